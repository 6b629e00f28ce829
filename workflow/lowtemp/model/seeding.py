"""Every random stream derives from one root seed.

A stream is named by a tuple of strings (e.g. ("concentration", "initial_tokens"));
the name is hashed with a stable hash (not Python's salted ``hash``) into the
spawn key of a ``numpy.random.SeedSequence``. Same root seed and same name give
the same numbers on every machine; different names give independent streams.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _stable_word(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")


def generator(root_seed: int, *stream: str) -> np.random.Generator:
    """The random generator of the named stream under ``root_seed``."""
    if not isinstance(root_seed, (int, np.integer)) or root_seed < 0:
        raise ValueError(f"root_seed must be a non-negative integer, got {root_seed!r}")
    key = tuple(_stable_word(str(s)) for s in stream)
    return np.random.default_rng(np.random.SeedSequence(int(root_seed), spawn_key=key))
