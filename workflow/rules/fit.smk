# Step 6 (SPEC §2.6): C1, c, the metastable time scale; then the paper's statements as checks.


rule fit:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        distances=f"{RESULTS}/{{experiment}}/distances.nc",
    output:
        f"{RESULTS}/{{experiment}}/fit.nc",
    params:
        stage=stage_params,
    resources:
        mem_mb=stage_mem_mb("fit"),
        runtime=stage_runtime("fit"),
        cpus_per_task=stage_cpus("fit"),
    group:
        stage_group("fit")
    log:
        f"{RESULTS}/{{experiment}}/logs/fit.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/fit.tsv"
    script:
        "../scripts/fit.py"


rule claims:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        distances=f"{RESULTS}/{{experiment}}/distances.nc",
        fit=f"{RESULTS}/{{experiment}}/fit.nc",
    output:
        f"{RESULTS}/{{experiment}}/claims.nc",
    params:
        stage=stage_params,
    resources:
        mem_mb=stage_mem_mb("fit"),
        runtime=stage_runtime("fit"),
        cpus_per_task=stage_cpus("fit"),
    group:
        stage_group("fit")
    log:
        f"{RESULTS}/{{experiment}}/logs/claims.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/claims.tsv"
    script:
        "../scripts/claims.py"
