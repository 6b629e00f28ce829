#!/usr/bin/env bash
# Run by Snakemake once in the environment it creates from envs/environment.yaml
# (--sdm conda): install the package lowtemp from the checkout the workflow runs from
# (LOWTEMP_SOURCE, set by workflow/rules/common.smk), like `make venv` does.
set -euo pipefail
python -m pip install --no-deps --no-build-isolation -e "${LOWTEMP_SOURCE:?set by workflow/rules/common.smk}"
