"""The whole config check, run once when the Snakefile is read, before any job.

Order (the first failure stops with one error naming the key or file):

1. every config file parses as YAML with no duplicate keys (PyYAML would keep the
   last of two experiments of the same name, silently) and aliases that expand
   to no more than ``MAX_EXPANDED_NODES`` nodes (a few lines of aliases can
   stand for billions of values);
2. the JSON schema (``workflow/schemas/config.schema.yaml``: types, ranges,
   unknown keys, experiment names), then its defaults are filled in
   (``check_schema``, as ``snakemake.utils.validate`` does it, without importing
   Snakemake, but with integers that are Python ints, not floats such as 1e300);
3. every number is finite and every integer fits int64 (``check_numbers``: the
   schema's bounds let NaN through);
4. per experiment, what the schema cannot express (``validate_experiment``:
   β grid, time grid, shapes, Assumptions 1–3 on the matrices and ρ0, the
   samplers' parameters, the convergence block, the particle runs of a mean-field experiment);
5. the memory of the largest job against ``memory_limit_gb``;
6. the results folder, or the real target of a link to it, can be written; each experiment's folder in it, where
   it exists, is a folder, and nothing in it named like a file the pipeline writes is a folder (Snakemake would
   take such a folder as the file, done).

Nothing is written by these checks (the results-folder probe creates and
removes one temporary file).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from ..dynamics import integrate, reduction, sphere_levels
from ..model import matrices, measures
from . import registry, resources, studies
from .experiment import build_matrices, initial_measure, measure_of, snapshot_times, time_grid
from .plan import ConfigError, beta_label, particle_error_tokens, study_betas
from .schema import check_results, check_structure


def validate_experiment(name: str, experiment: dict, root_seed: int) -> matrices.AttentionMatrices:
    """Checks the schema cannot express; raises ConfigError naming the key. Cheap (d×d work).

    Returns the experiment's matrices, checked against Assumption 1.
    """
    where = f"experiments.{name}"
    d = int(experiment["dim"])
    betas = [float(b) for b in experiment["betas"]]
    if len(set(betas)) != len(betas):
        raise ConfigError(f"{where}.betas has duplicate values: {betas}")
    labels = [beta_label(b) for b in betas]
    if len(set(labels)) != len(labels):
        same = sorted({b for b, label in zip(betas, labels) if labels.count(label) > 1})
        raise ConfigError(
            f"{where}.betas: {same} share the file label beta{beta_label(same[0])} (β written with %g, 6 "
            "significant digits): one run would overwrite the other; make them differ in the first 6 digits"
        )
    if any(not np.isfinite(b) or b <= 0 for b in betas):
        raise ConfigError(f"{where}.betas must be positive and finite, got {betas}")
    try:
        grid = time_grid(experiment)
    except ValueError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    for t in snapshot_times(experiment):
        if not 0 <= t <= grid.horizon:
            raise ConfigError(f"{where}.figures.snapshot_times: {t} is outside [0, time.horizon = {grid.horizon}]")
    m = experiment["matrices"]
    for key in ("eigenvalues", "eigenvalues_V"):
        if key in m and len(m[key]) != d:
            raise ConfigError(f"{where}.matrices.{key} must have length dim = {d}, got {len(m[key])}")
    kernel = experiment["kernel"]
    if kernel in ("dense", "cap") and d not in (2, 3):
        raise ConfigError(f"{where}.kernel: {kernel!r} supports dim 2 and 3, got dim = {d}; use 'numpy' or 'auto'")
    if kernel == "torch" and importlib.util.find_spec("torch") is None:  # found, not imported: the check stays cheap
        raise ConfigError(
            f"{where}.kernel: 'torch' needs PyTorch, which is not installed here: `.venv/bin/pip "
            f"install torch` (or `pip install -e .[gpu]`), or choose dense, cap, numpy or auto"
        )
    if m["family"] == "explicit":
        for key in ("K", "Q", "V"):
            try:
                shape = np.shape(np.asarray(m[key], dtype=float))
            except ValueError:
                raise ConfigError(
                    f"{where}.matrices.{key} is not a rectangular matrix (rows of unequal length)"
                ) from None
            if shape != (d, d):
                raise ConfigError(f"{where}.matrices.{key} must be a {d}x{d} matrix (dim = {d}), got shape {shape}")
    _check_initial_measure_shapes(where, experiment["initial_measure"], d)
    try:
        M = build_matrices(name, experiment, root_seed)
    except matrices.AssumptionViolation as exc:
        raise matrices.AssumptionViolation(f"{where}.matrices: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{where}.matrices: {exc}") from None
    _check_initial_measure_assumptions(where, experiment["initial_measure"], M)
    _check_scales(where, experiment, M, grid)
    if experiment["model"] == "mean_field":
        _check_mean_field(where, experiment, M, initial_measure(name, experiment, root_seed))
    particle_error_tokens(name, experiment)  # the particle runs against the reference: n ≤ tokens, increasing
    if "convergence" in experiment:  # the optional studies' block: steps dividing the grid, N list, …
        studies.study_settings(name, experiment)
    return M


#: largest κ = β·σmax(B), the softmax kernel's concentration: its width κ^(-1/2) is then 1e-6 rad, and the weights
#: e^(κ⟨b̂, y⟩) are decided by differences of ⟨b̂, y⟩ near 1e-12, a few thousand roundings of float64
MAX_KAPPA = 1e12
#: an explicit integrator's stability interval on the negative real axis (RK4: 2.79, DOPRI5: 3.3): a run needs at
#: least horizon·ρ(A)/STABILITY steps whatever its tolerance, ρ(A) the largest |eigenvalue| of A, the linearised
#: dynamics' fastest rate near E1(A)
STABILITY = 4.0


def _check_scales(where: str, experiment: dict, M: matrices.AttentionMatrices, grid) -> None:
    """ConfigError for scales no float64 run can resolve: a kernel narrower than ``MAX_KAPPA`` allows (at the
    largest β of the run and of its studies), or a horizon that needs more than ``MAX_STEPS`` steps for the
    integrator's stability alone (eigenvalues of A near 1e300 otherwise pass every other check and fail inside the
    simulation, its step underflowing)."""
    betas = {"betas": max(float(b) for b in experiment["betas"])}
    if "convergence" in experiment:
        betas["convergence.beta"] = max(study_betas(experiment))
    key, beta = max(betas.items(), key=lambda item: item[1])
    kappa = beta * M.sigma_max
    if not kappa <= MAX_KAPPA:
        raise ConfigError(
            f"{where}.{key}: β·σmax(B) = {beta:g}·{M.sigma_max:.4g} = {kappa:.3g} exceeds {MAX_KAPPA:g}: the "
            f"softmax kernel would be {kappa**-0.5:.2g} rad wide, its weights decided by rounding; lower β (or the "
            "scale of K and Q)"
        )
    rate = float(np.max(np.abs(M.mu)))
    needed = grid.horizon * rate / STABILITY
    if not needed <= integrate.MAX_STEPS:
        raise ConfigError(
            f"{where}.matrices: A = VBᵀ (its symmetric part) has an eigenvalue of size {rate:.3g}: over time.horizon "
            f"= {grid.horizon:g} "
            f"an explicit integrator needs at least {needed:.3g} steps for stability alone, more than float64 "
            "time can count (2^53); rescale the matrices or shorten the horizon"
        )


def _check_mean_field(where: str, experiment: dict, M, rho0: tuple[str, dict]) -> None:
    """A ``model: mean_field`` experiment needs a solver (``reduction.geometry``): the one-dimensional reduction
    (d = 2, or d = 3 with B, V and ρ0 axisymmetric) with cells its width and depth can lay out, or in d = 3 without
    that symmetry the S² mesh with levels that resolve every β (``sphere_levels.reference_levels``) and a
    density it can carry; and no particle-number study."""
    if "convergence" in experiment:
        raise ConfigError(
            f"{where}.convergence: a model: mean_field experiment has no particles to study; put the "
            f"particle-number study in a model: particles experiment"
        )
    measure, params = measure_of(experiment)
    try:
        geometry = reduction.geometry(M.B, M.V, measure, params)
    except (reduction.SymmetryBroken, ValueError) as exc:
        raise ConfigError(
            f"{where}.model: mean_field needs the circle, or d = 3 (one-dimensional by symmetry, or the S² mesh): {exc}"
        ) from None
    cells = experiment["mean_field"]
    if geometry == "sphere":
        _check_sphere_mean_field(where, experiment, M, *rho0)
        return
    if "level" in cells:
        raise ConfigError(
            f"{where}.mean_field.level: the S² mesh's level, and this experiment is solved by the one-dimensional "
            f"reduction ({geometry}): its resolution is mean_field.width and depth"
        )
    red = reduction.reduce(M.B, M.V, measure, params)
    try:  # the grid of the solve and of its error estimate at twice the width
        for width in (cells["width"], 2 * cells["width"]):
            reduction.graded_edges(red, width, cells["depth"])
    except ValueError as exc:
        raise ConfigError(f"{where}.mean_field: {exc}") from None


def _check_sphere_mean_field(where: str, experiment: dict, M, measure: str, params: dict) -> None:
    """The S² mesh's checks, before any job: ρ0 a density it carries (``measure``, ``params`` with vMF means drawn
    as the initial tokens draw them), and at every β both icosphere levels resolving the kernel (a level too coarse
    is named with the β)."""
    block = experiment["mean_field"]
    singular = np.linalg.svd(M.B, compute_uv=False)
    if singular[-1] <= sphere_levels.B_CONDITION * singular[0]:
        raise ConfigError(
            f"{where}.matrices: the S² mean field needs B well invertible (smallest singular value above "
            f"{sphere_levels.B_CONDITION:g} of the largest), got {singular.tolist()}: the softmax's centre "
            "Bᵀx/|Bᵀx| is undefined where Bᵀx = 0"
        )
    try:
        sphere_levels.log_density0(measure, params)
        for beta in experiment["betas"]:
            _, fine = sphere_levels.reference_levels(M.B, float(beta), block.get("level"), experiment["betas"])
            if sphere_levels.icosphere_triangles(fine) > block["max_triangles"]:
                raise ValueError(
                    f"at beta = {beta:g} the reference starts on icosphere level {fine} "
                    f"({sphere_levels.icosphere_triangles(fine)} triangles), more than max_triangles = "
                    f"{block['max_triangles']}; raise max_triangles or leave out that beta"
                )
    except ValueError as exc:
        raise ConfigError(f"{where}.mean_field: {exc}") from None


def _check_initial_measure_shapes(where: str, mu: dict, d: int) -> None:
    """Vector lengths, non-zero directions and mixture weights of ``initial_measure``."""
    where = f"{where}.initial_measure"
    for key in ("mean", "center"):
        if key in mu and len(mu[key]) != d:
            raise ConfigError(f"{where}.{key} must have length dim = {d}, got {len(mu[key])}")
    for key in ("means", "points"):
        if key in mu and any(len(v) != d for v in mu[key]):
            raise ConfigError(f"{where}.{key}: every vector must have length dim = {d}")
    if mu["name"] == "projected_gaussian":
        try:
            measures.check_projected_gaussian(mu["mean"], mu["scale"])
        except ValueError as exc:
            raise ConfigError(f"{where}.scale: {exc}") from None
    if "means" in mu and len(mu["means"]) != len(mu.get("kappas", [])):
        raise ConfigError(f"{where}.means and kappas must have the same length")
    for key in ("center", "means", "points"):
        # the samplers' own check (a direction at the float floor is one, a zero vector is not)
        if key in mu and len(mu[key]):
            try:
                measures.directions(mu[key], f"{where}.{key}")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    if "weights" in mu:
        components = "points" if mu["name"] == "atoms" else "kappas"
        n = len(mu.get(components, []))
        weights = np.asarray(mu["weights"], dtype=float)
        if weights.size != n:
            raise ConfigError(f"{where}.weights must have one entry per {components[:-1]} ({n}), got {weights.size}")
        try:  # the sampler's own check, so the two cannot disagree on "sums to 1"
            measures.check_weights(weights, n)
        except ValueError as exc:
            raise ConfigError(f"{where}.{exc}") from None
    if "kappas" in mu:
        try:  # the sampler's own range (measures.KAPPA_MAX)
            measures.check_kappas(mu["kappas"])
        except ValueError as exc:
            raise ConfigError(f"{where}.{exc}") from None


def _check_initial_measure_assumptions(where: str, mu: dict, M: matrices.AttentionMatrices) -> None:
    """Assumption 3 (positive density) unless waived, and Assumption 2 (∫|P1 x|^(-1/2) dρ0 < ∞)."""
    where = f"{where}.initial_measure"
    name = mu["name"]
    if mu.get("positive_density", True) and not measures.has_positive_density(name, mu):
        what = (
            f"a cap of angle {mu['angle']:g}° has zero density outside it"
            if name == "cap"
            else "finitely many atoms have no density"
        )
        raise matrices.AssumptionViolation(
            f"{where}: {name!r} is not a positive density on the sphere ({what}; Assumption 3). "
            f"Set {where}.positive_density: false to run it outside the theorem"
        )
    if name == "atoms":
        bad = measures.atoms_on_E1_complement(mu["points"], M.E1)
        if bad.size:
            raise matrices.AssumptionViolation(
                f"{where}: Assumption 2 fails: point(s) {bad.tolist()} lie on E1⊥ (P1 x = 0), so "
                f"∫|P1 x|^(-1/2) dρ0 is infinite; these tokens never reach E1 and Π is undefined for them"
            )


def machine_memory_bytes() -> int:
    """Physical memory, or the cgroup limit where one is set and smaller."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def largest_job_memory_bytes(experiment: dict, M: matrices.AttentionMatrices | None = None) -> int:
    """Peak memory of the experiment's largest job of any stage its config can run (``registry.enabled_stages``: the
    default target, the optional stages its config turns on, the convergence studies of a ``convergence`` block;
    ``lowtemp.config.resources``, the SLURM requests' model)."""
    need = 0
    for stage in registry.enabled_stages(experiment):
        betas = experiment["betas"] if stage == "finite_temperature" else [None]
        for beta in betas:
            need = max(need, resources.memory_mb(stage, experiment, beta=beta, matrices=M, threads=2))
    return need * 2**20


