"""The convergence studies' settings: what an experiment's ``convergence`` block asks for, with every
default resolved and every value checked (``study_settings``), and the time grids and integrators it
implies. Cheap and free of numerics: the config check, the resource model and the Snakefile read them
before any job; the studies themselves run in ``lowtemp.stages.convergence`` (docs/convergence.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..analysis import particle_budget
from ..dynamics import integrate
from .experiment import field_kernel, integration_tolerance, time_grid
from .plan import ConfigError, study_betas

#: the steps h, h/2, h/4
STEP_LEVELS = 3
#: the fixed-step integrators compared, with their nominal orders (the adaptive ones: ``integrate.ADAPTIVE``)
NOMINAL_ORDER = {"rk4": 4, "euler": 1}
#: tokens of the step study unless configured (7 runs per integrator at N² per field evaluation)
DEFAULT_STEP_TOKENS = 1024
#: fewest particle numbers in the N study
MIN_PARTICLE_NUMBERS = 4
#: replicas per particle number unless configured (or the experiment's, if more)
DEFAULT_PARTICLE_REPLICAS = 4


@dataclass(frozen=True)
class StepStudy:
    """The step-halving study: runs at dt, dt/2, dt/4 on the first tokens of the stored initial tokens."""

    dt: float  # the coarsest step h; the runs use h, h/2, h/4
    times: tuple[float, ...]  # the fixed times of the report (snapshot times of the experiment)
    tokens: int  # the first `tokens` tokens of the stored initial tokens …
    replicas: int  # … of the first `replicas` replicas


@dataclass(frozen=True)
class ParticleStudy:
    """The particle-number study: fresh tokens from ρ0 for each N, run on the experiment's step, at each β."""

    tokens: tuple[int, ...]  # N values, increasing
    replicas: int
    horizon: float  # a snapshot time of the experiment
    betas: tuple[float, ...] = ()  # increasing; the study runs at each (``study_betas``)


@dataclass(frozen=True)
class Settings:
    """Both studies of one experiment, with every default and every per-run choice resolved once
    (``study_settings``): the stage reads these, never the experiment's config."""

    beta: float  # the step study's: the largest of the particle study's
    interval: float  # the experiment's snapshot interval time.horizon / time.snapshots
    steps: StepStudy
    particles: ParticleStudy
    methods: tuple[str, ...] = ()  # the step study's integrators (``study_methods``)
    integrator: str = "rk4"  # the particle runs' (the experiment's own)
    tokens: int = 0  # the experiment's N: where the particle-number budget is judged
    grid: integrate.TimeGrid | None = None  # of every particle run (``particle_grid``)
    reused: tuple[float, ...] = ()  # the particle study's β whose run at N = tokens is the experiment's own
    kernels: dict = field(default_factory=dict)  # N -> the field kernel of a run of N tokens (``field_kernel``)
    tolerances: dict = field(default_factory=dict)  # N -> the adaptive integrator's tolerance (None: fixed steps)

    def kernel(self, n: int) -> str:
        """The kernel of the study's runs of ``n`` tokens."""
        return self.kernels[int(n)]

    def tolerance(self, n: int) -> float | None:
        """The local error tolerance of the study's runs of ``n`` tokens (``integration_tolerance``)."""
        return self.tolerances[int(n)]


def _is_multiple(x: float, unit: float) -> bool:
    k = x / unit
    return round(k) >= 1 and abs(k - round(k)) <= 1e-9 * max(1.0, k)


