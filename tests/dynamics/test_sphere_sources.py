"""Triangles aggregated as sources (``sphere_sources``): the Chebyshev bound the acceptance rests on, against the
interpolant itself; the tree (a partition of the triangles, caps that hold them); the upward pass against direct
anterpolation; the pass against a fine exact pass on a crowded mesh, as accurate as the exact pass and with fewer
nodes, a loose tolerance failing; the solver with and without it; the refusals."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.dynamics import (
    sphere_aggregate,
    sphere_meanfield,
    sphere_mesh,
    sphere_softmax,
    sphere_sources,
    sphere_tree,
)
from lowtemp.dynamics.sphere_mesh import SUB_RULES

B = np.array([[0.92, -0.09, 0.22], [-0.14, 0.72, -0.20], [0.48, -0.29, 1.36]])
V = np.array([[0.65, -0.01, -0.16], [-0.01, 0.81, 0.06], [-0.16, 0.06, 1.14]])


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


CENTRE = unit([0.3, -0.5, 0.8])
CENTRES = (CENTRE, -CENTRE)


def contracted(points: np.ndarray, reach: float = 1.0, power: float = 4.0) -> np.ndarray:
    """The points moved toward the nearer of ±CENTRE along great circles, the angle θ < reach sent to
    reach·(θ/reach)^power: a monotone map of each cap onto itself, so the triangles keep their orientation and
    crowd into the two centres, as the flow crowds the mesh into its clusters."""
    out = points.copy()
    for c in CENTRES:
        cos = points @ c
        theta = np.arccos(np.clip(cos, -1.0, 1.0))
        near = (theta < reach) & (theta > 0)
        tangent = unit(points[near] - cos[near, None] * c)
        new = reach * (theta[near] / reach) ** power
        out[near] = np.cos(new)[:, None] * c + np.sin(new)[:, None] * tangent
    return out


def two_clusters(y, kappa: float = 40.0) -> np.ndarray:
    """log of an even vMF mixture of concentration ``kappa`` on ±CENTRE."""
    log_c = math.log(kappa) - math.log(2 * math.pi) - kappa - math.log(-math.expm1(-2 * kappa))
    parts = [math.log(0.5) + log_c + kappa * (np.asarray(y) @ c) for c in CENTRES]
    return np.logaddexp(*parts)


def crowded_mesh(level: int = 4) -> sphere_mesh.SphereMesh:
    points, triangles = sphere_mesh.icosphere(level)
    return sphere_mesh.mesh_on(contracted(points), triangles, two_clusters)


CROWDED = crowded_mesh()
QUERIES = unit(np.random.default_rng(5).standard_normal((400, 3)))


# ---------------------------------------------------------------------------------------------------------------
# the interpolation bound


def interpolant(a: float, h: float, n: int, s: np.ndarray) -> np.ndarray:
    """n-point Chebyshev interpolation of e^{a s} over |s| ≤ h, at s, by the module's Lagrange basis."""
    nodes = sphere_tree.chebyshev_points(n)
    values = np.exp(a * h * nodes)
    basis = np.empty(n)
    out = np.empty(s.size)
    for k, x in enumerate(s):
        sphere_tree.lagrange(x / h, nodes, basis)
        out[k] = basis @ values
    return out


@settings(max_examples=60, deadline=None)
@given(
    a=st.floats(-200.0, 200.0),
    h=st.floats(1e-4, 0.3),
    n=st.sampled_from([sphere_tree.TANGENT_POINTS, sphere_tree.NORMAL_POINTS]),
)
def test_chebyshev_bound_holds(a, h, n):
    """|e^{as} − I(s)| ≤ xⁿeˣ/(2ⁿ⁻¹n!) (x = |a|h) over the interval, relative to the value at its centre."""
    s = np.linspace(-h, h, 401)
    error = np.abs(np.exp(a * s) - interpolant(a, h, n, s)).max()
    bound, _ = sphere_tree.interpolation_error(abs(a) * h, n)
    assert error <= bound * (1 + 1e-9) + 1e-14 * math.exp(abs(a) * h)


