"""Exact Wasserstein-2 distances between empirical measures.

W2 uses the Euclidean (chordal) cost in R^d and is the distance itself, not
its square. Two uniform clouds of the same size (every W2 the pipeline
computes) go to ``assignment.w2_exact``: a sparse assignment certified optimal
on all N² pairs, with POT's network simplex as its fallback, in O(N·k) memory
except where that fallback builds the dense matrix (N ≤ ``assignment.DENSE_MAX``).
Weighted measures, clouds of different sizes and capped solves go to POT's
network simplex on the dense cost matrix (``network_simplex``), certified by a
dual bound of its own. Every cost is a sum of squared coordinate differences,
never |x|² + |y|² − 2⟨x,y⟩, which keeps only rounding once the distances are
far below the coordinates. A solve that did not reach optimality, or whose
bound misses its target, raises ``TransportNotConverged`` instead of returning
a number. A two-atom target ±u (Π_♯ρ for dim E1 = 1) has a closed form by
sorting (``w2_two_atoms``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import ot

from ..model.projection import check_basis, check_tokens, projection_map, two_atom_masses
from . import assignment, pricing

#: POT's result code for an optimal solution of the network simplex
_OPTIMAL = 1
#: unit roundoff of float64
_U = 2.0**-53
#: the network simplex's certificate: error bound on W2² at most NETWORK_SIMPLEX_REL_TOL·W2² (the target at
#: which the equal-size solver certifies POT's plans: the marginals of a weighted plan carry rounding of the
#: weights' size, and it costs up to the largest cost; W2 = 0 is certified only with a bound of exactly 0)
NETWORK_SIMPLEX_REL_TOL = assignment.FALLBACK_REL_TOL


#: rows of the cost matrix per block of the dual bound's c-transform
_ROW_BLOCK = 256


class TransportNotConverged(RuntimeError):
    """The exact transport solver stopped before reaching an optimal plan."""


def squared_euclidean_cost(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """C_ij = |x_i − y_j|² as Σ_a (x_ia − y_ja)², summed coordinate by coordinate.

    Differences first: the expansion |x|² + |y|² − 2⟨x,y⟩ subtracts numbers of the size of the
    coordinates and keeps only their rounding once |x − y| is below about 1e-8·|x|. The order of the
    sum is that of the equal-size solver's kernels, so both see the same cost for the same pair.
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    C = np.zeros((X.shape[0], Y.shape[0]))
    for a in range(X.shape[1]):
        D = X[:, a, None] - Y[None, :, a]
        C += D * D
    return C


def w2(
    X: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
    max_iterations: int | None = None,
) -> float:
    """Exact W2 between the probability measures Σ a_i δ_{x_i}/Σa and Σ b_j δ_{y_j}/Σb (uniform weights by
    default; a and b must have the same total, to a relative 1e-9, and any scale).

    Uniform clouds of the same size: ``assignment.w2_exact``; otherwise, or with an iteration cap,
    ``network_simplex``. Both are certified or raise ``TransportNotConverged``.
    """
    return w2_certified(X, Y, a, b, max_iterations)[0]


