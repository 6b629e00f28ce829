"""What a config asks the pipeline to make, read with the standard library alone: the figures of an experiment,
the labels of its β in file names, whether its tokens are animated, the particle runs beside a mean field, the β
of its particle-number study.

Reading the workflow (the Snakefile's top level, ``snakemake --lint``) needs only this module, ``schema``,
``registry`` and ``params`` of ``lowtemp.config``: so the workflow can be read, and linted, in an environment that
holds Snakemake and its own dependencies only, as the Snakemake workflow catalog's does. The numerical checks
(``validation``), the study settings and the resource model come with the package's dependencies.
"""

from __future__ import annotations

import numbers


class ConfigError(ValueError):
    """The config is inconsistent; the message names the key."""


#: every figure of an experiment, in the order of the report (one job of the rule ``figure`` each)
FIGURES = ("w2_projection", "collapse", "end_phase", "time_scale", "snapshots", "phase")
#: figures drawn from the tokens' positions on S¹ or S² themselves: only for dim = 2 and 3
SPHERE_FIGURES = ("snapshots",)
#: the dimensions in which the tokens can be drawn where they are
DRAWN_DIMS = (2, 3)


def figures_for(experiment: dict) -> list[str]:
    """The figures drawn for ``experiment``: all of ``FIGURES``, the sphere figures only for dim = 2 and 3."""
    return [f for f in FIGURES if f not in SPHERE_FIGURES or int(experiment["dim"]) in DRAWN_DIMS]


#: the animation of the tokens (rule ``animation``, ``figures/tokens.gif``) is drawn on S¹ and S² only
ANIMATED_DIMS = (2, 3)


def animated(experiment: dict) -> bool:
    """Whether ``experiment``'s default target holds the animation of its tokens: on S¹ and S² (``ANIMATED_DIMS``)."""
    return int(experiment["dim"]) in ANIMATED_DIMS


def particle_error_tokens(name: str, experiment: dict) -> tuple[int, ...]:
    """The particle numbers n of the particle runs measured against a ``model: mean_field`` experiment's reference
    (``mean_field.particles.tokens``), checked: integers, increasing, 2 ≤ n ≤ ``tokens`` (each run starts from the
    first n initial tokens of every replica); () where the block is absent. ConfigError names the key.

    Cheap: the config check calls it before any job, and the stage before any work (a notebook's slice is checked
    as the config is)."""
    block = experiment["mean_field"].get("particles") if "mean_field" in experiment else None
    if block is None:
        return ()
    where = f"experiments.{name}.mean_field.particles"
    if experiment["model"] != "mean_field":
        raise ConfigError(
            f"{where}: particle runs are measured against the reference of a model: mean_field experiment, and "
            f"this one is model: {experiment['model']} (its particle-number study is convergence.particles)"
        )
    tokens = block.get("tokens") if isinstance(block, dict) else None
    if not isinstance(tokens, (list, tuple)) or not tokens:
        raise ConfigError(f"{where}.tokens must be a non-empty list of particle numbers, got {tokens!r}")
    n_max = int(experiment["tokens"])
    for i, n in enumerate(tokens):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise ConfigError(f"{where}.tokens.{i}: {n!r} is not an integer (a number of tokens)")
        if not 2 <= n <= n_max:
            raise ConfigError(
                f"{where}.tokens.{i}: {n} is outside [2, tokens = {n_max}]: every run starts from the first n of "
                f"the experiment's {n_max} initial tokens per replica, which the reference pushes forward"
            )
    if any(b <= a for a, b in zip(tokens, tokens[1:])):
        raise ConfigError(f"{where}.tokens must be increasing without repeats, got {list(tokens)}")
    return tuple(int(n) for n in tokens)


def beta_label(beta) -> str:
    """Short, canonical label of a β in file names (``beta<label>.nc``): %g, 6 significant digits, no float noise.
    The config check refuses betas that share one."""
    return f"{float(beta):g}"


def study_betas(experiment: dict) -> tuple[float, ...]:
    """The β of the particle-number study, increasing: ``convergence.beta`` (a number or a list), else the
    experiment's largest β."""
    cfg = experiment.get("convergence") or {}
    if "beta" not in cfg:
        return (max(float(b) for b in experiment["betas"]),)
    raw = cfg["beta"]
    return tuple(sorted(float(b) for b in (raw if isinstance(raw, list | tuple) else [raw])))


def study_beta(experiment: dict) -> float:
    """The β of the step study: the largest of ``study_betas`` (the largest β has the stiffest field)."""
    return max(study_betas(experiment))


def narrowed_slice(experiment_slice: dict) -> dict:
    """The convergence stage's config slice with ``betas`` cut to what the studies depend on: the studies' β
    that are among the experiment's (their runs are then reused, ``reusable_run``), else nothing. So adding or
    removing another β reruns neither study, and the stage, which reads the slice, computes the same."""
    betas = study_betas(experiment_slice)
    return {**experiment_slice, "betas": [b for b in experiment_slice["betas"] if float(b) in betas]}


class MissingDependency:
    """Stands in the Snakefile for a module of ``lowtemp.config`` that needs a package this environment lacks
    (numpy, scipy, …): reading the workflow needs Snakemake alone, and anything that needs the module (building a
    job's params or resources) raises ModuleNotFoundError naming what to install."""

    def __init__(self, module: str, missing: str):
        self.module, self.missing = module, missing

    def __getattr__(self, attribute: str):
        raise self._missing(f"{self.module}.{attribute}")

    def __getitem__(self, key):
        raise self._missing(f"{self.module}[{key!r}]")

    def _missing(self, what: str) -> ModuleNotFoundError:
        return ModuleNotFoundError(
            f"{what} needs the Python package {self.missing!r}, which this environment lacks: it can read and lint "
            "the workflow, not run it; install the package lowtemp with its dependencies (`make venv`, or "
            "`pip install -e '.[workflow]'` in a clone)",
            name=self.missing,
        )