def validate_config(
    config: dict,
    schema_path: str | os.PathLike,
    configfiles=(),
    results="results",
    memory_estimate=largest_job_memory_bytes,
) -> dict[str, matrices.AttentionMatrices]:
    """All checks of the module docstring; returns the checked matrices per experiment.

    ``memory_estimate(experiment, M) -> bytes`` gives the peak memory of the
    experiment's largest job; it is compared with ``memory_limit_gb``.
    """
    check_structure(config, schema_path, configfiles)
    checked = {name: validate_experiment(name, exp, config["root_seed"]) for name, exp in config["experiments"].items()}
    if memory_estimate is not None:
        limit_gb = config.get("memory_limit_gb")
        limit = machine_memory_bytes() if limit_gb is None else float(limit_gb) * 2**30
        source = "this machine's memory" if limit_gb is None else "memory_limit_gb"
        for name, exp in config["experiments"].items():
            need = _estimated_memory(name, exp, checked[name], memory_estimate)
            if need > limit:
                raise ConfigError(
                    f"experiments.{name}: the largest job needs about {need / 2**30:.1f} GiB "
                    f"(tokens = {exp['tokens']}, replicas = {exp['replicas']}, snapshots = "
                    f"{exp['time']['snapshots']}), more than the {limit / 2**30:.3g} GiB of {source}; "
                    f"use fewer tokens, replicas or snapshots, or set memory_limit_gb for the compute nodes"
                )
    check_job_hours(config, checked)
    check_results(results, config["experiments"])
    return checked


