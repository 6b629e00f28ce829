"""Time integration on the sphere (docs/integrators.md).

* ``dopri5`` (default), ``bs3``: the Dormand–Prince 5(4) and Bogacki–Shampine
  3(2) embedded pairs with error control: the root mean square over tokens of
  the local error estimate (largest replica), which bounds the step's effect on
  W2, at most a tolerance tied to the run's N (``default_tolerance``); every
  snapshot time is landed on, none interpolated.
* ``rk4``: classical Runge–Kutta on the ambient ODE at a fixed step, then
  renormalisation (the ambient flow keeps the sphere invariant, so the order
  stays 4).
* ``euler``: x ← (x + h f(x)) / |x + h f(x)|, the transformer layer
  (residual update followed by normalisation) as a discretisation.

``simulate`` steps from snapshot to snapshot (the fixed schemes with a uniform
step no larger than the requested ``dt``) and stores every snapshot. Every step
is checked before its result is projected back onto the sphere: positions that
become non-finite, or a step that leaves the sphere by more than
``DRIFT_TOLERANCE``, stop a fixed-step run with an error naming the step, the
time, the run (e.g. its beta), the replica and the token; an adaptive run
rejects such a trial step and retries a shorter one.

The *norm drift* of a step is max over tokens of | |y| − 1 | for the step's
ambient result y, before renormalisation. The exact flow keeps |x| = 1 and the
step starts on the sphere, so the drift is the distance from y to the sphere,
a lower bound on the step's local error |y − x(t + h)|: O(h^5) per step for
RK4, and for Euler exactly sqrt(1 + h²|f|²) − 1 ≈ h²|f|²/2 (f is tangent).
``simulate(..., return_record=True)`` also returns a ``StepRecord``: per
snapshot interval the drift's maximum per replica, the field evaluations, the
accepted and rejected steps and the step proposed at its end. A run can resume
from a checkpoint (``resume``) bit for bit, record included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..model.measures import normalise

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


#: most steps a time grid may hold: beyond 2^53 a step count is no longer an exact float64 and t + h == t
MAX_STEPS = 2.0**53


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
        if not self.horizon / self.dt <= MAX_STEPS:
            raise ValueError(
                f"time.dt = {self.dt:g} against time.horizon = {self.horizon:g} makes {self.horizon / self.dt:.3g} "
                "steps, more than float64 time can count (2^53: t + dt == t); raise time.dt or shorten time.horizon"
            )

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


def describe_steps(grid: TimeGrid, method: str, tolerance: float | None) -> str:
    """The steps of a run in words, for logs: the fixed step and count, or the adaptive tolerance."""
    if method in ADAPTIVE:
        return (
            f"steps from error control at tolerance {tolerance:.3g} (first trial {grid.step:.4g}, landing on "
            f"{grid.snapshots} snapshot times)"
        )
    return f"step {grid.step:.4g}, {grid.total_steps} steps"


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
            f"replica {r}, token {i}"
        )


def norm_drift(Y: np.ndarray) -> np.ndarray:
    """| |y| − 1 | of every row of a step's result before renormalisation, shape Y.shape[:-1]."""
    return np.abs(np.linalg.norm(Y, axis=-1) - 1.0)


def check_step(
    Y: np.ndarray, t: float, what: str = "tokens", step: int | None = None, tolerance: float = DRIFT_TOLERANCE
) -> np.ndarray:
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
            f"lower time.dt"
        )
    return dev.max(axis=-1)


# ------------------------------------------------------------------ adaptive: embedded Runge–Kutta pairs
@dataclass(frozen=True)
class EmbeddedPair:
    """An explicit embedded Runge–Kutta pair with the first-same-as-last property.

    Stages k_i = f(x + h Σ_j a_ij k_j), i = 1..s; the higher-order solution y = x + h Σ b_i k_i is
    the one kept (local extrapolation); h Σ e_i k_i over the stages and k_{s+1} = f(y) estimates
    the local error of the embedded lower-order solution, of order ``estimate_order`` (the
    controller's exponent is 1/(estimate_order + 1)). k_{s+1} is the next step's k_1, so a step
    costs s evaluations.
    """

    name: str
    a: tuple[tuple[float, ...], ...]  # rows 2..s of the tableau
    b: tuple[float, ...]  # weights of the kept solution (s entries)
    e: tuple[float, ...]  # b − b̂ (s + 1 entries, the last on f(y))
    order: int  # of the kept solution
    estimate_order: int  # of the embedded solution the estimate measures

    @property
    def stages(self) -> int:
        return len(self.b)


