"""Layer 6, the config: what an experiment decides (time grid, kernel, matrices), the stages' config
slices, the convergence studies' settings, the resource model and the validation of a whole config. The
Snakefile imports only this layer, so it loads no numba, POT or matplotlib (a test checks it).

Imports: model, dynamics, transport, analysis.
"""
