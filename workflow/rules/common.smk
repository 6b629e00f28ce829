# Helpers shared by all rules; the config is validated here, before any job runs.
import re

import os

from snakemake.sourcecache import LocalSourceFile

from lowtemp.config import experiment as lowtemp_experiment
from lowtemp.config import params as lowtemp_params
from lowtemp.config import studies as lowtemp_studies
from lowtemp.config import validation

RESULTS = "results"

# Duplicate keys, schema (defaults filled in), assumptions, memory, results folder:
# a bad config stops here with one error naming the key, before any job and any output.
MATRICES = validation.validate_config(  # experiment name -> its checked K, Q, V (AttentionMatrices)
    config,
    # relative to this file, wherever the Snakefile that includes it lies (workflow.basedir is the main
    # Snakefile's folder: the repository root, workflow/, or a deployment's workflow/)
    schema_path=workflow.source_path("../schemas/config.schema.yaml"),
    configfiles=workflow.configfiles,
    results=RESULTS,
)

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

FIGURES = lowtemp_experiment.FIGURES


beta_label = lowtemp_experiment.beta_label


BETAS = {name: {beta_label(b): float(b) for b in exp["betas"]} for name, exp in EXPERIMENTS.items()}


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
        return lowtemp_params.stage_params(wildcards.experiment, EXPERIMENTS[wildcards.experiment], key, ROOT_SEED)

    return params


def convergence_reused_run(wildcards):
    """{"finite": the experiment's runs at the particle study's beta} where the study reuses them for N = tokens
    (``lowtemp.config.studies.reused_betas``), else nothing."""
    exp = EXPERIMENTS[wildcards.experiment]
    settings = lowtemp_studies.study_settings(wildcards.experiment, exp)
    betas = lowtemp_studies.reused_betas(exp, settings)
    if not betas:
        return {}
    return {"finite": [f"{RESULTS}/{wildcards.experiment}/finite_temperature/beta{beta_label(b)}.nc" for b in betas]}


def finite_temperature_files(wildcards):
    return [
        f"{RESULTS}/{wildcards.experiment}/finite_temperature/beta{label}.nc" for label in BETAS[wildcards.experiment]
    ]


def distance_parts(wildcards):
    return [f"{RESULTS}/{wildcards.experiment}/distances/beta{label}.nc" for label in BETAS[wildcards.experiment]]


def particle_error_parts(wildcards):
    return [f"{RESULTS}/{wildcards.experiment}/particle_error/beta{label}.nc" for label in BETAS[wildcards.experiment]]


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
    inputs = {"matrices": f"{RESULTS}/{e}/matrices.nc", "distances": f"{RESULTS}/{e}/distances.nc"}
    if "convergence" in EXPERIMENTS[e]:
        inputs["convergence"] = f"{RESULTS}/{e}/convergence.nc"
    return inputs


def experiment_figures(name):
    figures = lowtemp_experiment.figures_for(EXPERIMENTS[name])
    return [f"{RESULTS}/{name}/figures/{fig}.{ext}" for fig in figures for ext in ("pdf", "png")]


def all_targets():
    targets = []
    for name in EXPERIMENTS:
        targets += [f"{RESULTS}/{name}/distances.nc", f"{RESULTS}/{name}/fit.nc", f"{RESULTS}/{name}/claims.nc"]
        targets += experiment_figures(name)
        if "convergence" in EXPERIMENTS[name]:  # its study decides the fit: its figure shows the budget
            targets += [f"{RESULTS}/{name}/figures/convergence.{ext}" for ext in ("pdf", "png")]
        if lowtemp_experiment.particle_error_tokens(name, EXPERIMENTS[name]):  # mean_field.particles
            targets.append(f"{RESULTS}/{name}/particle_error.nc")
        if lowtemp_experiment.animated(EXPERIMENTS[name]):  # on S¹ and S²: the tokens' animation
            targets.append(f"{RESULTS}/{name}/figures/tokens.gif")
    return targets + [f"{RESULTS}/claims_summary.md"]
