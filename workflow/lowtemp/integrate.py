"""Time integration on the sphere.

* ``rk4``: classical Runge–Kutta on the ambient ODE, then renormalisation
  (the ambient flow keeps the sphere invariant, so the order stays 4).
* ``euler``: x ← (x + h f(x)) / |x + h f(x)|, the transformer layer
  (residual update followed by normalisation) as a discretisation.

``simulate`` steps from snapshot to snapshot with a uniform step no larger
than the requested ``dt`` and stores every snapshot; positions that become
non-finite or leave the sphere stop the run with an error naming the step,
the time, the run (e.g. its beta), the replica and the token. A run can resume
from a checkpoint (``resume``) bit for bit.
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


def check_on_sphere(X: np.ndarray, t: float, what: str = "tokens", step: int | None = None) -> None:
    """Raise FloatingPointError if X has non-finite entries or rows off the unit sphere.

    The message names ``what`` (for a simulation: the run, e.g. "beta = 100"), the
    time, the step when given, and the first offending replica and token.
    """
    at = f"t = {t:.6g}" + ("" if step is None else f" (step {step})")
    if not np.all(np.isfinite(X)):
        bad = np.argwhere(~np.isfinite(X))[0]
        raise FloatingPointError(f"{what}: positions became non-finite at {at}, replica {bad[0]}, token {bad[1]}")
    dev = np.abs(np.linalg.norm(X, axis=-1) - 1.0)
    if dev.max() > SPHERE_TOLERANCE:
        r, i = np.unravel_index(np.argmax(dev), dev.shape)
        raise FloatingPointError(
            f"{what}: positions left the sphere at {at}: | |x| - 1 | = {dev.max():.3e} > {SPHERE_TOLERANCE:g}, "
            f"replica {r}, token {i}")


Resume = tuple[int, np.ndarray]


def simulate(field: Field, X0: np.ndarray, grid: TimeGrid, method: str = "rk4",
             progress: Callable[[float, int], None] | None = None, *, label: str = "tokens",
             resume: Resume | None = None,
             on_snapshot: Callable[[int, np.ndarray], None] | None = None) -> np.ndarray:
    """Positions at the snapshot times, shape (time, replica, token, dim).

    Every step is checked (finite, on the sphere); an error names ``label``, the
    step, the time, the replica and the token. ``resume = (k, P)`` continues from
    a checkpoint: ``P`` holds the snapshots 0..k of an earlier run of the same
    problem. Steps only depend on the positions, so the result is bit for bit
    that of an uninterrupted run. ``on_snapshot(k, out)`` is called after
    snapshot k is stored (``out[:k + 1]`` is final), e.g. to write a checkpoint.
    """
    try:
        step = STEPPERS[method]
    except KeyError:
        raise ValueError(f"unknown integrator {method!r}; known: {sorted(STEPPERS)}") from None
    X = normalise(np.asarray(X0, dtype=float))
    times = grid.times
    out = np.empty((times.size,) + X.shape)
    out[0] = X
    first = 1
    if resume is not None:
        k0, done = resume
        done = np.asarray(done, dtype=float)
        if not (0 <= k0 < times.size) or done.shape != (k0 + 1,) + X.shape:
            raise ValueError(f"resume: expected snapshots 0..{k0} of shape {(k0 + 1,) + X.shape}, got {done.shape}")
        if not np.array_equal(done[0], out[0]):
            raise ValueError("resume: the checkpoint starts from other initial positions")
        out[: k0 + 1] = done
        X = out[k0].copy()
        first = k0 + 1
    h = grid.step
    n_sub = grid.steps_per_snapshot
    for k in range(first, times.size):
        for j in range(n_sub):
            X = step(field, X, h)
            n = (k - 1) * n_sub + j + 1
            check_on_sphere(X, n * h, label, step=n)
        out[k] = X
        if on_snapshot is not None:
            on_snapshot(k, out)
        if progress is not None:
            progress(float(times[k]), k * n_sub)
    return out
