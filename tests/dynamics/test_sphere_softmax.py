"""The S² softmax over a log-density mesh against closed forms: von Mises–Fisher mixtures (log Z, mean and
covariance at β = 10 … 10⁴, tails 50 e-folds deep), its convergence order in the mesh width, the surface divergence
against central differences of the velocity, and the refusals (a mesh too coarse for β, bad settings)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lowtemp.dynamics import sphere_levels, sphere_mesh, sphere_pieces, sphere_softmax, sphere_sources

# a generic B (the `concentration` experiment's, rounded): |Bᵀx| varies by a factor ~2 over the sphere
B = np.array([[0.92, -0.09, 0.22], [-0.14, 0.72, -0.20], [0.48, -0.29, 1.36]])
V = np.array([[0.65, -0.01, -0.16], [-0.01, 0.81, 0.06], [-0.16, 0.06, 1.14]])


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# ---------------------------------------------------------------------------------------------------------------
# closed forms of a vMF mixture on S²: density C(κ) e^{κ⟨μ,y⟩}, C(κ) = κ/(4π sinh κ). Tilting a component by
# e^{κq⟨b̂,y⟩} gives the vMF of η = κμ + κq b̂, with mass C(κ)/C(|η|), mean A(|η|) η̂ (A(s) = coth s − 1/s) and
# second moment (A/s) I + (1 − 3A/s) η̂η̂ᵀ.


def log_vmf_constant(s: float) -> float:
    if s < 1e-8:
        return -math.log(4 * math.pi)
    return math.log(s) - math.log(2 * math.pi) - s - math.log(-math.expm1(-2 * s))


def langevin(s: float) -> float:
    return s / 3 - s**3 / 45 if s < 1e-3 else 1 / math.tanh(s) - 1 / s


def vmf_log_density(y, weights, means, kappas):
    parts = [
        math.log(w) + log_vmf_constant(k) + k * (np.asarray(y) @ unit(mu)) for w, mu, k in zip(weights, means, kappas)
    ]
    return np.logaddexp.reduce(np.stack(parts), axis=0)


def vmf_softmax(bhat, kappa_q, weights, means, kappas):
    """log Z, mean and covariance of e^{κq⟨b̂,y⟩} ρ(dy)/Z for the mixture ρ, in closed form."""
    logs, firsts, seconds = [], [], []
    for w, mu, k in zip(weights, means, kappas):
        eta = k * unit(mu) + kappa_q * bhat
        s = float(np.linalg.norm(eta))
        e, a = eta / s, langevin(s)
        logs.append(math.log(w) + log_vmf_constant(k) - log_vmf_constant(s))
        firsts.append(a * e)
        seconds.append((a / s) * np.eye(3) + (1 - 3 * a / s) * np.outer(e, e))
    logs = np.array(logs)
    log_z = float(np.logaddexp.reduce(logs))
    p = np.exp(logs - log_z)
    mean = sum(pi * m for pi, m in zip(p, firsts))
    second = sum(pi * s for pi, s in zip(p, seconds))
    return log_z, mean, second - np.outer(mean, mean)


QUERIES = unit(np.random.default_rng(3).standard_normal((6, 3)))
BHAT = unit(QUERIES @ B)
SMOOTH = ([0.6, 0.4], [[1, 0.2, 0.1], [-0.3, 1, 0.5]], [2.0, 5.0])
# one component of κ = 25 centred at −b̂ of the first query: its Laplace point lies 50 e-folds below the peak
DEEP = ([1.0], [-BHAT[0]], [25.0])


def softmax_errors(level, beta, mixture, queries=QUERIES, pass_=sphere_softmax.softmax, **kw):
    """Largest errors over the queries of the softmax ``pass_`` (the exact pass, or the one with triangles
    aggregated as sources): mean (relative to the β-effect |m − b̂|), covariance (relative to its largest entry) and
    log Z (absolute)."""
    weights, means, kappas = mixture
    # the masses' rule: 8 × 8 sub-triangles, fewer on fine meshes (level 7: 2 × 2 on triangles of 0.009 rad)
    n = 8 if level < 7 else 2
    mesh = sphere_mesh.mesh_from_density(level, lambda y: vmf_log_density(y, weights, means, kappas), n=n)
    sm = pass_(mesh, B, beta, queries, **kw)
    errors = np.zeros((queries.shape[0], 3))
    for s, x in enumerate(queries):
        b = B.T @ x
        log_z, mean, cov = vmf_softmax(unit(b), beta * np.linalg.norm(b), weights, means, kappas)
        errors[s] = (
            np.linalg.norm(sm.mean[s] - mean) / np.linalg.norm(mean - unit(b)),
            np.abs(sm.cov[s] - cov).max() / np.abs(cov).max(),
            abs(sm.log_z[s] - log_z),
        )
    return errors.max(axis=0), sm


def test_closed_form_density_is_normalised():
    """The test's own closed forms: the mixture integrates to 1 and its softmax at κq → 0 is ρ's own mean."""
    weights, means, kappas = SMOOTH
    mesh = sphere_mesh.mesh_from_density(5, lambda y: vmf_log_density(y, weights, means, kappas), n=8)
    assert abs(np.exp(mesh.log_mass).sum() - 1.0) < 1e-10
    log_z, mean, _ = vmf_softmax(BHAT[0], 1e-12, weights, means, kappas)
    assert abs(log_z) < 1e-10
    assert np.allclose(mean, sum(w * langevin(k) * unit(mu) for w, mu, k in zip(weights, means, kappas)))


@pytest.mark.parametrize(
    ("level", "beta", "mixture", "bound"),
    [
        (5, 10.0, SMOOTH, 1e-6),
        (5, 100.0, SMOOTH, 3e-6),
        (5, 1000.0, SMOOTH, 2e-4),
        (7, 10000.0, SMOOTH, 3e-5),
        (5, 100.0, DEEP, 5e-5),
        (5, 1000.0, DEEP, 5e-4),
        (7, 10000.0, DEEP, 3e-5),
    ],
)
@pytest.mark.parametrize("pass_", [sphere_softmax.softmax, sphere_sources.tree_softmax], ids=["exact", "sources"])
def test_softmax_against_vmf_mixtures(level, beta, mixture, bound, pass_):
    """Mean (against the β-effect), covariance and log Z within the bound (about 3× the largest of the three
    measured at the default settings; the mesh width at each β is that of the kernel or finer), by the exact pass
    and by the pass with triangles aggregated as sources."""
    errors, _ = softmax_errors(level, beta, mixture, pass_=pass_)
    assert errors[0] < bound, errors
    assert errors[1] < bound, errors
    assert errors[2] < bound, errors


def test_deep_tail_is_fifty_efolds_down():
    """The DEEP case does what it says: at the first query's b̂ the density is e^{−50} of its peak."""
    weights, means, kappas = DEEP
    drop = vmf_log_density(-BHAT[0], weights, means, kappas) - vmf_log_density(BHAT[0], weights, means, kappas)
    assert drop == pytest.approx(50.0)


