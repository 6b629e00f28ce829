"""Fitting Theorem 1's constants on synthetic curves with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import resource_experiment
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lowtemp.analysis import fitting
from lowtemp.config import experiment

HYP = settings(max_examples=25, deadline=None)
_FIT = resource_experiment()["fit"]  # the schema's defaults of the fit block
#: the window rule's settings the pipeline passes by default
WINDOW = {"max_residual": _FIT["max_residual"], "min_points": _FIT["min_points"]}


@HYP
@given(c=st.floats(0.2, 2.0), b=st.floats(0.05, 2.0), seed=st.integers(0, 2**32 - 1))
def test_fit_decay_rate_recovers_rate_despite_transient_and_noise(c, b, seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 10.0, 51)
    # curved initial transient (decays like e^{-4t} on top of the exponential) and 0.5 % noise
    w2 = b * np.exp(-c * t) * (1.0 + 2.0 * np.exp(-4.0 * t)) * np.exp(0.005 * rng.standard_normal((4, t.size)))
    fit = fitting.fit_decay_rate(t, w2, **WINDOW)
    assert fit.slope.shape == (4,)
    assert fit.mean == pytest.approx(c, rel=0.02, abs=0.005)
    assert np.exp(fit.intercept) == pytest.approx(np.full(4, b), rel=0.05)
    assert fit.window[0] >= 0.6  # the transient (log deviation > 0.05 before t ≈ 0.9) is excluded
    assert 0 < fit.sem < 0.05
    lo, hi = fit.window_index
    assert (fit.window[0], fit.window[1]) == (t[lo], t[hi - 1])


def test_fit_decay_rate_exact_curve_and_floor():
    t = np.linspace(0, 20, 41)
    w2 = np.exp(-1.3 * t)[None, :] * np.array([[1.0], [0.5]])
    fit = fitting.fit_decay_rate(t, w2, **WINDOW)
    np.testing.assert_allclose(fit.slope, 1.3, rtol=1e-10)
    assert fit.sem == pytest.approx(0.0, abs=1e-10)
    # values below the floor (1e-7 by default) are not admissible: the window runs from t = 0 to
    # t = 11.5, the last snapshot where the smaller replica 0.5 e^{-1.3 t} is still above 1e-7
    assert 0.5 * np.exp(-1.3 * 12.0) < 1e-7 < 0.5 * np.exp(-1.3 * 11.5)
    assert fit.window == (0.0, 11.5)
    assert tuple(fit.window_index) == (0, 24)
    # a lower floor admits more of the same line
    assert fitting.fit_decay_rate(t, w2, floor=1e-9, **WINDOW).window == (0.0, 15.0)


def test_fit_decay_rate_without_window_raises():
    t = np.linspace(0, 5, 11)
    with pytest.raises(ValueError, match="no log-linear decay window"):
        fitting.fit_decay_rate(t, np.exp(+0.5 * t)[None, :], **WINDOW)


@HYP
@given(C1=st.floats(0.2, 1.5), a=st.floats(0.01, 0.3), seed=st.integers(0, 2**32 - 1))
def test_fit_growth_rate_recovers_c1_across_betas(C1, a, seed):
    rng = np.random.default_rng(seed)
    betas = np.array([10.0, 100.0, 1000.0])
    t = np.linspace(0.0, 12.0, 61)
    scale = np.sqrt(np.log(betas + 1.0) / betas)
    w2 = a * scale[:, None, None] * np.exp(C1 * t)[None, None, :]
    w2 = w2 * np.exp(0.005 * rng.standard_normal((3, 4, t.size)))
    w2 = np.minimum(w2, 2.0)  # W2 is bounded by the sphere's diameter: growth saturates
    fit = fitting.fit_growth_rate(t, betas, w2, saturation=_FIT["saturation"], **WINDOW)
    assert fit.C1.shape == (4,)
    assert fit.mean == pytest.approx(C1, rel=0.03)
    np.testing.assert_allclose(np.exp(fit.log_a[np.isfinite(fit.log_a)]), a, rtol=0.1)
    ok = np.isfinite(fit.windows[:, 0])
    assert ok.any()
    # windows start after t = 0 and stay below half of each curve's largest value
    for i in np.nonzero(ok)[0]:
        t0, t1 = fit.windows[i]
        assert t0 > 0
        assert np.all(w2[i][:, (t >= t0) & (t <= t1)] < 0.5 * w2[i].max(axis=-1, keepdims=True))
    per_beta = fit.C1_per_beta[ok]
    np.testing.assert_allclose(per_beta, C1, rtol=0.1)


def test_fit_growth_rate_pooled_slope_is_fixed_effects_regression():
    """Different slopes per β: C1 is the pooled within-β slope Σ(t-t̄)(y-ȳ)/Σ(t-t̄)²."""
    betas = np.array([10.0, 100.0])
    t = np.linspace(0, 4, 21)
    scale = fitting.temperature_scale(betas)
    slopes = np.array([0.4, 0.6])
    w2 = 0.01 * scale[:, None, None] * np.exp(slopes[:, None, None] * t[None, None, :])
    fit = fitting.fit_growth_rate(t, betas, w2, saturation=1.0, **WINDOW)
    num = den = 0.0
    for i in range(2):
        lo, hi = fit.windows[i]
        s = (t >= lo) & (t <= hi)
        y = np.log(w2[i, 0, s] / scale[i])
        tt = t[s]
        num += np.sum((tt - tt.mean()) * (y - y.mean()))
        den += np.sum((tt - tt.mean()) ** 2)
    assert fit.C1[0] == pytest.approx(num / den, rel=1e-10)
    np.testing.assert_allclose(fit.C1_per_beta[:, 0], slopes, rtol=1e-9)


def test_fit_growth_rate_without_window_raises():
    t = np.linspace(0, 5, 11)
    w2 = np.full((2, 1, t.size), 1.0)  # flat: above half its maximum everywhere
    with pytest.raises(ValueError, match="no log-linear growth window"):
        fitting.fit_growth_rate(t, np.array([1.0, 2.0]), w2, saturation=_FIT["saturation"], **WINDOW)


@HYP
@given(
    t_arrive=st.floats(0.5, 4.0),
    t_leave=st.floats(4.5, 8.0),
    k=st.floats(0.3, 3.0),
    gap=st.floats(0.2, 1.5),
    shape=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    fraction=st.one_of(st.just(0.5), st.floats(0.1, 0.9)),
)
def test_geometric_departure_on_closed_form_curves(t_arrive, t_leave, k, gap, shape, fraction):
    """dist_A falls linearly to 0 at t_arrive, stays, and rises at rate k after t_leave: the departure is the first
    snapshot past t_leave + gap/(2k), past t_leave + fraction·gap/k with the threshold at that fraction of the gap
    (a rule that kept gap/2 whatever the fraction fails the second)."""
    t = np.linspace(0.0, 10.0, 201)
    curve = np.where(t < t_arrive, gap * (1 - t / t_arrive), 0.0) + k * np.maximum(t - t_leave, 0.0)
    dep, cen = fitting.geometric_departure(t, np.broadcast_to(curve, shape + t.shape), gap, fraction)
    assert dep.shape == cen.shape == shape
    expected = t_leave + fraction * gap / k
    if expected < t[-1] - 0.05:
        assert np.all(np.abs(dep - expected) <= 1.5 * (t[1] - t[0])) and not cen.any()
    elif expected > t[-1]:
        assert np.all(np.isnan(dep)) and cen.all()


def test_a_curve_at_the_threshold_neither_arrives_nor_departs():
    """Arrival is strictly below the threshold and departure strictly above it: a curve that falls exactly to
    q·gap never arrived; one that arrives and rises exactly to it is still metastable (a rule with ≤ or ≥ reads an
    arrival or a departure there). A fraction outside (0, 1) puts the threshold outside the way between the
    eigenspaces and is refused."""
    t = np.linspace(0.0, 4.0, 17)
    gap, q = 0.5, 0.25
    touches = np.where(t < 1.0, 1.0, q * gap)
    dep, cen = fitting.geometric_departure(t, touches, gap, q)
    assert np.isnan(dep) and not cen
    rises_to = np.where(t < 1.0, 1.0, np.where(t < 2.0, 0.0, q * gap))
    dep, cen = fitting.geometric_departure(t, rises_to, gap, q)
    assert np.isnan(dep) and cen
    dep, _ = fitting.geometric_departure(t, rises_to + 1e-12 * (t >= 2.0), gap, q)
    assert dep == 2.0
    for fraction in (0.0, 1.0, 2.5, -0.5, float("nan")):
        with pytest.raises(ValueError, match="fraction .* must lie in"):
            fitting.geometric_departure(t, touches, gap, fraction)


def test_departure_shift_compares_departures_of_curves_made_to_depart():
    """Curves built to arrive and leave at known times, through geometric_departure: the shift is the difference of
    the leaving times (two intervals apart must read as two), 0 where both stay or neither arrives, inf where one
    leaves and the other stays, or one stays and the other never arrives."""
    t = np.linspace(0.0, 10.0, 41)
    gap = 0.5

    def curve(leave):  # arrives at t = 1, leaves at ``leave`` (never within the horizon when None)
        rising = 0.0 if leave is None else np.maximum(t - leave, 0.0) * 10.0
        return np.where(t < 1.0, gap * (1 - t), 0.0) + rising

    never = np.full(t.shape, 2 * gap)  # never reaches E1(A)
    first = np.stack([curve(4.0), curve(4.0), curve(None), never, curve(4.0), curve(None), never])
    other = np.stack([curve(4.0), curve(4.5), curve(None), never, curve(None), never, curve(4.0)])
    dep_a, cen_a = fitting.geometric_departure(t, first, gap)
    dep_b, cen_b = fitting.geometric_departure(t, other, gap)
    shift = fitting.departure_shift(dep_a, cen_a, dep_b, cen_b)
    np.testing.assert_allclose(shift, [0.0, 0.5, 0.0, 0.0, np.inf, np.inf, np.inf])
    np.testing.assert_array_equal(shift, fitting.departure_shift(dep_b, cen_b, dep_a, cen_a))
    assert shift[1] > t[1] - t[0]  # two snapshot intervals apart: not within one


def test_t_interval_covers_as_labelled_and_a_percentile_bootstrap_does_not():
    """Coverage simulated on normal samples (the per-replica statistics are independent draws): the Student-t
    interval at 95 % covers ≥ 93 % for R = 3 and 4; the percentile bootstrap, the violating method, covers far less
    (so this coverage test can fail)."""
    rng = np.random.default_rng(12345)
    trials = 4000
    for R in (3, 4):
        samples = rng.standard_normal((trials, R))
        covered = np.mean([lo <= 0.0 <= hi for lo, hi in (fitting.t_interval(x, 0.95) for x in samples)])
        assert covered >= 0.93, (R, covered)
        boot = []
        for x in samples[:1000]:
            means = x[rng.integers(0, R, size=(500, R))].mean(axis=1)
            lo, hi = np.percentile(means, [2.5, 97.5])
            boot.append(lo <= 0.0 <= hi)
        assert np.mean(boot) < 0.9, (R, np.mean(boot))


def test_t_interval_closed_form_and_too_few_replicas():
    lo, hi = fitting.t_interval([1.0, 2.0, 3.0], 0.95)
    half = 4.302652729749464 * 1.0 / np.sqrt(3)  # t_{2, 0.975}·s/√3 with s = 1
    assert (lo, hi) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-9)
    assert np.all(np.isnan(fitting.t_interval([1.0], 0.95)))
    assert np.all(np.isnan(fitting.t_interval([1.0, np.nan], 0.95)))


def test_log_linear_window_returns_none_when_nothing_is_linear():
    t = np.linspace(0, 10, 41)
    assert fitting.log_linear_window(t, np.sin(3 * t), sign=-1, **WINDOW) is None  # wiggles
    assert fitting.log_linear_window(t, 0.5 * t, sign=-1, **WINDOW) is None  # linear, but wrong sign
    assert fitting.log_linear_window(t, -t, sign=-1, admissible=np.zeros(t.size, bool), **WINDOW) is None
    assert fitting.log_linear_window(t[:4], -t[:4], sign=-1, **WINDOW) is None  # fewer than min_points


def test_log_linear_window_finds_the_linear_part():
    t = np.linspace(0, 10, 41)
    logy = np.where(t <= 6.0, -t, -6.0 + 3.0 * (t - 6.0) ** 2)  # linear, then curved
    start, stop = fitting.log_linear_window(t, logy, sign=-1, **WINDOW)
    assert start == 0
    assert 6.0 <= t[stop - 1] <= 6.5


def test_log_linear_window_stays_inside_one_admissible_run():
    """An inadmissible point splits the run; the window must lie inside one admissible run."""
    t = np.linspace(0, 10, 41)
    logy = np.where(t <= 6.0, -t, -6.0 + 3.0 * (t - 6.0) ** 2)  # linear, then curved
    adm = np.ones(t.size, bool)
    adm[8] = False
    start, stop = fitting.log_linear_window(t, logy, sign=-1, admissible=adm, **WINDOW)
    assert adm[start:stop].all(), (start, stop)
    assert start == 9 and 6.0 <= t[stop - 1] <= 6.5


def _longest_run(ok, min_points):
    """Naive: the longest run of True of length >= min_points, earliest on ties, as [start, stop)."""
    best, start = None, None
    for i, flag in enumerate(list(ok) + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - start >= min_points and (best is None or i - start > best[1] - best[0]):
                best = (start, i)
            start = None
    return best


@settings(max_examples=60, deadline=None)
@given(
    mask=st.lists(st.booleans(), min_size=1, max_size=30),
    min_points=st.integers(3, 6),
    slope=st.sampled_from([-1.0, 1.0]),
)
def test_log_linear_window_on_exact_line_is_longest_admissible_run(mask, min_points, slope):
    """On an exactly linear log curve every admissible run qualifies, so the window is the longest
    admissible run (earliest on ties) and never contains an inadmissible point."""
    ok = np.array(mask)
    t = np.arange(ok.size, dtype=float)
    got = fitting.log_linear_window(
        t, slope * t + 0.3, sign=int(slope), min_points=min_points, max_residual=WINDOW["max_residual"], admissible=ok
    )
    assert got == _longest_run(ok, min_points)


def test_fit_decay_rate_window_excludes_points_below_floor():
    """A replica that dips below the floor at one snapshot must not be fitted across that snapshot."""
    t = np.linspace(0, 10, 41)
    w2 = np.exp(-t)[None, :].repeat(2, axis=0)
    w2[1, 8] = 1e-9  # below the default floor 1e-7 (rounding level), then back up
    fit = fitting.fit_decay_rate(t, w2, **WINDOW)
    lo, hi = fit.window_index
    assert not (lo <= 8 < hi), fit.window_index
    np.testing.assert_allclose(fit.slope, 1.0, rtol=1e-9)


def test_temperature_scale_and_bound_curve_formulas():
    beta = np.array([1.0, 10.0, 1e4])
    np.testing.assert_allclose(fitting.temperature_scale(beta), [np.sqrt(np.log(b + 1) / b) for b in beta])
    t = np.linspace(0, 3, 7)
    expected = 0.5 * np.sqrt(np.log(11) / 10) * np.exp(0.7 * t) + 2.0 * np.exp(-1.1 * t)
    np.testing.assert_allclose(fitting.bound_curve(t, 10.0, 0.5, 0.7, 2.0, 1.1), expected)


def test_line_fit():
    t = np.linspace(-1, 3, 9)
    assert fitting.line_fit(t, 2.5 * t - 0.75) == pytest.approx((2.5, -0.75))


def test_exact_w2_snapshots_every_kth_and_the_last():
    mask = experiment.exact_w2_snapshots({"distances": {"exact_every": 4}}, 11)
    assert np.flatnonzero(mask).tolist() == [0, 4, 8, 10]
    assert experiment.exact_w2_snapshots({"distances": {"exact_every": 1}}, 5).all()
    with pytest.raises(KeyError):  # the default lives in the schema: an unvalidated config has none
        experiment.exact_w2_snapshots({}, 5)


def test_fit_growth_rate_skips_snapshots_without_exact_distance():
    """NaN marks snapshots where the exact W2 was not solved: the fit uses the others only."""
    betas = np.array([10.0, 100.0])
    t = np.linspace(0.0, 8.0, 41)
    scale = fitting.temperature_scale(betas)
    w2 = 0.02 * scale[:, None, None] * np.exp(0.7 * t)[None, None, :] * np.ones((2, 3, 1))
    full = fitting.fit_growth_rate(t, betas, w2, saturation=1.0, **WINDOW)
    sparse = w2.copy()
    sparse[..., 1::3] = np.nan
    fit = fitting.fit_growth_rate(t, betas, sparse, saturation=1.0, **WINDOW)
    np.testing.assert_allclose(fit.C1, 0.7, rtol=1e-9)
    np.testing.assert_allclose(full.C1, 0.7, rtol=1e-9)
    assert np.all(np.isfinite(fit.windows))


@settings(max_examples=50, deadline=None)
@given(
    st.floats(0.5, 50.0),
    st.floats(-0.9, 3.0),
    st.integers(11, 200),
)
def test_the_change_over_the_last_tenth_reads_approaching_and_moving_away(span, change, n):
    """A curve constant at 1 up to 90 % of the run, then linear to 1 + change at its end: ``last_tenth_change``
    is ``change`` (from the first snapshot at or after 90 % of the span, where the curve is still 1), and it reads
    'still approaching' only below −0.1 and 'moving away' only above +0.1; a curve that falls or rises by less
    (the violation of either) reads neither."""
    t = np.linspace(0.0, span, n)
    k = int(np.searchsorted(t, 0.9 * span))
    assume(k < n - 1)  # 90 % of the span rounded onto the last snapshot: no tenth to change over
    d = np.ones(n)
    d[k:] = 1.0 + change * (t[k:] - t[k]) / (t[-1] - t[k])
    assert fitting.last_tenth_change(t, d) == pytest.approx(change, abs=1e-12)
    assert bool(fitting.still_approaching(t, d)) == (change < -0.1 - 1e-12) or abs(change + 0.1) < 1e-9
    assert bool(fitting.moving_away(t, d)) == (change > 0.1 + 1e-12) or abs(change - 0.1) < 1e-9
    flat = np.stack([d, np.full(n, 2.0)])  # (…, time): a constant curve beside it neither approaches nor leaves
    assert not fitting.still_approaching(t, flat)[1] and not fitting.moving_away(t, flat)[1]


def test_a_run_with_few_snapshots_still_compares_its_last_step():
    """Three snapshots over [0, 10]: 90 % of the span falls on the last one, and comparing it with itself would
    never read a change; the last step is compared instead, so a distance halving over it is still approaching
    and one doubling is moving away, while one constant over it (the violation) is neither."""
    t = np.array([0.0, 5.0, 10.0])
    assert fitting.last_tenth_change(t, np.array([2.0, 1.0, 0.5])) == pytest.approx(-0.5)
    assert fitting.still_approaching(t, np.array([2.0, 1.0, 0.5]))
    assert fitting.moving_away(t, np.array([2.0, 1.0, 2.0]))
    steady = np.array([2.0, 1.0, 1.0])
    assert not fitting.still_approaching(t, steady) and not fitting.moving_away(t, steady)
    assert fitting.last_tenth_change(np.array([3.0]), np.array([1.0])) == 0.0  # one snapshot: no change
