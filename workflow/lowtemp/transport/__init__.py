"""Layer 3, transport: exact W2 between point clouds (an exact assignment solver with a certificate, the
sparse network simplex it uses) and the closed forms against projections. ``limits`` holds the solver's size
constants without loading numba.

Imports: model.
"""
