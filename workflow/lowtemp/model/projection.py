"""The projection map Π and distances to eigenspaces.

Π(x) = P1 x / |P1 x| maps a token onto the great sphere E1 ∩ S^{d-1}, where P1 is
the orthogonal projector onto E1 (the leading eigenspace of A = VBᵀ). The
zero-temperature flow converges to Π_♯ρ0. For dim E1 = 1 with unit vector u,
Π_♯ρ0 is two atoms at ±u with masses ρ0{⟨x,u⟩ > 0} and ρ0{⟨x,u⟩ < 0}.
"""

from __future__ import annotations

import numpy as np


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
    """
    return np.sqrt(np.mean(squared_distance_to_great_sphere(X, E), axis=-1))


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
