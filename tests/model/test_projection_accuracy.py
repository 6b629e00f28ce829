"""The distance to E ∩ S to a few roundings of the given coordinates, down to distances of 1e-12.

Reference: |x − Ep/|Ep||², p = Eᵀx, in exact decimal arithmetic on the given floats; 2 − 2|Px| computed here shows
that the inputs below defeat the expansion.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.model import projection

HYP = settings(max_examples=60, deadline=None)
U = 2.0**-53


def _decimal_distance(X, E):
    """sqrt(mean_i |x_i − Ep_i/|Ep_i||²) in 60-digit decimal arithmetic (X: (N, d), E: (d, k))."""
    with localcontext() as ctx:
        ctx.prec = 60
        Ed = [[Decimal(c) for c in row] for row in E]
        total = Decimal(0)
        for x in X:
            xd = [Decimal(c) for c in x]
            p = [sum(xd[a] * Ed[a][j] for a in range(len(xd))) for j in range(E.shape[1])]
            q = [sum(Ed[a][j] * p[j] for j in range(len(p))) for a in range(len(xd))]
            norm = sum(c * c for c in q).sqrt()
            total += sum((xa - qa / norm) ** 2 for xa, qa in zip(xd, q))
        return float((total / len(X)).sqrt())


def _expanded_distance(X, E):
    return float(np.sqrt(max(np.mean(2.0 - 2.0 * np.linalg.norm(X @ E, axis=-1)), 0.0)))


def _tokens_near(rng, E, spread, n):
    """n unit tokens at distance about `spread` from E ∩ S."""
    d, k = E.shape
    inside = E @ rng.standard_normal((k, n))
    inside /= np.linalg.norm(inside, axis=0)
    X = (inside + spread * rng.standard_normal((d, n))).T
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@HYP
@given(
    seed=st.integers(0, 2**32 - 1),
    d=st.integers(2, 5),
    k=st.integers(1, 4),
    log_spread=st.floats(-12.0, -1.0),
    rotated=st.booleans(),
)
def test_distance_to_eigenspace_to_a_few_roundings_at_any_spread(seed, d, k, log_spread, rotated):
    """A few roundings relative to the distance, and a few u absolute: the rounding of the coordinates themselves
    moves a token by about u (|x| = 1 only to rounding, which (1 − |Px|)² carries), and a rotated basis E is
    orthonormal only to its rounding, which moves E ∩ S by about u."""
    k = min(k, d - 1)
    rng = np.random.default_rng(seed)
    E = np.linalg.qr(rng.standard_normal((d, d)))[0][:, :k] if rotated else np.eye(d)[:, :k]
    X = _tokens_near(rng, E, 10.0**log_spread, 8)
    expected = _decimal_distance(X, E)
    got = projection.distance_to_eigenspace(X, E)
    assert abs(got - expected) <= 1e-13 * expected + (64 * U if rotated else 4 * U)


@pytest.mark.parametrize("spread", [1e-6, 1e-8, 1e-10, 1e-12])
def test_distance_to_eigenspace_where_the_expansion_fails(spread):
    rng = np.random.default_rng(6)
    E = np.eye(4)[:, :2]
    X = _tokens_near(rng, E, spread, 10)
    expected = _decimal_distance(X, E)
    assert abs(projection.distance_to_eigenspace(X, E) - expected) <= 1e-13 * expected + 4 * U
    old_error = abs(_expanded_distance(X, E) - expected) / expected  # a few percent at 1e-8, all of it below
    assert old_error > {1e-6: 1e-6, 1e-8: 0.03}.get(spread, 0.5)


def test_squared_distance_is_two_minus_twice_the_projection_for_unit_tokens():
    """|x − Px/|Px||² = 2 − 2|Px| on unit tokens far enough from E for the expansion to be accurate."""
    rng = np.random.default_rng(7)
    E = np.linalg.qr(rng.standard_normal((4, 4)))[0][:, :2]
    X = rng.standard_normal((3, 50, 4))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    sq = projection.squared_distance_to_great_sphere(X, E)
    np.testing.assert_allclose(sq, 2.0 - 2.0 * np.linalg.norm(X @ E, axis=-1), rtol=1e-12, atol=1e-15)
    assert projection.distance_to_eigenspace(X, E).shape == (3,)
