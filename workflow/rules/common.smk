# Helpers shared by all rules; the config is validated here, before any job runs.
import re

import os

from snakemake.sourcecache import LocalSourceFile

from lowtemp.config import params as lowtemp_params
from lowtemp.config import plan as lowtemp_plan
from lowtemp.config import schema as lowtemp_schema

# Reading the workflow needs Snakemake's own dependencies only (lowtemp.config.plan, schema, params, registry).
# The numerical config check, the studies' settings and the resource model need the package's (numpy, scipy):
# where they are missing, as in the environment of the Snakemake workflow catalog's `snakemake --lint`, the
# workflow is read with the structural checks alone, and building any job names what to install.
try:
    from lowtemp.config import resources as lowtemp_resources
    from lowtemp.config import studies as lowtemp_studies
    from lowtemp.config import validation
except ModuleNotFoundError as missing:
    if missing.name is None or missing.name.split(".")[0] == "lowtemp":
        raise
    lowtemp_resources = lowtemp_plan.MissingDependency("lowtemp.config.resources", missing.name)
    lowtemp_studies = lowtemp_plan.MissingDependency("lowtemp.config.studies", missing.name)
    validation = None
    MATRICES = lowtemp_plan.MissingDependency("the checked matrices (lowtemp.config.validation)", missing.name)

RESULTS = "results"

# Every output file's pattern, named once. Rules read each other's outputs through these patterns, and the
# target lists fill them in (``result``); logs, benchmarks and checkpoints sit beside them (``job_file``,
# ``CHECKPOINTS``).
OUTPUTS = {
    "matrices": f"{RESULTS}/{{experiment}}/matrices.nc",
    "initial_tokens": f"{RESULTS}/{{experiment}}/initial_tokens.nc",
    "finite_temperature": f"{RESULTS}/{{experiment}}/finite_temperature/beta{{beta}}.nc",
    "zero_temperature": f"{RESULTS}/{{experiment}}/zero_temperature.nc",
    "distances_beta": f"{RESULTS}/{{experiment}}/distances/beta{{beta}}.nc",
    "distances": f"{RESULTS}/{{experiment}}/distances.nc",
    "particle_error_beta": f"{RESULTS}/{{experiment}}/particle_error/beta{{beta}}.nc",
    "particle_error": f"{RESULTS}/{{experiment}}/particle_error.nc",
    "convergence": f"{RESULTS}/{{experiment}}/convergence.nc",
    "fit": f"{RESULTS}/{{experiment}}/fit.nc",
    "claims": f"{RESULTS}/{{experiment}}/claims.nc",
    "figure": f"{RESULTS}/{{experiment}}/figures/{{figure}}.{{ext}}",
    "claims_summary": f"{RESULTS}/claims_summary.md",
}


def result(key, **wildcards):
    """The path of output ``key`` with ``wildcards`` filled in; those not given stay wildcards."""
    names = set(re.findall(r"{(\w+)}", OUTPUTS[key]))
    return OUTPUTS[key].format(**{name: wildcards.get(name, f"{{{name}}}") for name in names})


def job_file(kind, name):
    """A job's ``log`` or ``benchmark`` file; ``name`` may hold wildcards ("distances_beta{beta}")."""
    folder, ext = {"log": ("logs", "log"), "benchmark": ("benchmarks", "tsv")}[kind]
    return f"{RESULTS}/{{experiment}}/{folder}/{name}.{ext}"


# where a job keeps what it has done, so that a killed job resumes (``lowtemp.store.checkpoint``)
CHECKPOINTS = f"{RESULTS}/{{experiment}}/checkpoints"

# Duplicate keys, schema (defaults filled in), assumptions, memory, results folder:
# a bad config stops here with one error naming the key, before any job and any output.
# relative to this file, wherever the Snakefile that includes it lies (workflow.basedir is the main Snakefile's
# folder: the repository root, workflow/, or a deployment's workflow/)
SCHEMA = workflow.source_path("../schemas/config.schema.yaml")
if validation is None:  # the structural checks alone (lowtemp.config.schema): no matrices to check
    lowtemp_schema.check_structure(config, SCHEMA, workflow.configfiles)
    lowtemp_schema.check_results(RESULTS, config["experiments"])
else:  # experiment name -> its checked K, Q, V (AttentionMatrices)
    MATRICES = validation.validate_config(config, SCHEMA, workflow.configfiles, results=RESULTS)

# The software of every rule, named in its conda directive: the pinned environment, used
# with --sdm conda (a plain run uses the environment Snakemake runs in, e.g. the .venv of
# `make venv`). Relative to the rule files; envs/environment.post-deploy.sh installs this
# checkout's package lowtemp into it: LOWTEMP_SOURCE, the checkout two folders above this file
# (a workflow read from a remote source, a module's `github(...)`, has no checkout to name).
SOFTWARE = "../../envs/environment.yaml"
if isinstance(workflow.current_basedir, LocalSourceFile):
    os.environ.update(LOWTEMP_SOURCE=os.path.dirname(os.path.dirname(workflow.current_basedir.get_path_or_uri(False))))

ROOT_SEED = config["root_seed"]
EXPERIMENTS = config["experiments"]