def w2_certified(
    X: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
    max_iterations: int | None = None,
) -> tuple[float, float]:
    """(W2, bound): exact W2 as ``w2`` computes it and a certified bound on |W2² − W2²_opt| for the exact
    costs of the given coordinates (``assignment.W2Result.error_bound`` or ``NetworkSimplexResult.error_bound``)."""
    X = pricing.as_cloud(X, "X")
    Y = pricing.as_cloud(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must live in the same dimension, got {X.shape} and {Y.shape}")
    _check_max_iterations(max_iterations)
    if a is None and b is None and max_iterations is None and X.shape == Y.shape:
        result = assignment.w2_exact(X, Y)
        if not result.certified:
            raise TransportNotConverged(
                f"exact W2 between {len(X)} tokens was not certified: error bound on W2² "
                f"{result.error_bound:.3g} against the target {result.target:.3g} (W2 = {result.value:.3g}; "
                f"{result.rounds} pricing passes, POT fallback {'taken' if result.fallback else 'not taken'})"
            )
        return result.value, result.error_bound
    result = network_simplex(X, Y, a, b, max_iterations)
    _refuse_uncertified(result)
    return result.value, result.error_bound


def w2_network_simplex(
    X: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
    max_iterations: int | None = None,
) -> float:
    """Exact W2 by POT's network simplex on the dense cost matrix, any weights; certified or it raises."""
    result = network_simplex(X, Y, a, b, max_iterations)
    _refuse_uncertified(result)
    return result.value


@dataclass
class NetworkSimplexResult:
    """W2 from POT's network simplex with its certificate.

    value: W2 (the distance); error_bound: ≥ |value² − W2²_opt| for the exact costs of the given
    coordinates and the marginals a/Σa and b/Σb as POT received them (``_unit_mass``; b then rescaled to a's mass
    exactly, as POT does);
    target: what error_bound had to reach; certified: error_bound ≤ target and error_bound < value² (or both
    0); scale_exponent: the clouds were solved multiplied by 2^scale_exponent.
    """

    value: float
    error_bound: float
    target: float
    certified: bool
    scale_exponent: int


def network_simplex(
    X: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
    max_iterations: int | None = None,
    rel_tol: float = NETWORK_SIMPLEX_REL_TOL,
) -> NetworkSimplexResult:
    """W2 between Σ a_i δ_{x_i} and Σ b_j δ_{y_j} by ``ot.emd`` on the dense cost matrix, with a dual bound.

    POT compares reduced costs with an absolute tolerance, so costs far below 1 would be solved to that
    tolerance and not to their own size: the clouds are first multiplied by the power of two that brings
    their joint extent into [0.5, 1) (exact; W2(sX, sY) = s·W2(X, Y)). ``_dual_bound`` then bounds the
    plan's distance to the optimum. Raises ``TransportNotConverged`` if POT stops before an optimal plan.
    """
    X = pricing.as_cloud(X, "X")
    Y = pricing.as_cloud(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must live in the same dimension, got {X.shape} and {Y.shape}")
    _check_max_iterations(max_iterations)
    a = np.full(len(X), 1.0 / len(X)) if a is None else _weights(a, len(X), "a")
    b = np.full(len(Y), 1.0 / len(Y)) if b is None else _weights(b, len(Y), "b")
    (a, log_a), (b, log_b) = _unit_mass(a), _unit_mass(b)
    if not abs(log_a - log_b) <= math.log2(1.0 + 1e-9):  # the sums equal to a relative 1e-9
        raise ValueError(f"weights a and b must have the same total mass, got sums 2^{log_a:.12g} and 2^{log_b:.12g}")
    if max_iterations is None:
        max_iterations = max(100_000, 100 * len(X) * len(Y))
    e = _extent_exponent(X, Y)
    Xs, Ys = np.ldexp(X, e), np.ldexp(Y, e)
    C = squared_euclidean_cost(Xs, Ys)
    G, v = _emd(a, b, C, max_iterations)
    value_sq, bound = _dual_bound(Xs, Ys, C, a, b, G, v)
    value = float(np.ldexp(math.sqrt(value_sq), -e))
    with np.errstate(over="ignore", under="ignore"):
        error_bound = assignment._up(bound, -2 * e)
        value_sq = float(np.ldexp(value_sq, -2 * e))
    target = rel_tol * value_sq
    certified = bool(
        np.isfinite(error_bound) and error_bound <= target and (error_bound < value_sq or error_bound == 0.0)
    )
    return NetworkSimplexResult(value, error_bound, target, certified, e)


def _refuse_uncertified(result: NetworkSimplexResult) -> None:
    if not result.certified:
        raise TransportNotConverged(
            f"W2 by the network simplex was not certified: error bound on W2² {result.error_bound:.3g} against "
            f"the target {result.target:.3g} (W2 = {result.value:.3g})"
        )


def _check_max_iterations(max_iterations) -> None:
    """ValueError naming the option: POT takes it as a C integer and overflows on a negative one."""
    if max_iterations is None:
        return
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, np.integer)) or max_iterations < 1:
        raise ValueError(f"max_iterations must be an integer ≥ 1 or None, got {max_iterations!r}")
    if max_iterations > np.iinfo(np.int64).max:
        raise ValueError(f"max_iterations must be at most 2^63 − 1, got {max_iterations!r}")