def test_softmax_converges_at_order_four():
    """With the quadrature tight (variation 0.5), halving the mesh width divides the errors of the mean, the
    covariance and log Z by about 2⁴ (measured 15.8–17.2 at β = 100, between levels 4 and 5)."""
    coarse, _ = softmax_errors(4, 100.0, SMOOTH, variation=0.5)
    fine, _ = softmax_errors(5, 100.0, SMOOTH, variation=0.5)
    assert np.all((10 < coarse / fine) & (coarse / fine < 25)), coarse / fine


def test_too_coarse_mesh_is_refused_at_large_beta():
    """Level 1 (edges 0.63 rad) at β = 10⁶ (kernel width 0.001 rad): a piece halved MAX_HALVINGS times still sees
    the exponent vary by more than the tolerance: refused, naming β and the kernel width, by both passes; level 2
    at β = 10⁴ is integrated (its pieces halved where the kernel is steep)."""
    with pytest.raises(sphere_mesh.MeshTooCoarse, match=r"beta = 1e\+06.*256 sub-triangles.*kernel width"):
        softmax_errors(1, 1e6, SMOOTH)
    with pytest.raises(sphere_mesh.MeshTooCoarse, match=r"beta = 1e\+06.*kernel width"):
        softmax_errors(1, 1e6, SMOOTH, pass_=sphere_sources.tree_softmax)
    _, sm = softmax_errors(2, 1e4, SMOOTH)
    assert np.all(np.isfinite(sm.mean))


def chord_quarters(points, ell, triangles):
    """Every chord triangle split into four by its edges' midpoints (corners off the sphere, in the same plane; ℓ
    linear): the same piecewise log-linear density on four times as many triangles."""
    a, b, c = triangles.T
    m = triangles.shape[0]
    mids = [(points[u] + points[v]) / 2 for u, v in ((a, b), (b, c), (c, a))]
    ells = [(ell[u] + ell[v]) / 2 for u, v in ((a, b), (b, c), (c, a))]
    ab, bc, ca = (points.shape[0] + k * m + np.arange(m) for k in range(3))
    quarters = np.concatenate([np.stack(q, axis=1) for q in ((a, ab, ca), (ab, b, bc), (ca, bc, c), (bc, ca, ab))])
    return np.concatenate([points, *mids]), np.concatenate([ell, *ells]), quarters, np.tile(np.arange(m), 4)


def dense_softmax(mesh, beta, x, splits=2, n=24, window=0.6, around=None):
    """log Z, mean and covariance of the mesh's density seen from x by brute force: every triangle within
    ``window`` rad of b̂ (beyond 0.6 rad the kernel is below e^{−200} of its peak at β = 1000), or of ``around``
    where the density is what confines the integrand, split ``splits`` times into chord quarters, the 7-point rule
    on n × n sub-triangles of each, no bound and no pruning."""
    b = B.T @ x
    kappa, bhat = beta * np.linalg.norm(b), unit(b)
    centres = unit(mesh.points[mesh.triangles].sum(axis=1))
    near = np.flatnonzero(centres @ (bhat if around is None else unit(around)) > math.cos(window))
    points, ell, triangles, owner = mesh.points, mesh.log_density, mesh.triangles[near], near
    for _ in range(splits):
        points, ell, triangles, o = chord_quarters(points, ell, triangles)
        owner = owner[o]
    y, w = sphere_mesh.triangle_nodes(points, triangles, n)
    bary = sphere_mesh.SUB_BARY[n, : sphere_mesh.SUB_COUNT[n]]
    log_w = np.log(w) + ell[triangles] @ bary.T + sphere_mesh.log_normalisers(mesh)[owner][:, None]
    y, e = y.reshape(-1, 3), (log_w + kappa * (y @ bhat - 1.0)).ravel()
    p = np.exp(e - e.max())
    d = y - bhat
    first = p @ d / p.sum()
    return e.max() + math.log(p.sum()) + kappa, bhat + first, (p[:, None] * d).T @ d / p.sum() - np.outer(first, first)


