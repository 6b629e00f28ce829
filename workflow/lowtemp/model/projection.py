"""The projection map Π and distances to eigenspaces.

Π(x) = P1 x / |P1 x| maps a token onto the great sphere E1 ∩ S^{d-1}, where P1 is
the orthogonal projector onto E1 (the leading eigenspace of A = VBᵀ). The
zero-temperature flow converges to Π_♯ρ0. For dim E1 = 1 with unit vector u,
Π_♯ρ0 is two atoms at ±u with masses ρ0{⟨x,u⟩ > 0} and ρ0{⟨x,u⟩ < 0}.
"""

from __future__ import annotations

import numpy as np

#: largest entry of EᵀE − I for a basis E to count as orthonormal (an eigensolver's basis is within 1e-15)
ORTHONORMAL_TOL = 1e-8


def check_basis(E: np.ndarray, dim: int, name: str = "E") -> np.ndarray:
    """E as a (dim, k) float array with orthonormal columns, or ValueError naming ``name``: a 1-D vector, a basis
    of another dimension, non-finite entries or columns that are not orthonormal (2·u for u) would otherwise give a
    number for another subspace."""
    E = np.asarray(E, dtype=float)
    if E.ndim != 2 or E.shape[0] != dim or E.shape[1] < 1:
        raise ValueError(f"{name} must be a ({dim}, k) basis (one column per direction), got shape {E.shape}")
    if not np.all(np.isfinite(E)):
        raise ValueError(f"{name} must be finite")
    defect = float(np.max(np.abs(E.T @ E - np.eye(E.shape[1]))))
    if not defect <= ORTHONORMAL_TOL:
        raise ValueError(f"{name}'s columns are not orthonormal (largest entry of EᵀE − I: {defect:.3g})")
    return E


def check_tokens(X: np.ndarray, name: str = "X") -> np.ndarray:
    """X as a float array (…, token, dim) with at least one token and no infinite coordinate, or ValueError naming
    ``name``. NaN passes: it marks a snapshot a solver did not reach, and every distance of such a cloud is NaN."""
    X = np.asarray(X, dtype=float)
    if X.ndim < 2 or X.shape[-2] < 1:
        raise ValueError(f"{name} must be (…, token, dim) with at least one token, got shape {X.shape}")
    if np.any(np.isinf(X)):
        raise ValueError(f"{name} has an infinite coordinate")
    return X


