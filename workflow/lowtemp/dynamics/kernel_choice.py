"""Which kernel computes the finite-temperature field: the names and the automatic rule (``kernel: auto``).

Kept apart from ``lowtemp.dynamics.kernels`` (which compiles numba code on import) so that the
config check, the resource estimates and the figures can apply the rule without
loading numba. ``lowtemp.config.experiment.field_kernel`` applies it to an experiment's
config; the kernels themselves are described in ``lowtemp.dynamics.kernels`` and
docs/kernels.md.
"""

from __future__ import annotations

import numpy as np

#: the kernels of ``kernels.field_with_kernel`` that are always there
KERNELS = ("numpy", "dense", "cap")
#: kernels that need an optional package: ``torch`` (PyTorch, float64, on a CUDA device when there is one;
#: ``lowtemp.dynamics.torch_field``)
OPTIONAL_KERNELS = ("torch",)
#: relative mass the cap kernel may neglect
DEFAULT_TAIL = 1e-12
#: largest truncation constant of the cap kernel
_C_MAX = 64.0
#: ``kernel: auto`` decides cloud by cloud (``choose_for_cloud``) only from this many tokens on: below, a
#: dense evaluation is cheap (N² ≤ 2.7e8 pairs), the probe would cost 15–95 % of it (measured at N = 4096 and
#: 8192) and the cap kernel gains at most 1.1–2.7× where it gains at all
CAP_MIN_TOKENS = 16384
#: the cap kernel's cost per token it sweeps (two passes each), in units of one dense token pair: 5.6–6.5 on
#: the spread and clustered clouds of ``make bench`` at N = 32768 (d = 2, 3; β = 10² … 10⁴), 2.5 on the
#: tightest (d = 2, β = 10⁴, clustered), where the rule then errs towards the dense kernel
CAP_COST_PER_SWEPT = 6.0
#: the cap kernel's fixed cost per query (tree query, cell lists), in dense token pairs: 0.12 of a dense
#: evaluation at N = 32768 on a cloud whose sweep is almost empty (d = 3, β = 10⁴)
CAP_COST_PER_QUERY = 4000.0
#: ``kernel: auto``: the kernel is chosen at run time, per field evaluation, from the cloud itself
RUNTIME = "auto"


def truncation_constant(n_tokens: int, tail: float = DEFAULT_TAIL) -> float:
    """c with (N − 1)·e^{−c} ≤ tail: scores more than c below the maximum are neglected."""
    c = float(np.log(max(n_tokens, 2)) + np.log(1.0 / tail))
    if c > _C_MAX:
        raise ValueError(f"cap kernel: tail = {tail:g} at N = {n_tokens} needs c = {c:.1f} > {_C_MAX:g}")
    return c


def choose_kernel(n_tokens: int, d: int) -> str:
    """The kernel ``kernel: auto`` runs with N tokens in dimension d: ``auto`` (each field evaluation picks
    ``cap`` or ``dense`` from its own cloud, ``choose_for_cloud``) when d ∈ {2, 3} and N ≥ CAP_MIN_TOKENS,
    ``dense`` for smaller N in d ∈ {2, 3}, else ``numpy``.

    Why at run time: the cap kernel's cost follows the cloud, not the config. On the spread initial cloud at
    β = 1000 (d = 3) it is 2× faster than the dense kernel; once the tokens cluster, one cell of its grid holds
    a whole cluster and it is 6× slower
    (docs/decisions/0008-kernel-choice-at-run-time.md). A choice made once from (β, N, d) is wrong in one of
    the two phases of every low-temperature run.
    """
    if d not in (2, 3):
        return "numpy"
    return RUNTIME if n_tokens >= CAP_MIN_TOKENS else "dense"


def predicted_cap_cost(n_tokens: int, sweep_fraction: float) -> float:
    """The cap kernel's cost relative to the dense kernel's on a cloud whose queries sweep ``sweep_fraction`` of
    the tokens: two passes at CAP_COST_PER_SWEPT per swept token, plus CAP_COST_PER_QUERY per query."""
    return 2.0 * CAP_COST_PER_SWEPT * float(sweep_fraction) + CAP_COST_PER_QUERY / float(n_tokens)


#: query tokens per replica on which ``cap_sweep_fraction`` follows the cap kernel's sweep
PROBE_QUERIES = 64