@pytest.mark.parametrize("mixture", [SMOOTH, DEEP], ids=["smooth", "deep"])
def test_triangles_coarser_than_the_kernel_against_brute_force(mixture):
    """Level 3 at β = 1000 (triangles 0.14 rad, kernel 0.025 rad: pieces halved up to 76 per edge where the kernel
    is steep) integrates its own density as a brute-force rule on every triangle does: at the coarse variation the
    mean within 5e-4 of the β-effect (measured 1.8e-4, 7e-5), the covariance within 1e-4 of its largest entry, log Z
    within 3e-5; at the default variation of 3 the pieces' errors do not cancel and the mean errs by more than
    5e-3 of the β-effect (measured 0.02, 0.028)."""
    weights, means, kappas = mixture
    mesh = sphere_mesh.mesh_from_density(3, lambda y: vmf_log_density(y, weights, means, kappas))
    truth = [dense_softmax(mesh, 1000.0, x) for x in QUERIES]

    def errors(variation):
        sm = sphere_softmax.softmax(mesh, B, 1000.0, QUERIES, variation=variation)
        return np.max(
            [
                (
                    np.linalg.norm(sm.mean[s] - mean) / np.linalg.norm(mean - unit(B.T @ x)),
                    np.abs(sm.cov[s] - cov).max() / np.abs(cov).max(),
                    abs(sm.log_z[s] - log_z),
                )
                for s, (x, (log_z, mean, cov)) in enumerate(zip(QUERIES, truth))
            ],
            axis=0,
        )

    good = errors(sphere_levels.COARSE_VARIATION)
    assert good[0] < 5e-4 and good[1] < 1e-4 and good[2] < 3e-5, good
    assert errors(sphere_levels.DEFAULT_VARIATION)[0] > 5e-3


# a cluster of κ = 300 (width 0.06 rad) on level 2 (triangles 0.28 rad): ℓ varies linearly by a median 72 e-folds
# across a triangle, up to 94, as across the contracted clusters of a late run
STEEP = ([1.0], [[0.3, -0.5, 0.8]], [300.0])


@pytest.mark.parametrize("beta", [10.0, 100.0])
def test_a_cluster_steeper_than_its_triangles_against_brute_force(beta):
    """Where ℓ varies across a triangle far more than the kernel does (β = 10) and about as much (β = 100), the pass
    integrates the mesh's own density as a brute-force rule does (2 × 2 chord quarters, 24 × 24 sub-triangles on
    each, all within 1.2 rad of the cluster, e^{−190} beyond; within 1e-10 of one twice as fine): the mean within
    1e-5 of the β-effect (measured 1.1e-6, 4.4e-8 at most), the covariance within 3e-4 of its largest entry (8e-5,
    2.1e-6), log Z within 1e-4 (1.3e-5, 2.2e-7). At β = 10 it cuts pieces in two across their steepest edge: 2 154
    nodes per query, where cutting every piece in four took 3 824; the bound on them fails on quarters alone."""
    weights, means, kappas = STEEP
    mesh = sphere_mesh.mesh_from_density(2, lambda y: vmf_log_density(y, weights, means, kappas))
    queries = QUERIES[:3]
    sm = sphere_softmax.softmax(mesh, B, beta, queries)
    for s, x in enumerate(queries):
        log_z, mean, cov = dense_softmax(mesh, beta, x, window=1.2, around=means[0])
        assert np.linalg.norm(sm.mean[s] - mean) < 1e-5 * np.linalg.norm(mean - unit(B.T @ x))
        assert np.abs(sm.cov[s] - cov).max() < 3e-4 * np.abs(cov).max()
        assert abs(sm.log_z[s] - log_z) < 1e-4
    if beta == 10.0:
        assert sm.nodes.mean() < 2800


