"""The checks of the paper's statements, fed synthetic curves with known constants (issue item 7).

Curves are built here from closed forms (W2 = b e^{−ct}, a·sqrt(log(β+1)/β)·e^{C1 t},
departure = κ log β + t0, ...) with small multiplicative noise per replica.
The fits must recover the constants within tolerance and the checks must pass;
curves that violate a claim must make exactly that check fail, with its numbers.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import xarray as xr
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp import claims, fitting, io, pipeline
from conftest import TEST_CONFIG, validated

T = np.linspace(0.0, 12.0, 121)
BETAS = np.array([10.0, 100.0, 1000.0, 10000.0])
R = 6
C_TRUE, C1_TRUE, A_TRUE, B_TRUE = 0.8, 0.6, 0.05, 1.0
KAPPA, T0 = 1.0, 1.0  # departure time = T0 + KAPPA log β (3.3 … 10.2 for β = 10 … 10⁴)
BOUNDS = (0.5, 1.25)
BOOT = {"n_boot": 1000, "confidence": 0.95}
CFG = {"bound_fraction": 0.9, "early_time": 1.0, "end_phase_tolerance": 0.1}


def synthetic(seed=0, c=C_TRUE, C1=C1_TRUE, exponent_of_scale=1.0, kappa=KAPPA, t0=T0, end_at="V"):
    """distances-like dataset: (beta, replica, time) curves with 1 % multiplicative noise per replica."""
    rng = np.random.default_rng(seed)
    noise = lambda *shape: np.exp(0.01 * rng.standard_normal(shape))  # noqa: E731
    scale = fitting.temperature_scale(BETAS) ** exponent_of_scale
    zero_to_proj = B_TRUE * np.exp(-c * T)[None, :] * noise(R, 1)
    w2_zero = A_TRUE * scale[:, None, None] * np.exp(C1 * T)[None, None, :] * noise(len(BETAS), R, 1)
    w2_zero = np.minimum(w2_zero, 1.0)  # saturates once the clusters have left
    w2_zero[..., 0] = 0.0
    depart = t0 + kappa * np.log(BETAS)[:, None] + 0.05 * rng.standard_normal((len(BETAS), R))
    # W2 to the projection: the zero-temperature decay until departure, then a rise (factor 4 per time unit)
    w2_proj = np.maximum(zero_to_proj[None], 1e-3)
    w2_proj = np.broadcast_to(w2_proj, (len(BETAS), R, T.size)).copy()
    for i in range(len(BETAS)):
        for r in range(R):
            after = T > depart[i, r]
            w2_proj[i, r, after] = w2_proj[i, r, ~after][-1] * 4.0 ** (T[after] - depart[i, r])
    w2_proj = np.minimum(w2_proj, 2.0) * 0.9  # just under the bound's b e^{-ct} before departure
    near, far = 0.02, 1.3
    dist_A = np.full_like(w2_proj, far if end_at == "V" else near)
    dist_V = np.full_like(w2_proj, near if end_at == "V" else far)
    return xr.Dataset(
        {
            "w2_zero_to_projection": (("replica", "time"), zero_to_proj),
            "w2_zero_temperature": (("beta", "replica", "time"), w2_zero),
            "w2_projection": (("beta", "replica", "time"), w2_proj),
            "dist_leading_A": (("beta", "replica", "time"), dist_A),
            "dist_leading_V": (("beta", "replica", "time"), dist_V),
            "dist_leading_V_modulus": (("beta", "replica", "time"), dist_V + 0.01),
            "ess_median": (("beta", "replica", "time"), np.full_like(w2_proj, 100.0)),
        },
        coords={"beta": BETAS, "replica": np.arange(R), "time": T},
    )


def fitted(dist):
    """fit.nc-like dataset from the package's own fits of the synthetic curves."""
    beta = dist.beta.values
    rate = fitting.fit_decay_rate(T, dist["w2_zero_to_projection"].values)
    growth = fitting.fit_growth_rate(T, beta, dist["w2_zero_temperature"].values)
    dep = fitting.departure_time(T, dist["w2_projection"].values, factor=2.0)
    return xr.Dataset({
        "c": (("replica",), rate.slope), "c_mean": rate.mean, "log_b": (("replica",), rate.intercept),
        "C1": (("replica",), growth.C1), "C1_mean": growth.mean, "log_a": (("beta", "replica"), growth.log_a),
        "departure_time": (("beta", "replica"), dep),
        "bound_a": fitting.envelope_prefactor_growth(T, beta, dist["w2_zero_temperature"].values, growth.mean,
                                                     growth.windows),
        "bound_b": fitting.envelope_prefactor_decay(T, dist["w2_zero_to_projection"].values, rate.mean, rate.window),
    }, coords={"beta": beta})


