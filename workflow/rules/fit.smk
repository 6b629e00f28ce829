# Step 6 (SPEC §2.6): C1, c, the metastable time scale.


rule fit:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        distances=f"{RESULTS}/{{experiment}}/distances.nc",
    output:
        f"{RESULTS}/{{experiment}}/fit.nc",
    params:
        stage=stage_params,
    log:
        f"{RESULTS}/{{experiment}}/logs/fit.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/fit.tsv"
    script:
        "../scripts/fit.py"
