"""Layer 8, the stages: one module per rule file of ``workflow/rules/``, one ``stage_<rule>`` function per
rule, each reading its inputs, calling the layers above and writing one output file (and ``joblog``: one
log file per job). The Snakemake scripts of ``workflow/scripts/`` are one-call adapters onto these.

Imports: model, dynamics, transport, store, analysis, config, plotting.
"""
