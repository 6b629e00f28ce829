"""Layer 4, the store: NetCDF reading and writing with provenance, the layout of every output file,
checkpoints, and the comparison of two runs.

Imports: model, dynamics.
"""
