"""Crowded queries expanded about their group's centre (``sphere_aggregate``): the derivative of the softmax mean
against central differences, the expanded field against the exact one inside a tight cluster, and the check that
sends a group to the exact pass where the softmax is broad (with the check off, the expansion is visibly wrong)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.dynamics import sphere_aggregate, sphere_mesh, sphere_softmax

B = np.array([[0.92, -0.09, 0.22], [-0.14, 0.72, -0.20], [0.48, -0.29, 1.36]])
V = np.array([[0.65, -0.01, -0.16], [-0.01, 0.81, 0.06], [-0.16, 0.06, 1.14]])


def unit(v) -> np.ndarray:
    v = np.asarray(v, float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def vmf_mixture(y, means, kappa):
    """log density of an equal mixture of von Mises–Fisher components of concentration kappa (per steradian)."""
    logs = [kappa * (y @ unit(m)) + np.log(kappa / (2 * np.pi * (1 - np.exp(-2 * kappa)))) - kappa for m in means]
    return np.logaddexp.reduce(logs, axis=0) - np.log(len(means))


CENTRE = unit([0.31, 0.52, 0.79])
#: two clusters of width 0.05 rad, one around CENTRE
CLUSTERED = sphere_mesh.mesh_from_density(4, lambda y: vmf_mixture(y, [CENTRE, -CENTRE + [0, 0.3, 0]], 400.0))
#: a smooth density: every query's softmax spreads over the sphere
SMOOTH = sphere_mesh.mesh_from_density(3, lambda y: vmf_mixture(y, [CENTRE, [1, -0.2, 0.1]], 2.0))


#: a grid cell that holds every cloud below whole (CENTRE's coordinates lie in (0.3, 0.9)): one group
ONE_CELL = 1.0


def cloud(radius: float, n: int = 40, seed: int = 0) -> np.ndarray:
    """n queries within about ``radius`` of CENTRE."""
    offsets = np.random.default_rng(seed).uniform(-radius, radius, (n, 3))
    return unit(CENTRE + offsets)


def exact_field(mesh, beta, x):
    return sphere_softmax.velocity_divergence(x, sphere_softmax.softmax(mesh, B, beta, x), B, V, beta)


def test_the_mean_moves_with_the_query_as_beta_c_b_transposed():
    """∂m/∂x = βCBᵀ, the expansion's first term, against central differences of the exact softmax."""
    beta, h = 10.0, 1e-5
    x = cloud(0.002)[:1]
    sm = sphere_softmax.softmax(CLUSTERED, B, beta, x)
    for k in range(3):
        step = np.zeros(3)
        step[k] = h
        plus = sphere_softmax.softmax(CLUSTERED, B, beta, x + step).mean
        minus = sphere_softmax.softmax(CLUSTERED, B, beta, x - step).mean
        np.testing.assert_allclose((plus - minus)[0] / (2 * h), beta * sm.cov[0] @ B.T[:, k], rtol=1e-5)


@pytest.mark.parametrize("beta", [10.0, 100.0])
def test_inside_a_tight_cluster_the_expansion_matches_the_exact_field(beta):
    """Queries within 5e-4 rad of each other in a cluster of width 0.05: one group, expanded, every member within
    the check's tolerances of the exact field."""
    x = cloud(0.0005)
    v, div, counts = sphere_aggregate.aggregated_field(CLUSTERED, B, V, beta, x, 3.0, 40.0, cell=ONE_CELL)
    assert counts["groups"] == 1 and counts["refused"] == 0 and counts["expanded"] == x.shape[0] - 1
    v_exact, div_exact = exact_field(CLUSTERED, beta, x)
    # each member's miss stays at the check point's tolerance (the check point is where the expansion is worst)
    assert np.linalg.norm(v - v_exact, axis=1).max() <= sphere_aggregate.VELOCITY_TOLERANCE
    assert np.abs(div - div_exact).max() <= sphere_aggregate.DIVERGENCE_TOLERANCE


def test_a_broad_softmax_sends_the_group_to_the_exact_pass(monkeypatch):
    """With a smooth density a group 0.01 rad wide misses the exact field by far more than the tolerances: its check
    refuses it and every value is the exact one, bit for bit. With the check disabled the expansion is used and
    is wrong by more than 1e-6: the check is what protects the field."""
    x = cloud(0.01)
    v, div, counts = sphere_aggregate.aggregated_field(SMOOTH, B, V, 10.0, x, 3.0, 40.0, cell=ONE_CELL)
    assert counts == {"groups": 1, "expanded": 0, "refused": 1, "exact": x.shape[0] + 4}
    v_exact, div_exact = exact_field(SMOOTH, 10.0, x)
    assert np.array_equal(v, v_exact) and np.array_equal(div, div_exact)
    monkeypatch.setattr(sphere_aggregate, "VELOCITY_TOLERANCE", np.inf)
    monkeypatch.setattr(sphere_aggregate, "DIVERGENCE_TOLERANCE", np.inf)
    v, div, counts = sphere_aggregate.aggregated_field(SMOOTH, B, V, 10.0, x, 3.0, 40.0, cell=ONE_CELL)
    assert counts["expanded"] == x.shape[0] - 1
    assert max(np.linalg.norm(v - v_exact, axis=1).max(), np.abs(div - div_exact).max()) > 1e-6


def test_queries_alone_are_evaluated_exactly():
    """Queries too sparse to form groups (fewer than MIN_GROUP per cell): the exact field, bit for bit."""
    x = unit(np.random.default_rng(4).standard_normal((30, 3)))
    v, div, counts = sphere_aggregate.aggregated_field(SMOOTH, B, V, 10.0, x, 3.0, 40.0)
    assert counts["groups"] == 0
    v_exact, div_exact = exact_field(SMOOTH, 10.0, x)
    assert np.array_equal(v, v_exact) and np.array_equal(div, div_exact)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 300), spread=st.floats(1e-3, 1.0), cell=st.floats(0.005, 0.2))
def test_query_cells_group_only_full_cells(seed, n, spread, cell):
    """Every group lies in one grid cell and has at least MIN_GROUP members; a query left alone is in a cell with
    fewer than MIN_GROUP queries."""
    rng = np.random.default_rng(seed)
    x = unit(unit(rng.standard_normal(3)) + spread * rng.standard_normal((n, 3)))
    group, n_groups = sphere_aggregate.query_cells(x, cell)
    keys = [tuple(k) for k in np.floor(x / cell).astype(np.int64)]
    per_cell = {k: keys.count(k) for k in set(keys)}
    for g in range(n_groups):
        members = np.flatnonzero(group == g)
        assert members.size >= sphere_aggregate.MIN_GROUP
        assert len({keys[i] for i in members}) == 1 and per_cell[keys[members[0]]] == members.size
    for i in np.flatnonzero(group < 0):
        assert per_cell[keys[i]] < sphere_aggregate.MIN_GROUP
