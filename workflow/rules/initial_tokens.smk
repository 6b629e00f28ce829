# Step 2: N tokens x R replicas from the initial measure, seeded.


rule initial_tokens:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
    output:
        f"{RESULTS}/{{experiment}}/initial_tokens.nc",
    log:
        f"{RESULTS}/{{experiment}}/logs/initial_tokens.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/initial_tokens.tsv"
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
