"""numba's on-disk cache (the W2 solver, the simplex, the mean-field solver) gives the same bits as a fresh compile.

Two processes run the same solves with an empty ``NUMBA_CACHE_DIR``: the first compiles and writes the cache, the
second loads it; every number they return (W2, its certified bound, the plan, the potentials, the mean-field
cells) must agree bit for bit. A cache that changed the last bit of any of them (as it did for the fastmath field
kernels, which are therefore compiled in every job) fails this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = r"""
import hashlib, pickle, sys
import numpy as np
from lowtemp.dynamics import meanfield, meanfield_softmax
from lowtemp.transport import assignment, pricing
from lowtemp.dynamics import reduction
rng = np.random.default_rng(3)
out = []
for n, d, spread in ((300, 3, 1e-3), (1200, 3, None), (600, 2, 1e-7)):
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y = X + spread * rng.standard_normal((n, d)) if spread else rng.standard_normal((n, d))
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    r = assignment.w2_exact(X, Y[rng.permutation(n)])
    out.append((r.value, r.error_bound, r.gap_bound, r.perm.tobytes(), r.u.tobytes(), r.v.tobytes(), r.certified))
for B, V in ((np.diag([1.5, 0.5]), np.diag([1.2, 0.6])), (np.diag([1.5, 0.5, 0.5]), np.diag([1.2, 0.6, 0.6]))):
    s = meanfield.solve(reduction.reduce(B, V), 100.0, np.linspace(0.0, 0.5, 3), width=0.1, depth=0.01)
    out.append(pickle.dumps(s))
hits = sum(sum(f.stats.cache_hits.values()) for f in (pricing._price_kernel, meanfield_softmax._softmax_sums))
print(hashlib.sha256(pickle.dumps(out)).hexdigest(), hits)
"""


def _run(cache_dir) -> tuple[str, int]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT / "workflow"))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digest, hits = proc.stdout.split()
    return digest, int(hits)


@pytest.mark.e2e
def test_a_cached_load_gives_the_bits_of_a_fresh_compile(tmp_path):
    fresh, hits = _run(tmp_path)
    written = [f for _, _, files in os.walk(tmp_path) for f in files if f.endswith(".nbc")]
    assert written and hits == 0, "nothing was cached: the test would compare two fresh compiles"
    loaded, hits = _run(tmp_path)
    assert hits >= 2, "the second process compiled again instead of loading the cache"
    assert loaded == fresh


KEYED = r"""
import os, sys
if sys.argv[1] == "numba-first":
    import numba
import lowtemp
import numba
print(os.environ["NUMBA_CACHE_DIR"], numba.config.CACHE_DIR)
"""


def _cache_dirs(package_root, cache_dir, order="lowtemp-first") -> tuple[str, str]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), PYTHONPATH=str(package_root))
    proc = subprocess.run([sys.executable, "-c", KEYED, order], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tuple(proc.stdout.split())


def test_the_cache_is_keyed_by_every_module_of_the_package(tmp_path):
    """numba reloads a cached function when its own file changes, not when a module it inlines from does (an
    edit to sphere_pieces left sphere_softmax's cached pass on the old pieces): the package keeps the cache in a
    directory keyed by all its sources. A copy of the package gives the same directory until one byte of one
    module changes (a comment in sphere_pieces), then another; numba itself, imported before or after, uses it;
    the user's NUMBA_CACHE_DIR is the base, and a keyed directory inherited from a parent process is replaced, not
    nested."""
    shutil.copytree(
        ROOT / "workflow" / "lowtemp", tmp_path / "src" / "lowtemp", ignore=shutil.ignore_patterns("__pycache__")
    )
    base = tmp_path / "cache"
    first, numba_dir = _cache_dirs(tmp_path / "src", base)
    assert first == numba_dir and first.startswith(str(base / "lowtemp-src-"))
    assert _cache_dirs(tmp_path / "src", base, "numba-first") == (first, first)
    assert _cache_dirs(tmp_path / "src", first)[0] == first  # inherited from a parent: not nested
    pieces = tmp_path / "src" / "lowtemp" / "dynamics" / "sphere_pieces.py"
    pieces.write_text(pieces.read_text() + "# an edit\n")
    second, _ = _cache_dirs(tmp_path / "src", first)
    assert second != first and second.startswith(str(base / "lowtemp-src-"))