def fine_piece_sums(p, ell, kernel, n=96):
    """The ten sums of ``sphere_pieces._piece_sums`` on one piece (chord corners ``p``, ℓ ``ell``, ``kernel`` =
    (b̂, κ/2, area share)) by brute force: the 7-point rule on each of its n × n sub-triangles, no shift."""
    up = [((i, j), (i + 1, j), (i, j + 1)) for i in range(n) for j in range(n - i)]
    down = [((i + 1, j), (i + 1, j + 1), (i, j + 1)) for i in range(n) for j in range(n - i - 1)]
    corners = np.array(up + down, dtype=float) / n  # (sub, 3, (λ1, λ2))
    lam = np.concatenate([1.0 - corners.sum(axis=2, keepdims=True), corners], axis=2)  # (sub, 3, 3)
    nodes = np.einsum("qc,sck->sqk", sphere_mesh.RULE_BARY, lam).reshape(-1, 3)
    weights = np.tile(sphere_mesh.RULE_WEIGHTS, len(corners)) / n**2
    chord = nodes @ np.reshape(p, (3, 3))
    r = np.linalg.norm(chord, axis=1)
    d = chord / r[:, None] - kernel[:3]
    w = kernel[4] * weights * np.exp(nodes @ np.asarray(ell) - kernel[3] * (d * d).sum(axis=1)) / r**3
    second = np.einsum("n,ni,nj->ij", w, d, d)[np.triu_indices(3)]
    return np.concatenate([[w.sum()], w @ d, second])


def steepest_admitted_kernel(p, ell, bhat, cos_r, variation):
    """κ/2 at the limit of what the exp-linear rule takes (by bisection in log κ): the kernel's part of the piece's
    variation bound at most ``KERNEL_FLAT``·δ and its bend at most ``KERNEL_BEND``·δ²; with ``bend=False`` the
    first limit alone."""

    def admitted(half, bend):
        _, spread = sphere_pieces._piece_bounds(p, ell, tuple(bhat), 2 * half, cos_r)
        flat = spread - (max(ell) - min(ell)) <= sphere_pieces.KERNEL_FLAT * variation
        bent = sphere_pieces._kernel_bend(p, half, cos_r) > sphere_pieces.KERNEL_BEND * variation**2
        return flat and not (bend and bent)

    def limit(bend):
        lo, hi = -3.0, 9.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if admitted(10**mid, bend) else (lo, mid)
        return 10**lo

    return limit(True), limit(False)


def steep_piece(seed, size, ell_range, near):
    """A random chord piece (corners on the sphere within about ``size`` of a random point), ℓ at its corners 0,
    ``ell_range`` and one between, b̂ at ``near`` cap radii from its centre (random where ``near`` is None), and the
    cos of its cap radius."""
    rng = np.random.default_rng(seed)
    corners = unit(unit(rng.normal(size=3)) + size * rng.normal(size=(3, 3)))
    ell = tuple(rng.permutation([0.0, rng.uniform(0.0, ell_range), ell_range]))
    centre = unit(corners.sum(axis=0))
    cos_r = (corners @ centre).min()
    away = unit(np.cross(centre, rng.normal(size=3)))
    bhat = unit(rng.normal(size=3)) if near is None else unit(centre + near * math.acos(cos_r) * away)
    return tuple(corners.ravel()), ell, bhat, cos_r


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    size=st.floats(1e-3, 0.03),
    ell_range=st.floats(4.0, 40.0),
    near=st.one_of(st.none(), st.floats(0.0, 5.0)),
    variation=st.sampled_from([1.5, 3.0]),
)
def test_the_exp_linear_rule_integrates_a_steep_piece_as_brute_force_does(seed, size, ell_range, near, variation):
    """A small piece across which ℓ varies linearly by 4 … 40 e-folds, under the steepest kernel the exp-linear rule
    takes at the allowed variation δ = 1.5 or 3, centred at 0 … 5 cap radii from the piece (where it is a bump) or
    anywhere: with its 8 nodes the rule's S0 (relative) and the moments S1/S0, S2/S0 about b̂ (relative to |m − b̂|
    or 1) lie within 2e-6 (δ = 1.5) and 3e-5 (δ = 3) of a brute-force rule on 96 × 96 sub-triangles (the 2-point
    Gauss rule's bound for a kernel ramp of δ/6, K⁴e^K/4 320, is 1.2e-6 and 2.4e-5; the 7-point rule errs up to
    2.9e-6 and 1.9e-4 on an exponent varying linearly by δ); the 7-point rule on the whole piece errs by more than
    1e-5 (about 3e-4 at 4 e-folds, 0.08 at 13)."""
    p, ell, bhat, cos_r = steep_piece(seed, size, ell_range, near)
    half, _ = steepest_admitted_kernel(p, ell, bhat, cos_r, variation)
    kernel = (*bhat, half, 0.25)
    truth = fine_piece_sums(p, ell, kernel)
    assume(truth[0] > 1e-250)  # a kernel pointing away from the piece leaves nothing to integrate
    rule = np.array(sphere_pieces._exp_linear_sums((0.0,) * 10, p, ell, kernel, 0.0))
    tolerance = 2e-6 if variation == 1.5 else 3e-5
    scale = max(np.linalg.norm(truth[1:4]) / truth[0], 1.0)
    assert abs(rule[0] / truth[0] - 1.0) < tolerance
    assert np.abs(rule[1:] / rule[0] - truth[1:] / truth[0]).max() < tolerance * scale**2
    seven = np.array(sphere_pieces._piece_sums((0.0,) * 10, p, ell, kernel, 0.0))
    assert abs(seven[0] / truth[0] - 1.0) > 1e-5


