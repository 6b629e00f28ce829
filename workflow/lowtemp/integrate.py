"""Time integration on the sphere.

* ``rk4``: classical Runge–Kutta on the ambient ODE, then renormalisation
  (the ambient flow keeps the sphere invariant, so the order stays 4).
* ``euler``: x ← (x + h f(x)) / |x + h f(x)|, the transformer layer
  (residual update followed by normalisation) as a discretisation.

``simulate`` steps from snapshot to snapshot with a uniform step no larger
than the requested ``dt`` and stores every snapshot; positions that become
non-finite or leave the sphere stop the run with an error naming the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .measures import normalise

Field = Callable[[np.ndarray], np.ndarray]

#: largest tolerated | |x| − 1 | after renormalisation
SPHERE_TOLERANCE = 1e-12


def rk4_step(field: Field, X: np.ndarray, h: float) -> np.ndarray:
    k1 = field(X)
    k2 = field(X + 0.5 * h * k1)
    k3 = field(X + 0.5 * h * k2)
    k4 = field(X + h * k3)
    return normalise(X + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4))


def euler_step(field: Field, X: np.ndarray, h: float) -> np.ndarray:
    return normalise(X + h * field(X))


STEPPERS = {"rk4": rk4_step, "euler": euler_step}


@dataclass(frozen=True)
class TimeGrid:
    """Snapshot times 0, Δ, 2Δ, …, horizon and the step h = Δ / steps_per_snapshot ≤ dt."""

    horizon: float
    snapshots: int  # number of snapshot intervals
    dt: float  # largest admissible step

    def __post_init__(self):
        if not (self.horizon > 0 and np.isfinite(self.horizon)):
            raise ValueError(f"time.horizon must be a positive finite number, got {self.horizon}")
        if not (self.dt > 0 and np.isfinite(self.dt)):
            raise ValueError(f"time.dt must be a positive finite number, got {self.dt}")
        if self.dt > self.horizon:
            raise ValueError(f"time.dt = {self.dt} is larger than time.horizon = {self.horizon}")
        if int(self.snapshots) != self.snapshots or self.snapshots < 1:
            raise ValueError(f"time.snapshots must be a positive integer, got {self.snapshots}")

    @property
    def times(self) -> np.ndarray:
        return np.linspace(0.0, self.horizon, int(self.snapshots) + 1)

    @property
    def steps_per_snapshot(self) -> int:
        interval = self.horizon / self.snapshots
        return max(1, int(np.ceil(interval / self.dt - 1e-9)))

    @property
    def step(self) -> float:
        return self.horizon / self.snapshots / self.steps_per_snapshot

    @property
    def total_steps(self) -> int:
        return int(self.snapshots) * self.steps_per_snapshot


def check_on_sphere(X: np.ndarray, t: float, what: str = "tokens") -> None:
    """Raise FloatingPointError if X has non-finite entries or rows off the unit sphere."""
    if not np.all(np.isfinite(X)):
        bad = np.argwhere(~np.isfinite(X))[0]
        raise FloatingPointError(f"{what} became non-finite at t = {t:.6g} (replica {bad[0]}, token {bad[1]})")
    dev = np.abs(np.linalg.norm(X, axis=-1) - 1.0)
    if dev.max() > SPHERE_TOLERANCE:
        r, i = np.unravel_index(np.argmax(dev), dev.shape)
        raise FloatingPointError(
            f"{what} left the sphere at t = {t:.6g}: | |x| - 1 | = {dev.max():.3e} (replica {r}, token {i})")


def simulate(field: Field, X0: np.ndarray, grid: TimeGrid, method: str = "rk4",
             progress: Callable[[float, int], None] | None = None) -> np.ndarray:
    """Positions at the snapshot times, shape (time, replica, token, dim)."""
    try:
        step = STEPPERS[method]
    except KeyError:
        raise ValueError(f"unknown integrator {method!r}; known: {sorted(STEPPERS)}") from None
    X = normalise(np.asarray(X0, dtype=float))
    times = grid.times
    out = np.empty((times.size,) + X.shape)
    out[0] = X
    h = grid.step
    for k in range(1, times.size):
        for _ in range(grid.steps_per_snapshot):
            X = step(field, X, h)
        check_on_sphere(X, times[k])
        out[k] = X
        if progress is not None:
            progress(float(times[k]), k * grid.steps_per_snapshot)
    return out
