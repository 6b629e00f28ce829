# Step 1: K, Q, V from a named family, checked against Assumption 1.


rule matrices:
    output:
        f"{RESULTS}/{{experiment}}/matrices.nc",
    log:
        f"{RESULTS}/{{experiment}}/logs/matrices.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/matrices.tsv"
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("matrices"),
        runtime=stage_runtime("matrices"),
        cpus_per_task=stage_cpus("matrices"),
    params:
        stage=stage_params("matrices"),
    script:
        "../scripts/matrices.py"