@pytest.mark.parametrize("variation", [1.5, 3.0])
def test_a_kernel_bump_on_the_piece_is_left_to_the_cuts(variation):
    """With b̂ at the piece's centre the kernel is a bump over it, not a ramp: at the steepest kernel the flatness
    limit alone would admit (its part of the bound δ/6) the exp-linear rule errs by more than three times the
    tolerance of the test above (measured 7e-5 … 8e-4 at δ = 1.5: the 2 × 2 rule misses the bump), so the bend limit
    must refuse that kernel; at the steepest kernel it admits the rule is within that tolerance."""
    errors = []
    for seed in range(5):
        p, ell, bhat, cos_r = steep_piece(seed, 0.01, 12.0, near=0.0)
        for half in steepest_admitted_kernel(p, ell, bhat, cos_r, variation):
            kernel = (*bhat, half, 0.25)
            truth = fine_piece_sums(p, ell, kernel)
            rule = sphere_pieces._exp_linear_sums((0.0,) * 10, p, ell, kernel, 0.0)
            errors.append(abs(rule[0] / truth[0] - 1.0))
    bend, flat_only = np.array(errors).reshape(5, 2).T
    tolerance = 2e-6 if variation == 1.5 else 3e-5
    assert bend.max() < tolerance
    assert flat_only.min() > 3 * tolerance


@pytest.mark.parametrize("offset", [0.0, 0.03])
def test_a_kernel_centred_on_a_steep_cluster_errs_as_the_cuts_do(offset):
    """A cluster of κ = 1000 on level 2 seen at β = 30 from the query whose kernel centre b̂ lies on the cluster's
    centre (or 0.03 rad off): pieces there are small, ℓ is steep across them and the kernel bends over them. The pass
    meets the brute-force rule as the 7-point rule with cuts did (mean within 2e-5 of the β-effect, covariance within
    1e-3 of its largest entry; measured 1.6e-6, 4.0e-6 and 2.2e-4 for both, the parent's cuts 1.9e-6, 4.1e-6,
    2.2e-4); with the exp-linear rule's bend limit removed from ``triangle_sums`` it errs 2.5e-4, 2.4e-4 on the mean
    and 1.2e-2, 1.3e-2 on the covariance (run once)."""
    mu = unit([0.3, -0.5, 0.8])
    mesh = sphere_mesh.mesh_from_density(2, lambda y: vmf_log_density(y, [1.0], [mu], [1000.0]))
    target = unit(mu + offset * unit(np.cross(mu, [1.0, 0.0, 0.0])))
    x = unit(np.linalg.solve(B.T, target))
    sm = sphere_softmax.softmax(mesh, B, 30.0, x[None])
    log_z, mean, cov = dense_softmax(mesh, 30.0, x, window=1.2, around=mu)
    assert np.linalg.norm(sm.mean[0] - mean) < 2e-5 * np.linalg.norm(mean - unit(B.T @ x))
    assert np.abs(sm.cov[0] - cov).max() < 1e-3 * np.abs(cov).max()


def test_halves_near_the_peak_do_not_run_out_of_bits():
    """A cluster of κ = 10⁴ on level 2 (ℓ varying by thousands of e-folds across a triangle) seen at β = 10⁴ from a
    kernel 0.05 rad off its centre: where the kernel's gradient cancels ℓ's near the integrand's peak, cutting the
    edge of largest *exponent* difference left ℓ's range unchanged on long thin halves and the piece ran out of bits
    (``MeshTooCoarse``, where quarters integrate it); the edge of largest ℓ difference, cut only where the halves stay
    round, integrates it, both passes alike."""
    x = np.array([0.5638197602383339, -0.7852632678646965, -0.25586886896855116])
    bhat = unit(B.T @ x)
    mu = unit(bhat + 0.05 * unit(np.cross(bhat, [-0.3002194205247538, 0.1647329204351259, 0.9395378462120063])))
    mesh = sphere_mesh.mesh_from_density(2, lambda y: vmf_log_density(y, [1.0], [mu], [1e4]))
    exact = sphere_softmax.softmax(mesh, B, 1e4, x[None])
    tree = sphere_sources.tree_softmax(mesh, B, 1e4, x[None])
    assert np.isfinite(exact.log_z[0]) and exact.log_z[0] == pytest.approx(tree.log_z[0], abs=1e-9)


