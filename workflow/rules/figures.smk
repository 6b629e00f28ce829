# Step 7: figures from the NetCDF outputs (no physics recomputed), the convergence studies' included, and the
# animation of the tokens (S¹ and S² only).


rule figure:
    input:
        matrices=f"{RESULTS}/{{experiment}}/matrices.nc",
        distances=f"{RESULTS}/{{experiment}}/distances.nc",
        fit=f"{RESULTS}/{{experiment}}/fit.nc",
        zero=f"{RESULTS}/{{experiment}}/zero_temperature.nc",
        finite=finite_temperature_files,
    output:
        pdf=f"{RESULTS}/{{experiment}}/figures/{{figure}}.pdf",
        png=report(
            f"{RESULTS}/{{experiment}}/figures/{{figure}}.png",
            caption="../report/figure.rst",
            category="{experiment}",
            subcategory="figures",
            labels=figure_labels,
        ),
    log:
        f"{RESULTS}/{{experiment}}/logs/figure_{{figure}}.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/figure_{{figure}}.tsv"
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
        convergence=f"{RESULTS}/{{experiment}}/convergence.nc",
    output:
        pdf=f"{RESULTS}/{{experiment}}/figures/convergence.pdf",
        png=report(
            f"{RESULTS}/{{experiment}}/figures/convergence.png",
            caption="../report/convergence.rst",
            category="{experiment}",
            subcategory="convergence",
            labels=convergence_labels,
        ),
    log:
        f"{RESULTS}/{{experiment}}/logs/figure_convergence.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/figure_convergence.tsv"
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
        zero=f"{RESULTS}/{{experiment}}/zero_temperature.nc",
        finite=finite_temperature_files,
    output:
        gif=report(
            f"{RESULTS}/{{experiment}}/figures/tokens.gif",
            caption="../report/animation.rst",
            category="{experiment}",
            subcategory="animation",
            labels=animation_labels,
        ),
    log:
        f"{RESULTS}/{{experiment}}/logs/animation.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/animation.tsv"
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
