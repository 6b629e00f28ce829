# Steps 3-4: finite temperature per beta, zero temperature once.


rule finite_temperature:
    input:
        matrices=OUTPUTS["matrices"],
        tokens=OUTPUTS["initial_tokens"],
    output:
        OUTPUTS["finite_temperature"],
    log:
        job_file("log", "finite_temperature_beta{beta}"),
    benchmark:
        job_file("benchmark", "finite_temperature_beta{beta}")
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
        beta=beta_value,
        checkpoint=f"{CHECKPOINTS}/finite_temperature_beta{{beta}}.nc",
    script:
        "../scripts/finite_temperature.py"


rule zero_temperature:
    input:
        matrices=OUTPUTS["matrices"],
        tokens=OUTPUTS["initial_tokens"],
    output:
        OUTPUTS["zero_temperature"],
    log:
        job_file("log", "zero_temperature"),
    benchmark:
        job_file("benchmark", "zero_temperature")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("zero_temperature"),
        runtime=stage_runtime("zero_temperature"),
        cpus_per_task=stage_cpus("zero_temperature"),
    params:
        stage=stage_params("zero_temperature"),
        checkpoint=f"{CHECKPOINTS}/zero_temperature.nc",
    script:
        "../scripts/zero_temperature.py"
