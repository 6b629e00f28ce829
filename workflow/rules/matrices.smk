# Step 1: K, Q, V from a named family, checked against Assumption 1.


rule matrices:
    output:
        OUTPUTS["matrices"],
    log:
        job_file("log", "matrices"),
    benchmark:
        job_file("benchmark", "matrices")
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