def evaluate(dist, bounds=BOUNDS, cfg=CFG, seed=1):
    found, _ = claims.evaluate(dist, fitted(dist), bounds, cfg, np.random.default_rng(seed), BOOT)
    return {c.name: c for c in found}


# ------------------------------------------------------------------ the fits recover the constants
def test_fits_recover_the_constants_of_synthetic_curves():
    fit = fitted(synthetic())
    assert float(fit["c_mean"]) == pytest.approx(C_TRUE, rel=0.01)
    assert float(fit["C1_mean"]) == pytest.approx(C1_TRUE, rel=0.02)
    # a: the mean intercept recovers log a (the temperature scale divided out)
    assert np.nanmean(fit["log_a"].values) == pytest.approx(np.log(A_TRUE), abs=0.05)
    dep = np.nanmean(fit["departure_time"].values, axis=1)
    slope = fitting.line_fit(np.log(BETAS), dep)[0]
    assert slope == pytest.approx(KAPPA, rel=0.1)


def test_every_claim_passes_on_curves_that_satisfy_it():
    got = evaluate(synthetic())
    for name, claim in got.items():
        assert claim.status == claims.PASSED, claim.line()
    assert got["rate_in_bounds"].value == pytest.approx(C_TRUE, rel=0.01)
    lo, hi = got["rate_in_bounds"].interval
    assert lo <= got["rate_in_bounds"].value <= hi
    assert got["temperature_scaling"].value == pytest.approx(fitting.temperature_scale_exponent(BETAS), abs=0.02)
    assert got["metastable_log_beta"].value == pytest.approx(KAPPA, rel=0.1)
    assert got["metastable_log_beta"].interval[0] > 0
    assert list(got["conjecture_1"].per_beta["chosen_eigenspace"][0]) == ["E1(V), largest real part"] * len(BETAS)


# ------------------------------------------------------------------ each violation fails its own check
@pytest.mark.parametrize("changes, failing, numbers", [
    ({"c": 0.3}, "rate_in_bounds", r"c = 0\.30"),
    ({"exponent_of_scale": 2.0}, "temperature_scaling", r"exponent of β at t = 1: -0\.80[0-9] "),  # 2 × (−0.404)
    ({"kappa": -0.8, "t0": 10.0}, "metastable_log_beta", r"slope of the departure time against log β: -0\.[78]"),
    ({"end_at": "A"}, "conjecture_1", r"largest final distance to V's leading eigenspace \(largest real part\) over the β that departed 1\.300"),
], ids=["rate-outside-bounds", "wrong-beta-exponent", "departure-shrinks-with-beta", "tokens-stay-at-E1(A)"])
def test_a_violation_fails_exactly_its_check(changes, failing, numbers):
    got = evaluate(synthetic(**changes))
    assert got[failing].status == claims.FAILED, got[failing].line()
    assert re.search(numbers, got[failing].numbers), got[failing].numbers
    others = [c for name, c in got.items() if name != failing and name != "bound_above_data"]
    assert all(c.status == claims.PASSED for c in others), [c.line() for c in others]


def test_data_above_the_bound_fails_the_bound_check():
    dist = synthetic()
    fit = fitted(dist)
    dist["w2_projection"] = dist["w2_projection"] * 3.0  # data three times the curve the bound was fitted to
    found, _ = claims.evaluate(dist, fit, BOUNDS, CFG, np.random.default_rng(0), BOOT)
    bound = {c.name: c for c in found}["bound_above_data"]
    assert bound.status == claims.FAILED
    assert bound.value < 0.9


def test_conjecture_1_reports_the_modulus_eigenspace_when_the_tokens_choose_it():
    dist = synthetic()
    dist["dist_leading_V_modulus"] = dist["dist_leading_V"] * 0.0 + 0.001
    dist["dist_leading_V"] = dist["dist_leading_V"] * 0.0 + 0.9
    got = evaluate(dist)["conjecture_1"]
    assert got.status == claims.FAILED  # the conjecture names the largest real part; the run chose the modulus
    assert set(got.per_beta["chosen_eigenspace"][0]) == {"E1(V), largest modulus"}


