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


# A model: mean_field experiment with mean_field.particles: the particle system from the same initial tokens as the
# reference (the first n of each replica), per beta, its exact W2 to the reference's push-forward, then collected.
# In the default target only where the block is (common.smk, all_targets).


rule particle_error_beta:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        tokens=f"{RESULTS}/{{experiment}}/initial_tokens.nc",
        finite=f"{RESULTS}/{{experiment}}/finite_temperature/beta{{beta}}.nc",
    output:
        f"{RESULTS}/{{experiment}}/particle_error/beta{{beta}}.nc",
    log:
        f"{RESULTS}/{{experiment}}/logs/particle_error_beta{{beta}}.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/particle_error_beta{{beta}}.tsv"
    conda:
        SOFTWARE
    threads: stage_threads("particle_error_beta")
    resources:
        mem_mb=stage_mem_mb("particle_error_beta"),
        runtime=stage_runtime("particle_error_beta"),
        cpus_per_task=stage_cpus("particle_error_beta"),
        gpu=stage_gpus("particle_error_beta"),
    params:
        stage=stage_params("particle_error_beta"),
        checkpoints=f"{RESULTS}/{{experiment}}/checkpoints/particle_error_beta{{beta}}",
    script:
        "../scripts/particle_error_beta.py"


rule particle_error:
    input:
        parts=particle_error_parts,
    output:
        f"{RESULTS}/{{experiment}}/particle_error.nc",
    log:
        f"{RESULTS}/{{experiment}}/logs/particle_error.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/particle_error.tsv"
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("particle_error"),
        runtime=stage_runtime("particle_error"),
        cpus_per_task=stage_cpus("particle_error"),
    params:
        stage=stage_params("particle_error"),
    script:
        "../scripts/particle_error.py"