@settings(max_examples=12, deadline=None)
@given(
    level=st.sampled_from([1, 2]),
    log_beta=st.floats(math.log(100.0), math.log(1e4)),
    direction=st.lists(st.floats(-1, 1), min_size=3, max_size=3).filter(lambda v: np.linalg.norm(v) > 0.1),
)
def test_descended_lower_bound_is_below_log_z_and_near_it(level, log_beta, direction):
    """The lower bound the pass takes from the pieces of the triangle whose cap centre sees the largest exponent
    (``centre_exponent``) lies below log Z
    (brute force, ``dense_softmax``, on every triangle within 1.2 rad: at β ≥ 100 the rest is below e^{−100}) and
    within 6 e-folds of it on triangles 0.3–0.6 rad wide (measured 2.2–4.0 over 80 draws), where the triangles'
    caps alone put L a median 21 (level 2) and 148 (level 1) e-folds below, up to 1700. Descending the triangle of
    the largest cap bound instead left it 19 e-folds below (level 1, β = 2981); a bound that took the triangle's
    area for the piece's would lie above log Z."""
    beta, x = math.exp(log_beta), unit(direction)
    weights, means, kappas = SMOOTH
    mesh = sphere_mesh.mesh_from_density(level, lambda y: vmf_log_density(y, weights, means, kappas))
    tables = sphere_softmax._triangle_tables(mesh, sphere_mesh.log_normalisers(mesh))
    b = B.T @ x
    kappa, bhat = beta * np.linalg.norm(b), unit(b)
    cos_theta = tables.centre @ bhat
    top = int(np.argmax(mesh.log_mass + kappa * (cos_theta - 1.0)))
    stack = np.empty((sphere_pieces.PIECE_STACK, 13))
    lower = sphere_pieces.descended_lower(top, (*bhat, kappa), mesh.arrays(), tables, stack)
    log_z = dense_softmax(mesh, beta, x, splits=3 - level, window=1.2)[0] - kappa
    assert lower <= log_z + 1e-9
    assert lower > log_z - 6.0


def test_piece_bounds_reach_the_antipode():
    """A piece around b̂'s antipode: the exponent's smallest value is κ(cos π − 1) = −2κ there, and the bound must
    reach it (cos(min(θ + ρ, π)), not cos(θ + ρ), which comes back up past π: a bound 0.0125 above the minimum
    here, 3.5·10⁴ e-folds off on wide pieces)."""
    r = 0.05
    corners = [
        (math.sin(r) * math.cos(a), math.sin(r) * math.sin(a), math.cos(r))
        for a in (0, 2 * math.pi / 3, 4 * math.pi / 3)
    ]
    cos_r = min(unit(np.sum(corners, axis=0)) @ np.array(c) for c in corners)
    upper, spread = sphere_pieces._piece_bounds(
        tuple(np.ravel(corners)), (0.0, 0.0, 0.0), (0.0, 0.0, -1.0), 10.0, float(cos_r)
    )
    assert upper - spread <= -20.0 + 1e-12
    assert upper >= 10.0 * (math.cos(math.pi - r) - 1.0) - 1e-12  # the largest value, at a corner


@pytest.mark.parametrize("kappa", [100.0, 1000.0])
def test_a_kernel_pointing_away_from_the_mass(kappa):
    """Level 1, one triangle holding e^{2κ + 30} times the rest of the mass, the query's kernel centred on its
    antipode: Z is that triangle's near edge seen through the kernel's tail. Both passes give log Z within 1e-4 of a
    brute-force rule (a piece bound that missed the antipode put L above log Z and left 7 nodes, log Z 22.5 too low
    at κ = 1000; the source tree's pass, scaled to its root's bound, underflowed to log Z = −∞)."""
    points, triangles = sphere_mesh.icosphere(1)
    area = sphere_mesh.spherical_area(*(points[triangles[:, k]] for k in range(3)))
    log_mass = np.log(area)
    log_mass[0] += 2 * kappa + 30
    log_mass -= np.logaddexp.reduce(log_mass)
    mesh = sphere_mesh.SphereMesh(points, np.zeros(len(points)), triangles, log_mass)
    bhat = -unit(points[triangles[0]].sum(axis=0))
    # brute force on the heavy triangle alone (the others hold e^{−2κ−30} of the mass, at most e^{2κ} more kernel):
    # split three times into chord quarters, 24 × 24 sub-triangles on each, about 0.003 rad
    pts, ell, quarters = points, np.zeros(len(points)), triangles[:1]
    for _ in range(3):
        pts, ell, quarters, _ = chord_quarters(pts, ell, quarters)
    y, w = sphere_mesh.triangle_nodes(pts, quarters, 24)
    logs = np.log(w) + sphere_mesh.log_normalisers(mesh)[0] + kappa * (y @ bhat - 1.0)
    truth = float(np.logaddexp.reduce(logs.ravel())) + kappa
    exact = sphere_softmax.softmax(mesh, np.eye(3), kappa, bhat[None, :], variation=1.5)
    tree = sphere_sources.tree_softmax(mesh, np.eye(3), kappa, bhat[None, :], variation=1.5)
    assert abs(exact.log_z[0] - truth) < 1e-4 and abs(tree.log_z[0] - truth) < 1e-4, (exact.log_z, tree.log_z, truth)


def test_pruning_depth_matters():
    """A pruning depth of 5 e-folds drops triangles that hold a visible share of Z: log Z is then off by more than
    the quadrature's error; at the default depth it is not."""
    good, _ = softmax_errors(5, 100.0, SMOOTH)
    shallow, _ = softmax_errors(5, 100.0, SMOOTH, depth=5.0)
    assert shallow[2] > 100 * good[2]


