"""Snakemake adapter: rule initial_tokens -> lowtemp.stages.initial_tokens.stage_initial_tokens."""

from lowtemp.stages import initial_tokens, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
with joblog.logged(sm.log[0]):
    initial_tokens.stage_initial_tokens(
        p["name"], p["experiment"], p["root_seed"], matrices_path=sm.input.matrices, output=sm.output[0]
    )
