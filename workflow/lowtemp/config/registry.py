"""The pipeline's stages, each named once: the config keys its function reads, its threads, its job group, and
whether the default target runs it (what one of its jobs costs: ``lowtemp.config.costs.STAGE_COSTS``).

Every rule of ``workflow/rules/`` that runs a stage function is an entry of ``STAGES`` under its own name, and
everything that needs a per-stage decision reads it from here: the rules' ``params`` (the config slice,
``lowtemp.config.params``), their ``resources`` and ``threads`` (``lowtemp.config.resources``, through
``workflow/rules/resources.smk``), the job groups of a cluster run, and the config check's memory test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .plan import animated, narrowed_slice, particle_error_tokens


@dataclass(frozen=True)
class Stage:
    """One rule that runs a stage function (its name is the rule's)."""

    #: config keys (dotted paths into one experiment) its stage function reads: a path names a whole block
    #: (``matrices``) or one key in it (``fit.confidence``); the rule reruns when, and only when, one changes
    keys: tuple[str, ...]
    #: the rule's threads; a stage with more than one runs the numba kernels on them (and asks for that many CPUs)
    threads: int = 1
    #: it evaluates the finite-temperature field: with ``kernel: torch`` its jobs ask for a GPU
    evaluates_field: bool = False
    #: the job group of its short jobs on a cluster (``resources.group_of``), or None
    group: str | None = None
    #: part of the default target ``all`` (and so of the config check's memory test)
    default_target: bool = True
    #: an optional stage (``default_target`` False) that an experiment's config block turns on: experiment -> whether
    #: it does; its jobs then join that experiment's default target and memory test (``target_stages``)
    enabled_by: Callable[[dict], bool] | None = None
    #: it draws with matplotlib (a larger base memory)
    plotting: bool = False
    #: the rule ``figure`` only: the keys of each figure, one config slice per figure name
    figure_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: slice -> slice: where a key matters only through a value derived from it, the slice cut down to that
    #: value (the rule then reruns when, and only when, the value changes); the stage receives the cut slice
    narrow: Callable[[dict], dict] | None = None


STAGES: dict[str, Stage] = {
    # stages.matrices.stage_matrices -> experiment.build_matrices
    "matrices": Stage(keys=("dim", "matrices", "streams")),
    # stages.initial_tokens.stage_initial_tokens
    "initial_tokens": Stage(keys=("dim", "initial_measure", "replicas", "streams", "tokens")),
    # stages.simulate.stage_finite_temperature: experiment.time_grid, the integrator and its tolerance
    # (experiment.integration_tolerance: time.tolerance, else one from tokens), experiment.field_kernel
    # (``kernel``; the automatic rule reads tokens and dim); the ESS it records is judged by the fit.
    # With model: mean_field, stage_mean_field reads the reference's cells and the initial measure (the reduction);
    # not mean_field.particles, which only the particle runs against it read
    "finite_temperature": Stage(
        keys=(
            "dim",
            "initial_measure",
            "integrator",
            "kernel",
            "mean_field.depth",
            "mean_field.level",
            "mean_field.max_triangles",
            "mean_field.width",
            "model",
            "streams",
            "time",
            "tokens",
        ),
        threads=2,
        evaluates_field=True,
    ),
    # stages.simulate.stage_zero_temperature: experiment.time_grid, the integrator and its tolerance
    "zero_temperature": Stage(keys=("integrator", "time", "tokens")),
    # stages.distances.stage_distances_beta -> experiment.exact_w2_snapshots; the level of the lower bound on
    # W2(ρ^β_t, Π♯ρ0) over resampled tokens is 1 − fit.confidence
    "distances_beta": Stage(keys=("distances.exact_every", "fit.confidence"), group="distances"),
    # stages.distances.stage_distances: nothing beyond its input files
    "distances": Stage(keys=(), group="distances"),
    # stages.distances.stage_particle_error_beta (model: mean_field with mean_field.particles): the particle runs
    # from the first n initial tokens (plan.particle_error_tokens: mean_field.particles, model, tokens) with
    # the finite-temperature stage's grid, integrator, tolerance and kernel (time, integrator, kernel; the
    # automatic rule reads dim and tokens), their exact W2 to the reference at experiment.exact_w2_snapshots
    "particle_error_beta": Stage(
        keys=(
            "dim",
            "distances.exact_every",
            "integrator",
            "kernel",
            "mean_field.particles",
            "model",
            "time",
            "tokens",
        ),
        # one thread: the exact W2 solves, one after another, take most of its time (13.4 of 18 s at n = 256 and
        # 1024 on the circle, where the particle runs took 2 s), so a second reserved core would idle
        threads=1,
        evaluates_field=True,
        default_target=False,
        enabled_by=lambda experiment: bool(particle_error_tokens("experiment", experiment)),
    ),
    # stages.distances.stage_particle_error: nothing beyond its input files
    "particle_error": Stage(
        keys=(),
        default_target=False,
        enabled_by=lambda experiment: bool(particle_error_tokens("experiment", experiment)),
    ),
    # stages.fit.stage_fit -> analysis.estimates.fit_experiment (the whole fit block)
    "fit": Stage(keys=("ess_threshold", "fit", "tokens"), group="figures"),
    # stages.fit.stage_claims -> analysis.claims.evaluate (the claims block; the confidence level comes from fit.nc)
    "claims": Stage(keys=("claims",), group="figures"),
    # stages.figures.stage_figure -> figures.FIGURES[name]; one slice per name of plan.FIGURES
    "figure": Stage(
        keys=(),
        group="figures",
        plotting=True,
        figure_keys={
            "w2_projection": ("ess_threshold",),
            "collapse": ("ess_threshold",),
            "end_phase": ("ess_threshold",),
            "time_scale": (),
            "snapshots": ("figures.snapshot_times", "time.horizon"),  # experiment.snapshot_times
            "phase": ("ess_threshold",),
        },
    ),
    # stages.convergence.stage_convergence: studies.study_settings (betas for the default beta, tokens,
    # replicas, time), initial_measure and dim for fresh tokens, integrator, experiment.field_kernel
    "convergence": Stage(
        keys=(
            "betas",
            "convergence",
            "dim",
            "initial_measure",
            "integrator",
            "kernel",
            "replicas",
            "streams",
            "time",
            "tokens",
        ),
        narrow=narrowed_slice,  # betas: only the study's β matters
        threads=2,
        evaluates_field=True,
        default_target=False,
    ),
    # stages.figures.stage_animation: nothing beyond its input files (replica 0 of every β and of zero temperature);
    # the default target of an experiment on S¹ or S² (plan.animated), figures/tokens.gif
    "animation": Stage(keys=(), plotting=True, default_target=False, enabled_by=animated),
    # stages.figures.stage_convergence_figure: convergence.nc and the ESS threshold it draws
    "convergence_figure": Stage(keys=("ess_threshold",), plotting=True, default_target=False),
}

#: the stages of the default target, in the order the pipeline runs them
DEFAULT_TARGET = tuple(name for name, stage in STAGES.items() if stage.default_target)


def enabled_stages(experiment: dict) -> tuple[str, ...]:
    """Every stage ``experiment``'s config can run: its default target (``target_stages``) and, with a
    ``convergence`` block, the convergence studies of the target ``convergence_all``."""
    extra = ("convergence", "convergence_figure") if "convergence" in experiment else ()
    return target_stages(experiment) + tuple(s for s in extra if s not in target_stages(experiment))


def target_stages(experiment: dict) -> tuple[str, ...]:
    """The stages of ``experiment``'s default target: ``DEFAULT_TARGET`` and the optional stages its config turns
    on (``Stage.enabled_by``)."""
    return tuple(
        name
        for name, spec in STAGES.items()
        if spec.default_target or (spec.enabled_by is not None and spec.enabled_by(experiment))
    )


def stage(name: str) -> Stage:
    """The registry's entry for a rule; ValueError names the known ones."""
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; known: {list(STAGES)}") from None
