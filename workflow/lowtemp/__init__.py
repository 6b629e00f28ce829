"""Low-temperature mean-field transformer dynamics on the sphere.

Tokens x_i on S^{d-1} move under single-head softmax self-attention
(Eq. 2 of the paper for the particle system, Eq. 3 for its zero-temperature limit;
README.md names the paper).
Arrays of tokens always have the layout (replica, token, dim).

The package never imports snakemake: every function takes arrays and plain
parameters, so scripts, tests and notebooks share one implementation.

``lowtemp.__version__`` is read from git when first asked for (``lowtemp.store.version``: the
release tag, the commits since, whether the tree is dirty; ``unknown`` outside a checkout).
"""

import importlib


def __getattr__(name: str):
    """``lowtemp.__version__``: the version from git (``lowtemp.store.version``), read on first use."""
    if name == "__version__":
        return importlib.import_module("lowtemp.store.version").code_version().version
    raise AttributeError(f"module 'lowtemp' has no attribute {name!r}")
