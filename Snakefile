# Low-temperature mean-field transformer dynamics: the whole pipeline.
# This file only includes the rule files and names the final targets.
from snakemake.utils import min_version

min_version("9.0")

# The default experiments, unless a config with experiments was given
# (`--configfile other.yaml` replaces them instead of being merged into them).
if "experiments" not in config:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/matrices.smk"
include: "workflow/rules/initial_tokens.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/distances.smk"
include: "workflow/rules/fit.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/convergence.smk"


rule all:
    input:
        all_targets(),
