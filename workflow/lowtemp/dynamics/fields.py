"""Velocity fields of the token dynamics.

Finite temperature (the particle system behind Eq. 2):

    dx_i/dt = P⊥(x_i) Σ_j w_ij V x_j,   w_ij = softmax_j(β x_iᵀ B x_j).

Zero temperature (Eq. 3): dx/dt = P⊥(x) A x / |Bᵀx|,  A = VBᵀ.

P⊥(x) = I − x xᵀ. Off the sphere (inside a Runge–Kutta stage) the same formula
is used as a smooth extension: the ambient flow keeps |x| = 1 invariant,
d|x|²/dt = 2(1 − |x|²) xᵀ(…), so renormalising after a step costs no order.

Arrays have layout (replica, token, dim). The softmax is computed with a max
shift (no raw exponential of an unshifted score) and in blocks of query rows,
so memory is O(R·block·N) rather than O(R·N²).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: query rows per block in ``attention_field``; R·block·N float64 scores live at once
DEFAULT_BLOCK_ROWS = 256


def tangent_projection(X: np.ndarray, F: np.ndarray) -> np.ndarray:
    """P⊥(x) f = f − ⟨f, x⟩ x, row by row."""
    return F - np.sum(F * X, axis=-1, keepdims=True) * X


def _shifted_scores(XBt_rows: np.ndarray, X: np.ndarray, beta: float) -> np.ndarray:
    """β x_iᵀ B x_j − max_j(β x_iᵀ B x_j) for a block of query rows; shape (R, b, N)."""
    S = np.matmul(XBt_rows, np.swapaxes(X, -1, -2))
    S *= beta
    S -= S.max(axis=-1, keepdims=True)
    return S


def attention_field(
    X: np.ndarray, B: np.ndarray, V: np.ndarray, beta: float, block_rows: int = DEFAULT_BLOCK_ROWS
) -> np.ndarray:
    """Finite-temperature velocity P⊥(x_i) Σ_j softmax_j(β x_iᵀBx_j) V x_j, shape like X."""
    X = np.asarray(X, dtype=float)
    XB = X @ B  # row i: x_iᵀ B, so (X B) x_j = x_iᵀ B x_j
    VX = X @ V.T  # row j: (V x_j)ᵀ
    F = np.empty_like(X)
    n = X.shape[-2]
    for start in range(0, n, block_rows):
        rows = slice(start, min(start + block_rows, n))
        W = _shifted_scores(XB[..., rows, :], X, beta)
        np.exp(W, out=W)
        F[..., rows, :] = np.matmul(W, VX) / W.sum(axis=-1, keepdims=True)
    return tangent_projection(X, F)


def effective_sample_size(
    X: np.ndarray, B: np.ndarray, beta: float, block_rows: int = DEFAULT_BLOCK_ROWS
) -> np.ndarray:
    """ESS_i = 1 / Σ_j w_ij² of every token's attention weights, shape (replica, token)."""
    X = np.asarray(X, dtype=float)
    XB = X @ B
    n = X.shape[-2]
    ess = np.empty(X.shape[:-1])
    for start in range(0, n, block_rows):
        rows = slice(start, min(start + block_rows, n))
        W = _shifted_scores(XB[..., rows, :], X, beta)
        np.exp(W, out=W)
        # after the max shift the largest weight is e^0 = 1, so Z ≥ 1 and Σ w² ≥ 1: no 0/0
        Z = W.sum(axis=-1)
        ess[..., rows] = Z**2 / np.sum(W * W, axis=-1)
    return ess


def zero_temperature_field(X: np.ndarray, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Zero-temperature velocity P⊥(x) A x / |Bᵀx| (Eq. 3), shape like X."""
    X = np.asarray(X, dtype=float)
    speed = np.linalg.norm(X @ B, axis=-1, keepdims=True)  # |Bᵀx| = |xᵀB|
    return tangent_projection(X, (X @ A.T) / speed)


def value_field(X: np.ndarray, V: np.ndarray) -> np.ndarray:
    """End-phase velocity of Conjecture 1, P⊥(x) V x."""
    return tangent_projection(X, X @ V.T)


@dataclass(frozen=True, eq=False)
class ZeroTemperatureField:
    """The zero-temperature field of Eq. 3 for A = VBᵀ and B: what a simulation calls, and what a checkpoint's
    fingerprint covers (``identity``)."""

    A: np.ndarray
    B: np.ndarray

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return zero_temperature_field(X, self.A, self.B)

    def identity(self) -> tuple[tuple[np.ndarray, ...], dict]:
        """The arrays and settings that determine the field."""
        return (self.A, self.B), {}