def test_variation_sets_the_quadrature_error():
    """The sub-division tolerance is what sets the quadrature error: 12× tighter than the default is measurably
    better, at about 10× the nodes (minor pieces are loosened up to the same LOOSEST_VARIATION; the error is not
    monotone above the default: a rule that is the same on every triangle errs alike on both sides of the kernel's
    centre, which cancels in the mean, so only the tight side is asserted)."""
    default, sm_default = softmax_errors(5, 1000.0, SMOOTH)
    tight, sm_tight = softmax_errors(5, 1000.0, SMOOTH, variation=0.25)
    assert default[0] > 5 * tight[0]
    assert default[1] > 5 * tight[1]
    assert sm_tight.nodes.sum() > 5 * sm_default.nodes.sum()


def divergence_by_differences(mesh, x, h=1e-5, beta=100.0):
    """Σ_i e_i·(v(x + h e_i) − v(x − h e_i))/2h over an orthonormal tangent basis, points normalised."""
    out = np.zeros(x.shape[0])
    for s, p in enumerate(x):
        basis = np.linalg.svd(np.eye(3) - np.outer(p, p))[0][:, :2].T
        plus = unit(p[None, :] + h * basis)
        minus = unit(p[None, :] - h * basis)
        v_plus, _ = sphere_softmax.velocity_divergence(plus, sphere_softmax.softmax(mesh, B, beta, plus), B, V, beta)
        v_minus, _ = sphere_softmax.velocity_divergence(minus, sphere_softmax.softmax(mesh, B, beta, minus), B, V, beta)
        out[s] = np.einsum("ij,ij->", basis, v_plus - v_minus) / (2 * h)
    return out


def test_divergence_against_central_differences():
    """div_S v = tr D − xᵀDx − 2 x·Vm against central differences of v (to 1e-5 relative to its scale); the
    formula without the −2 x·Vm term (the sphere's curvature) is off by far more."""
    weights, means, kappas = SMOOTH
    mesh = sphere_mesh.mesh_from_density(5, lambda y: vmf_log_density(y, weights, means, kappas))
    x = QUERIES[:4]
    sm = sphere_softmax.softmax(mesh, B, 100.0, x)
    v, div = sphere_softmax.velocity_divergence(x, sm, B, V, 100.0)
    reference = divergence_by_differences(mesh, x)
    scale = np.abs(reference).max()
    assert np.abs(div - reference).max() < 1e-5 * scale
    without_curvature = div + 2.0 * np.einsum("qi,qi->q", x, sm.mean @ V.T)
    assert np.abs(without_curvature - reference).max() > 1e-2 * scale
    assert np.abs(np.einsum("qi,qi->q", x, v)).max() < 1e-14  # v is tangent


@settings(max_examples=8, deadline=None)
@given(
    beta=st.floats(1.0, 100.0),
    rotation_seed=st.integers(0, 2**31 - 1),
)
def test_softmax_is_rotation_equivariant(beta, rotation_seed):
    """Rotating the density and B together rotates the softmax mean: the mesh's orientation does not leak into the
    answer beyond the quadrature's error (a property over β and rotations)."""
    q, r = np.linalg.qr(np.random.default_rng(rotation_seed).standard_normal((3, 3)))
    R = q * np.sign(np.diag(r))
    weights, means, kappas = SMOOTH
    mesh = sphere_mesh.mesh_from_density(4, lambda y: vmf_log_density(y, weights, means, kappas))
    rotated = sphere_mesh.mesh_from_density(4, lambda y: vmf_log_density(y @ R, weights, means, kappas))
    x = QUERIES[:3]
    sm = sphere_softmax.softmax(mesh, B, beta, x)
    # ρ_R(y) = ρ(Rᵀy) and B_R = R B Rᵀ: the softmax of R x under (ρ_R, B_R) is R times that of x under (ρ, B)
    smr = sphere_softmax.softmax(rotated, R @ B @ R.T, beta, x @ R.T)
    # both are level-4 discretisations, each within ~1e-5 of the truth at β ≤ 100 (log Z; the mean far closer)
    assert np.abs(smr.mean - sm.mean @ R.T).max() < 1e-5
    assert np.abs(smr.log_z - sm.log_z).max() < 5e-5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": 0.0}, "beta must be positive"),
        ({"beta": float("nan")}, "beta must be positive"),
        ({"depth": 1.0}, "depth must be at least 5"),
        ({"variation": -1.0}, "variation must be positive"),
        ({"B": np.eye(2)}, "B must be a finite 3×3"),
        ({"queries": np.ones((3, 2))}, r"queries must be \(query, 3\)"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    mesh = sphere_mesh.mesh_from_density(1, lambda y: np.full(y.shape[:-1], -math.log(4 * math.pi)))
    args = {"B": B, "beta": 10.0, "queries": QUERIES, **kwargs}
    with pytest.raises(ValueError, match=message):
        sphere_softmax.softmax(mesh, args.pop("B"), args.pop("beta"), args.pop("queries"), **args)


def test_uniform_masses_are_exact_and_mesh_checks():
    """A uniform density's triangle masses are the exact solid angles over 4π; check() refuses a flipped triangle."""
    mesh = sphere_mesh.mesh_from_density(3, lambda y: np.full(y.shape[:-1], -math.log(4 * math.pi)))
    a, b, c = (mesh.points[mesh.triangles[:, k]] for k in range(3))
    assert np.allclose(mesh.masses, sphere_mesh.spherical_area(a, b, c) / (4 * math.pi), rtol=1e-14, atol=0)
    assert abs(mesh.masses.sum() - 1.0) < 1e-14
    assert np.abs(sphere_mesh.log_normalisers(mesh)).max() < 1e-7  # ℓ constant: c_T = 1 up to the rule's error
    broken = mesh.copy()
    broken.triangles[0] = broken.triangles[0, [0, 2, 1]]
    with pytest.raises(ValueError, match="counter-clockwise"):
        broken.check()


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), jitter=st.floats(0.0, 0.4))
def test_every_triangle_lies_in_its_bounding_cap(seed, jitter):
    """The pruning bounds rest on each triangle lying in its cap (centre g_T, radius r_T): on icospheres distorted
    at random, every vertex and every node of the 24 × 24 rule lies within r_T of g_T (a radius from one vertex only,
    or a smaller one, fails this)."""
    rng = np.random.default_rng(seed)
    points, triangles = sphere_mesh.icosphere(2)
    edge = float(sphere_mesh.edge_lengths(points, triangles).min())
    moved = unit(points + jitter * edge * rng.standard_normal(points.shape))
    keep = sphere_mesh.orientation(moved, triangles) > 0  # a jitter that flips a triangle leaves it out
    tri = triangles[keep]
    m = tri.shape[0]
    centre, cos_r, sin_r, log_range = np.empty((m, 3)), np.empty(m), np.empty(m), np.empty(m)
    sphere_softmax._caps(moved, tri, centre, cos_r, sin_r, log_range, np.zeros(moved.shape[0]))
    nodes, _ = sphere_mesh.triangle_nodes(moved, tri, sphere_mesh.TABLE_SUBDIVISION)
    corners = moved[tri]
    assert np.all(np.einsum("tj,tkj->tk", centre, corners) >= cos_r[:, None])
    assert np.all(np.einsum("tj,tqj->tq", centre, nodes) >= cos_r[:, None])
    assert np.allclose(cos_r**2 + sin_r**2, 1.0)


