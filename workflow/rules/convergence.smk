# Convergence studies: step halving (h, h/2, h/4; RK4 and Euler; the adaptive integrator's tolerance levels;
# finite β by Richardson, zero temperature also against the exact solution) and particle
# number (W2(ρ^β_t, Π♯ρ0) for N doubling, spread over replicas). Not in the default target
# (`all`): `snakemake --cores all convergence_all` runs them for every experiment. Their figure's
# rule, `convergence_figure`, is in figures.smk with the other figures.


rule convergence:
    input:
        unpack(convergence_reused_run),
        matrices=OUTPUTS["matrices"],
        tokens=OUTPUTS["initial_tokens"],
    output:
        OUTPUTS["convergence"],
    log:
        job_file("log", "convergence"),
    benchmark:
        job_file("benchmark", "convergence")
    conda:
        SOFTWARE
    threads: stage_threads("convergence")
    resources:
        mem_mb=stage_mem_mb("convergence"),
        runtime=stage_runtime("convergence"),
        cpus_per_task=stage_cpus("convergence"),
        gpu=stage_gpus("convergence"),
    params:
        stage=stage_params("convergence"),
        checkpoints=CHECKPOINTS,
    script:
        "../scripts/convergence.py"


rule convergence_all:
    input:
        [result("convergence", experiment=name) for name in EXPERIMENTS]
        + [
            result("figure", experiment=name, figure="convergence", ext=ext)
            for name in EXPERIMENTS
            for ext in ("pdf", "png")
        ],