def test_checks_that_lack_data_say_so():
    dist = synthetic().isel(beta=[0])
    got = evaluate(dist)
    assert got["temperature_scaling"].status == claims.NOT_EVALUABLE
    assert got["metastable_log_beta"].status == claims.NOT_EVALUABLE
    assert "fewer than two β" in got["metastable_log_beta"].numbers


# ------------------------------------------------------------------ the numerics under the checks
@settings(max_examples=50, deadline=None)
@given(alpha=st.floats(-3.0, 3.0), k=st.floats(0.01, 100.0), lo=st.floats(0.5, 10.0), span=st.floats(2.0, 1e4))
def test_power_law_exponent_is_exact_on_power_laws(alpha, k, lo, span):
    x = np.geomspace(lo, lo * span, 7)
    assert fitting.power_law_exponent(x, k * x**alpha) == pytest.approx(alpha, abs=1e-9)


def test_temperature_scale_exponent_tends_to_minus_one_half():
    assert -0.5 < fitting.temperature_scale_exponent([10, 100, 1000]) < -0.3
    assert fitting.temperature_scale_exponent([1e8, 1e9, 1e10]) == pytest.approx(-0.5, abs=0.03)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(2, 12), confidence=st.floats(0.5, 0.99))
def test_bootstrap_interval_brackets_the_statistic_and_widens_with_confidence(seed, n, confidence):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=n)
    lo, hi = fitting.bootstrap_interval(values, np.mean, np.random.default_rng(1), n_boot=500, confidence=confidence)
    assert values.min() - 1e-12 <= lo <= hi <= values.max() + 1e-12
    lo2, hi2 = fitting.bootstrap_interval(values, np.mean, np.random.default_rng(1), n_boot=500,
                                          confidence=min(0.999, confidence + 0.0099))
    assert lo2 <= lo + 1e-12 and hi2 >= hi - 1e-12
    same = fitting.bootstrap_interval(np.full(n, 3.0), np.mean, np.random.default_rng(2), n_boot=200)
    assert same == (3.0, 3.0)


def test_bootstrap_interval_of_the_mean_matches_the_normal_approximation():
    """For many replicas the percentile interval of the mean is mean ± 1.96 s/√n (independent closed form)."""
    values = np.random.default_rng(3).normal(2.0, 0.5, size=400)
    lo, hi = fitting.bootstrap_interval(values, np.mean, np.random.default_rng(4), n_boot=4000)
    half = 1.96 * values.std(ddof=1) / np.sqrt(values.size)
    assert lo == pytest.approx(values.mean() - half, abs=0.15 * half)
    assert hi == pytest.approx(values.mean() + half, abs=0.15 * half)


# ------------------------------------------------------------------ through the stages, with files
def test_stage_fit_and_stage_claims_on_synthetic_files(tmp_path):
    with open(TEST_CONFIG) as fh:
        config = validated(yaml.safe_load(fh))
    exp = config["experiments"]["tiny"]
    exp["betas"] = BETAS.tolist()
    exp["replicas"] = R
    pipeline.stage_matrices("tiny", exp, 7, tmp_path / "matrices.nc")
    M = pipeline.load_matrices(tmp_path / "matrices.nc")
    dist = synthetic(c=float(np.mean(M.rate_bounds)))
    io.write_netcdf(dist, tmp_path / "distances.nc", "distances", io.provenance("tiny", exp, 7))
    pipeline.stage_fit("tiny", exp, 7, tmp_path / "matrices.nc", tmp_path / "distances.nc", tmp_path / "fit.nc")
    fit = io.read_netcdf(tmp_path / "fit.nc", "fit")
    lo, hi = fit["c_interval"].values
    assert lo <= float(fit["c_mean"]) <= hi
    assert fit["C1_interval"].values[0] <= float(fit["C1_mean"]) <= fit["C1_interval"].values[1]
    pipeline.stage_claims("tiny", exp, 7, tmp_path / "matrices.nc", tmp_path / "distances.nc", tmp_path / "fit.nc",
                          tmp_path / "claims.nc")
    out = io.read_netcdf(tmp_path / "claims.nc", "claims")
    assert list(out.claim.values) == ["rate_in_bounds", "bound_above_data", "temperature_scaling",
                                      "metastable_log_beta", "conjecture_1"]
    assert out["status"].values.tolist() == [1, 1, 1, 1, 1], out["summary"].values
    assert float(out.attrs["early_time"]) == pytest.approx(1.0)
    np.testing.assert_allclose(out["min_ess_median"].values, 100.0)


