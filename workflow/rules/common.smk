# Helpers shared by all rules; the config is validated here, before any job runs.
import re

import os

from lowtemp import validation

RESULTS = "results"

# Duplicate keys, schema (defaults filled in), assumptions, memory, results folder:
# a bad config stops here with one error naming the key, before any job and any output.
MATRICES = validation.validate_config(  # experiment name -> its checked K, Q, V (AttentionMatrices)
    config,
    schema_path=os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml"),
    configfiles=workflow.configfiles,
    results=RESULTS,
)

ROOT_SEED = config["root_seed"]
EXPERIMENTS = config["experiments"]

FIGURES = ["w2_projection", "collapse", "end_phase", "time_scale", "snapshots"]


def beta_label(beta):
    """Short, canonical label of a beta in file names (no float noise)."""
    return f"{float(beta):g}"


BETAS = {name: {beta_label(b): float(b) for b in exp["betas"]} for name, exp in EXPERIMENTS.items()}


wildcard_constraints:
    experiment="|".join(re.escape(name) for name in EXPERIMENTS),
    beta=r"[0-9][0-9.e+\-]*",
    figure="|".join(FIGURES),


def stage_params(wildcards):
    """Plain parameters every stage receives: experiment name, its config slice, the root seed.

    The slice leaves out the optional ``convergence`` block: only the rule ``convergence``
    depends on it, so changing it reruns nothing else."""
    return {
        "name": wildcards.experiment,
        "experiment": {k: v for k, v in EXPERIMENTS[wildcards.experiment].items() if k != "convergence"},
        "root_seed": ROOT_SEED,
    }


def finite_temperature_files(wildcards):
    return [
        f"{RESULTS}/{wildcards.experiment}/finite_temperature/beta{label}.nc"
        for label in BETAS[wildcards.experiment]
    ]


def distance_parts(wildcards):
    return [
        f"{RESULTS}/{wildcards.experiment}/distances/beta{label}.nc"
        for label in BETAS[wildcards.experiment]
    ]


def experiment_figures(name):
    figures = [f for f in FIGURES if f != "snapshots" or EXPERIMENTS[name]["dim"] == 3]
    return [f"{RESULTS}/{name}/figures/{fig}.{ext}" for fig in figures for ext in ("pdf", "png")]


def all_targets():
    targets = []
    for name in EXPERIMENTS:
        targets += [f"{RESULTS}/{name}/distances.nc", f"{RESULTS}/{name}/fit.nc", f"{RESULTS}/{name}/claims.nc"]
        targets += experiment_figures(name)
    return targets