def test_chebyshev_bound_is_tight_enough_to_fail_one_order_up():
    """The bound is not vacuous: claiming one more point's order (n + 1) is violated."""
    n, a, h = sphere_tree.TANGENT_POINTS, 10.0, 0.05
    s = np.linspace(-h, h, 2001)
    error = np.abs(np.exp(a * s) - interpolant(a, h, n, s)).max()
    assert error > sphere_tree.interpolation_error(a * h, n + 1)[0]
    assert error <= sphere_tree.interpolation_error(a * h, n)[0]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(0.05, 3.0))
def test_tensor_bound_holds(seed, scale):
    """The tensor interpolant of e^{⟨a, z⟩} over a box errs by at most ε (module docstring) times its value at the
    box's centre."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(3) * 20
    h = np.abs(rng.standard_normal(3)) * scale / np.abs(a)
    n = (sphere_tree.TANGENT_POINTS, sphere_tree.TANGENT_POINTS, sphere_tree.NORMAL_POINTS)
    z = rng.uniform(-1, 1, (200, 3)) * h
    approx = np.ones(200)
    for k in range(3):
        approx *= interpolant(a[k], h[k], n[k], z[:, k])
    error = np.abs(np.exp(z @ a) - approx).max()
    assert error <= sphere_tree.tensor_error(np.abs(a) * h) * (1 + 1e-9) + 1e-13 * math.exp(np.abs(a) @ h)


# ---------------------------------------------------------------------------------------------------------------
# the tree


def built(mesh=CROWDED, beta=10.0):
    return sphere_sources.sources(mesh, B, beta)


def test_tree_partitions_the_triangles_and_its_caps_hold_them():
    tree = built().tree
    m = CROWDED.triangles.shape[0]
    assert np.array_equal(np.sort(tree.order), np.arange(m))
    for i in range(tree.start.size):
        c0, c1 = tree.child[i]
        if c0 >= 0:
            assert (tree.start[c0], tree.stop[c0], tree.stop[c1]) == (tree.start[i], tree.start[c1], tree.stop[i])
        corners = CROWDED.points[CROWDED.triangles[tree.order[tree.start[i] : tree.stop[i]]]].reshape(-1, 3)
        assert np.all(corners @ tree.centre[i] >= tree.cos_r[i] - 1e-12)
        masses = CROWDED.log_mass[tree.order[tree.start[i] : tree.stop[i]]]
        assert tree.log_mass[i] == pytest.approx(np.logaddexp.reduce(masses), abs=1e-12)
    # the crowded clusters are aggregated: nodes of many triangles hold proxies
    counts = tree.stop - tree.start
    assert counts[tree.proxy >= 0].max() >= 200


def direct_weights(source: sphere_sources.Sources, node: int) -> np.ndarray:
    """Node ``node``'s proxy weights anterpolated from all its triangles' quadrature nodes at once."""
    tree = source.tree
    tables = sphere_softmax._triangle_tables(CROWDED, sphere_mesh.log_normalisers(CROWDED))
    rule = np.where(tree.rule > 0, tree.rule, 1)
    arrays = (tree.order, tree.start, tree.stop, tree.frame, tree.frame_origin, tree.frame_axes, tree.mid, tree.half,
              tree.log_mass)  # fmt: skip
    out = np.zeros((sphere_tree.PROXIES, 10))
    sphere_tree._anterpolate(node, node, arrays, CROWDED.arrays(), (*SUB_RULES, tables.log_c, rule), out)
    return out


def test_the_upward_pass_is_exact_and_a_moved_child_box_breaks_it():
    """A parent's weights taken through its children's proxies equal its direct anterpolation (the parent's basis
    is a polynomial of the children's degrees in the same frame); a child's box moved by a tenth of its width does
    not reproduce them."""
    source = built()
    tree = source.tree
    parents = [i for i in np.flatnonzero(tree.proxy >= 0) if (tree.proxy[tree.child[i]] >= 0).all()]
    assert len(parents) >= 2
    for i in parents:
        direct = direct_weights(source, i)
        stored = tree.weights[tree.proxy[i]]
        assert np.abs(stored - direct).max() <= 1e-10 * np.abs(direct).max()
    i = parents[0]
    moved = tree.mid.copy()
    for c in tree.child[i]:
        moved[c] += 0.1 * tree.half[c]
    out = np.zeros((sphere_tree.PROXIES, 10))
    for c in tree.child[i]:
        sphere_tree._translate(i, c, moved, tree.half, tree.log_mass, tree.weights[tree.proxy[c]], out)
    direct = direct_weights(source, i)
    assert np.abs(out - direct).max() > 1e-4 * np.abs(direct).max()


def frame_coordinates(tree, node: int, y: np.ndarray) -> np.ndarray:
    f = tree.frame[node]
    return (y - tree.frame_origin[f]) @ tree.frame_axes[f].T


def rule_nodes(mesh, tree, node: int):
    """(positions (k, 3), weights (k,)) of node ``node``'s quadrature nodes under its triangles' rules, its density
    included, relative to e^{log m_N}: what its proxies were anterpolated from, computed here independently."""
    log_c = sphere_mesh.log_normalisers(mesh)
    ys, ws = [], []
    for t in tree.order[tree.start[node] : tree.stop[node]]:
        n = int(tree.rule[t])
        y, w = sphere_mesh.triangle_nodes(mesh.points, mesh.triangles[t : t + 1], n)
        bary = sphere_mesh.SUB_BARY[n, : sphere_mesh.SUB_COUNT[n]]
        ell = bary @ mesh.log_density[mesh.triangles[t]]
        ys.append(y[0])
        ws.append(w[0] * np.exp(ell + log_c[t] - tree.log_mass[node]))
    return np.concatenate(ys), np.concatenate(ws)


def test_every_aggregated_rule_is_at_least_the_exact_passs():
    """For any unit query, the exact pass sub-divides a triangle into at most as many pieces (before loosening) as
    the tree's rule for it; a tree built for half the largest κ falls short somewhere."""
    source = built(beta=31.6)
    tables = source.tables
    tree = source.tree
    o = tree.order  # the source's tables are in tree order
    x = unit(np.random.default_rng(7).standard_normal((300, 3)))
    b = x @ B
    kappa = 31.6 * np.linalg.norm(b, axis=1)
    bhat = b / np.linalg.norm(b, axis=1, keepdims=True)

    def needed():
        c = np.clip(bhat @ tables.centre.T, -1, 1)
        theta = np.arccos(c)
        r = np.arccos(np.clip(tables.cos_r, -1, 1))
        hi = np.cos(np.maximum(theta - r, 0.0))
        lo = np.cos(np.minimum(theta + r, np.pi))
        spread = kappa[:, None] * (hi - lo) + tables.log_range
        return np.ceil(spread / sphere_softmax.DEFAULT_VARIATION).clip(1).max(axis=0)

    aggregable = tree.rule[o] > 0
    assert aggregable.sum() > 100
    assert np.all(needed()[aggregable] <= tree.rule[o][aggregable])
    half = sphere_tree.build_tree(CROWDED, source.tables, tree.kappa_max / 2, sphere_softmax.DEFAULT_VARIATION)
    assert np.any(needed()[aggregable] > half.rule[o][aggregable])


def test_boxes_hold_their_quadrature_nodes():
    """Every proxy node's box holds the quadrature nodes of its triangles' rules (the interpolation bound holds
    only inside it); boxes drawn around the one-piece nodes alone would miss some."""
    tree = built(beta=31.6).tree
    missed = 0
    for i in np.flatnonzero(tree.proxy >= 0):
        y, _ = rule_nodes(CROWDED, tree, i)
        z = frame_coordinates(tree, i, y)
        assert np.all(np.abs(z - tree.mid[i]) <= tree.half[i] * (1 + 1e-9) + 1e-15)
        one_piece = sphere_mesh.triangle_nodes(
            CROWDED.points, CROWDED.triangles[tree.order[tree.start[i] : tree.stop[i]]], 1
        )[0]
        zp = frame_coordinates(tree, i, one_piece.reshape(-1, 3))
        lo, hi = zp.min(axis=0), zp.max(axis=0)
        missed += np.any((z < lo - 1e-15) | (z > hi + 1e-15))
    assert missed > 0


def proxy_errors(beta: float, order_up: int = 0):
    """For every proxy node and 40 queries: |S₀ by the node's proxies − S₀ by its quadrature nodes| over the
    bound ε·K(mid)·m_N (both relative to e^{log m_N}); ``order_up`` points more per axis in the bound."""
    tree = built(beta=beta).tree
    x = unit(np.random.default_rng(11).standard_normal((40, 3)))
    b = x @ B
    kappa = beta * np.linalg.norm(b, axis=1)
    bhat = b / np.linalg.norm(b, axis=1, keepdims=True)
    n = (sphere_tree.TANGENT_POINTS, sphere_tree.TANGENT_POINTS, sphere_tree.NORMAL_POINTS)
    nodes1 = [sphere_tree.chebyshev_points(k) for k in n]
    ratios = []
    for i in np.flatnonzero(tree.proxy >= 0):
        f = tree.frame[i]
        y, w = rule_nodes(CROWDED, tree, i)
        mid = tree.frame_origin[f] + tree.mid[i] @ tree.frame_axes[f]
        proxies = np.stack(np.meshgrid(*[tree.mid[i, k] + tree.half[i, k] * nodes1[k] for k in range(3)],
                                       indexing="ij"), axis=-1).reshape(-1, 3)  # fmt: skip
        py = tree.frame_origin[f] + proxies @ tree.frame_axes[f]
        weights = tree.weights[tree.proxy[i]][:, 0]
        for q in range(x.shape[0]):
            log_k = kappa[q] * (bhat[q] @ mid - 1)
            direct = np.sum(w * np.exp(kappa[q] * (y @ bhat[q] - 1) - log_k))
            proxy = np.sum(weights * np.exp(kappa[q] * (py @ bhat[q] - 1) - log_k))
            xk = np.abs(kappa[q] * tree.frame_axes[f] @ bhat[q]) * tree.half[i]
            e = [sphere_tree.interpolation_error(xk[k], n[k] + order_up) for k in range(3)]
            (e1, m1), (e2, m2), (e3, m3) = e
            eps = e1 * m2 * m3 + (m1 + e1) * e2 * m3 + (m1 + e1) * (m2 + e2) * e3
            ratios.append(abs(proxy - direct) / (eps * w.sum()) if eps * w.sum() > 1e-13 else 0.0)
    return np.array(ratios)


@pytest.mark.parametrize("beta", [10.0, 100.0])
def test_every_node_meets_its_interpolation_bound(beta):
    """The error a node's proxies make in S₀, against its own quadrature nodes summed directly, is within the
    bound the pass accepts nodes by, for every proxy node and query; a bound one order too optimistic (one more
    point per axis) is broken by some."""
    assert proxy_errors(beta).max() <= 1.0 + 1e-6
    assert proxy_errors(beta, order_up=1).max() > 1.0


# ---------------------------------------------------------------------------------------------------------------
# the pass


def velocity_errors(beta, **kw):
    """Largest velocity and divergence errors of the exact pass and of the pass with sources against a fine
    exact pass (sub-division tolerance 1, a third of the default: the rule's error falls like its sixth power; depth
    40), and the two passes' softmaxes."""
    fine = sphere_softmax.softmax(CROWDED, B, beta, QUERIES, 1.0, 40.0)
    v_fine, d_fine = sphere_softmax.velocity_divergence(QUERIES, fine, B, V, beta)
    out = []
    for sm in (
        sphere_softmax.softmax(CROWDED, B, beta, QUERIES, depth=20.0),
        sphere_sources.tree_softmax(CROWDED, B, beta, QUERIES, depth=20.0, **kw),
    ):
        v, d = sphere_softmax.velocity_divergence(QUERIES, sm, B, V, beta)
        out.append((np.linalg.norm(v - v_fine, axis=1).max(), np.abs(d - d_fine).max(), sm))
    return out


@pytest.mark.parametrize("beta", [10.0, 31.6])
def test_sources_are_as_accurate_as_the_exact_pass_with_fewer_nodes(beta):
    """Against a fine exact pass the pass with sources errs no more than the exact pass at the same settings, to
    within 10⁻⁹ (velocity) and 10⁻⁸ (divergence) or a thousandth of the divergence's error where both err alike (at
    β = 31.6 both err 1.947·10⁻⁵ on the divergence, 1.5·10⁻¹¹ apart), with fewer nodes."""
    (v_exact, d_exact, exact), (v_tree, d_tree, tree) = velocity_errors(beta)
    assert v_tree <= max(v_exact, 1e-9), (v_tree, v_exact)
    assert d_tree <= max(1.001 * d_exact, 1e-8), (d_tree, d_exact)
    assert tree.nodes.sum() < exact.nodes.sum()


def test_a_loose_tolerance_breaks_the_velocity():
    """At β = 100 the pass with sources follows the exact pass to 10⁻⁸; with every node that holds proxies
    accepted whatever its bound (a tolerance of 10¹²) it moves the velocity a hundred times further: the bound is
    what keeps the pass accurate."""
    beta = 100.0
    exact = sphere_softmax.softmax(CROWDED, B, beta, QUERIES, depth=20.0)
    v_exact, _ = sphere_softmax.velocity_divergence(QUERIES, exact, B, V, beta)
    moved = []
    for tolerance in (sphere_sources.SOURCE_TOLERANCE, 1e12):
        sm = sphere_sources.tree_softmax(CROWDED, B, beta, QUERIES, depth=20.0, tolerance=tolerance)
        v, _ = sphere_softmax.velocity_divergence(QUERIES, sm, B, V, beta)
        moved.append(np.linalg.norm(v - v_exact, axis=1).max())
    assert moved[0] < 1e-8
    assert moved[1] > 100 * moved[0]


def test_bad_tolerance_is_refused():
    for bad in (0.0, float("inf"), float("nan"), -1e-3):
        with pytest.raises(ValueError, match="tolerance"):
            sphere_sources.tree_softmax(CROWDED, B, 10.0, QUERIES[:3], tolerance=bad)


def test_too_coarse_a_mesh_is_refused_as_by_the_exact_pass():
    """Level 1 at β = 10⁶: beyond the softmax's eight halvings, refused by both passes; at β = 1000 both integrate
    it (pieces) and agree."""
    coarse = sphere_mesh.mesh_from_density(1, two_clusters)
    with pytest.raises(sphere_mesh.MeshTooCoarse):
        sphere_softmax.softmax(coarse, B, 1e6, QUERIES[:3])
    with pytest.raises(sphere_mesh.MeshTooCoarse, match="refine the mesh"):
        sphere_sources.tree_softmax(coarse, B, 1e6, QUERIES[:3])
    exact = sphere_softmax.softmax(coarse, B, 1000.0, QUERIES[:3])
    tree = sphere_sources.tree_softmax(coarse, B, 1000.0, QUERIES[:3])
    assert np.allclose(tree.log_z, exact.log_z, rtol=0, atol=1e-9)
    assert np.allclose(tree.mean, exact.mean, rtol=0, atol=1e-9)


def test_the_solver_with_sources_follows_the_solver_without(monkeypatch):
    """Level 2 at β = 10 to t = 3 (the reference settings, with and without sources; the tree taken at every
    evaluation, whatever its tight share): tracers within 10⁻⁶, and not bit for bit the same."""
    monkeypatch.setattr(sphere_sources, "WORTHWHILE", 0.0)
    tracers = unit(np.random.default_rng(2).standard_normal((32, 3)))
    mesh0 = sphere_meanfield.initial_mesh("uniform", {}, 2)
    runs = []
    for sources in (True, False):
        st_ = dataclasses.replace(sphere_meanfield.reference_settings(2, None), sources=sources)
        runs.append(sphere_meanfield.solve(B, V, 10.0, [0.0, 1.5, 3.0], mesh0, tracers, st_).tracers)
    assert not np.array_equal(runs[0], runs[1])
    assert np.linalg.norm(runs[0] - runs[1], axis=-1).max() < 1e-6


def test_degenerate_meshes_give_the_exact_passs_answer():
    """Inputs an adversary found: two exactly antipodal triangles (their cap centres sum to zero); tiny triangles on
    a great circle seen at β = 10⁵ by queries in its plane (a factor of the bound beyond the floating-point range:
    refused, not NaN); 230 nested annuli (a tree deeper than a fixed stack)."""
    from lowtemp.dynamics.sphere_mesh import orientation

    a, b, c = unit([1.0, 0.1, 0.1]), unit([0.1, 1.0, 0.1]), unit([0.1, 0.1, 1.0])
    pair = sphere_mesh.mesh_on(
        np.array([a, b, c, -a, -b, -c]), np.array([[0, 1, 2], [3, 5, 4]]), lambda y: 0 * y[..., 0]
    )
    q = np.array([[0.0, 0, 1], [0.6, 0.8, 0]])
    cases = [(pair, 1.0, q)]
    pts, tri, d = [], [], 2e-5
    for j in range(64):
        th = -0.14 + 0.28 * j / 63
        p2 = unit([math.sin(th + d), d, math.cos(th + d)])
        pts += [[math.sin(th - d), 0.0, math.cos(th - d)], p2, p2 * np.array([1, -1, 1])]
        tri.append((3 * j, 3 * j + 1, 3 * j + 2))
    pts, tri = np.array(pts), np.array(tri)
    tri[orientation(pts, tri) < 0] = tri[orientation(pts, tri) < 0][:, [0, 2, 1]]
    line = sphere_mesh.mesh_on(pts, tri, lambda y: np.zeros(np.shape(y)[:-1]))
    cases.append((line, 1e5, np.array([[math.sin(t), 0.0, math.cos(t)] for t in (0.0, 0.05, 0.1, 0.13)])))
    rings, per = 230, 6
    pts = [[0.0, 0.0, 1.0]] + [
        [math.sin(2.0**-k) * math.cos(phi), math.sin(2.0**-k) * math.sin(phi), math.cos(2.0**-k)]
        for k in range(rings + 1)
        for phi in (2 * math.pi * j / per + (k % 2) * math.pi / per for j in range(per))
    ]
    pts = np.array(pts)

    def ring(k, j):
        return 1 + k * per + j % per

    tri = [t for k in range(rings) for j in range(per) for t in (
        ((ring(k, j), ring(k + 1, j), ring(k, j + 1)), (ring(k, j + 1), ring(k + 1, j), ring(k + 1, j + 1)))
        if k % 2 == 0 else
        ((ring(k, j), ring(k + 1, j + 1), ring(k, j + 1)), (ring(k, j), ring(k + 1, j), ring(k + 1, j + 1)))
    )] + [(ring(rings, j), 0, ring(rings, j + 1)) for j in range(per)]  # fmt: skip
    tri = np.array(tri)
    tri[orientation(pts, tri) < 0] = tri[orientation(pts, tri) < 0][:, [0, 2, 1]]
    nested = sphere_mesh.mesh_on(pts, tri, lambda y: 20.0 * np.asarray(y)[..., 2])
    assert sphere_sources.sources(nested, np.eye(3), 1.0).tree.depth > 256
    cases.append((nested, 1.0, np.array([[0.0, 0.0, 1.0], [0.0, 0.6, 0.8], [1.0, 0.0, 0.0]])))
    for mesh, beta, queries in cases:
        exact = sphere_softmax.softmax(mesh, np.eye(3), beta, queries)
        tree = sphere_sources.tree_softmax(mesh, np.eye(3), beta, queries)
        assert np.all(np.isfinite(tree.log_z)) and np.all(np.isfinite(tree.mean))
        assert np.allclose(tree.log_z, exact.log_z, rtol=0, atol=1e-9)
        assert np.allclose(tree.mean, exact.mean, rtol=0, atol=1e-9)


def test_queries_off_the_sphere_are_refused():
    """The triangles' rules hold for κ up to β·σ_max(B), that of unit queries."""
    with pytest.raises(ValueError, match="unit vectors"):
        sphere_sources.tree_softmax(CROWDED, B, 10.0, 10.0 * QUERIES[:3])


def test_the_solver_takes_the_tree_only_where_it_can_aggregate(monkeypatch):
    """The solver's exact pass (``sphere_aggregate.exact_softmax``) is the tree's where the tight share reaches
    ``WORTHWHILE`` and ``softmax`` itself, bit for bit, below it: a uniform icosphere has no tight node (share 0);
    the crowded mesh's share decides it on either side of the threshold."""

    def passes(mesh):
        log_c = sphere_mesh.log_normalisers(mesh)
        chosen = sphere_aggregate.exact_softmax(mesh, B, 10.0, 3.0, log_c, sources=True)(QUERIES, 20.0)
        exact = sphere_softmax.softmax(mesh, B, 10.0, QUERIES, 3.0, 20.0, log_c)
        return chosen, exact

    def took_the_tree(mesh) -> bool:
        chosen, exact = passes(mesh)
        return not (np.array_equal(chosen.mean, exact.mean) and np.array_equal(chosen.cov, exact.cov))

    uniform = sphere_meanfield.initial_mesh("uniform", {}, 3)
    assert sphere_sources.sources(uniform, B, 10.0).tree.tight_share == 0.0
    assert not took_the_tree(uniform)
    share = sphere_sources.sources(CROWDED, B, 10.0).tree.tight_share
    assert share > 0.0
    monkeypatch.setattr(sphere_sources, "WORTHWHILE", share / 2)
    assert took_the_tree(CROWDED)
    monkeypatch.setattr(sphere_sources, "WORTHWHILE", share * 2)
    assert not took_the_tree(CROWDED)
    monkeypatch.setattr(sphere_sources, "WORTHWHILE", 0.0)
    assert took_the_tree(uniform)


def test_tight_share_counts_each_triangle_once():
    """The tight share is the share of the triangles lying in any proxy node with κ_max·radius ≤ 1, computed here
    from the tree's nodes directly (nested nodes hold the same triangles: counting every tight node, not only the
    largest, would give more than this)."""
    for mesh, beta in ((CROWDED, 10.0), (CROWDED, 31.6), (crowded_mesh(3), 10.0)):
        tree = sphere_sources.sources(mesh, B, beta).tree
        radius = np.arccos(np.clip(tree.cos_r, -1.0, 1.0))
        covered = np.zeros(mesh.triangles.shape[0], dtype=bool)
        for i in np.flatnonzero((tree.proxy >= 0) & (tree.kappa_max * radius <= 1.0)):
            covered[tree.order[tree.start[i] : tree.stop[i]]] = True
        assert tree.tight_share == pytest.approx(covered.mean(), abs=1e-12)
        assert 0.0 <= tree.tight_share <= 1.0


def test_queries_along_the_leading_singular_direction_are_not_refused():
    """κ = β|Bᵀx| reaches β·σ_max(B) for x along B's leading left singular vector; rounded unit queries there may
    exceed it by an ulp, which the tree's κ_max allows for."""
    u = np.linalg.svd(B)[0][:, 0]
    noise = np.random.default_rng(4).standard_normal((2000, 3)) * 1e-9
    x = unit(np.concatenate([u[None], -u[None], u + noise]))
    sm = sphere_sources.tree_softmax(CROWDED, B, 10.0, x)
    assert np.all(np.isfinite(sm.log_z))
