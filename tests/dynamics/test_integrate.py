"""Time integration on the sphere: against the exact zero-temperature solution, observed orders,
the norm drift before renormalisation and the per-step guards."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import EIGENVALUES_OF_A, SIGMA_MAX, SIGMA_MIN, random_unit
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.dynamics import fields as dynamics
from lowtemp.dynamics import integrate
from lowtemp.model import exact, matrices, measures, projection, seeding

SCHEMA_DEFAULT_DT = 0.05


@pytest.fixture(scope="module")
def problem():
    rng = seeding.generator(123, "tests", "integrate")
    M = matrices.generate_matrices(
        "spectral", 3, rng, eigenvalues=EIGENVALUES_OF_A, sigma_min=SIGMA_MIN, sigma_max=SIGMA_MAX
    )
    X0 = measures.uniform(rng, 2, 60, 3)
    return M, X0


def _zero_field(M):
    return lambda X: dynamics.zero_temperature_field(X, M.A, M.B)


def test_rk4_matches_exact_zero_temperature_solution(problem):
    M, X0 = problem
    grid = integrate.TimeGrid(horizon=10, snapshots=20, dt=SCHEMA_DEFAULT_DT)
    assert grid.step == pytest.approx(0.05)
    sim = integrate.simulate(_zero_field(M), X0, grid, "rk4")
    ref = exact.exact_zero_temperature(X0, M.A, M.B, grid.times)
    assert sim.shape == ref.shape == integrate.trajectory_shape(X0.shape, 21) == (2, 21, 60, 3)
    assert np.max(np.abs(sim[:, -1] - ref[:, -1])) < 1e-6
    assert np.max(np.abs(sim - ref)) < 1e-6  # every snapshot, not only the end


def _max_error(M, X0, method, dt, horizon=3.0):
    grid = integrate.TimeGrid(horizon=horizon, snapshots=6, dt=dt)
    assert grid.step == pytest.approx(dt)
    sim = integrate.simulate(_zero_field(M), X0, grid, method)
    ref = exact.exact_zero_temperature(X0, M.A, M.B, grid.times)
    return np.max(np.abs(sim - ref))


@pytest.mark.parametrize("method, dts, order", [("rk4", [0.25, 0.125, 0.0625], 4), ("euler", [0.1, 0.05, 0.025], 1)])
def test_observed_order_by_step_halving(problem, method, dts, order):
    M, X0 = problem
    errs = [_max_error(M, X0, method, dt) for dt in dts]
    observed = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(observed - order) < 0.35), (errs, observed)


def test_exact_solution_converges_to_projection(problem):
    M, X0 = problem
    # tokens bounded away from E1⊥ so that the limit is reached by t = 40
    u = M.E1[:, 0]
    keep = np.abs(X0 @ u) > 0.2
    Xk = X0[0][keep[0]][None]
    ref = exact.exact_zero_temperature(Xk, M.A, M.B, np.array([0.0, 40.0]))
    np.testing.assert_allclose(ref[:, 0], Xk, atol=1e-14)
    np.testing.assert_allclose(ref[:, -1], projection.projection_map(Xk, M.E1), atol=1e-9)


def test_exact_time_change_is_bounded_by_singular_values(problem):
    """ds/dt = 1/|Bᵀx| ∈ [1/σmax, 1/σmin], so s(t) lies in [t/σmax, t/σmin]."""
    M, X0 = problem
    t = np.linspace(0, 5, 11)
    s = exact.exact_time_change(X0, M.A, M.B, t)
    assert s.shape == (X0.shape[0], t.size, X0.shape[1])  # (replica, time, token)
    assert np.all(s >= t[:, None] / M.sigma_max - 1e-10)
    assert np.all(s <= t[:, None] / M.sigma_min + 1e-10)
    assert np.all(np.diff(s, axis=1) > 0)


def test_normalised_linear_flow_against_expm():
    from scipy.linalg import expm

    rng = np.random.default_rng(8)
    S = rng.standard_normal((4, 4))
    A = S + S.T
    X0 = random_unit(rng, 5, 4)
    s = rng.uniform(0, 3, size=5)
    got = exact.normalised_linear_flow(X0, A, s)
    for x, si, g in zip(X0, s, got):
        y = expm(si * A) @ x
        np.testing.assert_allclose(g, y / np.linalg.norm(y), atol=1e-12)


@pytest.mark.parametrize("method", ["rk4", "euler"])
@pytest.mark.parametrize("which", ["finite", "zero"])
def test_tokens_stay_on_the_sphere(problem, method, which):
    M, X0 = problem
    field = (lambda X: dynamics.attention_field(X, M.B, M.V, 5.0)) if which == "finite" else _zero_field(M)
    grid = integrate.TimeGrid(horizon=4.0, snapshots=8, dt=0.1)
    out = integrate.simulate(field, X0, grid, method)
    assert out.shape == (X0.shape[0], 9) + X0.shape[1:]
    assert np.max(np.abs(np.linalg.norm(out, axis=-1) - 1.0)) < 1e-12
    np.testing.assert_array_equal(out[:, 0], measures.normalise(X0))


def test_a_trajectory_inserts_time_before_the_tokens(problem):
    """The one layout: (replica, time, token, dim) for a batch of clouds, (time, token, dim) for one cloud, the
    same numbers either way; ``snapshot`` hands back a contiguous cloud (what the kernels saw while stepping)."""
    M, X0 = problem
    grid = integrate.TimeGrid(horizon=1.0, snapshots=4, dt=0.25)
    batch = integrate.simulate(_zero_field(M), X0, grid, "rk4")
    one = integrate.simulate(_zero_field(M), X0[1], grid, "rk4")
    assert batch.shape == (2, 5, 60, 3) and one.shape == (5, 60, 3)
    np.testing.assert_array_equal(batch[1], one)
    cloud = integrate.snapshot(batch, 3)
    assert cloud.flags.c_contiguous and cloud.shape == (2, 60, 3)
    np.testing.assert_array_equal(cloud, batch[:, 3])
    # the exact solution and the mean-field push-forward use the same layout (tests/dynamics/test_meanfield.py)
    assert exact.exact_zero_temperature(X0, M.A, M.B, grid.times).shape == batch.shape


def test_simulate_reports_progress_and_rejects_unknown_method(problem):
    M, X0 = problem
    grid = integrate.TimeGrid(horizon=1.0, snapshots=4, dt=0.1)
    seen = []
    integrate.simulate(
        _zero_field(M),
        X0,
        grid,
        "rk4",
        progress=lambda t, k, record: seen.append((t, k, record.accepted[: k + 1].sum())),
    )
    assert [t for t, _, _ in seen] == pytest.approx(grid.times[1:].tolist())
    assert [k for _, k, _ in seen] == [1, 2, 3, 4]
    assert [n for _, _, n in seen] == [grid.steps_per_snapshot * i for i in range(1, 5)]
    with pytest.raises(ValueError, match="unknown integrator"):
        integrate.simulate(_zero_field(M), X0, grid, "leapfrog")


def test_simulate_stops_on_non_finite_positions_naming_the_time():
    X0 = random_unit(np.random.default_rng(0), 1, 4, 3)
    grid = integrate.TimeGrid(horizon=1.0, snapshots=4, dt=0.25)
    with pytest.raises(FloatingPointError, match=r"non-finite at t = 0\.25"):
        integrate.simulate(lambda X: np.full_like(X, np.nan), X0, grid, "euler")


def test_check_on_sphere_detects_drift():
    X = random_unit(np.random.default_rng(1), 2, 3, 3)
    integrate.check_on_sphere(X, 0.0)
    X[1, 2] *= 1 + 1e-9
    with pytest.raises(FloatingPointError, match=r"left the sphere at t = 2\.5.*replica 1, token 2"):
        integrate.check_on_sphere(X, 2.5)


@settings(max_examples=60, deadline=None)
@given(horizon=st.floats(0.1, 100.0), snapshots=st.integers(1, 200), frac=st.floats(0.001, 1.0))
def test_time_grid_invariants(horizon, snapshots, frac):
    dt = frac * horizon
    g = integrate.TimeGrid(horizon=horizon, snapshots=snapshots, dt=dt)
    assert g.times[0] == 0.0 and g.times[-1] == pytest.approx(horizon)
    assert g.times.size == snapshots + 1
    assert g.step <= dt * (1 + 1e-8)
    assert g.step * g.steps_per_snapshot * snapshots == pytest.approx(horizon)
    assert g.total_steps == g.steps_per_snapshot * snapshots
    # the step is the largest admissible uniform one: one fewer sub-step would exceed dt
    if g.steps_per_snapshot > 1:
        assert horizon / snapshots / (g.steps_per_snapshot - 1) > dt * (1 - 1e-8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(horizon=0.0, snapshots=3, dt=0.1), "horizon"),
        (dict(horizon=np.inf, snapshots=3, dt=0.1), "horizon"),
        (dict(horizon=1.0, snapshots=3, dt=0.0), "dt"),
        (dict(horizon=1.0, snapshots=3, dt=2.0), "larger than time.horizon"),
        (dict(horizon=1.0, snapshots=0, dt=0.1), "snapshots"),
        (dict(horizon=1.0, snapshots=2.5, dt=0.1), "snapshots"),
    ],
)
def test_time_grid_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        integrate.TimeGrid(**kwargs)


# ------------------------------------------------------------------ norm drift before renormalisation
def _finite_field(M, beta=5.0):
    return lambda X: dynamics.attention_field(X, M.B, M.V, beta)


@pytest.mark.parametrize("which", ["zero", "finite"])
@pytest.mark.parametrize("method, order", [("rk4", 5), ("euler", 2)])
def test_norm_drift_of_one_step_scales_like_the_local_error(problem, which, method, order):
    """The drift | |y| − 1 | of one step from the sphere is a lower bound on its local error:
    O(h^5) for RK4, O(h^2) for Euler. Observed by step halving on smooth fields (the
    zero-temperature field and the finite-temperature one at β = 5), max over tokens."""
    M, X0 = problem
    field = _zero_field(M) if which == "zero" else _finite_field(M)
    X = measures.normalise(X0)
    hs = 0.2 / 2.0 ** np.arange(4)
    drift = np.array([integrate.norm_drift(integrate.INCREMENTS[method](field, X, h)).max() for h in hs])
    assert np.all(drift > 1e-13), drift  # well above rounding at every level
    observed = np.log2(drift[:-1] / drift[1:])
    assert np.all(np.abs(observed - order) < 0.2), (drift, observed)


def test_euler_drift_is_the_turn_angle(problem):
    """For Euler the field is tangent, so |x + h f| = sqrt(1 + h²|f|²) exactly: the drift is a turn
    of θ = h|f| radians (the relation behind DRIFT_TOLERANCE's 18°)."""
    M, X0 = problem
    X = measures.normalise(X0)
    F = _zero_field(M)(X)
    h = 0.3
    got = integrate.norm_drift(integrate.euler_increment(_zero_field(M), X, h))
    np.testing.assert_allclose(got, np.sqrt(1.0 + h**2 * np.sum(F * F, axis=-1)) - 1.0, rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("method", ["rk4", "euler"])
def test_simulate_records_the_largest_drift_of_each_snapshot_interval(problem, method):
    """norm_drift[k] is the max over the steps from snapshot k − 1 to k, per replica (0 at k = 0);
    the positions are those of simulate without the drift, bit for bit."""
    M, X0 = problem
    field = _zero_field(M)
    grid = integrate.TimeGrid(horizon=1.2, snapshots=3, dt=0.15)  # 3 steps per snapshot
    out, record = integrate.simulate(field, X0, grid, method, return_record=True)
    drift = record.drift
    np.testing.assert_array_equal(out, integrate.simulate(field, X0, grid, method))
    assert drift.shape == (X0.shape[0], grid.times.size)
    assert np.all(drift[:, 0] == 0.0)
    X = measures.normalise(X0)
    for k in range(1, grid.times.size):
        expected = np.zeros(X0.shape[0])
        for _ in range(grid.steps_per_snapshot):
            Y = integrate.INCREMENTS[method](field, X, grid.step)
            expected = np.maximum(expected, integrate.norm_drift(Y).max(axis=-1))
            X = measures.normalise(Y)
        np.testing.assert_array_equal(drift[:, k], expected)
        np.testing.assert_array_equal(out[:, k], X)
    assert np.all(drift[:, 1:] > 0) and np.all(drift < integrate.DRIFT_TOLERANCE)
    per_step = integrate.EVALUATIONS_PER_STEP[method]
    assert record.accepted.tolist() == [0] + [grid.steps_per_snapshot] * grid.snapshots
    assert record.evaluations.tolist() == [0] + [per_step * grid.steps_per_snapshot] * grid.snapshots
    assert record.rejected.sum() == 0 and np.all(record.next_step == grid.step)


def _kick(replica, token, theta, h):
    """A field zero everywhere but at one token, where it turns that token by θ in one Euler step of h."""

    def field(X):
        F = np.zeros_like(X)
        x = X[replica, token]
        e = np.eye(X.shape[-1])[0] - x[0] * x  # a tangent direction at x
        F[replica, token] = theta / h * e / np.linalg.norm(e)
        return F

    return field


def test_drift_guard_fires_on_a_step_far_too_large_naming_step_time_replica_token():
    """One token turned by θ = 0.5 rad in one Euler step: drift sqrt(1 + θ²) − 1 = 0.118 > 0.05."""
    X0 = random_unit(np.random.default_rng(0), 2, 5, 3)
    grid = integrate.TimeGrid(horizon=1.0, snapshots=2, dt=0.25)
    theta = 0.5
    assert np.sqrt(1 + theta**2) - 1 > integrate.DRIFT_TOLERANCE
    with pytest.raises(
        FloatingPointError,
        match=r"beta = 7: the step is far too large: at t = 0\.25 \(step 1\) it left the sphere by "
        r"\| \|x\| - 1 \| = 1\.180e-01 > 0\.05 .*replica 1, token 2; lower time\.dt",
    ):
        integrate.simulate(_kick(1, 2, theta, grid.step), X0, grid, "euler", label="beta = 7")


def test_drift_guard_threshold_is_sharp():
    """θ just inside the tolerance passes (and is recorded), just outside it stops the run."""
    X0 = random_unit(np.random.default_rng(1), 1, 4, 3)
    grid = integrate.TimeGrid(horizon=0.5, snapshots=1, dt=0.5)
    inside = np.sqrt((1 + 0.99 * integrate.DRIFT_TOLERANCE) ** 2 - 1)
    outside = np.sqrt((1 + 1.01 * integrate.DRIFT_TOLERANCE) ** 2 - 1)
    _, record = integrate.simulate(_kick(0, 3, inside, grid.step), X0, grid, "euler", return_record=True)
    assert record.drift[0, 1] == pytest.approx(0.99 * integrate.DRIFT_TOLERANCE, rel=1e-12)
    with pytest.raises(FloatingPointError, match="far too large.*replica 0, token 3"):
        integrate.simulate(_kick(0, 3, outside, grid.step), X0, grid, "euler")


def test_drift_guard_fires_for_rk4_on_the_real_field_with_a_huge_step(problem):
    """The zero-temperature field with one RK4 step of h = 2 (40× the default dt): the guard names
    the token whose one-step drift is largest."""
    M, X0 = problem
    field = _zero_field(M)
    drift = integrate.norm_drift(integrate.rk4_increment(field, measures.normalise(X0), 2.0))
    assert drift.max() > integrate.DRIFT_TOLERANCE
    r, i = np.unravel_index(np.argmax(drift), drift.shape)
    grid = integrate.TimeGrid(horizon=4.0, snapshots=2, dt=2.0)
    with pytest.raises(FloatingPointError, match=rf"far too large: at t = 2 \(step 1\).*replica {r}, token {i};"):
        integrate.simulate(field, X0, grid, "rk4", label="zero temperature")


def test_steppers_are_the_renormalised_increments(problem):
    M, X0 = problem
    X = measures.normalise(X0)
    for method, step in integrate.STEPPERS.items():
        np.testing.assert_array_equal(
            step(_zero_field(M), X, 0.1), measures.normalise(integrate.INCREMENTS[method](_zero_field(M), X, 0.1))
        )


# ------------------------------------------------------------------ adaptive: embedded pairs
PAIRS = sorted(integrate.ADAPTIVE)


@pytest.mark.parametrize("name", PAIRS)
def test_embedded_pair_orders_of_one_step_against_the_exact_solution(problem, name):
    """One trial step from the exact solution's start on the zero-temperature field: the kept
    solution's local error is O(h^(p+1)) and the error estimate O(h^(q+1)) (p, q the pair's orders),
    observed by step halving against the exact time-changed solution."""
    pair = integrate.ADAPTIVE[name]
    M, X0 = problem
    field = _zero_field(M)
    X = measures.normalise(X0)
    hs = 0.4 / 2.0 ** np.arange(4)
    local, estimate = [], []
    for h in hs:
        _, X_next, _, error = integrate.embedded_trial(pair, field, X, h, field(X))
        local.append(np.max(np.abs(X_next - exact.exact_zero_temperature(X, M.A, M.B, np.array([h]))[:, 0])))
        estimate.append(np.max(np.abs(error)))
    local, estimate = np.array(local), np.array(estimate)
    assert np.all(local > 1e-14), local
    # the leading term takes over as h → 0: the last halving within 0.3 of the order, the earlier ones
    # (higher terms still visible at h = 0.4) no lower than that
    for errors, order in ((local, pair.order + 1), (estimate, pair.estimate_order + 1)):
        observed = np.log2(errors[:-1] / errors[1:])
        assert abs(observed[-1] - order) < 0.3 and np.all(observed > order - 0.3), (errors, observed)
    assert np.all(estimate > local)  # the estimate measures the lower-order solution: it is the larger


@pytest.mark.parametrize("name", PAIRS)
def test_tableaux_are_consistent(name):
    """Row sums of a give the stage times c_i in [0, 1]; the kept weights sum to 1 and the estimate's
    weights e = b − b̂ to 0 (both solutions are consistent), for both pairs."""
    pair = integrate.ADAPTIVE[name]
    c = [sum(row) for row in pair.a]
    assert all(0 < ci <= 1 + 1e-15 for ci in c)
    assert sum(pair.b) == pytest.approx(1.0, abs=1e-15)
    assert sum(pair.e) == pytest.approx(0.0, abs=1e-15)
    assert len(pair.e) == pair.stages + 1 and all(len(row) == i + 1 for i, row in enumerate(pair.a))


@pytest.mark.parametrize("name", PAIRS)
def test_adaptive_run_lands_on_the_snapshots_and_its_error_is_proportional_to_the_tolerance(problem, name):
    """Against the exact zero-temperature solution at every snapshot: the error at tolerance τ is
    O(τ) (the step is ∝ τ^(1/(q+1)) and the kept solution's global error ∝ h^p = τ^(p/(q+1)) = τ for
    both pairs), so a hundredth of τ gives about a hundredth of the error; each run has fewer steps
    than a fixed RK4 run of the same accuracy would need at the largest step that stays ≤ Δ."""
    M, X0 = problem
    grid = integrate.TimeGrid(horizon=6.0, snapshots=12, dt=0.05)
    ref = exact.exact_zero_temperature(X0, M.A, M.B, grid.times)
    errors = []
    for tol in (1e-6, 1e-8):
        sim, record = integrate.simulate(_zero_field(M), X0, grid, name, tolerance=tol, return_record=True)
        errors.append(np.max(np.sqrt(np.sum((sim - ref) ** 2, axis=-1))))
        assert np.all(record.accepted[1:] >= 1)  # at least the landing step in every interval
        stages = integrate.ADAPTIVE[name].stages
        assert record.evaluations.sum() == 1 + stages * (record.accepted.sum() + record.rejected.sum())
        assert np.all(record.next_step[1:] <= grid.horizon / grid.snapshots + 1e-15)
    ratio = errors[0] / errors[1]
    assert 20 < ratio < 500, errors
    assert errors[0] < 50 * 1e-6


def test_error_norm_is_the_tokens_root_mean_square_of_the_largest_replica():
    e = np.zeros((2, 4, 3))
    e[0, 0] = [3.0, 4.0, 0.0]  # |e| = 5 on one of four tokens: rms 2.5
    e[1, :, 2] = 2.0  # |e| = 2 on every token: rms 2
    assert integrate.error_norm(e) == pytest.approx(2.5)
    e[1, 1, 1] = np.nan
    assert np.isnan(integrate.error_norm(e))


def test_adaptive_controller_rejects_a_bad_trial_and_recovers(problem):
    """One evaluation that returns NaN (a transient fault) rejects its trial step; the run completes,
    records the rejection and still meets the exact solution at the tolerance's scale."""
    M, X0 = problem
    field = _zero_field(M)
    calls = {"n": 0}

    def flaky(X):
        calls["n"] += 1
        return np.full_like(X, np.nan) if calls["n"] == 9 else field(X)

    grid = integrate.TimeGrid(horizon=2.0, snapshots=4, dt=0.05)
    sim, record = integrate.simulate(flaky, X0, grid, "dopri5", tolerance=1e-7, return_record=True)
    assert record.rejected.sum() >= 1
    ref = exact.exact_zero_temperature(X0, M.A, M.B, grid.times)
    assert np.max(np.abs(sim - ref)) < 1e-5


def test_adaptive_run_stops_when_the_step_underflows_naming_the_time(problem):
    """A field that is NaN from t > 0 on rejects every trial; the step shrinks by SHRINK_MAX per
    rejection and the run stops once it falls below MIN_STEP_FRACTION of the snapshot interval."""
    M, X0 = problem
    field = _zero_field(M)
    calls = {"n": 0}

    def broken(X):
        calls["n"] += 1
        return field(X) if calls["n"] <= 13 else np.full_like(X, np.nan)  # two good steps (to t = 0.3), then none

    grid = integrate.TimeGrid(horizon=2.0, snapshots=4, dt=0.05)
    with pytest.raises(
        FloatingPointError,
        match=r"beta = 3: the adaptive step fell to .* at t = 0\.3 \(below 1e-10 of the snapshot .*"
        r"raise time\.tolerance",
    ):
        integrate.simulate(broken, X0, grid, "dopri5", tolerance=1e-3, label="beta = 3")


@pytest.mark.parametrize("tolerance", [0.0, -1e-6, np.nan, np.inf])
def test_adaptive_run_refuses_a_bad_tolerance(problem, tolerance):
    M, X0 = problem
    with pytest.raises(ValueError, match="tolerance must be a positive finite number"):
        integrate.simulate(_zero_field(M), X0, integrate.TimeGrid(1.0, 2, 0.1), "dopri5", tolerance=tolerance)


def test_default_tolerance_is_a_thousandth_of_the_w2_floor():
    assert integrate.default_tolerance(4096) == pytest.approx(1e-3 / 64)
    assert integrate.default_tolerance(100) == pytest.approx(1e-4)


def test_adaptive_steps_are_capped_and_the_cap_is_checked(problem):
    """max_step = Δ/4 gives at least four steps per snapshot interval and never proposes more; a cap
    above Δ is Δ; a cap of 0 is refused."""
    M, X0 = problem
    grid = integrate.TimeGrid(horizon=2.0, snapshots=4, dt=0.05)
    _, capped = integrate.simulate(
        _zero_field(M), X0, grid, "dopri5", tolerance=1e-3, max_step=0.125, return_record=True
    )
    assert np.all(capped.accepted[1:] >= 4) and np.all(capped.next_step[1:] <= 0.125)
    _, loose = integrate.simulate(_zero_field(M), X0, grid, "dopri5", tolerance=1e-3, max_step=10.0, return_record=True)
    assert np.all(loose.next_step[1:] <= 0.5) and loose.accepted.sum() < capped.accepted.sum()
    with pytest.raises(ValueError, match="largest step must be positive"):
        integrate.simulate(_zero_field(M), X0, grid, "dopri5", max_step=0.0)
