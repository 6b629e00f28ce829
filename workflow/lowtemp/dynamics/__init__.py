"""Layer 2, the dynamics: the velocity fields of Eq. 2 and Eq. 3 (numpy reference, numba kernels, the
optional torch field), the rule that picks a kernel, the integrators, and the one-dimensional mean-field
reference (``meanfield``: the solver and its solution; ``meanfield_cells``, ``meanfield_softmax`` and
``meanfield_quadrature``: its cells and densities, its softmax integrals, its quadrature rules).

Imports: model.
"""
