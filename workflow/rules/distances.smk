# Step 5 (SPEC §2.5): exact W2 and eigenspace distances, per beta, then collected.


rule distances_beta:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        tokens=f"{RESULTS}/{{experiment}}/initial_tokens.nc",
        finite=f"{RESULTS}/{{experiment}}/finite_temperature/beta{{beta}}.nc",
        zero=f"{RESULTS}/{{experiment}}/zero_temperature.nc",
    output:
        f"{RESULTS}/{{experiment}}/distances/beta{{beta}}.nc",
    params:
        stage=stage_params,
    resources:
        mem_mb=stage_mem_mb("distances_beta"),
        runtime=stage_runtime("distances_beta"),
        cpus_per_task=stage_cpus("distances_beta"),
    group:
        stage_group("distances_beta")
    log:
        f"{RESULTS}/{{experiment}}/logs/distances_beta{{beta}}.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/distances_beta{{beta}}.tsv"
    script:
        "../scripts/distances_beta.py"


rule distances:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        tokens=f"{RESULTS}/{{experiment}}/initial_tokens.nc",
        zero=f"{RESULTS}/{{experiment}}/zero_temperature.nc",
        parts=distance_parts,
    output:
        f"{RESULTS}/{{experiment}}/distances.nc",
    params:
        stage=stage_params,
    resources:
        mem_mb=stage_mem_mb("distances"),
        runtime=stage_runtime("distances"),
        cpus_per_task=stage_cpus("distances"),
    group:
        stage_group("distances")
    log:
        f"{RESULTS}/{{experiment}}/logs/distances.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/distances.tsv"
    script:
        "../scripts/distances.py"