def _extent_exponent(X, Y) -> int:
    """e with the clouds' joint extent (largest coordinate range) times 2^e in [0.5, 1); 0 when the clouds are
    one point, or when scaling would not be exact (coordinates overflow, or underflow into the subnormals)."""
    P = np.vstack([X, Y])
    with np.errstate(over="ignore"):
        extent = float(np.max(np.max(P, axis=0) - np.min(P, axis=0)))
    if extent == 0.0 or not math.isfinite(extent):
        return 0
    e = -math.frexp(extent)[1]
    with np.errstate(over="ignore", under="ignore"):
        Ps = np.ldexp(P, e)
        exact = bool(np.all(np.isfinite(Ps)) and np.array_equal(np.ldexp(Ps, -e), P))
    return e if exact else 0


def _emd(a, b, C, max_iterations):
    """POT's optimal plan G and column potentials v, or ``TransportNotConverged``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # POT warns on non-convergence
        try:
            G, log = ot.emd(a, b, C, numItermax=int(max_iterations), log=True)
        except UserWarning as w:
            raise TransportNotConverged(f"ot.emd did not converge: {w}") from None
    if log["result_code"] != _OPTIMAL:
        raise TransportNotConverged(
            f"ot.emd did not reach an optimal plan (result code {log['result_code']}: {log['warning']})"
        )
    return np.asarray(G, dtype=float), np.asarray(log["v"], dtype=float)


def _dual_bound(X, Y, C, a, b, G, v) -> tuple[float, float]:
    """(W2²(G), bound ≥ |W2²(G) − W2²_opt|) for the exact costs of X, Y and the marginals a, b̂ = b·Σa/Σb.

    Lower: the c-transform u*_i = min_j (c_ij − v_j) over the columns with mass makes (u*, v) dual feasible,
    so W2²_opt ≥ Σ a_i u*_i + Σ b̂_j v_j (weak duality), each rounding subtracted. Upper: G's marginals
    miss a and b̂ by rounding (measured exactly, in rationals); removing the excess and spreading the defect
    as a product plan gives a feasible plan costing at most W2²(G) + max c·defect. The computed costs are
    within g·ĉ of the exact ones (plus the subnormal spacing where a square may have underflowed,
    ``pricing._rounding_constants``).
    """
    g, _, uf = pricing._rounding_constants(X.shape[1])
    rows, cols = np.nonzero(G)
    used = G[rows, cols] * C[rows, cols]
    value_sq = math.fsum(used.tolist())
    ratio = _exact_sum(a) / _exact_sum(b)
    defect = _marginal_defect(G, rows, cols, a, b, ratio)
    # a square below the normal range keeps only its subnormal spacing: uf per unit of mass, where possible
    spill = uf * (float(np.sum(a)) + defect) * (1.0 + 4.0 * _U) if _may_underflow(X, Y) else 0.0
    upper = (1.0 + g) * (value_sq * (1.0 + 2.0 * _U) + float(np.max(C)) * defect) + spill
    lower = max(0.0, (1.0 - g) * _dual_value_lo(C, a, b, v, ratio) - spill)
    bound = max(value_sq - lower, upper - value_sq, 0.0) * (1.0 + 8.0 * _U) + 3.0 * _U * value_sq
    return value_sq, bound


def _may_underflow(X, Y) -> bool:
    """Whether some pair's squared coordinate difference may fall below the normal range: two distinct
    coordinates closer than 2^-484 (in a coordinate, the closest distinct values of the two clouds together
    bound every pair's difference from below)."""
    for a in range(X.shape[1]):
        gaps = np.diff(np.unique(np.concatenate([X[:, a], Y[:, a]])))
        if gaps.size and float(np.min(gaps)) < 2.0**-484:
            return True
    return False


def _dual_value_lo(C, a, b, v, ratio: Fraction) -> float:
    """A lower bound on Σ a_i u*_i + Σ b̂_j v_j, u*_i = min_j (c_ij − v_j) over the columns j with b_j > 0."""
    live = b > 0
    u_lo = np.empty(C.shape[0])
    for start in range(0, C.shape[0], _ROW_BLOCK):  # blocks of rows: no second dense matrix
        R = C[start : start + _ROW_BLOCK, live] - v[None, live]  # each entry within u·|R| of c_ij − v_j
        u_lo[start : start + _ROW_BLOCK] = np.min(R, axis=1) - 2.0 * _U * np.max(np.abs(R), axis=1)
    ratio_f = float(ratio)
    terms = np.concatenate([a * u_lo, ratio_f * (b[live] * v[live])])
    # products: u each; the ratio's rounding: u on the b terms; fsum: u on the total
    return math.fsum(terms.tolist()) - 4.0 * _U * math.fsum(np.abs(terms).tolist())


def _exact_sum(w) -> Fraction:
    return sum((Fraction(float(x)) for x in w), Fraction(0))


def _marginal_defect(G, rows, cols, a, b, ratio: Fraction) -> float:
    """Σ_i |Σ_j G_ij − a_i| + Σ_j |Σ_i G_ij − b̂_j| in exact arithmetic, rounded up (0 when exact)."""
    row_sum = [Fraction(0)] * G.shape[0]
    col_sum = [Fraction(0)] * G.shape[1]
    for i, j in zip(rows.tolist(), cols.tolist()):
        q = Fraction(float(G[i, j]))
        row_sum[i] += q
        col_sum[j] += q
    total = sum((abs(s - Fraction(float(x))) for s, x in zip(row_sum, a)), Fraction(0))
    total += sum((abs(s - Fraction(float(x)) * ratio) for s, x in zip(col_sum, b)), Fraction(0))
    return _float_up(total)


def _float_up(q: Fraction) -> float:
    f = float(q)
    return f if Fraction(f) >= q else float(np.nextafter(f, np.inf))


def _weights(w, n, name):
    w = np.asarray(w)
    if np.iscomplexobj(w) or w.dtype.kind not in "biuf":
        raise TypeError(f"weights {name} must be real numbers, got dtype {w.dtype}")
    w = np.asarray(w, dtype=float)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError(f"weights {name} must be {n} finite non-negative numbers with a positive sum")
    return w


def _unit_mass(w: np.ndarray) -> tuple[np.ndarray, float]:
    """(w / Σw, log2 Σw) without overflow or underflow: weights of 1e-300 or 1e308 are valid, but POT needs
    marginals of a moderate scale (it crashed on weights of 1e-200 and called 1e300 'infeasible'); W2 depends on
    the normalised measures only."""
    top = float(np.max(w))
    scaled = w / top
    total = math.fsum(scaled.tolist())
    return scaled / total, math.log2(top) + math.log2(total)


def w2_two_atoms(X: np.ndarray, u: np.ndarray, masses: np.ndarray) -> float:
    """Exact W2 between the uniform cloud X (N, d) and m₊δ_u + m₋δ_{−u}, |u| = 1.

    |x − u|² − |x + u|² = −4⟨x,u⟩, so the optimal plan sends the mass m₊ from the tokens of largest ⟨x,u⟩
    to +u (splitting one token if needed) and the rest to −u. W2² = (1/N) Σ_i (f_i|x_i − u|² + (1 − f_i)|x_i + u|²),
    f_i the fraction of token i sent to +u, each cost a sum of squared differences: a sum of non-negative
    terms each accurate to a few roundings, where the expanded mean|x|² + 1 ± 2⟨x,u⟩ lost everything below
    about 1e-8.
    """
    X = check_tokens(X)
    if X.ndim != 2:
        raise ValueError(f"X must be one cloud (token, dim), got shape {X.shape}")
    u = check_basis(np.asarray(u, dtype=float).reshape(-1, 1), X.shape[1], "u")[:, 0]
    n = len(X)
    k, frac = _tokens_to_plus(masses, n)
    if np.any(np.isnan(X)):
        return math.nan  # a snapshot the solver did not reach
    order = np.argsort(-(X @ u), kind="stable")
    to_plus = _row_squares(X[order] - u)
    to_minus = _row_squares(X[order] + u)
    terms = to_plus[:k].tolist() + to_minus[k + 1 :].tolist()
    if k < n:
        terms += [frac * to_plus[k], (1.0 - frac) * to_minus[k]]
    return math.sqrt(math.fsum(terms) / n)


def _row_squares(D):
    """Σ_a D_ia², coordinate by coordinate (as ``squared_euclidean_cost``)."""
    out = np.zeros(D.shape[0])
    for a in range(D.shape[1]):
        out += D[:, a] * D[:, a]
    return out


def _tokens_to_plus(masses, n) -> tuple[int, float]:
    """(k, f): the mass m₊/(m₊ + m₋) of +u is (k + f)/N, f ∈ [0, 1), in tokens of mass 1/N.

    The masses of Π_♯ρ0 are counts over N; a quotient within a few roundings of a whole number of tokens is
    that number, else the one split token would carry a rounding-sized share of the wrong atom (a cost of
    O(u) in W2², all of it when W2 itself is near 1e-8)."""
    masses = np.asarray(masses, dtype=float)
    if masses.shape != (2,) or not np.all(np.isfinite(masses)) or np.any(masses < 0) or not np.any(masses > 0):
        raise ValueError(f"masses must be two finite non-negative numbers with a positive sum, got {masses!r}")
    masses = masses / masses.max()  # the ratio only: 1e308 + 1e308 would overflow
    t = n * (float(masses[0]) / float(masses[0] + masses[1]))
    whole = round(t)
    if abs(t - whole) <= 8.0 * _U * max(n, 1):
        t = float(whole)
    t = min(max(t, 0.0), float(n))
    k = min(int(math.floor(t)), n)
    return k, t - k


def synchronous_coupling(X: np.ndarray, Y: np.ndarray) -> float:
    """sqrt(mean_i |x_i − y_i|²): W2 under the coupling x_i ↔ y_i, an upper bound on W2."""
    return float(np.sqrt(np.mean(np.sum((np.asarray(X) - np.asarray(Y)) ** 2, axis=-1))))


def w2_to_projection(X: np.ndarray, X0: np.ndarray, E1: np.ndarray) -> float:
    """W2(ρ, Π_♯ρ0) for clouds X (N, d) and the initial tokens X0 (N, d).

    dim E1 = 1: closed form against the two atoms ±u; otherwise the exact solve
    against the cloud Π(x0_i) on the great sphere E1 ∩ S.
    """
    X0 = check_tokens(X0, "X0")
    if X0.ndim != 2 or np.any(np.isnan(X0)):
        raise ValueError(f"X0 must be one cloud of finite initial tokens (token, dim), got shape {X0.shape}")
    E1 = check_basis(E1, X0.shape[1], "E1")
    if np.any(np.isnan(check_tokens(X))):
        return math.nan  # a snapshot the solver did not reach
    if E1.shape[1] == 1:
        u = E1[:, 0]
        if np.any(X0 @ u == 0):
            raise ValueError("Π is undefined for a token with P1 x = 0 (a token on E1⊥)")
        return w2_two_atoms(X, u, two_atom_masses(X0, u))
    return w2(X, projection_map(X0, E1))


def w2_to_projection_curves(positions: np.ndarray, X0: np.ndarray, E1: np.ndarray) -> np.ndarray:
    """W2(ρ_t, Π♯ρ0) (``w2_to_projection``) per replica and time, shape (replica, time), for positions (replica,
    time, token, dim) started from the initial tokens X0 (replica, token, dim)."""
    nr, nt = positions.shape[:2]
    return np.array([[w2_to_projection(positions[r, k], X0[r], E1) for k in range(nt)] for r in range(nr)])
