"""Low-temperature mean-field transformer dynamics on the sphere.

Tokens x_i on S^{d-1} move under single-head softmax self-attention
(Eq. 2 of the paper for the particle system, Eq. 3 for its zero-temperature limit;
README.md names the paper).
Arrays of tokens always have the layout (replica, token, dim).

The package never imports snakemake: every function takes arrays and plain
parameters, so scripts, tests and notebooks share one implementation.
"""

__version__ = "0.1.0"
