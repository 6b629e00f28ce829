"""Time integration on the sphere.

* ``rk4``: classical Runge–Kutta on the ambient ODE, then renormalisation
  (the ambient flow keeps the sphere invariant, so the order stays 4).
* ``euler``: x ← (x + h f(x)) / |x + h f(x)|, the transformer layer
  (residual update followed by normalisation) as a discretisation.

``simulate`` steps from snapshot to snapshot with a uniform step no larger
than the requested ``dt`` and stores every snapshot. Every step is checked
before its result is projected back onto the sphere: positions that become
non-finite, or a step that leaves the sphere by more than ``DRIFT_TOLERANCE``,
stop the run with an error naming the step, the time, the run (e.g. its beta),
the replica and the token.

The *norm drift* of a step is max over tokens of | |y| − 1 | for the step's
ambient result y, before renormalisation. The exact flow keeps |x| = 1 and the
step starts on the sphere, so the drift is the distance from y to the sphere,
a lower bound on the step's local error |y − x(t + h)|: O(h^5) per step for
RK4, and for Euler exactly sqrt(1 + h²|f|²) − 1 ≈ h²|f|²/2 (f is tangent).
``simulate(..., return_drift=True)`` also returns its maximum over the steps
of every snapshot interval, per replica. A run can resume from a checkpoint
(``resume``) bit for bit, drift included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .measures import normalise

Field = Callable[[np.ndarray], np.ndarray]

#: largest tolerated | |x| − 1 | of positions that should lie on the sphere (``check_on_sphere``)
SPHERE_TOLERANCE = 1e-12
#: largest tolerated norm drift of one step (before renormalisation). The drift bounds the step's
#: local error from below, so a drift of 0.05 is a step that alone moved some token at least 5 % of
#: a unit vector off its exact trajectory; for Euler (drift = sqrt(1 + θ²) − 1 for a turn of
#: θ = h|f| radians) it is a turn of 0.32 rad (18°) in one step. No step that resolves the dynamics
#: comes near it: on the shipped configs' matrices, initial measures and steps (384 tokens, the
#: largest β, whole horizon) the largest drift per step measured 1.2e-5 with RK4 and 1.1e-3 with
#: Euler. A step above it is far too large (lower ``time.dt``); the smaller drifts of a run are
#: recorded (``norm_drift``) rather than judged here.
DRIFT_TOLERANCE = 0.05


def rk4_increment(field: Field, X: np.ndarray, h: float) -> np.ndarray:
    """One classical Runge–Kutta step of the ambient ODE, not renormalised (off the sphere by the drift)."""
    k1 = field(X)
    k2 = field(X + 0.5 * h * k1)
    k3 = field(X + 0.5 * h * k2)
    k4 = field(X + h * k3)
    return X + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def euler_increment(field: Field, X: np.ndarray, h: float) -> np.ndarray:
    """One explicit Euler step x + h f(x), not renormalised."""
    return X + h * field(X)


def rk4_step(field: Field, X: np.ndarray, h: float) -> np.ndarray:
    """One RK4 step followed by renormalisation onto the sphere."""
    return normalise(rk4_increment(field, X, h))


def euler_step(field: Field, X: np.ndarray, h: float) -> np.ndarray:
    """One Euler step followed by renormalisation (the transformer layer)."""
    return normalise(euler_increment(field, X, h))


STEPPERS = {"rk4": rk4_step, "euler": euler_step}
#: the same steps before renormalisation, used by ``simulate`` to measure the norm drift
INCREMENTS = {"rk4": rk4_increment, "euler": euler_increment}
#: field evaluations of one step of each scheme
EVALUATIONS_PER_STEP = {"rk4": 4, "euler": 1}


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
        """Snapshot times 0, Δ, …, horizon."""
        return np.linspace(0.0, self.horizon, int(self.snapshots) + 1)

    @property
    def steps_per_snapshot(self) -> int:
        """Steps per snapshot interval: the fewest that keep the step ≤ dt."""
        interval = self.horizon / self.snapshots
        return max(1, int(np.ceil(interval / self.dt - 1e-9)))

    @property
    def step(self) -> float:
        """The uniform step h = Δ / steps_per_snapshot."""
        return self.horizon / self.snapshots / self.steps_per_snapshot

    @property
    def total_steps(self) -> int:
        """Steps from t = 0 to the horizon."""
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


def norm_drift(Y: np.ndarray) -> np.ndarray:
    """| |y| − 1 | of every row of a step's result before renormalisation, shape Y.shape[:-1]."""
    return np.abs(np.linalg.norm(Y, axis=-1) - 1.0)