def default_particle_numbers(n: int) -> list[int]:
    """[N/8, N/4, N/2, N] (integer division), or [N, 2N, 4N, 8N] when N/8 < 2."""
    if n // 8 >= 2:
        return [n // 8, n // 4, n // 2, n]
    return [n, 2 * n, 4 * n, 8 * n]


def _step_study(where: str, st: dict, experiment: dict, grid: integrate.TimeGrid, interval: float) -> StepStudy:
    """The ``convergence.steps`` block ``st`` with its defaults resolved; ConfigError names the key."""
    h = float(st.get("dt", grid.step))
    if not (np.isfinite(h) and h > 0) or h > interval * (1 + 1e-12) or not _is_multiple(interval, h):
        raise ConfigError(
            f"{where}.steps.dt = {h:g} does not divide the snapshot interval time.horizon/time.snapshots = "
            f"{interval:g} (ratio {interval / h:.6g}); the runs at dt, dt/2, dt/4 must land on the snapshot "
            f"times exactly, so choose dt = interval/k for an integer k"
        )
    default_times = sorted({float(interval * max(1, round(grid.snapshots * f))) for f in (0.25, 0.5, 1.0)})
    times = tuple(float(t) for t in st.get("times", default_times))
    for t in times:
        if not (0 < t <= grid.horizon * (1 + 1e-12)) or not _is_multiple(t, interval):
            raise ConfigError(
                f"{where}.steps.times: {t:g} is not a snapshot time in (0, time.horizon = "
                f"{grid.horizon:g}] (a multiple of time.horizon/time.snapshots = {interval:g})"
            )
    if list(times) != sorted(set(times)):
        raise ConfigError(f"{where}.steps.times must be increasing without repeats, got {list(times)}")
    times = tuple(float(interval * round(t / interval)) for t in times)
    n_steps = int(st.get("tokens", min(int(experiment["tokens"]), DEFAULT_STEP_TOKENS)))
    r_steps = int(st.get("replicas", 1))
    if not 2 <= n_steps <= int(experiment["tokens"]):
        raise ConfigError(
            f"{where}.steps.tokens = {n_steps} must be between 2 and tokens = {experiment['tokens']} "
            f"(the study runs the first tokens of the stored initial tokens)"
        )
    if not 1 <= r_steps <= int(experiment["replicas"]):
        raise ConfigError(
            f"{where}.steps.replicas = {r_steps} must be between 1 and replicas = {experiment['replicas']}"
        )

    return StepStudy(dt=h, times=times, tokens=n_steps, replicas=r_steps)


def _particle_study(
    where: str, pa: dict, experiment: dict, grid: integrate.TimeGrid, interval: float, betas: tuple[float, ...]
) -> ParticleStudy:
    """The ``convergence.particles`` block ``pa`` with its defaults resolved; ConfigError names the key."""
    numbers = [int(n) for n in pa.get("tokens", default_particle_numbers(int(experiment["tokens"])))]
    if len(numbers) < MIN_PARTICLE_NUMBERS:
        raise ConfigError(
            f"{where}.particles.tokens needs at least {MIN_PARTICLE_NUMBERS} particle numbers "
            f"(N doubling, e.g. [N/8, N/4, N/2, N]), got {numbers}"
        )
    if any(n < 2 for n in numbers) or any(b <= a for a, b in zip(numbers, numbers[1:])):
        raise ConfigError(f"{where}.particles.tokens must be increasing integers ≥ 2, got {numbers}")
    r_particles = int(pa.get("replicas", max(int(experiment["replicas"]), DEFAULT_PARTICLE_REPLICAS)))
    if r_particles < particle_budget.MIN_REPLICAS:
        raise ConfigError(
            f"{where}.particles.replicas = {r_particles}: the particle-number budget's Student-t "
            f"bounds need at least {particle_budget.MIN_REPLICAS} replicas"
        )
    horizon = float(pa.get("horizon", grid.horizon))
    if not (0 < horizon <= grid.horizon * (1 + 1e-12)) or not _is_multiple(horizon, interval):
        raise ConfigError(
            f"{where}.particles.horizon = {horizon:g} is not a snapshot time in (0, time.horizon = "
            f"{grid.horizon:g}] (a multiple of time.horizon/time.snapshots = {interval:g})"
        )
    horizon = float(interval * round(horizon / interval))
    return ParticleStudy(tokens=tuple(numbers), replicas=r_particles, horizon=horizon, betas=betas)


def study_settings(name: str, experiment: dict) -> Settings:
    """The experiment's ``convergence`` block with its defaults resolved; ConfigError names the key.

    Cheap (no arrays): the config check calls it before any job.
    """
    where = f"experiments.{name}.convergence"
    cfg = experiment.get("convergence") or {}
    grid = time_grid(experiment)
    interval = grid.horizon / grid.snapshots
    try:
        betas = study_betas(experiment)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where}.beta must be a positive number or a list of them, got {cfg.get('beta')!r}"
        ) from None
    if not betas or not all(np.isfinite(b) and b > 0 for b in betas) or len(set(betas)) != len(betas):
        raise ConfigError(f"{where}.beta must be positive finite numbers without repeats, got {list(betas)}")
    beta = max(betas)

    steps = _step_study(where, cfg.get("steps") or {}, experiment, grid, interval)
    particles = _particle_study(where, cfg.get("particles") or {}, experiment, grid, interval, betas)
    settings = Settings(
        beta=beta,
        interval=interval,
        steps=steps,
        particles=particles,
    )
    return _with_runs(where, experiment, settings)


