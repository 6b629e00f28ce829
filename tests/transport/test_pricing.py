"""The pricing kernel (``pricing._price_all_pairs``) against a naive computation of every pair in NumPy.

The kernel sums the squares dimension by dimension over whole rows of Y (so that its loops vectorise) and
takes the row minima with four running minima; the reference computes each pair on its own, with the same
IEEE operations in the same order (fl(fl(t_0²) + fl(t_1²)) + …, then fl(ĉ − v_j)), so every output must be
equal to the last bit: the minima, the rigorous lower bounds (with the subnormal term where a square may
have underflowed), the counts and the kept pairs with their order (most negative first, ties in the order
the row scans its columns, from column i on)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.transport import pricing


def _reference(X, Y, perm, v, tol, base, per_row):
    n, d = X.shape
    g, e, uf = pricing._rounding_constants(d)
    T = X[:, None, :] - Y[None, :, :]  # (i, j, a): one rounding per difference, as in the kernel
    s = T[:, :, 0] * T[:, :, 0]
    for a in range(1, d):
        s = s + T[:, :, a] * T[:, :, a]
    r = s - v[None, :]
    bound = g * s + e * np.abs(r)
    underflow = (s < pricing._TINY) & np.any(T != 0.0, axis=2)
    bound = np.where(underflow, bound + uf, bound)
    rows = np.arange(n)
    assigned = r[rows, perm]
    ref = assigned if base is None else base
    cut = ref - tol
    keep = []
    for i in range(n):
        cols = np.flatnonzero(r[i] < cut[i])
        order = np.lexsort(((cols - i) % n, r[i, cols] - ref[i]))  # most negative, then scan order from i
        keep += [(i, int(j)) for j in cols[order][:per_row]]
    return dict(
        rowmin=r.min(axis=1),
        rowmin_lo=(r - bound).min(axis=1),
        assigned=assigned,
        assigned_hi=assigned + bound[rows, perm],
        counts=np.sum(r < cut[:, None], axis=1),
        pairs=np.array(keep, dtype=np.int64).reshape(-1, 2),
    )


def _clouds(seed, n, d, kind):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    if kind == "random":
        return X, rng.standard_normal((n, d))
    if kind == "permuted copy":  # W2 = 0: exact zeros on one pair per row
        return X, X[rng.permutation(n)]
    if kind == "duplicates":  # many exact ties in every row
        P = rng.standard_normal((max(1, n // 4), d))
        return P[rng.integers(0, len(P), n)], P[rng.integers(0, len(P), n)]
    if kind == "subnormal squares":  # differences near 1e-170: their squares underflow (the uf term)
        base = rng.standard_normal(d) * 1e-160
        return base + rng.integers(-3, 4, (n, d)) * 1e-170, base + rng.integers(-3, 4, (n, d)) * 1e-170
    raise ValueError(kind)


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 150),  # past PRICE_ROWS_PER_TASK = 64: rows in several tasks
    d=st.integers(1, 5),
    kind=st.sampled_from(["random", "permuted copy", "duplicates", "subnormal squares"]),
    potentials=st.sampled_from(["zero", "random", "large"]),
    with_base=st.booleans(),
    tol=st.sampled_from([0.0, 1e-12, 0.5]),
    per_row=st.integers(1, 9),
)
def test_the_kernel_equals_the_naive_pairs_to_the_last_bit(seed, n, d, kind, potentials, with_base, tol, per_row):
    X, Y = _clouds(seed, n, d, kind)
    rng = np.random.default_rng(seed + 1)
    scale = float(np.max(np.abs(X - Y[rng.permutation(n)]))) ** 2 if kind == "subnormal squares" else 1.0
    v = {"zero": np.zeros(n), "random": rng.standard_normal(n) * scale, "large": rng.standard_normal(n) * 1e6}[
        potentials
    ]
    perm = rng.permutation(n)
    base = rng.standard_normal(n) * scale if with_base else None
    got = pricing._price_all_pairs(X, Y, perm, v, tol * scale, base=base, per_row=per_row)
    want = _reference(X, Y, perm, v, tol * scale, base, per_row)
    for key, value in want.items():
        assert np.array_equal(getattr(got, key), value), key


def test_the_reference_sees_what_a_broken_kernel_gets_wrong(monkeypatch):
    """The comparison above can fail: the kernel without its subnormal term (a bound that misses a square lost
    to underflow) differs from the reference."""
    X, Y = _clouds(3, 40, 3, "subnormal squares")
    perm, v = np.arange(40), np.zeros(40)
    want = _reference(X, Y, perm, v, 0.0, None, 4)
    assert np.any(np.abs(X - Y) > 0) and np.any(np.sum((X - Y) ** 2, axis=1) < pricing._TINY)
    g, e, _ = pricing._rounding_constants(3)
    monkeypatch.setattr(pricing, "_rounding_constants", lambda d: (g, e, 0.0))
    blind = pricing._price_all_pairs(X, Y, perm, v, 0.0, per_row=4)
    assert not np.array_equal(blind.rowmin_lo, want["rowmin_lo"])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9])
def test_row_minima_cover_every_column(n):
    """The four running minima and the tail: the smallest entry is found wherever it sits."""
    for where in range(n):
        red = np.arange(1.0, n + 1.0)
        red[where] = -1.0
        low = red.copy()
        low[where] = -2.0
        assert pricing._row_minima(red, low) == (-1.0, -2.0)