def check_step(Y: np.ndarray, t: float, what: str = "tokens", step: int | None = None,
               tolerance: float = DRIFT_TOLERANCE) -> np.ndarray:
    """Check a step's ambient result Y (before renormalisation); return its norm drift per replica.

    Raises FloatingPointError if Y has non-finite entries, or if some token's drift
    | |y| − 1 | exceeds ``tolerance`` (the step is far too large; see
    ``DRIFT_TOLERANCE``). The message names ``what`` (for a simulation: the run,
    e.g. "beta = 100"), the time, the step when given, and the first offending
    replica and token.
    """
    at = f"t = {t:.6g}" + ("" if step is None else f" (step {step})")
    if not np.all(np.isfinite(Y)):
        bad = np.argwhere(~np.isfinite(Y))[0]
        raise FloatingPointError(f"{what}: positions became non-finite at {at}, replica {bad[0]}, token {bad[1]}")
    dev = norm_drift(Y)
    worst = float(dev.max())
    if not worst <= tolerance:
        r, i = np.unravel_index(np.argmax(dev), dev.shape)
        raise FloatingPointError(
            f"{what}: the step is far too large: at {at} it left the sphere by | |x| - 1 | = {worst:.3e} > "
            f"{tolerance:g} before renormalisation (local error at least that), replica {r}, token {i}; "
            f"lower time.dt")
    return dev.max(axis=-1)


#: ``(k, positions of snapshots 0..k, norm drift of snapshots 0..k)`` of an earlier run
Resume = tuple[int, np.ndarray, np.ndarray]


def simulate(field: Field, X0: np.ndarray, grid: TimeGrid, method: str = "rk4",
             progress: Callable[[float, int], None] | None = None, *, label: str = "tokens",
             resume: Resume | None = None,
             on_snapshot: Callable[[int, np.ndarray, np.ndarray], None] | None = None,
             return_drift: bool = False):
    """Positions at the snapshot times, shape (time, replica, token, dim).

    With ``return_drift`` also the norm drift (module doc), shape (time, replica):
    entry k is the largest drift of any token over the steps from snapshot k − 1
    to k (0 at k = 0, where no step was taken).

    Every step is checked before renormalisation (``check_step``: finite, drift
    below ``DRIFT_TOLERANCE``); an error names ``label``, the step, the time, the
    replica and the token. ``resume = (k, P, D)`` continues from a checkpoint:
    ``P`` and ``D`` hold the positions and drifts of snapshots 0..k of an earlier
    run of the same problem. Steps only depend on the positions, so the result
    is bit for bit that of an uninterrupted run. ``on_snapshot(k, out, drift)``
    is called after snapshot k is stored (``out[:k + 1]`` and ``drift[:k + 1]``
    are final), e.g. to write a checkpoint.
    """
    try:
        increment = INCREMENTS[method]
    except KeyError:
        raise ValueError(f"unknown integrator {method!r}; known: {sorted(INCREMENTS)}") from None
    X = normalise(np.asarray(X0, dtype=float))
    times = grid.times
    out = np.empty((times.size,) + X.shape)
    out[0] = X
    drift = np.zeros((times.size, X.shape[0]))
    first = 1
    if resume is not None:
        k0, done, done_drift = resume
        done = np.asarray(done, dtype=float)
        done_drift = np.asarray(done_drift, dtype=float)
        if not (0 <= k0 < times.size) or done.shape != (k0 + 1,) + X.shape:
            raise ValueError(f"resume: expected snapshots 0..{k0} of shape {(k0 + 1,) + X.shape}, got {done.shape}")
        if done_drift.shape != (k0 + 1, X.shape[0]):
            raise ValueError(f"resume: expected the norm drift of snapshots 0..{k0}, shape {(k0 + 1, X.shape[0])}, "
                             f"got {done_drift.shape}")
        if not np.array_equal(done[0], out[0]):
            raise ValueError("resume: the checkpoint starts from other initial positions")
        out[: k0 + 1] = done
        drift[: k0 + 1] = done_drift
        X = out[k0].copy()
        first = k0 + 1
    h = grid.step
    n_sub = grid.steps_per_snapshot
    for k in range(first, times.size):
        for j in range(n_sub):
            Y = increment(field, X, h)
            n = (k - 1) * n_sub + j + 1
            # checked before renormalising: afterwards every row has norm 1 up to rounding,
            # so neither a blown-up step nor the drift would be visible
            drift[k] = np.maximum(drift[k], check_step(Y, n * h, label, step=n))
            X = normalise(Y)
        out[k] = X
        if on_snapshot is not None:
            on_snapshot(k, out, drift)
        if progress is not None:
            progress(float(times[k]), k * n_sub)
    return (out, drift) if return_drift else out
