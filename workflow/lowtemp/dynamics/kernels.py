"""Fast kernels for the finite-temperature field, interchangeable with
``fields.attention_field`` (the blocked numpy float64 reference).

* ``dense``: numba, parallel over query tokens, never materialises the N×N
  weights: for each query one pass accumulates Z = Σ_j w_ij and Σ_j w_ij x_j
  (V is applied once per query: Σ_j w_ij V x_j = V Σ_j w_ij x_j). Scores are
  shifted by |a_i|·max_j|x_j| ≥ max_j ⟨a_i, x_j⟩ (Cauchy–Schwarz) while that
  keeps every shifted score above −600, and by the exact row max (an extra
  pass) otherwise, so no weight under- or overflows. The effective sample size
  Z²/Σ_j w_ij² needs the squares too: with the bound shift a weight can be as
  small as e^{−600}, whose square (e^{−1200}) underflows, and when every token
  scores far below the bound (B = −I on a tight cluster: all scores ≈ −β
  against a shift of +β) Z² and Σ w² both underflow to 0 and the ESS is 0/0.
  So every weight is carried scaled by the power of two 2^432 (written into the
  exponent bits, ``_ESS_EXPONENT``): the scaled weights and their squares stay
  normal floats, and the field Σ w V x_j / Z and the ESS are unchanged bit for
  bit wherever nothing underflowed before (a power-of-two scale commutes with
  rounding). Tokens are stored coordinate-major (replica, dim, token) so the
  inner loops run on unit-stride vectors, and the exponential is branch-free
  (``_exp_nonpositive_scaled``: 2^k from the exponent bits times a polynomial)
  so the compiler vectorises it. Memory O(R·N·d). d = 2 and d = 3.
* ``cap``: the low-temperature kernel. With a_i = β Bᵀx_i and
  m_i = max_j ⟨a_i, x_j⟩, token j's weight relative to the largest is
  e^{⟨a_i, x_j⟩ − m_i}; it is below e^{−c} unless ⟨q_i, x_j⟩ ≥ m_i/|a_i| − c/|a_i|,
  q_i = a_i/|a_i|, i.e. unless x_j lies in the cap
  |x_j − q_i|² ≤ 2 − 2 m_i/|a_i| + 2c/|a_i|. Only tokens in that cap are summed.
  The neglected mass relative to Z (Z ≥ 1 after the max shift) is at most
  (N − 1)·e^{−c}; with c = log N + log(1/tail) it is below ``tail`` (default
  1e-12), and the field moves by at most 2·tail·‖V‖ relative to its scale.
  (c is capped at 64: tail ≥ N·e^{−64}.)
  The cap is found with a uniform grid of cells (cell lists, built per replica
  by a sort); the nearest token to q_i (scipy cKDTree) gives a lower bound on
  m_i that fixes a cap which provably holds every token that can matter, and
  m_i itself is the max over that cap. d = 2 and d = 3.

``field_with_kernel(X, B, V, beta, kernel)`` (and ``ess_with_kernel``) dispatches on the kernel's name; ``auto`` (what
``kernel_choice.choose_kernel`` gives ``kernel: auto`` at N ≥ 16384 in d = 2, 3) picks ``cap`` or
``dense`` at each call from the cloud itself (``kernel_choice.choose_for_cloud``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic
from scipy.spatial import cKDTree

from . import fields, integrate, torch_field
from .kernel_choice import DEFAULT_TAIL, KERNELS, OPTIONAL_KERNELS, cap_geometry, concrete_kernel, truncation_constant

# Kernels are compiled afresh in every process (no numba on-disk cache): a kernel
# loaded from numba's cache was measured to differ in the last bit from a fresh
# compile, which broke "same config, same numbers" between a first and a second
# run. Fresh compiles agree with each other bit for bit; they cost about 1.5 s
# per kernel and process.

#: scores more than this below the row's shift are clamped (e^{-700} ≈ 1e-304)
_CLAMP = 700.0
#: the row shift is |a_i|·max_j|x_j| (no max pass) while 2·|a_i|·max_j|x_j| ≤ this, so no score is clamped
_BOUND_SHIFT_MAX = 600.0
#: the dense kernels carry every weight times 2^_ESS_EXPONENT: a weight w ∈ [e^{-600}, 1]
#: (bound shift) becomes w·2^432 ∈ [2^{-434}, 2^{432}] and its square lies in [2^{-868}, 2^{864}],
#: normal and far from overflow (N·2^{864} < 2^{1024} for N < 2^{160}); with the exact-max shift
#: the largest scaled weight is 2^{432} itself, so Σ (w·2^432)² ≥ 2^{864} and nothing that matters underflows
_ESS_EXPONENT = 432


@intrinsic
def _float_from_bits(typingctx, bits):
    """Reinterpret an int64 as the float64 with the same bits (2^k from its exponent field)."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        """LLVM bitcast i64 → double."""
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238  # ln 2 split in two (Cody–Waite) so k·ln 2 is exact to 1e-19
_LN2_LO = 1.9082149292705877e-10


@njit(inline="always", fastmath=True)
def _exp_nonpositive_scaled(s, e):
    """e^s · 2^e for −700 ≤ s ≤ 0 and an integer e with 0 ≤ e ≤ 1000 (relative error below 5e-14);
    s < −700 is clamped to −700.

    e^s = 2^k e^f with k = round(s/ln 2), |f| ≤ ln2/2; e^f by its degree-12 Taylor
    polynomial (error < 1e-15); 2^(k+e) written straight into the exponent bits, so
    the scale 2^e is exact and cannot be reassociated away by fast-math (the result
    is exactly ``_exp_nonpositive(s) * 2**e`` whenever that product is a normal float).
    Branch-free, so the compiler vectorises the loops that call it.
    """
    s = max(s, -_CLAMP)
    k = np.floor(s * _LOG2E + 0.5)
    f = s - k * _LN2_HI - k * _LN2_LO
    p = 2.08767569878681e-09
    p = p * f + 2.505210838544172e-08
    p = p * f + 2.755731922398589e-07
    p = p * f + 2.7557319223985893e-06
    p = p * f + 2.48015873015873e-05
    p = p * f + 0.0001984126984126984
    p = p * f + 0.001388888888888889
    p = p * f + 0.008333333333333333
    p = p * f + 0.041666666666666664
    p = p * f + 0.16666666666666666
    p = p * f + 0.5
    p = p * f + 1.0
    p = p * f + 1.0
    return p * _float_from_bits((np.int64(k) + 1023 + e) << 52)


@njit(inline="always", fastmath=True)
def _exp_nonpositive(s):
    """e^s for −700 ≤ s ≤ 0 with relative error below 5e-14; s < −700 is clamped to −700."""
    return _exp_nonpositive_scaled(s, 0)


# ------------------------------------------------------------------ dense kernels
@njit(parallel=True, fastmath=True, cache=False)
def _dense_d3(XT, At, V, rho_max, out, ess):
    R, _, N = XT.shape
    for p in prange(R * N):
        r = p // N
        i = p - r * N
        X0 = XT[r, 0]
        X1 = XT[r, 1]
        X2 = XT[r, 2]
        x0, x1, x2 = X0[i], X1[i], X2[i]
        a0 = At[0, 0] * x0 + At[0, 1] * x1 + At[0, 2] * x2  # a = β Bᵀ x_i
        a1 = At[1, 0] * x0 + At[1, 1] * x1 + At[1, 2] * x2
        a2 = At[2, 0] * x0 + At[2, 1] * x1 + At[2, 2] * x2
        # shift: the Cauchy–Schwarz bound |a|·max|x_j| ≥ every score while no score can fall
        # below −2|a|·max|x_j| ≥ −600 (then all weights are exact); else the exact row max
        m = np.sqrt(a0 * a0 + a1 * a1 + a2 * a2) * rho_max
        if 2.0 * m > _BOUND_SHIFT_MAX:
            m = -np.inf
            for j in range(N):
                m = max(m, a0 * X0[j] + a1 * X1[j] + a2 * X2[j])
        # Z, Z2 and c carry the factor 2^_ESS_EXPONENT (module doc): it cancels in c/Z and Z²/Z2
        Z = 0.0
        Z2 = 0.0
        c0 = 0.0
        c1 = 0.0
        c2 = 0.0
        for j in range(N):
            w = _exp_nonpositive_scaled(a0 * X0[j] + a1 * X1[j] + a2 * X2[j] - m, _ESS_EXPONENT)
            Z += w
            Z2 += w * w
            c0 += w * X0[j]
            c1 += w * X1[j]
            c2 += w * X2[j]
        f0 = (V[0, 0] * c0 + V[0, 1] * c1 + V[0, 2] * c2) / Z
        f1 = (V[1, 0] * c0 + V[1, 1] * c1 + V[1, 2] * c2) / Z
        f2 = (V[2, 0] * c0 + V[2, 1] * c1 + V[2, 2] * c2) / Z
        dot = f0 * x0 + f1 * x1 + f2 * x2  # P⊥(x) f = f − ⟨f, x⟩ x
        out[r, i, 0] = f0 - dot * x0
        out[r, i, 1] = f1 - dot * x1
        out[r, i, 2] = f2 - dot * x2
        ess[r, i] = Z * Z / Z2  # effective sample size 1/Σ_j w_ij²


@njit(parallel=True, fastmath=True, cache=False)
def _dense_d2(XT, At, V, rho_max, out, ess):
    R, _, N = XT.shape
    for p in prange(R * N):
        r = p // N
        i = p - r * N
        X0 = XT[r, 0]
        X1 = XT[r, 1]
        x0, x1 = X0[i], X1[i]
        a0 = At[0, 0] * x0 + At[0, 1] * x1
        a1 = At[1, 0] * x0 + At[1, 1] * x1
        m = np.sqrt(a0 * a0 + a1 * a1) * rho_max  # see _dense_d3
        if 2.0 * m > _BOUND_SHIFT_MAX:
            m = -np.inf
            for j in range(N):
                m = max(m, a0 * X0[j] + a1 * X1[j])
        Z = 0.0  # scaled by 2^_ESS_EXPONENT, see _dense_d3
        Z2 = 0.0
        c0 = 0.0
        c1 = 0.0
        for j in range(N):
            w = _exp_nonpositive_scaled(a0 * X0[j] + a1 * X1[j] - m, _ESS_EXPONENT)
            Z += w
            Z2 += w * w
            c0 += w * X0[j]
            c1 += w * X1[j]
        f0 = (V[0, 0] * c0 + V[0, 1] * c1) / Z
        f1 = (V[1, 0] * c0 + V[1, 1] * c1) / Z
        dot = f0 * x0 + f1 * x1
        out[r, i, 0] = f0 - dot * x0
        out[r, i, 1] = f1 - dot * x1
        ess[r, i] = Z * Z / Z2


def _check_dim(X, kernel):
    d = X.shape[-1]
    if d not in (2, 3):
        raise ValueError(f"kernel {kernel!r} supports d = 2 and d = 3, got d = {d}; use kernel 'numpy'")
    return d


def dense_field(X, B, V, beta, with_ess: bool = False):
    """Finite-temperature field, numba dense kernel (same result as fields.attention_field).

    With ``with_ess`` also the effective sample size 1/Σ_j w_ij², shape (replica, token).
    """
    X = np.asarray(X, dtype=float)
    d = _check_dim(X, "dense")
    XT = np.ascontiguousarray(np.swapaxes(X, -1, -2))
    out = np.empty_like(X)
    ess = np.empty(X.shape[:-1])
    At = np.ascontiguousarray(float(beta) * np.asarray(B, dtype=float).T)
    rho_max = float(np.max(np.linalg.norm(X, axis=-1)))
    (_dense_d3 if d == 3 else _dense_d2)(XT, At, np.ascontiguousarray(V, dtype=float), rho_max, out, ess)
    return (out, ess) if with_ess else out


# ------------------------------------------------------------------ cap kernel
def _cell_lists(X, h, G, origin):
    """Cell index of every token and the tokens sorted by cell (CSR: start, order)."""
    d = X.shape[-1]
    idx = np.clip(np.floor((X - origin) / h).astype(np.int64), 0, G - 1)
    flat = idx[:, 0]
    for k in range(1, d):
        flat = flat * G + idx[:, k]
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=G**d)
    start = np.zeros(G**d + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    return start, order.astype(np.int64)


class CellGrid(NamedTuple):
    """The uniform grid of cells the cap kernel finds a query's cap with (``_cell_lists``), for one replica: every
    token lies within ``rho_max`` of the origin; the grid's lower corner is ``origin`` on every axis, its cells have
    side ``h``, ``G`` of them per axis; the tokens sorted by cell, CSR: cell f holds ``order[start[f]:start[f + 1]]``
    (cells numbered axis by axis, the last fastest)."""

    rho_max: float
    origin: float
    h: float
    G: int
    start: np.ndarray
    order: np.ndarray


@njit(fastmath=False, cache=False)
def _cap_pass(X, a, m, c, box, grid, acc, total):
    """One sweep over the tokens of the cell box ``box`` = (lo, hi) (first and last cell per axis, inclusive).

    ``total`` False: return the largest score ⟨a, x_j⟩ in the box. ``total`` True:
    accumulate, over tokens with score ≥ m − c, Z, Z2 and Σ w x_j into ``acc``
    (acc[0] = Z, acc[1] = Z2, acc[2:] = Σ w x_j); return Z.
    """
    lo, hi = box
    G, start, order = grid.G, grid.start, grid.order
    d = X.shape[1]
    best = -np.inf
    cell = lo.copy()
    while True:
        flat = 0
        for k in range(d):
            flat = flat * G + cell[k]
        for t in range(start[flat], start[flat + 1]):
            j = order[t]
            s = 0.0
            for k in range(d):
                s += a[k] * X[j, k]
            if not total:
                best = max(best, s)
            elif s - m >= -c:
                w = _exp_nonpositive(s - m)
                acc[0] += w
                acc[1] += w * w
                for k in range(d):
                    acc[2 + k] += w * X[j, k]
        k = d - 1  # next cell of the box (odometer)
        while k >= 0:
            cell[k] += 1
            if cell[k] <= hi[k]:
                break
            cell[k] = lo[k]
            k -= 1
        if k < 0:
            break
    return best if not total else acc[0]


@njit(parallel=True, fastmath=False, cache=False)
def _cap_sum(X, At, V, m_lower, c, grid, out, ess):
    """For each query i (a_i = At x_i): the exact max score over a cell box of ``grid`` that provably holds every
    token with score ≥ m_lower_i − c, then the sum over tokens with score ≥ max − c; the field P⊥(x_i) V Σ w x_j / Z
    into ``out`` and the ESS Z²/Σ w² into ``ess``."""
    rho_max, origin, h, G = grid.rho_max, grid.origin, grid.h, grid.G
    N, d = X.shape
    for i in prange(N):
        a = np.zeros(d)
        for k in range(d):
            s = 0.0
            for j in range(d):
                s += At[k, j] * X[i, j]
            a[k] = s
        na = np.sqrt(np.sum(a * a))
        lo = np.zeros(d, dtype=np.int64)
        hi = np.full(d, G - 1, dtype=np.int64)
        if na > 0.0:  # a = 0 (β = 0, or x_i in the kernel of Bᵀ): every score is 0, every token counts
            # ⟨a, x⟩ ≥ L with |x| ≤ ρmax implies |x − q|² ≤ ρmax² + 1 − 2L/|a|, q = a/|a|
            r2 = rho_max * rho_max + 1.0 - 2.0 * (m_lower[i] - c) / na
            rad = np.sqrt(max(r2, 0.0))
            for k in range(d):
                qk = a[k] / na
                lo[k] = min(G - 1, max(0, int(np.floor((qk - rad - origin) / h))))
                hi[k] = min(G - 1, max(0, int(np.floor((qk + rad - origin) / h))))
        acc = np.zeros(2 + d)
        m = _cap_pass(X, a, 0.0, c, (lo, hi), grid, acc, False)
        Z = _cap_pass(X, a, m, c, (lo, hi), grid, acc, True)
        dot = 0.0
        f = np.zeros(d)
        for k in range(d):
            v = 0.0
            for j in range(d):
                v += V[k, j] * acc[2 + j]
            f[k] = v / Z
            dot += f[k] * X[i, k]
        for k in range(d):
            out[i, k] = f[k] - dot * X[i, k]
        ess[i] = Z * Z / acc[1]


def cap_field(X, B, V, beta, tail: float = DEFAULT_TAIL, with_ess: bool = False):
    """Finite-temperature field summing only the tokens whose weight can matter (see module doc).

    Exact for tokens of any length (Runge–Kutta stages leave the sphere slightly):
    a lower bound on each row's max score comes from the nearest token to q_i
    (cKDTree), the cap is widened by the largest token length, and the exact max
    is taken over the cap before summing.
    """
    X = np.asarray(X, dtype=float)
    _check_dim(X, "cap")
    At = float(beta) * np.asarray(B, dtype=float).T
    V = np.ascontiguousarray(V, dtype=float)
    out = np.empty_like(X)
    ess = np.empty(X.shape[:-1])
    n = X.shape[-2]
    c = truncation_constant(n, tail)
    for r in range(X.shape[0]):
        Xr = np.ascontiguousarray(X[r])
        A = Xr @ At.T  # a_i = β Bᵀ x_i
        zero = np.linalg.norm(A, axis=1) == 0.0  # a_i = 0: all of row i's scores are 0 (_cap_sum sums every token)
        direction = A / np.where(zero, 1.0, np.linalg.norm(A, axis=1))[:, None]
        _, nearest = cKDTree(Xr).query(np.where(zero[:, None], Xr, direction), k=1)
        m_lower = np.sum(A * Xr[nearest], axis=1)  # a real token's score: ≤ the row max
        _, _, rho_max, h, G = cap_geometry(Xr, A, m_lower, c)
        origin = -rho_max
        start, order = _cell_lists(Xr, h, G, origin)
        grid = CellGrid(rho_max, origin, h, G, start, order)
        _cap_sum(Xr, np.ascontiguousarray(At), V, m_lower, c, grid, out[r], ess[r])
    return (out, ess) if with_ess else out


# ------------------------------------------------------------------ dispatch
#: each kernel's field and ESS, (X, B, V, β) -> array: the one table the dispatch reads
_KERNEL_FUNCTIONS = {
    "numpy": (fields.attention_field, lambda X, B, V, beta: fields.effective_sample_size(X, B, beta)),
    "dense": (dense_field, lambda X, B, V, beta: dense_field(X, B, V, beta, with_ess=True)[1]),
    "cap": (cap_field, lambda X, B, V, beta: cap_field(X, B, V, beta, with_ess=True)[1]),
    "torch": (torch_field.torch_field, lambda X, B, V, beta: torch_field.torch_field(X, B, V, beta, with_ess=True)[1]),
}


def _kernel_functions(kernel: str, X, B, beta):
    """(field, ESS) functions of the named kernel, ``auto`` resolved on this cloud; ValueError names the known ones."""
    try:
        return _KERNEL_FUNCTIONS[concrete_kernel(kernel, X, B, beta)]
    except KeyError:
        raise ValueError(
            f"unknown kernel {kernel!r}; known: {list(KERNELS + OPTIONAL_KERNELS)} (or 'auto' in the config)"
        ) from None


def field_with_kernel(X, B, V, beta, kernel: str = "dense"):
    """The finite-temperature field with the named kernel (``numpy``, ``dense``, ``cap``, ``torch`` (optional,
    ``lowtemp.dynamics.torch_field``); ``auto``: the one ``kernel_choice.choose_for_cloud`` predicts cheaper on this
    cloud)."""
    return _kernel_functions(kernel, X, B, beta)[0](X, B, V, beta)


def ess_with_kernel(X, B, V, beta, kernel: str = "dense"):
    """ESS_i = 1/Σ_j w_ij² with the named kernel, shape (replica, token)."""
    return _kernel_functions(kernel, X, B, beta)[1](X, B, V, beta)


@dataclass(frozen=True, eq=False)
class AttentionField:
    """The finite-temperature field of Eq. 2 at one β, evaluated with one kernel: what a simulation calls, what
    its effective sample size is computed with, and what a checkpoint's fingerprint covers (``identity``), so β
    and the kernel travel together."""

    B: np.ndarray
    V: np.ndarray
    beta: float
    kernel: str

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return field_with_kernel(X, self.B, self.V, self.beta, self.kernel)

    def effective_sample_size(self, X: np.ndarray) -> np.ndarray:
        """ESS_i = 1/Σ_j w_ij² of every token (``ess_with_kernel``), shape (replica, token)."""
        return ess_with_kernel(X, self.B, self.V, self.beta, self.kernel)

    def trajectory_ess(self, positions: np.ndarray) -> np.ndarray:
        """The effective sample size of every token at every snapshot of a trajectory (…, time, token, dim):
        (…, time, token), each snapshot contiguous as the integrator stepped it (``integrate.snapshot``)."""
        sizes = [self.effective_sample_size(integrate.snapshot(positions, k)) for k in range(positions.shape[-3])]
        return np.stack(sizes, axis=-2)

    def identity(self) -> tuple[tuple[np.ndarray, ...], dict]:
        """The arrays and settings that determine the field."""
        return (self.B, self.V), {"beta": self.beta, "kernel": self.kernel}


def set_threads(n: int | None) -> None:
    """Limit numba's threads (e.g. to the cores Snakemake gives a job)."""
    if n:
        numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
