# Step 6: C1, c, the metastable time scale; then the paper's statements as checks.


rule fit:
    input:
        unpack(fit_inputs),
    output:
        OUTPUTS["fit"],
    log:
        job_file("log", "fit"),
    benchmark:
        job_file("benchmark", "fit")
    group:
        stage_group("fit")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("fit"),
        runtime=stage_runtime("fit"),
        cpus_per_task=stage_cpus("fit"),
    params:
        stage=stage_params("fit"),
    script:
        "../scripts/fit.py"


rule claims:
    input:
        distances=OUTPUTS["distances"],
        fit=OUTPUTS["fit"],
    output:
        OUTPUTS["claims"],
    log:
        job_file("log", "claims"),
    benchmark:
        job_file("benchmark", "claims")
    group:
        stage_group("claims")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("claims"),
        runtime=stage_runtime("claims"),
        cpus_per_task=stage_cpus("claims"),
    params:
        stage=stage_params("claims"),
    script:
        "../scripts/claims.py"


# a few lines of Markdown from the claims files: run where Snakemake runs, not as a cluster job
localrules:
    claims_summary,


# experiments in name order: reordering them in the config changes no input or param, so reruns nothing
rule claims_summary:
    input:
        expand(OUTPUTS["claims"], experiment=sorted(EXPERIMENTS)),
    output:
        report(
            result("claims_summary"),
            category="Claims",
            labels={"experiment": "all", "figure": "claims of every experiment"},
        ),
    log:
        f"{RESULTS}/logs/claims_summary.log",
    conda:
        SOFTWARE
    params:
        experiments=sorted(EXPERIMENTS),
    script:
        "../scripts/claims_summary.py"