FIGURES = lowtemp_plan.FIGURES


beta_label = lowtemp_plan.beta_label


BETAS = {name: {beta_label(b): float(b) for b in exp["betas"]} for name, exp in EXPERIMENTS.items()}


def beta_value(wildcards):
    """The β a job's ``{beta}`` label stands for, as the config gives it."""
    return BETAS[wildcards.experiment][wildcards.beta]


wildcard_constraints:
    experiment="|".join(re.escape(name) for name in EXPERIMENTS),
    beta=r"[0-9][0-9.e+\-]*",
    figure="|".join(FIGURES),


def stage_params(stage):
    """Params of a rule's jobs: experiment name, the slice of its config that ``stage`` reads, root seed.

    The slice (``lowtemp.config.params.STAGE_KEYS``, canonical: sorted keys, 10.0 as 10) is the
    rule's only config dependency, so Snakemake reruns a job when, and only when, a key
    its stage reads changes. The rule ``figure`` has one slice per figure."""

    def params(wildcards):
        key = f"figure:{wildcards.figure}" if stage == "figure" else stage
        beta = beta_value(wildcards) if "beta" in wildcards.keys() else None  # a per-β job reads its β's settings
        return lowtemp_params.stage_params(
            wildcards.experiment, EXPERIMENTS[wildcards.experiment], key, ROOT_SEED, beta=beta
        )

    return params


def convergence_reused_run(wildcards):
    """{"finite": the experiment's runs at the particle study's beta} where the study reuses them for N = tokens
    (``lowtemp.config.studies.reused_betas``), else nothing."""
    exp = EXPERIMENTS[wildcards.experiment]
    settings = lowtemp_studies.study_settings(wildcards.experiment, exp)
    betas = lowtemp_studies.reused_betas(exp, settings)
    if not betas:
        return {}
    return {
        "finite": [result("finite_temperature", experiment=wildcards.experiment, beta=beta_label(b)) for b in betas]
    }


def finite_temperature_files(wildcards):
    return [result("finite_temperature", experiment=wildcards.experiment, beta=b) for b in BETAS[wildcards.experiment]]


def distance_parts(wildcards):
    return [result("distances_beta", experiment=wildcards.experiment, beta=b) for b in BETAS[wildcards.experiment]]


def particle_error_parts(wildcards):
    return [result("particle_error_beta", experiment=wildcards.experiment, beta=b) for b in BETAS[wildcards.experiment]]


def figure_particle_runs(wildcards):
    """{"particles": particle_error.nc} for the figure w2_projection of an experiment with particle runs beside its
    mean-field reference (``mean_field.particles``), which it draws beside the reference; else nothing."""
    name = wildcards.experiment
    if wildcards.figure != "w2_projection" or not lowtemp_plan.particle_error_tokens(name, EXPERIMENTS[name]):
        return {}
    return {"particles": result("particle_error", experiment=name)}


def figure_labels(wildcards):
    """Labels of a figure in the report: its experiment, the experiment's betas, the figure."""
    return {
        "experiment": wildcards.experiment,
        "β": ", ".join(BETAS[wildcards.experiment]),
        "figure": wildcards.figure,
    }


def animation_labels(wildcards):
    """Labels of the animation in the report: its experiment, the experiment's betas, "tokens"."""
    return {"experiment": wildcards.experiment, "β": ", ".join(BETAS[wildcards.experiment]), "figure": "tokens"}


def convergence_labels(wildcards):
    """Labels of a convergence figure in the report (β: those the particle-number study runs at)."""
    name = wildcards.experiment
    betas = lowtemp_studies.study_settings(name, EXPERIMENTS[name]).particles.betas
    return {"experiment": name, "β": ", ".join(f"{b:g}" for b in betas), "figure": "convergence"}


def fit_inputs(wildcards):
    """The fit's inputs; with a ``convergence`` block, also the particle-number study, which then decides with the
    ESS which beta are resolved (so the study runs before the fit of that experiment)."""
    e = wildcards.experiment
    inputs = {key: result(key, experiment=e) for key in ("matrices", "distances")}
    if "convergence" in EXPERIMENTS[e]:
        inputs["convergence"] = result("convergence", experiment=e)
    return inputs


def experiment_figures(name):
    figures = lowtemp_plan.figures_for(EXPERIMENTS[name])
    return [result("figure", experiment=name, figure=fig, ext=ext) for fig in figures for ext in ("pdf", "png")]


def all_targets():
    targets = []
    for name in EXPERIMENTS:
        targets += [result(key, experiment=name) for key in ("distances", "fit", "claims")]
        targets += experiment_figures(name)
        if "convergence" in EXPERIMENTS[name]:  # its study decides the fit: its figure shows the budget
            targets += [result("figure", experiment=name, figure="convergence", ext=ext) for ext in ("pdf", "png")]
        if lowtemp_plan.particle_error_tokens(name, EXPERIMENTS[name]):  # mean_field.particles
            targets.append(result("particle_error", experiment=name))
        if lowtemp_plan.animated(EXPERIMENTS[name]):  # on S¹ and S²: the tokens' animation
            targets.append(result("figure", experiment=name, figure="tokens", ext="gif"))
    return targets + [result("claims_summary")]
