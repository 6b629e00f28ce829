"""Layer 1, the model: the attention matrices and what the paper derives from them (A, E1, the rates),
the initial measures, the random streams, projections onto eigenspaces and the exact zero-temperature
solution.

Imports: nothing else from the package.
"""
