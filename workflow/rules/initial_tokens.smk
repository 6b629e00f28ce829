# Step 2: N tokens x R replicas from the initial measure, seeded.


rule initial_tokens:
    input:
        matrices=OUTPUTS["matrices"],
    output:
        OUTPUTS["initial_tokens"],
    log:
        job_file("log", "initial_tokens"),
    benchmark:
        job_file("benchmark", "initial_tokens")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("initial_tokens"),
        runtime=stage_runtime("initial_tokens"),
        cpus_per_task=stage_cpus("initial_tokens"),
    params:
        stage=stage_params("initial_tokens"),
    script:
        "../scripts/initial_tokens.py"
