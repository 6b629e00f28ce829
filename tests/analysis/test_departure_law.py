"""The law in β of the departure times (``departures.departure_law_bounds``, ``departures.departure_law``).

Two curvatures against x = log β, each a linear functional of the per-β departure times, are bounded per replica
from the departures' snapshot ranges and censoring, then over replicas (Student-t, one-sided): k_lin (quadratic
coefficient of τ against (x, x²)) is 0 under a log-β law, k_log (the same for log τ) is 0 under a power law.
Here: the bounds against brute-force enumeration of the range ends, the coefficients against numpy.polyfit, the
verdict table, and the verdicts' error rates and power on departures simulated from each law (replica noise,
detection at the first snapshot at or after the true time, censoring beyond the horizon). Every check is shown
to fail on an input made to fail it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.analysis import departures, fitting
from lowtemp.store import analyses

Law = departures.DepartureLaw
CONF = 0.95  # the fit's default confidence (config/README.md)
BETA = np.array([10.0, 31.6, 100.0, 316.0])
SLOPE = 9.75 / np.log(10.0)  # a log-β law through the circle's mean-field departures 4.25 (β = 10) and 14 (β = 100)


def log_law(beta):
    return 4.25 + SLOPE * np.log(np.asarray(beta) / 10.0)


def power_law(p):
    return lambda beta: 4.25 * (np.asarray(beta) / 10.0) ** p


def simulate(law, rng, beta=BETA, replicas=3, step=0.05, horizon=1e9, replica_noise=0.1, noise=0.1):
    """Departures from ``law`` times a lognormal factor per replica and one per (β, replica) (so the mean of τ
    is the log-β law up to a factor, and log τ is the power law plus zero-mean noise: each law's own curvature is
    0 in expectation), detected at the first snapshot k·step at or after the true time, censored beyond
    ``horizon`` (departure NaN)."""
    factor = replica_noise * rng.standard_normal((1, replicas)) + noise * rng.standard_normal((beta.size, replicas))
    true = law(beta)[:, None] * np.exp(factor)
    detected = np.ceil(true / step) * step
    censored = detected > horizon
    return np.where(censored, np.nan, detected), censored


def trials(law, n, seed, conf=CONF, **kw):
    """The verdict, k_lin's and k_log's intervals, and the per-replica bounds of ``n`` simulated experiments."""
    rng = np.random.default_rng(seed)
    beta, step, horizon = kw.get("beta", BETA), kw.get("step", 0.05), kw.get("horizon", 1e9)
    out = {"law": [], "linear": [], "log": [], "per_replica": [], "censored": 0}
    for _ in range(n):
        dep, cen = simulate(law, rng, **kw)
        bounds = departures.departure_law_bounds(beta, dep, cen, horizon, step)
        lin, log = (fitting.one_sided_bounds(*bounds[k], conf) for k in ("linear", "log"))
        out["law"].append(departures.departure_law(lin, log))
        out["linear"].append(lin)
        out["log"].append(log)
        out["per_replica"].append(bounds)
        out["censored"] += bool(cen.any())
    return {k: np.array(v) if isinstance(v, list) and k != "per_replica" else v for k, v in out.items()}


def rate(found, law):
    return float(np.mean(found["law"] == law))


def tolerance(n, level=1 - CONF):
    """The nominal rate plus three binomial standard errors of its estimate from ``n`` trials."""
    return level + 3 * np.sqrt(level * (1 - level) / n)


# ---------------------------------------------------------------- naive references
def brute_force(weights, early, late, big):
    """min and max of Σ w_i y_i over every choice of range end per point, with ±inf ends replaced by ±big
    (plain loops; a bound that moves with ``big`` is infinite)."""
    ends = [
        [e if np.isfinite(e) else np.sign(e) * big, v if np.isfinite(v) else np.sign(v) * big]
        for e, v in zip(early, late)
    ]
    sums = [sum(w * y for w, y in zip(weights, choice)) for choice in itertools.product(*ends)]
    return min(sums), max(sums)


def naive_ends(departure, censored, horizon, step, slack, log):
    """Each departure's range (t_k − step − slack, t_k + slack], (horizon, +inf) when censored, through log when
    ``log`` (an end at or below 0 is −inf there)."""
    early, late = [], []
    for d, c, e in zip(departure, censored, slack):
        lo, hi = (horizon, np.inf) if c else (d - step - e, d + e)
        if log:
            lo = np.log(lo) if lo > 0 else -np.inf
            hi = np.log(hi)
        early.append(lo)
        late.append(hi)
    return early, late


def naive_check(weights, early, late):
    """The bounds the brute force expects: finite where the enumeration does not move with the stand-in."""
    lo1, hi1 = brute_force(weights, early, late, 1e6)
    lo2, hi2 = brute_force(weights, early, late, 1e9)
    return (lo1 if lo1 == pytest.approx(lo2) else -np.inf), (hi1 if hi1 == pytest.approx(hi2) else np.inf)


point = st.tuples(
    st.one_of(st.just(0.0), st.floats(0.05, 3.0), st.floats(-3.0, -0.05)),  # weight
    st.floats(0.2, 30.0),  # detected departure
    st.booleans(),  # censored
    st.floats(0.0, 0.5),  # slack
)


@settings(max_examples=300, deadline=None)
@given(points=st.lists(point, min_size=2, max_size=5), step=st.floats(0.0, 2.0), log=st.booleans())
def test_functional_bounds_are_the_extremes_over_the_range_ends(points, step, log):
    """Σ w_i τ_i (or Σ w_i log τ_i): the package's bounds are the min and max over all 2^n choices of range ends
    (censored: beyond the horizon, no end above), and every τ drawn inside the ranges lies within them."""
    w, dep, cen, slack = (np.array(v) for v in zip(*points))
    horizon = 31.0
    dep = np.where(cen, np.nan, dep)
    bounds = departures.departure_log_functional_bounds if log else departures.departure_functional_bounds
    lo, hi = bounds(w, dep[:, None], cen[:, None], horizon, step, slack)
    early, late = naive_ends(dep, cen, horizon, step, slack, log)
    want_lo, want_hi = naive_check(w, early, late)
    assert lo[0] == pytest.approx(want_lo, abs=1e-9) and hi[0] == pytest.approx(want_hi, abs=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(20):
        tau = np.where(cen, horizon + rng.exponential(10.0, w.size), dep - rng.uniform(0, 1, w.size) * (step + slack))
        tau = np.where(cen, tau, tau + rng.uniform(0, 1, w.size) * slack)
        if log and np.any(tau <= 0):
            continue
        value = np.sum(w * (np.log(tau) if log else tau))
        assert lo[0] - 1e-9 <= value <= hi[0] + 1e-9


def test_the_brute_force_tells_a_wrong_end_choice_apart():
    """The reference can fail: bounds that take every τ at its early end whatever the weight's sign (the slip the
    sign rule guards against) disagree with it."""
    w, dep, cen, slack = np.array([1.0, -2.0, 1.0]), np.array([4.0, 6.0, 9.0]), np.zeros(3, bool), np.zeros(3)
    early, late = naive_ends(dep, cen, 20.0, 0.5, slack, log=False)
    wrong_lo = float(np.sum(w * np.array(early)))
    assert naive_check(w, early, late)[0] != pytest.approx(wrong_lo)
    assert departures.departure_functional_bounds(w, dep[:, None], cen[:, None], 20.0, 0.5)[0][0] == pytest.approx(
        naive_check(w, early, late)[0]
    )


def test_unknown_departures_and_censoring_on_each_side():
    """A β that never arrived counts only with weight 0 (else NaN); a censored τ with w > 0 leaves no upper bound,
    with w < 0 no lower one; a departure range reaching time 0 leaves log τ no lower bound."""
    w = np.array([1.0, -2.0, 1.0])
    dep = np.array([[4.0, 4.0, 0.4], [np.nan, np.nan, 6.0], [9.0, 9.0, 9.0]])  # (beta, replica)
    cen = np.array([[False, False, False], [False, True, False], [False, False, False]])
    lo, hi = departures.departure_functional_bounds(w, dep, cen, 20.0, 0.5)
    assert np.isnan(lo[0]) and np.isnan(hi[0])  # never arrived at a weighted β
    assert np.isneginf(lo[1]) and np.isfinite(hi[1])  # censored, w < 0
    lo, hi = departures.departure_log_functional_bounds(w, dep, cen, 20.0, 0.5)
    assert np.isneginf(lo[2]) and np.isfinite(hi[2])  # 0.4 − 0.5 < 0: log τ has no lower end, w > 0
    lo, hi = departures.departure_functional_bounds(np.array([1.0, 0.0, 1.0]), dep[:, :1], cen[:, :1], 20.0, 0.5)
    assert lo[0] == pytest.approx(3.5 + 8.5) and hi[0] == pytest.approx(4.0 + 9.0)


def test_the_coefficients_are_numpy_polyfit_s_on_exact_data():
    """With exact departures (step 0) the bounds close on the least-squares coefficients: quadratic of τ and of
    log τ against (log β, log² β), slope of log τ; unevenly spaced β. The equal-spacing second difference, which
    a shortcut would use, is not the coefficient there (the comparison can fail)."""
    rng = np.random.default_rng(1)
    beta = np.array([10.0, 25.0, 100.0, 400.0, 1000.0])
    x = np.log(beta)
    for _ in range(20):
        tau = rng.uniform(2.0, 40.0, beta.size)
        found = departures.departure_law_bounds(beta, tau[:, None], np.zeros((beta.size, 1), bool), 50.0, 0.0)
        for key, want in (
            ("linear", np.polyfit(x, tau, 2)[0]),
            ("log", np.polyfit(x, np.log(tau), 2)[0]),
            ("power", np.polyfit(x, np.log(tau), 1)[0]),
        ):
            assert found[key][0][0] == pytest.approx(want, rel=1e-9, abs=1e-12)
            assert found[key][1][0] == pytest.approx(want, rel=1e-9, abs=1e-12)
    y = x**2
    h = np.mean(np.diff(x[:3]))
    assert departures.polynomial_weights(x[:3], 2) @ y[:3] == pytest.approx(1.0)
    assert (y[0] - 2 * y[1] + y[2]) / (2 * h**2) != pytest.approx(np.polyfit(x[:3], y[:3], 2)[0], rel=1e-3)


@pytest.mark.parametrize(
    ("law", "lin_sign", "log_sign"),
    [(log_law, 0, -1), (power_law(0.4), 1, 0), (lambda b: np.exp(np.asarray(b) / 100.0), 1, 1)],
    ids=["log", "power", "exponential"],
)
def test_each_law_has_the_curvatures_it_should(law, lin_sign, log_sign):
    """On exact data: log β gives k_lin = 0 and k_log < 0, a power of β k_log = 0 and k_lin > 0, e^{β/100}
    (faster than any power) both > 0."""
    found = departures.departure_law_bounds(BETA, law(BETA)[:, None], np.zeros((4, 1), bool), 1e9, 0.0)
    k_lin, k_log = found["linear"][0][0], found["log"][0][0]
    scale = np.max(np.abs(law(BETA)))
    assert (np.sign(k_lin) if abs(k_lin) > 1e-9 * scale else 0) == lin_sign
    assert (np.sign(k_log) if abs(k_log) > 1e-9 else 0) == log_sign


def test_the_verdict_table():
    """power: k_lin above 0, k_log's interval holds 0; log: k_log below 0, k_lin's holds 0; both excluding 0:
    neither; anything else undecided; NaN: not evaluable."""
    above, below, holds, nan = (0.1, 0.5), (-0.5, -0.1), (-0.1, 0.1), (np.nan, np.nan)
    assert departures.departure_law(above, holds) is Law.POWER
    assert departures.departure_law(holds, below) is Law.LOG
    for lin, log in ((above, above), (above, below), (below, below), (below, above)):
        assert departures.departure_law(lin, log) is Law.NEITHER
    for lin, log in ((holds, holds), (below, holds), (holds, above), ((-np.inf, np.inf), (-np.inf, np.inf))):
        assert departures.departure_law(lin, log) is Law.UNDECIDED
    assert departures.departure_law(nan, holds) is Law.NOT_EVALUABLE is departures.departure_law(above, nan)
    # censoring leaves k_log unbounded above: its interval holds 0 whatever the data, so it names no power law
    assert departures.departure_law((0.1, np.inf), (-0.1, np.inf)) is Law.UNDECIDED
    assert departures.departure_law((0.1, np.inf), (-0.1, 0.2)) is Law.POWER
    assert departures.departure_law((-np.inf, 0.1), (-0.5, -0.1)) is Law.UNDECIDED


def test_a_departure_at_the_end_of_its_range_is_not_misread_by_rounding():
    """τ = √β at β = 1, 4, 16 (an exact power law) detected at the snapshots 1, 2.25, 4 (step 0.25), the middle one
    with a shift of 2e-16: its true departure lies at the closed end of its range, k_log's upper bound comes out
    −1.7e-16 where the law's is 0, and a sign test at exact 0 named log β. The ranges hold both laws' curvatures
    (k_lin's reaches 0 at its lower end too): undecided. A real curvature beyond rounding is named as before."""
    beta, dep = np.array([1.0, 4.0, 16.0]), np.array([[1.0], [2.25], [4.0]])
    found = departures.departure_law_bounds(beta, dep, np.zeros((3, 1), bool), 1e9, 0.25, np.array([0.0, 2e-16, 0.0]))
    lin, log = ((float(v[0]) for v in found[k]) for k in ("linear", "log"))
    assert departures.departure_law(tuple(lin), tuple(log)) is Law.UNDECIDED
    assert departures.departure_law((0.1, 0.5), (-0.153, -1.67e-16)) is Law.POWER
    assert departures.departure_law((0.1, 0.5), (-0.153, -0.05)) is Law.NEITHER  # the must-fail: a real curvature


def test_censored_departures_faster_than_any_power_are_not_named_a_power():
    """τ = 4.25·e^{(β − 10)/40} (faster than any power of β) at β = 10, 31.6, 100 with β = 100 beyond the horizon 12
    in every replica (d = 3's pattern: 4.25, about 6.4, censored): k_lin's interval lies above 0 and k_log's holds 0
    only through its infinite upper end, so the verdict is undecided. The old rule (a power of β whenever k_log's
    interval held 0) named it a power law."""
    tau = 4.25 * np.exp((BETA[:3] - 10.0) / 40.0)
    dep = np.repeat(np.ceil(tau / 0.25)[:, None] * 0.25, 3, axis=1) + np.array([[0.0, 0.25, -0.25]])
    cen = dep > 12.0
    assert cen[2].all() and not cen[:2].any()
    found = departures.departure_law_bounds(BETA[:3], np.where(cen, np.nan, dep), cen, 12.0, 0.25)
    lin, log = (fitting.one_sided_bounds(*found[k], CONF) for k in ("linear", "log"))
    assert lin[0] > 0 and log[0] <= 0 and np.isposinf(log[1])
    assert departures.departure_law(lin, log) is Law.UNDECIDED


def test_two_beta_are_not_evaluable_and_a_censored_largest_beta_never_reads_as_log():
    """With two β there is no curvature (the exponent between them exists). A largest β censored in every
    replica (d = 3 so far: 4.25 and 6.4 at β = 10, 31.6, β = 100 beyond the horizon) leaves both curvatures
    unbounded above, so the verdict is never log β: a short horizon gives undecided, a long one shows the jump
    (faster than any power)."""
    dep = np.array([[4.25, 4.5, 4.0], [6.4, 6.5, 6.25]])
    two = departures.departure_law_bounds(BETA[:2], dep, np.zeros((2, 3), bool), 10.0, 0.25)
    assert np.isnan(two["linear"]).all() and np.isnan(two["log"]).all()
    exact = np.log(dep[1] / dep[0]) / np.log(BETA[1] / BETA[0])
    assert np.all((two["power"][0] <= exact) & (exact <= two["power"][1]))
    dep3, cen3 = np.vstack([dep, np.full((1, 3), np.nan)]), np.array([[False] * 3, [False] * 3, [True] * 3])
    verdicts = {}
    for horizon in (7.0, 40.0):
        found = departures.departure_law_bounds(BETA[:3], dep3, cen3, horizon, 0.25)
        lin, log = (fitting.one_sided_bounds(*found[k], CONF) for k in ("linear", "log"))
        assert np.isposinf(lin[1]) and np.isposinf(log[1])
        verdicts[horizon] = departures.departure_law(lin, log)
    assert verdicts == {7.0: Law.UNDECIDED, 40.0: Law.NEITHER}


# ---------------------------------------------------------------- coverage and power, simulated
N_TRIALS = 1500
RECOGNISABLE = dict(replicas=5, step=0.25, replica_noise=0.05, noise=0.03)


@pytest.mark.parametrize("replicas", [3, 5])
def test_a_log_law_is_not_taken_for_a_power_of_beta(replicas):
    """Log-β departures (10 % replica and point noise, snapshot step 0.05, horizon 22: β = 316 sometimes
    censored): "a power of β" in at most 1 − confidence of the trials (plus three standard errors), and each
    one-sided bound of k_lin on the right side of its true value 0 at least at the confidence (so its interval holds
    0 at ≥ 2·confidence − 1). Power-law data (p = 0.3) would fail the first assertion."""
    found = trials(log_law, N_TRIALS, seed=10 + replicas, replicas=replicas, horizon=22.0)
    tol = tolerance(N_TRIALS)
    assert found["censored"] > 0.05 * N_TRIALS  # censoring is exercised
    assert rate(found, Law.POWER) <= tol
    assert np.mean(found["linear"][:, 0] > 0) <= tol and np.mean(found["linear"][:, 1] < 0) <= tol
    contains = np.mean((found["linear"][:, 0] <= 0) & (found["linear"][:, 1] >= 0))
    assert contains >= 2 * CONF - 1 - 3 * np.sqrt(0.1 * 0.9 / N_TRIALS)
    wrong = trials(power_law(0.3), N_TRIALS // 3, seed=20 + replicas, replicas=replicas, horizon=22.0)
    assert rate(wrong, Law.POWER) > tolerance(N_TRIALS // 3)


@pytest.mark.parametrize("p", [0.3, 0.5])
@pytest.mark.parametrize("replicas", [3, 5])
def test_a_power_law_is_not_taken_for_log_beta(p, replicas):
    """Power-law departures τ = 4.25 (β/10)^p, same noise and snapshots, horizon 1.05 τ(316) (β = 316 censored in
    a part of the replicas): "log β" in at most 1 − confidence of the trials (plus three standard errors), and k_log's
    one-sided bounds on the right side of 0 at least at the confidence. Log-law data (horizon 22, as above) would
    fail the first assertion."""
    horizon = 1.05 * float(power_law(p)(316.0))
    found = trials(power_law(p), N_TRIALS, seed=int(100 * p) + replicas, replicas=replicas, horizon=horizon)
    tol = tolerance(N_TRIALS)
    assert found["censored"] > 0.05 * N_TRIALS
    assert rate(found, Law.LOG) <= tol
    assert np.mean(found["log"][:, 0] > 0) <= tol and np.mean(found["log"][:, 1] < 0) <= tol
    wrong = trials(log_law, N_TRIALS // 3, seed=30 + replicas, replicas=replicas, horizon=22.0)
    assert rate(wrong, Law.LOG) > tolerance(N_TRIALS // 3)


def test_the_coverage_check_catches_an_interval_that_is_too_short():
    """The same per-replica bounds with a normal quantile in place of Student-t's (3 replicas): k_lin's lower bound
    lies above its true value 0 in far more than 1 − confidence of log-law trials, and the check above would
    reject it."""
    found = trials(log_law, N_TRIALS, seed=7, replicas=3, step=0.001)
    lower = np.array([b["linear"][0] for b in found["per_replica"]])
    z = lower.mean(axis=1) - 1.6449 * lower.std(axis=1, ddof=1) / np.sqrt(lower.shape[1])
    assert np.mean(z > 0) > tolerance(N_TRIALS)
    assert np.mean(found["linear"][:, 0] > 0) <= tolerance(N_TRIALS)


@pytest.mark.parametrize(
    ("law", "expected"),
    [(log_law, Law.LOG), (power_law(0.3), Law.POWER), (power_law(0.5), Law.POWER)],
    ids=["log", "power 0.3", "power 0.5"],
)
def test_each_law_is_recognised_with_enough_replicas(law, expected):
    """β = 10, 31.6, 100, 316, 5 replicas, 5 % replica noise and 3 % point noise, snapshot step 0.25, no censoring:
    each law is named in ≥ 90 % of the trials (RECOGNISED)."""
    assert rate(trials(law, 400, seed=3, **RECOGNISABLE), expected) >= 0.9


def test_with_fewer_replicas_and_coarser_snapshots_a_weak_power_law_is_often_undecided():
    """The recognition check can fail: with 3 replicas and a snapshot step of 0.5, p = 0.3 is named in about half
    of the trials (k_lin's interval then holds 0: undecided), never as log β."""
    found = trials(power_law(0.3), 400, seed=3, **dict(RECOGNISABLE, replicas=3, step=0.5))
    assert rate(found, Law.POWER) < 0.9
    assert rate(found, Law.LOG) <= tolerance(400)


def test_fit_nc_names_every_law_code_with_its_words():
    """fit.nc's ``departure_law`` is an integer: its long name says what each code of ``DepartureLaw`` means, in
    the words the claim prints."""
    long_name = analyses.FIT_VARIABLES["departure_law"][1]
    for law in Law:
        assert f"{law.value} {law.words.replace('β', 'beta')}" in long_name, law
    assert "3 a power of beta" not in long_name  # the check can fail: a code that is not there


def test_the_words_of_neither_do_not_say_departures_that_fall_grow():
    """Departures 10, 3, 4 at β = 10, 100, 1000 fall with β, yet both curvatures are positive (log τ convex): the
    law reads NEITHER, and its words must say only what the curvatures say (curving up), not that τ grows faster
    than a power; the slope's bounds, both below 0, are what fail such data."""
    beta, dep = np.array([10.0, 100.0, 1000.0]), np.array([[10.0], [3.0], [4.0]])
    bounds = departures.departure_law_bounds(beta, dep, np.zeros((3, 1), bool), 40.0, 1e-6)
    lin, log = ([float(v[0]) for v in bounds[k]] for k in ("linear", "log"))
    assert departures.departure_law(lin, log) is Law.NEITHER
    words = departures.neither_law_words(lin[0], log[0])
    assert "curving up" in words and "faster" not in words
    assert departures.departure_slope_bounds(beta, dep, np.zeros((3, 1), bool), 40.0, 1e-6)[1][0] < 0
