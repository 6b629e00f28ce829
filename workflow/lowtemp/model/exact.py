"""Exact zero-temperature solution, the reference for the Eq. 3 simulation.

Under Assumption 1 (A symmetric) the solution of dx/dt = P⊥(x) A x / |Bᵀx| is
a time change of the normalised linear flow:

    x(t) = e^{s(t)A} x0 / |e^{s(t)A} x0|,    ds/dt = 1 / |Bᵀ x(s)|,  s(0) = 0,

because d/ds [e^{sA}x0/|e^{sA}x0|] = P⊥(x) A x. The matrix exponential is taken
in A's eigenbasis, scaled by e^{-s μ1} so nothing overflows; the scalar ODE for
s (one per token, decoupled) is solved with DOP853 at tight tolerances.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp


def normalised_linear_flow(X0: np.ndarray, A: np.ndarray, s: np.ndarray) -> np.ndarray:
    """e^{sA}x0/|e^{sA}x0| for tokens X0 (..., dim) and times s of shape X0.shape[:-1]."""
    mu, U = np.linalg.eigh(0.5 * (A + A.T))
    coeff = X0 @ U  # coordinates in the eigenbasis
    growth = np.exp(np.asarray(s)[..., None] * (mu - mu.max()))  # e^{s(μ − μ1)} ≤ 1
    Y = (coeff * growth) @ U.T
    return Y / np.linalg.norm(Y, axis=-1, keepdims=True)


def exact_time_change(
    X0: np.ndarray, A: np.ndarray, B: np.ndarray, times: np.ndarray, rtol: float = 1e-13, atol: float = 1e-13
) -> np.ndarray:
    """s(t) at the given times for every token of X0 (…, token, dim), shape (…, time, token): the time axis goes
    before the tokens, as in every trajectory of the package (``lowtemp.model.layout``)."""
    X0 = np.asarray(X0, dtype=float)
    shape = X0.shape[:-1]
    flat = X0.reshape(-1, X0.shape[-1])

    def ds_dt(_t, s):
        X = normalised_linear_flow(flat, A, s)
        return 1.0 / np.linalg.norm(X @ B, axis=-1)

    times = np.asarray(times, dtype=float)
    sol = solve_ivp(
        ds_dt, (0.0, float(times[-1])), np.zeros(flat.shape[0]), method="DOP853", t_eval=times, rtol=rtol, atol=atol
    )
    if not sol.success:
        raise RuntimeError(f"exact time change: ODE solver failed: {sol.message}")
    # sol.y is (token, time) over the flattened tokens: time goes before the token axis
    return np.moveaxis(sol.y.reshape(shape + (times.size,)), -1, max(len(shape) - 1, 0))


def exact_zero_temperature(X0: np.ndarray, A: np.ndarray, B: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Exact solution of Eq. 3 at ``times`` for tokens X0 (…, token, dim), shape (…, time, token, dim)."""
    s = exact_time_change(X0, A, B, times)
    return normalised_linear_flow(np.broadcast_to(np.expand_dims(X0, -3), s.shape + X0.shape[-1:]), A, s)