# ---------------------------------------------------------------------------------------------------------------
# query groups: the same answer, bit for bit, as every query bounding every triangle itself


def _group_case(seed, level, beta, clustered, extra=300):
    rng = np.random.default_rng(seed)
    if clustered:  # the metastable state: two narrow clusters, the tail hundreds of e-folds down
        axis = unit(rng.standard_normal(3))
        mixture = ([0.5, 0.5], [axis, -axis], [60.0, 60.0])
    else:
        mixture = SMOOTH
    mesh = sphere_mesh.mesh_from_density(level, lambda y: vmf_log_density(y, *mixture), n=4)
    queries = np.concatenate([mesh.points, unit(rng.standard_normal((extra, 3)))])
    return mesh, queries


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("log_z", "mean", "cov", "nodes", "kept"))


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    level=st.sampled_from([2, 3, 4]),
    beta=st.sampled_from([10.0, 100.0, 1000.0, 1e4]),
    clustered=st.booleans(),
)
def test_query_groups_change_nothing(seed, level, beta, clustered):
    """Grouped and ungrouped passes agree bit for bit (log Z, mean, covariance, nodes, kept triangles) on smooth and
    clustered densities from β = 10 (one group: nothing to prune) to 10⁴, the mesh's vertices and random points as
    queries; a query integrates no triangle it did not bound."""
    mesh, queries = _group_case(seed, level, beta, clustered)
    try:
        grouped = sphere_softmax.softmax(mesh, B, beta, queries, depth=20.0)
    except sphere_mesh.MeshTooCoarse:
        return  # the mesh cannot carry this β at all: nothing to compare
    plain = sphere_softmax.softmax(mesh, B, beta, queries, depth=20.0, grouped=False)
    assert _same(grouped, plain)
    for sm in (grouped, plain):
        assert np.all(sm.kept <= sm.bounded) and np.all(sm.bounded <= mesh.triangles.shape[0])


def test_query_groups_prune_at_low_temperature_and_a_group_too_narrow_breaks_the_answer(monkeypatch):
    """At β = 1000 on a clustered level-4 mesh the groups leave each query a small share of the triangles to bound;
    groups whose radius is taken as 0 (members outside their group's cap) drop triangles some member keeps, and the
    answer changes: what the radius in the group bounds is for."""
    mesh, queries = _group_case(5, 4, 1000.0, True)
    grouped = sphere_softmax.softmax(mesh, B, 1000.0, queries, depth=20.0)
    m = mesh.triangles.shape[0]
    assert np.median(grouped.bounded) < 0.3 * m
    real = sphere_softmax.query_groups

    def narrow(bhat, kappa, depth):
        group, centres, cos_R, sin_R, lo, hi = real(bhat, kappa, depth)
        return group, centres, np.ones_like(cos_R), np.zeros_like(sin_R), hi, lo  # radius 0, κ range inverted

    monkeypatch.setattr(sphere_softmax, "query_groups", narrow)
    wrong = sphere_softmax.softmax(mesh, B, 1000.0, queries, depth=20.0)
    assert not _same(wrong, grouped)
