"""Layer 6, the config: what an experiment decides (time grid, kernel, matrices), the stages' config
slices, the convergence studies' settings, the resource model and the validation of a whole config. The
Snakefile imports only this layer, so it loads no numba, POT or matplotlib (a test checks it). Reading the
workflow needs four of its modules, which import nothing outside the standard library, PyYAML and jsonschema:
``plan`` (what a config asks for), ``schema`` (the structural config check), ``registry`` and ``params``; so the
workflow can be linted where only Snakemake is installed (tests/workflow/test_catalog_lint.py).

Imports: model, dynamics, transport, analysis.
"""
