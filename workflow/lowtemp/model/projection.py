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
    """sqrt(mean_i (2 − 2|P x_i|)): the root-mean-square chordal distance of tokens to E ∩ S.

    |x − Px/|Px||² = 2 − 2|Px| for a unit token x, so this is the distance of
    the empirical measure to the set of measures supported on E ∩ S^{d-1}
    (each token moved to its nearest point there). Reduces over the token axis.
    """
    pn = np.linalg.norm(X @ E, axis=-1)
    return np.sqrt(np.clip(np.mean(2.0 - 2.0 * pn, axis=-1), 0.0, None))
