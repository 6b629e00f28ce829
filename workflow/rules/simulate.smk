# Steps 3-4: finite temperature per beta, zero temperature once.


rule finite_temperature:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        tokens=f"{RESULTS}/{{experiment}}/initial_tokens.nc",
    output:
        f"{RESULTS}/{{experiment}}/finite_temperature/beta{{beta}}.nc",
    log:
        f"{RESULTS}/{{experiment}}/logs/finite_temperature_beta{{beta}}.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/finite_temperature_beta{{beta}}.tsv"
    conda:
        SOFTWARE
    threads: stage_threads("finite_temperature")
    resources:
        mem_mb=stage_mem_mb("finite_temperature"),
        runtime=stage_runtime("finite_temperature"),
        cpus_per_task=stage_cpus("finite_temperature"),
        gpu=stage_gpus("finite_temperature"),
    params:
        stage=stage_params("finite_temperature"),
        beta=lambda w: BETAS[w.experiment][w.beta],
        checkpoint=f"{RESULTS}/{{experiment}}/checkpoints/finite_temperature_beta{{beta}}.nc",
    script:
        "../scripts/finite_temperature.py"


rule zero_temperature:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        tokens=f"{RESULTS}/{{experiment}}/initial_tokens.nc",
    output:
        f"{RESULTS}/{{experiment}}/zero_temperature.nc",
    log:
        f"{RESULTS}/{{experiment}}/logs/zero_temperature.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/zero_temperature.tsv"
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("zero_temperature"),
        runtime=stage_runtime("zero_temperature"),
        cpus_per_task=stage_cpus("zero_temperature"),
    params:
        stage=stage_params("zero_temperature"),
        checkpoint=f"{RESULTS}/{{experiment}}/checkpoints/zero_temperature.nc",
    script:
        "../scripts/zero_temperature.py"
