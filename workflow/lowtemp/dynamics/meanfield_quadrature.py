"""The quadrature of the one-dimensional mean-field reference (``meanfield``): scaled Bessel functions and the
Gauss–Legendre rules the softmax integrals (``meanfield_softmax``) pick their order from.

Rules. The n-point rule integrates e^{cu} on [−1, 1] with relative error about E_n c^{2n},
E_n = 2^{2n+1}(n!)^4 / ((2n+1)((2n)!)^3). A sub-interval of half-variation c uses the smallest n in
``RULE.orders`` with E_n c^{2n} ≤ 1e-4·QUADRATURE_RTOL (``_pick_order``); ``RULE`` is one ``Rule``, the table the
numba kernels take as one argument.

Bessel functions. e^{−x} I_0(x) and e^{−x} I_1(x), x ≥ 0 (the azimuthal integrals on S²), summed as power
series below ``_BESSEL_SWITCH`` and asymptotically above (``scaled_bessel``; the kernels call
``_scaled_bessel01``). Derivation and accuracy: docs/mean_field.md.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

#: relative accuracy of every cell's softmax integral (Gauss–Legendre, order chosen per cell)
QUADRATURE_RTOL = 1e-12
#: a cell is split into sub-intervals on which its log-integrand varies by at most 2·SUB_HALF_VARIATION: 4 is
#: what the 12-point rule integrates to QUADRATURE_RTOL (``RULE.limits[-1]`` = 4.03), so no sub-interval is cut
#: finer than its accuracy needs (with 1, the solves took 1.9x as long for the same numbers to 2.4e-12)
SUB_HALF_VARIATION = 4.0
#: below this argument the scaled Bessel functions are summed as power series, above it asymptotically
_BESSEL_SWITCH = 20.0

#: the Gauss–Legendre orders, one row of the rule table each
_ORDERS = np.array([2, 4, 6, 8, 12])

#: the Gauss–Legendre rules as the numba kernels take them: ``orders`` (rows,) the number of points of each row,
#: ``limits`` (rows,) the largest half-variation c each row integrates to its target, ``nodes`` and ``weights``
#: (rows, max order) on [−1, 1], padded with zeros
Rule = namedtuple("Rule", "orders limits nodes weights")


def _legendre_error_constant(n: int) -> float:
    return 2.0 ** (2 * n + 1) * math.factorial(n) ** 4 / ((2 * n + 1) * math.factorial(2 * n) ** 3)


def _order_limits(rtol: float) -> np.ndarray:
    """Largest half-variation c each order in _ORDERS meets ``rtol`` at."""
    return np.array([(rtol / _legendre_error_constant(int(n))) ** (1.0 / (2 * n)) for n in _ORDERS])


def _rule_table() -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of every order, padded to (orders, max order)."""
    width = int(_ORDERS.max())
    nodes = np.zeros((_ORDERS.size, width))
    weights = np.zeros((_ORDERS.size, width))
    for row, n in enumerate(_ORDERS):
        x, w = np.polynomial.legendre.leggauss(int(n))
        nodes[row, :n], weights[row, :n] = x, w
    return nodes, weights


_NODES, _WEIGHTS = _rule_table()
# the error constant is that of e^{cu} alone; the integrands also carry cos, sin and (on S²) Bessel and
# sine factors, so every order is chosen for 1e-4 of the target (measured: errors ≤ 1e-13 relative, tests)
_LIMITS = _order_limits(QUADRATURE_RTOL * 1e-4)
if _LIMITS[-1] < SUB_HALF_VARIATION:  # the largest order must cover a whole sub-interval
    raise RuntimeError("meanfield: the largest Gauss–Legendre order cannot reach QUADRATURE_RTOL")
#: the rules of every cell's softmax integral (``meanfield_softmax``)
RULE = Rule(_ORDERS.astype(np.int64), _LIMITS, _NODES, _WEIGHTS)


@njit(cache=True, inline="always")
def _pick_order(c, limits):
    for row in range(limits.size):
        if c <= limits[row]:
            return row
    return limits.size - 1


# ---------------------------------------------------------------------------------------------
# Scaled modified Bessel functions e^{−x} I_0(x), e^{−x} I_1(x), x ≥ 0.


@njit(cache=True)
def _scaled_bessel01(x):
    if x < _BESSEL_SWITCH:
        # power series, all terms positive: I_0 = Σ q^k/(k!)², I_1 = (x/2) Σ q^k/(k!(k+1)!), q = x²/4
        q = 0.25 * x * x
        t0 = 1.0
        t1 = 1.0
        s0 = 1.0
        s1 = 1.0
        k = 1
        while True:
            t0 *= q / (k * k)
            t1 *= q / (k * (k + 1))
            s0 += t0
            s1 += t1
            if t0 <= 1e-17 * s0 and t1 <= 1e-17 * s1:
                break
            k += 1
        e = math.exp(-x)
        return s0 * e, 0.5 * x * s1 * e
    # asymptotic series e^{−x} I_ν(x) ~ (2πx)^{−1/2} Σ_k (−1)^k a_k(ν) x^{−k},
    # a_k(ν) = Π_{j≤k} (4ν² − (2j−1)²)/(8j); at x ≥ 20 its smallest term is below 1e-16
    pre = 1.0 / math.sqrt(2.0 * np.pi * x)
    s0 = 1.0
    s1 = 1.0
    t0 = 1.0
    t1 = 1.0
    for j in range(1, 60):
        odd = (2 * j - 1) * (2 * j - 1)
        n0 = -t0 * (0.0 - odd) / (8.0 * j * x)
        n1 = -t1 * (4.0 - odd) / (8.0 * j * x)
        if abs(n0) >= abs(t0) or abs(n1) >= abs(t1) and j > 1:
            break
        t0 = n0
        t1 = n1
        s0 += t0
        s1 += t1
        if abs(t0) <= 1e-17 * s0 and abs(t1) <= 1e-17 * abs(s1):
            break
    return pre * s0, pre * s1


@njit(cache=True)
def _scaled_bessel_array(x, out0, out1):
    for i in range(x.size):
        out0[i], out1[i] = _scaled_bessel01(x[i])


def scaled_bessel(x) -> tuple[np.ndarray, np.ndarray]:
    """(e^{−x} I_0(x), e^{−x} I_1(x)) for x ≥ 0, to about 1e-15 relative."""
    x = np.asarray(x, dtype=float)
    if np.any(~(x >= 0)):
        raise ValueError("scaled_bessel: arguments must be finite and ≥ 0")
    flat = np.ascontiguousarray(x.ravel())
    out0, out1 = np.empty_like(flat), np.empty_like(flat)
    _scaled_bessel_array(flat, out0, out1)
    return out0.reshape(x.shape), out1.reshape(x.shape)
