# Step 1 (SPEC §2.1): K, Q, V from a named family, checked against Assumption 1.


rule matrices:
    output:
        f"{RESULTS}/{{experiment}}/matrices.nc",
    params:
        stage=stage_params,
    resources:
        mem_mb=stage_mem_mb("matrices"),
        runtime=stage_runtime("matrices"),
        cpus_per_task=stage_cpus("matrices"),
    log:
        f"{RESULTS}/{{experiment}}/logs/matrices.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/matrices.tsv"
    script:
        "../scripts/matrices.py"
