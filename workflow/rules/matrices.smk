# Step 1 (SPEC §2.1): K, Q, V from a named family, checked against Assumption 1.


rule matrices:
    output:
        f"{RESULTS}/{{experiment}}/matrices.nc",
    params:
        stage=stage_params,
    log:
        f"{RESULTS}/{{experiment}}/logs/matrices.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/matrices.tsv"
    script:
        "../scripts/matrices.py"
