"""Exact Wasserstein-2 distances between empirical measures.

W2 uses the Euclidean (chordal) cost in R^d and is the distance itself, not
its square. Two uniform clouds of the same size (every W2 the pipeline
computes) go to ``assignment.w2_exact``: a sparse assignment certified optimal
on all N² pairs, with POT's network simplex as its fallback, in O(N·k) memory
except where that fallback builds the dense matrix (N ≤ ``assignment.DENSE_MAX``).
Weighted measures go to POT's network simplex (``ot.emd2`` on the squared
Euclidean cost). A solve that did not reach optimality raises
``TransportNotConverged`` instead of returning a number. A two-atom target
±u (Π_♯ρ for dim E1 = 1) has a closed form by sorting (``w2_two_atoms``).
"""

from __future__ import annotations

import warnings

import numpy as np
import ot

from ..model.projection import projection_map, two_atom_masses
from . import assignment

#: POT's result code for an optimal solution of the network simplex
_OPTIMAL = 1


class TransportNotConverged(RuntimeError):
    """The exact transport solver stopped before reaching an optimal plan."""


def squared_euclidean_cost(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """C_ij = |x_i − y_j|², computed without cancellation below zero."""
    C = np.sum(X**2, axis=1)[:, None] + np.sum(Y**2, axis=1)[None, :] - 2.0 * (X @ Y.T)
    return np.maximum(C, 0.0)


def w2(
    X: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
    max_iterations: int | None = None,
) -> float:
    """Exact W2 between Σ a_i δ_{x_i} and Σ b_j δ_{y_j} (uniform weights by default).

    Uniform clouds of the same size: ``assignment.w2_exact`` (certified); otherwise, or with an
    iteration cap, ``w2_network_simplex``.
    """
    return w2_certified(X, Y, a, b, max_iterations)[0]


def w2_certified(
    X: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
    max_iterations: int | None = None,
) -> tuple[float, float]:
    """(W2, bound): exact W2 as ``w2`` computes it and a certified bound on |W2² − W2²_opt| (uniform clouds of
    the same size, ``assignment.W2Result.error_bound``); NaN for the weighted solve, which has no such bound."""
    X = assignment.as_cloud(X, "X")
    Y = assignment.as_cloud(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must live in the same dimension, got {X.shape} and {Y.shape}")
    if a is None and b is None and max_iterations is None and X.shape == Y.shape:
        result = assignment.w2_exact(X, Y)
        if not result.certified:
            raise TransportNotConverged(
                f"exact W2 between {len(X)} tokens was not certified: error bound on W2² "
                f"{result.error_bound:.3g} against the target {result.target:.3g} (W2 = {result.value:.3g}; "
                f"{result.rounds} pricing passes, POT fallback {'taken' if result.fallback else 'not taken'})"
            )
        return result.value, result.error_bound
    return w2_network_simplex(X, Y, a, b, max_iterations), float("nan")


def w2_network_simplex(
    X: np.ndarray,
    Y: np.ndarray,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
    max_iterations: int | None = None,
) -> float:
    """Exact W2 by POT's network simplex on the dense cost matrix (``ot.emd2``), any weights."""
    X = assignment.as_cloud(X, "X")
    Y = assignment.as_cloud(Y, "Y")
    a = np.full(len(X), 1.0 / len(X)) if a is None else _weights(a, len(X), "a")
    b = np.full(len(Y), 1.0 / len(Y)) if b is None else _weights(b, len(Y), "b")
    if not np.isclose(np.sum(a), np.sum(b), rtol=1e-9, atol=0.0):
        raise ValueError(f"weights a and b must have the same total mass, got {np.sum(a):.17g} and {np.sum(b):.17g}")
    C = squared_euclidean_cost(X, Y)
    if max_iterations is None:
        max_iterations = max(100_000, 100 * len(X) * len(Y))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # POT warns on non-convergence
        try:
            cost, log = ot.emd2(a, b, C, numItermax=max_iterations, log=True)
        except UserWarning as w:
            raise TransportNotConverged(f"ot.emd2 did not converge: {w}") from None
    if log["result_code"] != _OPTIMAL:
        raise TransportNotConverged(
            f"ot.emd2 did not reach an optimal plan (result code {log['result_code']}: {log['warning']})"
        )
    return float(np.sqrt(max(float(cost), 0.0)))


def _weights(w, n, name):
    w = np.asarray(w)
    if np.iscomplexobj(w) or w.dtype.kind not in "biuf":
        raise TypeError(f"weights {name} must be real numbers, got dtype {w.dtype}")
    w = np.asarray(w, dtype=float)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.sum(w) > 0:
        raise ValueError(f"weights {name} must be {n} finite non-negative numbers with a positive sum")
    return w


def w2_two_atoms(X: np.ndarray, u: np.ndarray, masses: np.ndarray) -> float:
    """Exact W2 between the uniform cloud X (N, d) and m₊δ_u + m₋δ_{−u}, |u| = 1.

    |x − u|² − |x + u|² = −4⟨x,u⟩, so the optimal plan sends the mass m₊ from
    the tokens of largest ⟨x,u⟩ to +u (splitting one token if needed) and the rest
    to −u: W2² = mean|x|² + 1 + 2·mean⟨x,u⟩ − 4 Σ_i f_i ⟨x_i,u⟩, with f_i the
    mass of token i sent to +u.
    """
    X = np.asarray(X, dtype=float)
    m_plus = float(masses[0]) / float(np.sum(masses))
    n = len(X)
    c = np.sort(X @ u)[::-1]
    cum = np.arange(1, n + 1) / n
    f = np.clip(m_plus - (cum - 1.0 / n), 0.0, 1.0 / n)  # mass of each sorted token sent to +u
    sq = np.mean(np.sum(X**2, axis=1)) + 1.0 + 2.0 * np.mean(c) - 4.0 * np.sum(f * c)
    return float(np.sqrt(max(sq, 0.0)))


def synchronous_coupling(X: np.ndarray, Y: np.ndarray) -> float:
    """sqrt(mean_i |x_i − y_i|²): W2 under the coupling x_i ↔ y_i, an upper bound on W2."""
    return float(np.sqrt(np.mean(np.sum((np.asarray(X) - np.asarray(Y)) ** 2, axis=-1))))


def w2_to_projection(X: np.ndarray, X0: np.ndarray, E1: np.ndarray) -> float:
    """W2(ρ, Π_♯ρ0) for clouds X (N, d) and the initial tokens X0 (N, d).

    dim E1 = 1: closed form against the two atoms ±u; otherwise the exact solve
    against the cloud Π(x0_i) on the great sphere E1 ∩ S.
    """
    if E1.shape[1] == 1:
        u = E1[:, 0]
        return w2_two_atoms(X, u, two_atom_masses(X0, u))
    return w2(X, projection_map(X0, E1))
