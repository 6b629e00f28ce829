"""Size constants of the exact W2 solver, importable without numba or POT (the resource model reads them
before any job; ``lowtemp.transport.assignment`` uses them)."""

#: the fallback builds the dense N×N matrix (ot.emd) up to this many tokens (2.6 GB peak at 8192),
#: else ot.emd2_lazy (costs computed on the fly, O(N) memory)
DENSE_MAX = 8192
#: clouds of at most this many tokens are solved with every pair a candidate (the recursion's floor)
DENSE_BASE = 256
