"""Which kernel computes the finite-temperature field: the names and the automatic rule.

Kept apart from ``lowtemp.kernels`` (which compiles numba code on import) so that the
config check, the resource estimates and the figures can apply the rule without
loading numba. ``lowtemp.experiment.field_kernel`` applies it to an experiment's
config; the kernels themselves are described in ``lowtemp.kernels`` and
docs/kernels.md.
"""

from __future__ import annotations

import numpy as np

#: the kernels of ``kernels.attention_field``
KERNELS = ("numpy", "dense", "cap")
#: relative mass the cap kernel may neglect
DEFAULT_TAIL = 1e-12
#: largest truncation constant of the cap kernel
_C_MAX = 64.0
#: the automatic rule picks ``cap`` only from this many tokens on …
CAP_MIN_TOKENS = 16384
#: … and only where a cap holds at most this fraction of a spread-out cloud
CAP_MAX_FRACTION = 0.03


def truncation_constant(n_tokens: int, tail: float = DEFAULT_TAIL) -> float:
    """c with (N − 1)·e^{−c} ≤ tail: scores more than c below the maximum are neglected."""
    c = float(np.log(max(n_tokens, 2)) + np.log(1.0 / tail))
    if c > _C_MAX:
        raise ValueError(f"cap kernel: tail = {tail:g} at N = {n_tokens} needs c = {c:.1f} > {_C_MAX:g}")
    return c


def expected_cap_fraction(beta: float, d: int, sigma_min: float, n_tokens: int,
                          tail: float = DEFAULT_TAIL) -> float:
    """Upper estimate of the fraction of a spread-out cloud inside one query's cap.

    The cap has chordal radius² ≈ 2c/(β|Bᵀx|) ≤ 2c/(β σmin(B)); its area fraction
    on S² is radius²/4, on S¹ the arc fraction is radius/π.
    """
    r2 = min(4.0, 2.0 * truncation_constant(n_tokens, tail) / (beta * sigma_min))
    return r2 / 4.0 if d == 3 else float(np.sqrt(r2) / np.pi)


def choose_kernel(beta: float, n_tokens: int, d: int, sigma_min: float | None) -> str:
    """The automatic rule: ``cap`` when N ≥ 16384 and a cap holds at most 3% of a
    spread-out cloud (measured: d = 3, β = 1000 gives 2% and a 3× gain over
    ``dense`` at N = 32768; d = 2, β = 1000 gives 9% and no gain; below 16384
    tokens a dense step is cheap and, once tokens cluster, a cap holds a whole
    cluster and the cap kernel loses its advantage); else ``dense`` (d = 2, 3);
    else ``numpy``.

    ``sigma_min`` None (σmin(B) not known yet) bounds no cap, so ``cap`` is never
    chosen: the answer is then the dearer of the two fast kernels.
    """
    if d not in (2, 3):
        return "numpy"
    if (sigma_min is not None and n_tokens >= CAP_MIN_TOKENS
            and expected_cap_fraction(beta, d, sigma_min, n_tokens) <= CAP_MAX_FRACTION):
        return "cap"
    return "dense"