#: the longest wall time (hours) one job may ask for unless the config's ``max_job_hours`` says otherwise
MAX_JOB_HOURS = 24.0


def check_job_hours(config: dict, checked: dict) -> None:
    """ConfigError naming the job, its estimate and the key when a job of a stage the config can run would ask for
    more wall time than ``max_job_hours`` (default ``MAX_JOB_HOURS``): the resource model's request
    (``resources.estimate``, its safety factor included), before any job starts."""
    limit = float(config.get("max_job_hours", MAX_JOB_HOURS))
    for name, exp in config["experiments"].items():
        for stage in registry.enabled_stages(exp):
            betas = exp["betas"] if stage in ("finite_temperature", "distances_beta", "particle_error_beta") else [None]
            for beta in betas:
                minutes = resources.estimate(stage, exp, beta=beta, matrices=checked[name], threads=2).runtime_min
                if minutes > 60.0 * limit:
                    at = "" if beta is None else f" at beta = {float(beta):g}"
                    raise ConfigError(
                        f"experiments.{name}: the {stage} job{at} would ask for about {minutes / 60.0:.3g} hours of "
                        f"wall time (the resource model's estimate, lowtemp.config.costs), more than max_job_hours = "
                        f"{limit:g}; make the experiment smaller (tokens, horizon, the studies' N), or raise "
                        "max_job_hours where the machine can run it"
                    )


def _estimated_memory(name: str, experiment: dict, M: matrices.AttentionMatrices, memory_estimate) -> int:
    """``memory_estimate(experiment, M)``; sizes too large for its arithmetic (2**62 snapshots ask for an
    array of them) are a ConfigError naming them."""
    try:
        return memory_estimate(experiment, M)
    except (ValueError, OverflowError, MemoryError) as exc:
        raise ConfigError(
            f"experiments.{name}: the memory of the largest job cannot be estimated (tokens = "
            f"{experiment['tokens']}, replicas = {experiment['replicas']}, snapshots = "
            f"{experiment['time']['snapshots']}): {str(exc).rstrip('.')}; these sizes are far beyond any "
            f"machine"
        ) from None