def _box_sums(counts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sum of ``counts`` (a d-dimensional grid) over the boxes lo..hi (inclusive; (query, d)) by prefix sums."""
    d = counts.ndim
    prefix = np.zeros(tuple(s + 1 for s in counts.shape))
    prefix[(slice(1, None),) * d] = counts
    for axis in range(d):
        prefix = np.cumsum(prefix, axis=axis)
    total = np.zeros(lo.shape[0])
    for corner in range(2**d):  # inclusion–exclusion over the box's 2^d corners
        pick = [(corner >> k) & 1 for k in range(d)]
        index = tuple(np.where(pick[k], hi[:, k] + 1, lo[:, k]) for k in range(d))
        total += (-1) ** (d - sum(pick)) * prefix[index]
    return total


def cap_geometry(Xr: np.ndarray, A: np.ndarray, row_max: np.ndarray, c: float):
    """The cap kernel's caps and cell grid for one replica's tokens ``Xr`` (N, d) and queries a_i = β Bᵀx_i
    (rows of ``A``) whose row maxima are at least ``row_max``: returns (q, radius, rho_max, h, G).

    Query i's cap is |x − q_i|² ≤ ρmax² + 1 − 2(m_i − c)/|a_i| around q_i = a_i/|a_i| (every score more than c
    below m_i lies outside it; ρmax the largest token length, so it holds off the sphere too), the whole
    ball of radius 2ρmax where a_i = 0. The grid has cells of side h, half the median cap radius within
    [2ρmax/64, 2ρmax], G per axis over [−ρmax, ρmax]. One definition for ``kernels.cap_field`` and for
    ``cap_sweep_fraction``, which predicts its cost.
    """
    na = np.linalg.norm(A, axis=1)
    zero = na == 0.0
    safe = np.where(zero, 1.0, na)
    rho_max = float(np.max(np.linalg.norm(Xr, axis=1)))
    radius = np.where(zero, 2.0 * rho_max, np.sqrt(np.clip(rho_max**2 + 1.0 - 2.0 * (row_max - c) / safe, 0.0, None)))
    h = float(np.clip(0.5 * np.median(radius), 2.0 * rho_max / 64, 2.0 * rho_max))
    return A / safe[:, None], radius, rho_max, h, int(np.ceil(2.0 * rho_max / h))


def cap_sweep_fraction(
    X: np.ndarray, B: np.ndarray, beta: float, tail: float = DEFAULT_TAIL, queries: int = PROBE_QUERIES
) -> float:
    """The fraction of the N tokens the cap kernel sweeps per query, on this cloud (mean over replicas and
    ``queries`` evenly spaced query tokens).

    The cap kernel (``kernels.cap_field``) sweeps, for query i, every token in the box of grid cells that covers
    the cap |x − q_i|² ≤ ρmax² + 1 − 2(m_i − c)/|a_i| around q_i = a_i/|a_i|, a_i = β Bᵀx_i, twice; its cost is
    proportional to the tokens in that box, not in the cap: on a clustered cloud a cell holds a whole cluster.
    This follows the same geometry (cell size half the median cap radius, within [2ρmax/64, 2ρmax]) with the
    exact row maximum m_i of the probe queries (``cap_geometry``), in O(queries·N + G^d) numpy operations,
    without numba.
    """
    X = np.asarray(X, dtype=float)
    r, n, d = X.shape
    c = truncation_constant(n, tail)
    fractions = []
    for k in range(r):
        Xr = X[k]
        probe = Xr[np.unique(np.linspace(0, n - 1, min(queries, n)).astype(np.int64))]
        A = float(beta) * probe @ np.asarray(B, dtype=float)  # a_i = β Bᵀx_i, as rows
        q, rad, rho_max, h, G = cap_geometry(Xr, A, np.max(A @ Xr.T, axis=1), c)
        cells = np.clip(np.floor((Xr + rho_max) / h).astype(np.int64), 0, G - 1)
        flat = np.ravel_multi_index(tuple(cells.T), (G,) * d)
        counts = np.bincount(flat, minlength=G**d).reshape((G,) * d).astype(float)
        lo = np.clip(np.floor((q - rad[:, None] + rho_max) / h).astype(np.int64), 0, G - 1)
        hi = np.clip(np.floor((q + rad[:, None] + rho_max) / h).astype(np.int64), 0, G - 1)
        fractions.append(float(np.mean(_box_sums(counts, lo, hi))) / n)
    return float(np.mean(fractions))


def choose_for_cloud(X: np.ndarray, B: np.ndarray, beta: float) -> str:
    """``cap`` where the cap kernel is predicted cheaper than the dense kernel on this cloud
    (``predicted_cap_cost`` < 1 from ``cap_sweep_fraction``), else ``dense``. Deterministic in X, so a run
    resumed from a checkpoint makes the same choices."""
    n = np.asarray(X).shape[-2]
    if n < CAP_MIN_TOKENS:
        return "dense"
    return "cap" if predicted_cap_cost(n, cap_sweep_fraction(X, B, beta)) < 1.0 else "dense"


def concrete_kernel(kernel: str, X: np.ndarray, B: np.ndarray, beta: float) -> str:
    """The kernel that evaluates the field on cloud X: ``kernel`` itself, or for ``auto`` ``choose_for_cloud``."""
    return choose_for_cloud(X, B, beta) if kernel == RUNTIME else kernel