def _with_runs(where: str, experiment: dict, settings: Settings) -> Settings:
    """``settings`` with what each run takes from the experiment: integrators, kernels and tolerances per N, the
    particle runs' grid and which β reuse the experiment's own run; ConfigError names the key where the
    particle runs' horizon is shorter than the experiment's step."""
    sizes = sorted({settings.steps.tokens, *settings.particles.tokens})
    try:
        grid = particle_grid(experiment, settings)
    except ValueError as exc:  # TimeGrid's own refusal, which names no key
        raise ConfigError(
            f"{where}.particles.horizon = {settings.particles.horizon:g} cannot hold a step of time.dt = "
            f"{float(experiment['time']['dt']):g}: {exc}"
        ) from None
    return replace(
        settings,
        methods=tuple(study_methods(experiment)),
        integrator=str(experiment["integrator"]),
        tokens=int(experiment["tokens"]),
        grid=grid,
        reused=reused_betas(experiment, settings),
        kernels={n: field_kernel(experiment, n) for n in sizes},
        tolerances={n: integration_tolerance(experiment, n) for n in sizes},
    )


def halving_steps(h: float, levels: int = STEP_LEVELS) -> np.ndarray:
    """h, h/2, h/4, …"""
    return float(h) / 2.0 ** np.arange(levels)


def halving_grids(horizon: float, interval: float, h: float, levels: int = STEP_LEVELS) -> list[integrate.TimeGrid]:
    """Time grids with snapshot interval ``interval`` up to ``horizon`` whose steps are exactly h, h/2, h/4.

    ``TimeGrid`` uses interval/ceil(interval/dt), so h must divide the interval; a
    step that would be rounded raises ConfigError.
    """
    snapshots = int(round(horizon / interval))
    grids = []
    for s in halving_steps(h, levels):
        grid = integrate.TimeGrid(horizon=float(horizon), snapshots=snapshots, dt=float(s))
        if abs(grid.step - s) > 1e-12 * s:
            raise ConfigError(
                f"convergence.steps.dt: the step {s:g} does not divide the snapshot interval "
                f"{interval:g} (the grid would use {grid.step:g})"
            )
        grids.append(grid)
    return grids


def study_methods(experiment: dict) -> list[str]:
    """The integrators of the study: ``rk4`` and ``euler``, and the experiment's own if it is adaptive."""
    own = experiment["integrator"]
    return list(NOMINAL_ORDER) + ([own] if own in integrate.ADAPTIVE else [])


def nominal_order(method: str) -> int:
    """The order of a scheme: ``NOMINAL_ORDER``, or the kept solution's of an adaptive pair."""
    return integrate.ADAPTIVE[method].order if method in integrate.ADAPTIVE else NOMINAL_ORDER[method]


def level_tolerances(method: str, tolerance: float, levels: int = STEP_LEVELS) -> np.ndarray:
    """τ, τ/2^(q+1), τ/4^(q+1), …: the tolerances at which the pair's steps (∝ τ^(1/(q+1))) halve."""
    q = integrate.ADAPTIVE[method].estimate_order
    return float(tolerance) * 2.0 ** (-(q + 1) * np.arange(levels))


def level_max_steps(interval: float, levels: int = STEP_LEVELS) -> np.ndarray:
    """Δ, Δ/2, Δ/4, …: the step caps of an adaptive integrator's levels (Δ the snapshot interval)."""
    return float(interval) / 2.0 ** np.arange(levels)


def particle_grid(experiment: dict, S: Settings) -> integrate.TimeGrid:
    """The time grid of every run of the particle-number study: the experiment's step, up to its horizon."""
    pa = S.particles
    return integrate.TimeGrid(
        horizon=pa.horizon, snapshots=int(round(pa.horizon / S.interval)), dt=float(experiment["time"]["dt"])
    )


def reusable_run(experiment: dict, S: Settings, beta: float) -> bool:
    """Whether the experiment's own run at ``beta`` can stand for the particle study's run at N = tokens there."""
    pa = S.particles
    return (
        int(experiment["tokens"]) in pa.tokens
        and pa.replicas <= int(experiment["replicas"])
        and any(float(b) == float(beta) for b in experiment["betas"])
    )


def reused_betas(experiment: dict, S: Settings) -> tuple[float, ...]:
    """The particle study's β whose run at N = tokens is the experiment's own (``reusable_run``)."""
    return tuple(b for b in S.particles.betas if reusable_run(experiment, S, b))
