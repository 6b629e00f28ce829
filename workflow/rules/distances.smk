# Step 5: exact W2 and eigenspace distances, per beta, then collected.


rule distances_beta:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        tokens=f"{RESULTS}/{{experiment}}/initial_tokens.nc",
        finite=f"{RESULTS}/{{experiment}}/finite_temperature/beta{{beta}}.nc",
        zero=f"{RESULTS}/{{experiment}}/zero_temperature.nc",
    output:
        f"{RESULTS}/{{experiment}}/distances/beta{{beta}}.nc",
    log:
        f"{RESULTS}/{{experiment}}/logs/distances_beta{{beta}}.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/distances_beta{{beta}}.tsv"
    group:
        stage_group("distances_beta")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("distances_beta"),
        runtime=stage_runtime("distances_beta"),
        cpus_per_task=stage_cpus("distances_beta"),
    params:
        stage=stage_params("distances_beta"),
        checkpoint=f"{RESULTS}/{{experiment}}/checkpoints/distances_beta{{beta}}.nc",
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
    log:
        f"{RESULTS}/{{experiment}}/logs/distances.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/distances.tsv"
    group:
        stage_group("distances")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("distances"),
        runtime=stage_runtime("distances"),
        cpus_per_task=stage_cpus("distances"),
    params:
        stage=stage_params("distances"),
    script:
        "../scripts/distances.py"
