# Step 5: exact W2 and eigenspace distances, per beta, then collected.


rule distances_beta:
    input:
        matrices=OUTPUTS["matrices"],
        tokens=OUTPUTS["initial_tokens"],
        finite=OUTPUTS["finite_temperature"],
        zero=OUTPUTS["zero_temperature"],
    output:
        OUTPUTS["distances_beta"],
    log:
        job_file("log", "distances_beta{beta}"),
    benchmark:
        job_file("benchmark", "distances_beta{beta}")
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
        checkpoint=f"{CHECKPOINTS}/distances_beta{{beta}}.nc",
    script:
        "../scripts/distances_beta.py"


rule distances:
    input:
        matrices=OUTPUTS["matrices"],
        tokens=OUTPUTS["initial_tokens"],
        zero=OUTPUTS["zero_temperature"],
        parts=distance_parts,
    output:
        OUTPUTS["distances"],
    log:
        job_file("log", "distances"),
    benchmark:
        job_file("benchmark", "distances")
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
        matrices=OUTPUTS["matrices"],
        tokens=OUTPUTS["initial_tokens"],
        finite=OUTPUTS["finite_temperature"],
    output:
        OUTPUTS["particle_error_beta"],
    log:
        job_file("log", "particle_error_beta{beta}"),
    benchmark:
        job_file("benchmark", "particle_error_beta{beta}")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("particle_error_beta"),
        runtime=stage_runtime("particle_error_beta"),
        cpus_per_task=stage_cpus("particle_error_beta"),
        gpu=stage_gpus("particle_error_beta"),
    params:
        stage=stage_params("particle_error_beta"),
        checkpoints=f"{CHECKPOINTS}/particle_error_beta{{beta}}",
    script:
        "../scripts/particle_error_beta.py"


rule particle_error:
    input:
        parts=particle_error_parts,
    output:
        OUTPUTS["particle_error"],
    log:
        job_file("log", "particle_error"),
    benchmark:
        job_file("benchmark", "particle_error")
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
