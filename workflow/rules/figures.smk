# Step 7 (SPEC §2.7): figures from the NetCDF outputs (no physics recomputed).


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
        ),
    params:
        stage=stage_params,
    log:
        f"{RESULTS}/{{experiment}}/logs/figure_{{figure}}.log",
    benchmark:
        f"{RESULTS}/{{experiment}}/benchmarks/figure_{{figure}}.tsv"
    script:
        "../scripts/figure.py"
