# The workflow is workflow/Snakefile (the layout of the Snakemake workflow catalog and snakedeploy).
include: "workflow/Snakefile"


# An include keeps the including file's default target (none here), so name the included `all`:
# `snakemake` without a target builds it, as when this file held the workflow.
workflow.default_target = "all"
