"""Snakemake adapter: rule convergence -> lowtemp.stages.convergence.stage_convergence."""

from lowtemp.dynamics import kernels
from lowtemp.stages import convergence, joblog

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params.stage
kernels.set_threads(sm.threads)
with joblog.logged(sm.log[0]):
    convergence.stage_convergence(
        p["name"],
        p["experiment"],
        p["root_seed"],
        matrices_path=sm.input.matrices,
        tokens_path=sm.input.tokens,
        output=sm.output[0],
        finite_paths=sm.input.get("finite", []),
        checkpoint_dir=sm.params.checkpoints,
        checkpoint_every=sm.config["checkpoint_every_seconds"],
    )
