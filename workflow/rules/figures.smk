# Step 7: figures from the NetCDF outputs (no physics recomputed), the convergence studies' included, and the
# animation of the tokens (S¹ and S² only).


rule figure:
    input:
        unpack(figure_particle_runs),
        matrices=OUTPUTS["matrices"],
        distances=OUTPUTS["distances"],
        fit=OUTPUTS["fit"],
        zero=OUTPUTS["zero_temperature"],
        finite=finite_temperature_files,
    output:
        pdf=result("figure", ext="pdf"),
        png=report(
            result("figure", ext="png"),
            caption="../report/figure.rst",
            category="{experiment}",
            subcategory="figures",
            labels=figure_labels,
        ),
    log:
        job_file("log", "figure_{figure}"),
    benchmark:
        job_file("benchmark", "figure_{figure}")
    group:
        stage_group("figure")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("figure"),
        runtime=stage_runtime("figure"),
        cpus_per_task=stage_cpus("figure"),
    params:
        stage=stage_params("figure"),
    script:
        "../scripts/figure.py"


rule convergence_figure:
    input:
        convergence=OUTPUTS["convergence"],
    output:
        pdf=result("figure", figure="convergence", ext="pdf"),
        png=report(
            result("figure", figure="convergence", ext="png"),
            caption="../report/convergence.rst",
            category="{experiment}",
            subcategory="convergence",
            labels=convergence_labels,
        ),
    log:
        job_file("log", "figure_convergence"),
    benchmark:
        job_file("benchmark", "figure_convergence")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("convergence_figure"),
        runtime=stage_runtime("convergence_figure"),
        cpus_per_task=stage_cpus("convergence_figure"),
    params:
        stage=stage_params("convergence_figure"),
    script:
        "../scripts/convergence_figure.py"


rule animation:
    input:
        zero=OUTPUTS["zero_temperature"],
        finite=finite_temperature_files,
    output:
        gif=report(
            result("figure", figure="tokens", ext="gif"),
            caption="../report/animation.rst",
            category="{experiment}",
            subcategory="animation",
            labels=animation_labels,
        ),
    log:
        job_file("log", "animation"),
    benchmark:
        job_file("benchmark", "animation")
    conda:
        SOFTWARE
    resources:
        mem_mb=stage_mem_mb("animation"),
        runtime=stage_runtime("animation"),
        cpus_per_task=stage_cpus("animation"),
    params:
        stage=stage_params("animation"),
    script:
        "../scripts/animation.py"
