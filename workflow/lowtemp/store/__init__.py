"""Layer 4, the store: NetCDF reading and writing with provenance, the layout of every output file,
checkpoints, the comparison of two runs, and the harness of the scripts in benchmarks/, studies/ and reports/
(timing, a generated page's stamp).

Imports: model, dynamics.
"""
