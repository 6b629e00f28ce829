"""Low-temperature mean-field transformer dynamics on the sphere.

Tokens x_i on S^{d-1} move under single-head softmax self-attention
(Eq. 2 of the paper for the particle system, Eq. 3 for its zero-temperature limit;
README.md names the paper).
Arrays of tokens always have the layout (replica, token, dim).

The package never imports snakemake: every function takes arrays and plain
parameters, so scripts, tests and notebooks share one implementation.

numba's on-disk cache is kept in a directory keyed by a digest of the package's sources (``_key_numba_cache``).

``lowtemp.__version__`` is read from git when first asked for (``lowtemp.store.version``: the
release tag, the commits since, whether the tree is dirty; ``unknown`` outside a checkout).
"""

import hashlib
import importlib
import os
import sys
from pathlib import Path

#: prefix of the directory numba's on-disk cache is kept in, one per version of the package's sources
CACHE_PREFIX = "lowtemp-src-"


def source_digest(root: Path = Path(__file__).parent) -> str:
    """A digest of every module of the package under ``root`` (paths and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def keyed_cache_dir(current: str | None, digest: str, default: Path) -> Path:
    """Where numba's cache goes for sources of ``digest``: a directory of its own under the user's
    ``NUMBA_CACHE_DIR`` (``current``; the one above it where it is already such a directory, set for another
    version by a parent process), else under ``default``."""
    base = Path(current) if current else default
    if base.name.startswith(CACHE_PREFIX):
        base = base.parent
    return base / f"{CACHE_PREFIX}{digest}"


def _key_numba_cache() -> None:
    """Put numba's on-disk cache in a directory keyed by the package's sources. numba reloads a cached function
    when its own file changes, not when a function it calls or inlines from another module does: an edit to
    ``sphere_pieces`` left ``sphere_softmax``'s cached pass running the old pieces (a wrong log Z, silently). Here
    every edit anywhere in the package compiles afresh. numba is not imported (the config check and the figures
    load without it); where it already is, its setting is changed in place."""
    default = Path(__file__).parent / "__pycache__" / "numba"
    if not os.access(default.parent.parent, os.W_OK):
        default = Path.home() / ".cache" / "lowtemp-numba"
    path = keyed_cache_dir(os.environ.get("NUMBA_CACHE_DIR"), source_digest(), default)
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    if "numba" in sys.modules:
        sys.modules["numba"].config.CACHE_DIR = str(path)


_key_numba_cache()


def __getattr__(name: str):
    """``lowtemp.__version__``: the version from git (``lowtemp.store.version``), read on first use."""
    if name == "__version__":
        return importlib.import_module("lowtemp.store.version").code_version().version
    raise AttributeError(f"module 'lowtemp' has no attribute {name!r}")