#: Dormand–Prince 5(4) (Hairer, Nørsett & Wanner, Solving ODEs I, Table II.5.2)
DOPRI5 = EmbeddedPair(
    "dopri5",
    a=(
        (1 / 5,),
        (3 / 40, 9 / 40),
        (44 / 45, -56 / 15, 32 / 9),
        (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
        (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    ),
    b=(35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
    e=(71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40),
    order=5,
    estimate_order=4,
)
#: Bogacki–Shampine 3(2) (Appl. Math. Lett. 2 (1989) 321–325)
BS3 = EmbeddedPair(
    "bs3",
    a=((1 / 2,), (0.0, 3 / 4)),
    b=(2 / 9, 1 / 3, 4 / 9),
    e=(2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8),
    order=3,
    estimate_order=2,
)
#: the adaptive integrators (step from error control, ``time.tolerance``)
ADAPTIVE = {p.name: p for p in (DOPRI5, BS3)}
#: the controller's safety factor and the bounds on the step's change per step (Hairer et al. II.4)
SAFETY, GROWTH_MAX, SHRINK_MAX = 0.9, 5.0, 0.2
#: a step below this fraction of the snapshot interval stops the run (the dynamics is not resolvable)
MIN_STEP_FRACTION = 1e-10
#: a step that would end less than this fraction of the interval before a snapshot lands on it instead
LANDING_SLACK = 1e-6
#: the local error tolerance relative to the W2 floor N^(-1/2) of an N-token run (``default_tolerance``)
TOLERANCE_PER_FLOOR = 1e-3


#: the resource model's budget for an adaptive run: the longest step it assumes the controller takes
#: (the step is also at most the snapshot interval) and the factor on the resulting step count for
#: rejected and extra steps (on the default run DOPRI5 made 1.0–1.9 trial steps per interval of 0.25,
#: the most at β = 1000; docs/decisions/0010-adaptive-time-steps.md)
BUDGET_STEP, BUDGET_OVERHEAD = 0.25, 2.0


def budgeted_evaluations(method: str, grid: TimeGrid) -> int:
    """Field evaluations of one run, for the resource model: exact for the fixed steps
    (``EVALUATIONS_PER_STEP`` × steps), a budget for the adaptive ones (at least one step per
    snapshot interval and none longer than ``BUDGET_STEP``, times ``BUDGET_OVERHEAD``)."""
    if method not in ADAPTIVE:
        return EVALUATIONS_PER_STEP[method] * grid.total_steps
    steps = max(int(grid.snapshots), int(np.ceil(grid.horizon / BUDGET_STEP)))
    return int(np.ceil(BUDGET_OVERHEAD * steps)) * ADAPTIVE[method].stages + 1


def default_tolerance(n_tokens: int) -> float:
    """The local error tolerance of an adaptive run of N tokens: ``TOLERANCE_PER_FLOOR``·N^(−1/2).

    N^(−1/2) is the scale of the sampling error an N-token cloud carries (the W2 between two
    independent draws of the same measure, and the replica spread of every W2 curve), so the
    integrator's error is kept a thousandth of what the run can resolve at all (docs/integrators.md).
    """
    return TOLERANCE_PER_FLOOR / np.sqrt(float(n_tokens))


def embedded_trial(pair: EmbeddedPair, field: Field, X: np.ndarray, h: float, k1: np.ndarray):
    """One trial step of ``pair`` from X (on the sphere) with k1 = f(X).

    Returns (Y, X_next, k_next, error): the ambient result Y (before renormalisation),
    X_next = Y/|Y|, k_next = f(X_next) (the next step's first stage, standing in for the last
    stage f(Y), from which it differs by O(h·drift), far below the estimate) and the error
    estimate h Σ e_i k_i per token, shape like X.
    """
    k = [k1]
    for a in pair.a:
        k.append(field(X + h * sum(c * ki for c, ki in zip(a, k) if c != 0.0)))
    Y = X + h * sum(b * ki for b, ki in zip(pair.b, k) if b != 0.0)
    finite = bool(np.all(np.isfinite(Y)))
    X_next = normalise(Y) if finite else Y
    k_next = field(X_next) if finite else np.full_like(Y, np.nan)
    k.append(k_next)
    error = h * sum(e * ki for e, ki in zip(pair.e, k) if e != 0.0)
    return Y, X_next, k_next, error


def error_norm(error: np.ndarray) -> float:
    """max over replicas of sqrt(mean over tokens of |e_i|²): the root mean square of the tokens' local
    errors bounds the W2 between the stepped and the exact cloud (couple token i with token i), so
    the tolerance is a tolerance on W2; the largest replica decides. NaN (never accepted) if non-finite."""
    e = np.sqrt(np.mean(np.sum(error * error, axis=-1), axis=-1))
    return float(np.max(e)) if np.all(np.isfinite(e)) else np.nan


def step_factor(err: float, tol: float, accepted: bool, estimate_order: int) -> float:
    """The controller's next step over this one: SAFETY·(tol/err)^(1/(q+1)) within [SHRINK_MAX, GROWTH_MAX]
    (never growth after a rejection), q the order of the estimated solution (local error O(h^(q+1)))."""
    if not np.isfinite(err):
        return SHRINK_MAX
    factor = GROWTH_MAX if err == 0.0 else SAFETY * (tol / err) ** (1.0 / (estimate_order + 1))
    return float(np.clip(factor, SHRINK_MAX, GROWTH_MAX if accepted else min(SAFETY, GROWTH_MAX)))


@dataclass
class StepRecord:
    """What the integrator did, per snapshot interval (entry k: the steps from snapshot k − 1 to k, 0 at k = 0).

    ``drift`` (replica, time): the largest norm drift of an accepted step; ``evaluations``: field
    evaluations (rejected trials included); ``accepted`` and ``rejected``: steps; ``next_step``: the
    step the controller proposes at snapshot k (the fixed step for rk4 and euler), with which an
    adaptive run resumes there.
    """

    drift: np.ndarray
    evaluations: np.ndarray
    accepted: np.ndarray
    rejected: np.ndarray
    next_step: np.ndarray

    @classmethod
    def empty(cls, n_times: int, replicas: tuple[int, ...], first_step: float) -> StepRecord:
        """No steps yet; ``replicas`` is the shape of the batch of clouds (``X.shape[:-2]``)."""
        z = np.zeros(n_times, dtype=np.int64)
        step = np.zeros(n_times)
        step[0] = first_step
        return cls(np.zeros(tuple(replicas) + (n_times,)), z.copy(), z.copy(), z.copy(), step)

    def truncated(self, k: int) -> StepRecord:
        """Entries 0..k (what a checkpoint at snapshot k holds)."""
        return StepRecord(*(getattr(self, f)[..., : k + 1] for f in FIELDS))


FIELDS = ("drift", "evaluations", "accepted", "rejected", "next_step")

#: ``(k, positions of snapshots 0..k, the StepRecord of snapshots 0..k)`` of an earlier run
Resume = tuple[int, np.ndarray, StepRecord]


class _CountedField:
    """The field, counting its evaluations (``StepRecord.evaluations``)."""

    def __init__(self, field: Field):
        self.field = field
        self.calls = 0

    def __call__(self, X: np.ndarray) -> np.ndarray:
        self.calls += 1
        return self.field(X)


def _fixed_interval(increment, field, X, grid, label, record, k):
    """The steps of one snapshot interval at the fixed step: returns the positions at its end."""
    h, n_sub = grid.step, grid.steps_per_snapshot
    for j in range(n_sub):
        Y = increment(field, X, h)
        n = (k - 1) * n_sub + j + 1
        # checked before renormalising: afterwards every row has norm 1 up to rounding,
        # so neither a blown-up step nor the drift would be visible
        record.drift[..., k] = np.maximum(record.drift[..., k], check_step(Y, n * h, label, step=n))
        X = normalise(Y)
    record.accepted[k] = n_sub
    record.next_step[k] = h
    return X


def _adaptive_interval(pair, field, X, k1, t0, t1, h, tol, max_step, label, record, k):
    """Steps of the embedded ``pair`` from t0 to t1 (the last one shortened to land on t1), starting with the
    proposed step h, none longer than ``max_step``. Returns (X at t1, f(X), the step proposed next)."""
    interval = t1 - t0
    h = min(h, max_step)
    t = t0
    while t < t1:
        remaining = t1 - t
        # land when the step would leave less than LANDING_SLACK of the interval: a sliver that short
        # would be a wasted step (and near the underflow guard); stretching h by it changes nothing
        landing = h >= remaining - LANDING_SLACK * interval
        step = remaining if landing else h
        if step < MIN_STEP_FRACTION * interval:
            raise FloatingPointError(
                f"{label}: the adaptive step fell to {step:.3e} at t = {t:.6g} (below {MIN_STEP_FRACTION:g} of "
                f"the snapshot interval) with local error tolerance {tol:.3e}: the dynamics is not resolvable "
                f"there; raise time.tolerance or check the matrices"
            )
        Y, X_next, k_next, error = embedded_trial(pair, field, X, step, k1)
        err = error_norm(error)
        drift = norm_drift(Y) if np.all(np.isfinite(Y)) else None
        accepted = err <= tol and drift is not None and drift.max() <= DRIFT_TOLERANCE
        if not accepted:
            record.rejected[k] += 1
            h = step * step_factor(err, tol, False, pair.estimate_order)
            continue
        record.accepted[k] += 1
        record.drift[..., k] = np.maximum(record.drift[..., k], drift.max(axis=-1))
        X, k1 = X_next, k_next
        t = t1 if landing else t + step
        proposed = step * step_factor(err, tol, True, pair.estimate_order)
        # a step shortened to land is no measure of what the dynamics allows: keep the longer one
        h = min(max_step, max(proposed, h) if landing else proposed)
    return X, k1, h


def trajectory_shape(cloud_shape: tuple[int, ...], n_times: int) -> tuple[int, ...]:
    """The shape of a trajectory of clouds of ``cloud_shape`` (…, token, dim) at ``n_times`` snapshots: the time
    axis goes before the tokens, (…, time, token, dim)."""
    return tuple(cloud_shape[:-2]) + (int(n_times),) + tuple(cloud_shape[-2:])


def snapshot(trajectory: np.ndarray, k: int) -> np.ndarray:
    """The clouds (…, token, dim) at snapshot k of a trajectory (…, time, token, dim), contiguous as the integrator
    stepped them (so a kernel sees the same memory layout, and gives the same bits, as during the run)."""
    return np.ascontiguousarray(trajectory[..., k, :, :])


def _is_adaptive(method: str) -> bool:
    """Whether ``method`` is an embedded pair (``ADAPTIVE``) rather than a fixed-step scheme; ValueError names the
    known integrators when it is neither."""
    if method not in ADAPTIVE and method not in INCREMENTS:
        raise ValueError(f"unknown integrator {method!r}; known: {sorted(INCREMENTS) + sorted(ADAPTIVE)}")
    return method in ADAPTIVE


def _adaptive_limits(n_tokens: int, grid: TimeGrid, tolerance: float | None, max_step: float | None):
    """(local error tolerance, longest step) of an adaptive run: ``tolerance`` (default ``default_tolerance`` of
    N) and ``max_step`` capped at the snapshot interval; ValueError where either is not a positive number."""
    tol = default_tolerance(n_tokens) if tolerance is None else float(tolerance)
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"the local error tolerance must be a positive finite number, got {tolerance}")
    interval = grid.horizon / grid.snapshots
    longest = interval if max_step is None else min(float(max_step), interval)
    if not longest > 0:
        raise ValueError(f"the largest step must be positive, got {max_step}")
    return tol, longest


def _restore(resume: Resume, out: np.ndarray, record: StepRecord) -> int:
    """Copy the snapshots 0..k and their record from ``resume = (k, positions, record)`` into ``out`` and
    ``record`` (whose snapshot 0 holds the run's initial positions) and return k; ValueError where the
    checkpoint's shapes or initial positions are not this run's."""
    k0, done, done_record = resume
    done = np.asarray(done, dtype=float)
    times = out.shape[-3]
    replicas = out.shape[:-3]
    expected = out.shape[:-3] + (k0 + 1,) + out.shape[-2:]
    if not (0 <= k0 < times) or done.shape != expected:
        raise ValueError(f"resume: expected snapshots 0..{k0} of shape {expected}, got {done.shape}")
    if done_record.drift.shape != replicas + (k0 + 1,) or any(
        getattr(done_record, f).shape != (k0 + 1,) for f in FIELDS[1:]
    ):
        raise ValueError(
            f"resume: expected the step record of snapshots 0..{k0}, norm drift of shape "
            f"{replicas + (k0 + 1,)}, got {done_record.drift.shape}"
        )
    if not np.array_equal(done[..., 0, :, :], out[..., 0, :, :]):
        raise ValueError("resume: the checkpoint starts from other initial positions")
    out[..., : k0 + 1, :, :] = done
    for f in FIELDS:
        getattr(record, f)[..., : k0 + 1] = getattr(done_record, f)
    return k0


def simulate(
    field: Field,
    X0: np.ndarray,
    grid: TimeGrid,
    method: str = "rk4",
    progress: Callable[[float, int, StepRecord], None] | None = None,
    *,
    label: str = "tokens",
    resume: Resume | None = None,
    on_snapshot: Callable[[int, np.ndarray, StepRecord], None] | None = None,
    return_record: bool = False,
    tolerance: float | None = None,
    max_step: float | None = None,
):
    """Positions at the snapshot times, shape (replica, time, token, dim): the time axis is inserted before the
    tokens of ``X0`` (replica, token, dim) (or (token, dim): then (time, token, dim)), the package's one
    layout (``lowtemp.model.layout``).

    ``method`` is ``rk4`` or ``euler`` (the fixed step ``grid.step``) or ``dopri5`` (the step from
    error control: the root mean square over tokens of the local error estimate, max over
    replicas, at most ``tolerance`` (default ``default_tolerance(N)``); the first trial step is
    ``grid.step``, no step is longer than ``max_step`` (default and at most the snapshot interval),
    and the last step of every interval is shortened to land on the snapshot time). With ``return_record`` also the
    ``StepRecord`` (norm drift, evaluations, accepted and rejected steps per snapshot interval).

    Every step is checked before renormalisation (``check_step``: finite, drift below
    ``DRIFT_TOLERANCE``; an adaptive trial step that fails is rejected and retried shorter); an
    error names ``label``, the step, the time, the replica and the token. ``resume = (k, P,
    record)`` continues from a checkpoint: ``P`` and ``record`` hold the positions and the
    record of snapshots 0..k of an earlier run of the same problem. Steps only depend on the
    positions and the proposed step, so the result is bit for bit that of an uninterrupted run.
    ``on_snapshot(k, out, record)`` is called after snapshot k is stored (``out[..., :k + 1, :, :]`` and
    the record's entries 0..k are final), e.g. to write a checkpoint. ``progress(t, k, record)``
    after every snapshot.
    """
    adaptive = _is_adaptive(method)
    X = normalise(np.asarray(X0, dtype=float))
    if adaptive:
        tol, longest = _adaptive_limits(X.shape[-2], grid, tolerance, max_step)
    times = grid.times
    out = np.empty(trajectory_shape(X.shape, times.size))
    out[..., 0, :, :] = X
    record = StepRecord.empty(times.size, X.shape[:-2], grid.step)
    first = 1
    if resume is not None:
        first = _restore(resume, out, record) + 1
        X = out[..., first - 1, :, :].copy()
    counted = _CountedField(field)
    if adaptive and first < times.size:
        # f(X) depends on X alone: a resumed run recomputes it bit for bit (and does not record it)
        k1 = (counted if first == 1 else field)(X)
        h = float(record.next_step[first - 1])
    before = 0  # the first interval of a fresh adaptive run counts the evaluation of k1 above
    for k in range(first, times.size):
        if adaptive:
            t0, t1 = float(times[k - 1]), float(times[k])
            X, k1, h = _adaptive_interval(ADAPTIVE[method], counted, X, k1, t0, t1, h, tol, longest, label, record, k)
            record.next_step[k] = h
        else:
            X = _fixed_interval(INCREMENTS[method], counted, X, grid, label, record, k)
        record.evaluations[k], before = counted.calls - before, counted.calls
        out[..., k, :, :] = X
        if on_snapshot is not None:
            on_snapshot(k, out, record)
        if progress is not None:
            progress(float(times[k]), k, record)
    return (out, record) if return_record else out


def simulate_resumable(field: Field, X0: np.ndarray, grid: TimeGrid, method: str, checkpoint=None, **run):
    """``simulate`` (``run``: its keyword arguments) resumed from, and writing, ``checkpoint``; returns the
    positions and the ``StepRecord``.

    ``checkpoint`` is None (start from t = 0, write nothing) or an object with ``load(shape)`` (a ``Resume`` or
    None) that is also the snapshot hook (``lowtemp.store.checkpoint.SimulationCheckpoint``): the integrator
    never sees where or how it is stored.
    """
    resume = None if checkpoint is None else checkpoint.load(X0.shape)
    return simulate(field, X0, grid, method, resume=resume, on_snapshot=checkpoint, return_record=True, **run)