def test_a_fit_without_a_window_is_recorded_as_nan_and_its_claims_are_not_evaluable(tmp_path):
    """Curves that zigzag from snapshot to snapshot (±50 %, ±30 %): no log-linear window for C1 or c."""
    with open(TEST_CONFIG) as fh:
        config = validated(yaml.safe_load(fh))
    exp = config["experiments"]["tiny"]
    exp["betas"] = BETAS.tolist()
    pipeline.stage_matrices("tiny", exp, 7, tmp_path / "matrices.nc")
    dist = synthetic()
    zigzag = (-1.0) ** np.arange(T.size)
    dist["w2_zero_temperature"] = dist["w2_zero_temperature"] * 0 + 0.01 * (1 + 0.5 * zigzag)
    dist["w2_zero_to_projection"] = dist["w2_zero_to_projection"] * 0 + 0.5 * (1 + 0.3 * zigzag)
    io.write_netcdf(dist, tmp_path / "distances.nc", "distances", io.provenance("tiny", exp, 7))
    pipeline.stage_fit("tiny", exp, 7, tmp_path / "matrices.nc", tmp_path / "distances.nc", tmp_path / "fit.nc")
    fit = io.read_netcdf(tmp_path / "fit.nc", "fit")
    assert np.isnan(float(fit["C1_mean"])) and np.isnan(float(fit["c_mean"]))
    assert np.all(np.isnan(fit["C1_window"].values))
    pipeline.stage_claims("tiny", exp, 7, tmp_path / "matrices.nc", tmp_path / "distances.nc", tmp_path / "fit.nc",
                          tmp_path / "claims.nc")
    out = io.read_netcdf(tmp_path / "claims.nc", "claims")
    status = dict(zip(out.claim.values.tolist(), out["status"].values.tolist()))
    assert status["rate_in_bounds"] == claims.NOT_EVALUABLE
    assert status["bound_above_data"] == claims.NOT_EVALUABLE
    assert status["metastable_log_beta"] == claims.PASSED  # departure times do not need the fits


def test_envelope_prefactors_are_the_smallest_that_bound_the_window():
    """Independent check: b·e^{−ct} touches the data at one point of the window and stays above at all others."""
    dist = synthetic()
    fit = fitted(dist)
    c, b = float(fit["c_mean"]), float(fit["bound_b"])
    rate = fitting.fit_decay_rate(T, dist["w2_zero_to_projection"].values)
    inside = (T >= rate.window[0]) & (T <= rate.window[1])
    ratio = dist["w2_zero_to_projection"].values[:, inside] / (b * np.exp(-c * T[inside]))
    assert ratio.max() == pytest.approx(1.0, abs=1e-12)
    assert np.all(ratio <= 1.0 + 1e-12)
    # a: one constant for all β, touching in one β's window
    growth = fitting.fit_growth_rate(T, BETAS, dist["w2_zero_temperature"].values)
    a, C1 = float(fit["bound_a"]), float(fit["C1_mean"])
    worst = 0.0
    for i, beta in enumerate(BETAS):
        lo, hi = growth.windows[i]
        inside = (T >= lo) & (T <= hi)
        ratio = dist["w2_zero_temperature"].values[i][:, inside] / (
            a * fitting.temperature_scale(beta) * np.exp(C1 * T[inside]))
        worst = max(worst, ratio.max())
    assert worst == pytest.approx(1.0, abs=1e-12)


def test_conjecture_1_is_not_evaluable_when_no_beta_departs():
    final = {k: np.full((2, 3), 0.5) for k in claims.EIGENSPACES}
    got = claims.check_conjecture_1([10.0, 100.0], final, 0.1, departed=[False, False])
    assert got.status == claims.NOT_EVALUABLE
    assert "no β left the metastable phase" in got.numbers
    got = claims.check_conjecture_1([10.0, 100.0], {**final, "E1(V), largest real part": np.array([[0.01] * 3, [0.9] * 3])},
                                    0.1, departed=[True, False])
    assert got.status == claims.PASSED and got.value == pytest.approx(0.01)  # β = 100 has not departed yet