def projection_map(X: np.ndarray, E1: np.ndarray) -> np.ndarray:
    """Π(x) = P1 x/|P1 x| for tokens X (..., dim); E1 is a (dim, k) orthonormal basis."""
    PX = (X @ E1) @ E1.T
    norms = np.linalg.norm(PX, axis=-1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("Π is undefined for a token with P1 x = 0 (a token on E1⊥)")
    return PX / norms


def two_atom_masses(X: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Masses of Π_♯ρ at +u and −u for dim E1 = 1: fractions with ⟨x,u⟩ > 0 and < 0.

    Shape X.shape[:-2] + (2,). Tokens exactly on u⊥ (measure zero) are left out
    of both; ``projection_map`` refuses them.
    """
    c = X @ u
    return np.stack([np.mean(c > 0, axis=-1), np.mean(c < 0, axis=-1)], axis=-1)


def distance_to_eigenspace(X: np.ndarray, E: np.ndarray) -> np.ndarray:
    """sqrt(mean_i |x_i − Px_i/|Px_i||²): the root-mean-square chordal distance of tokens to E ∩ S.

    Each token moves to its nearest point Px/|Px| of E ∩ S^{d-1}, so this is the distance of the empirical
    measure to the set of measures supported there; for a unit token the square is 2 − 2|Px|. Reduces over
    the token axis. Computed as ``squared_distance_to_great_sphere``, without the cancellation of 2 − 2|Px|.
    X and E are checked (``check_tokens``, ``check_basis``); a cloud with a NaN token gives NaN.
    """
    X = check_tokens(X)
    return np.sqrt(np.mean(squared_distance_to_great_sphere(X, check_basis(E, X.shape[-1])), axis=-1))


def squared_distance_to_great_sphere(X: np.ndarray, E: np.ndarray) -> np.ndarray:
    """|x − Px/|Px||² per token, E a (dim, k) orthonormal basis: |r|² + (1 − |p|)², p = Eᵀx, r = x − Ep.

    x − Px ⊥ E and Px − Px/|Px| ∈ E, so the square splits into these two non-negative terms (Pythagoras).
    2 − 2|Px| is the same number for a unit token, but it subtracts two numbers near 2 and keeps only
    their rounding once the distance is below about 1e-8. Here |r|² is accurate to a few roundings of
    itself, and (1 − |p|)² = O(|r|⁴ + (1 − |x|)²) is a correction whose own rounding is O(u²): the distance
    is accurate to a few roundings of itself plus a few u, the size by which rounding x moves it anyway.
    """
    p = X @ E
    r = X - p @ E.T
    return np.sum(r * r, axis=-1) + (1.0 - np.linalg.norm(p, axis=-1)) ** 2


def tokens_across(X: np.ndarray, X0: np.ndarray, E1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(across, net) for clouds X (replica, time, token, dim) started from X0 (replica, token, dim), E1 (dim, 1):
    how many tokens sit on the other side of u⊥ from their initial token (sign ⟨x,u⟩ ≠ sign ⟨x0,u⟩), and by how
    many the count on u's side differs from the initial count: the tokens the exact plan to Π♯ρ0 = m₊δ_u + m₋δ_{−u}
    must send to the farther atom. Both (replica, time), float (NaN at a snapshot with a NaN token and for
    dim E1 > 1, where Π♯ρ0 is no pair of atoms)."""
    X, X0 = check_tokens(X), check_tokens(X0, "X0")
    shape = X.shape[:2]
    if E1.shape[1] != 1:
        return np.full(shape, np.nan), np.full(shape, np.nan)
    u = check_basis(E1, X.shape[-1], "E1")[:, 0]
    side0 = (X0 @ u > 0)[:, None, :]  # (replica, 1, token)
    side = X @ u > 0
    across = np.sum(side != side0, axis=-1).astype(float)
    net = np.abs(np.sum(side, axis=-1) - np.sum(side0, axis=-1)).astype(float)
    reached = ~np.any(np.isnan(X), axis=(-2, -1))
    return np.where(reached, across, np.nan), np.where(reached, net, np.nan)


#: resamples of the tokens behind ``moving_cost_lower``
RESAMPLES = 400
#: net tokens across (j = 0 … MOVED) at which ``moving_cost_lower`` bounds W2² to Π♯ρ0
MOVED = 128


def moving_cost_lower(
    X: np.ndarray, X0: np.ndarray, E1: np.ndarray, level: float, rng: np.random.Generator
) -> np.ndarray:
    """A lower confidence bound on W2²(μ, Π♯ρ0) of the measure μ the tokens X (replica, time, token, dim) sample, were
    μ to send the mass of j tokens (j = 0 … ``MOVED``) net across u⊥, E1 = (u): (replica, time, MOVED + 1).

    The plan to Π♯ρ0 = m₊δ_u + m₋δ_{−u} sends every token to its nearer atom, |x − nearer|² = a(x), except a net
    mass, taken where it costs least: the smallest |⟨x,u⟩| on the side that gained it, each 4|⟨x,u⟩| more. So the
    cost of sending j tokens' mass is mean a + (4/n)·(the j smallest |⟨x,u⟩| there), the side that gained tokens
    since X0 (replica, token, dim). The bound is its ``level`` quantile over ``RESAMPLES`` resamples of the tokens
    with replacement (one set per replica, kept over time), per j: the near-split tokens that make sending cheap
    and their share of the spread are resampled together. Each resample draws n from the tokens and one more at an
    atom (a = 0, the dearest to send), which stands for tokens nearer the atoms than the sample happened to hold:
    without it a sample that missed a rare such mass (a spread on a ring about the atoms, a few tokens on them) has
    every resample over the measure's spread. Column 0 is the squared distance to the atoms (the spread D²).
    Nondecreasing in j. NaN at a snapshot with a NaN token and for dim E1 > 1 (no pair of atoms)."""
    X, X0 = check_tokens(X), check_tokens(X0, "X0")
    nr, nt, n = X.shape[:3]
    out = np.full((nr, nt, MOVED + 1), np.nan)
    if E1.shape[1] != 1:
        return out
    u = check_basis(E1, X.shape[-1], "E1")[:, 0]
    for r in range(nr):
        # n draws from the n tokens and one at an atom, which adds nothing to the spread and is never sent
        counts = rng.multinomial(n, np.full(n + 1, 1.0 / (n + 1)), size=RESAMPLES)[:, :n].astype(float)
        initial_u = np.sum(X0[r] @ u > 0)
        for k in range(nt):
            if np.any(np.isnan(X[r, k])):
                continue
            height = X[r, k] @ u
            side = np.flatnonzero(height > 0 if np.sum(height > 0) >= initial_u else height <= 0)
            order = side[_smallest_first(np.abs(height[side]))]
            if order.size < side.size and np.min(np.sum(counts[:, order], axis=1)) < MOVED:
                order = side[np.argsort(np.abs(height[side]))]  # a resample drew fewer than MOVED of them
            sent = _cheapest_sums(counts[:, order], np.abs(height[order]))
            spread = counts @ squared_distance_to_great_sphere(X[r, k], E1) / n
            out[r, k] = np.quantile(spread[:, None] + 4.0 * sent / n, level, axis=0)
    return out


def _smallest_first(h: np.ndarray) -> np.ndarray:
    """Indices of the 2·MOVED + 64 smallest of h, ascending (all of h if fewer): a resample's MOVED cheapest tokens
    are among them unless it draws fewer than MOVED of them (about 10 standard deviations off)."""
    keep = 2 * MOVED + 64
    if h.size <= keep:
        return np.argsort(h)
    part = np.argpartition(h, keep - 1)[:keep]
    return part[np.argsort(h[part])]


def _cheapest_sums(counts: np.ndarray, h: np.ndarray) -> np.ndarray:
    """(resample, j): the sum of the j smallest heights h (ascending), each repeated as ``counts`` (resample, len h)
    says, j = 0 … ``MOVED``; past the tokens drawn, each further one at the largest of h (1 where h is empty)."""
    if h.size == 0:
        counts, h = np.zeros((counts.shape[0], 1)), np.ones(1)
    j = np.arange(MOVED + 1, dtype=float)
    seen, summed = np.cumsum(counts, axis=1), np.cumsum(counts * h, axis=1)
    out = np.empty((counts.shape[0], MOVED + 1))
    for q in range(counts.shape[0]):
        at = np.minimum(np.searchsorted(seen[q], j), h.size - 1)  # the first height that completes j
        out[q] = summed[q, at] - (seen[q, at] - j) * h[at]
    return out
