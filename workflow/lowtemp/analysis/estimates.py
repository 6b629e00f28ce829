"""Every constant and interval of one experiment, computed once (``results/<experiment>/fit.nc``).

The claims (``lowtemp.analysis.claims``) read these numbers and judge them; they never
estimate anything a second time. What is estimated here, from ``distances.nc``:

* the zero-temperature decay rate of W2(ρ^∞_t, Π♯ρ0) in each of its two regimes
  (early: mean field; late: finite N), on either side of ``rates.regime_band``, each
  with the prediction of its regime (``rates.early_rate``, ``rates.late_rate``);
* C1 over all β (the data-collapse figure);
* the bound's constants *calibrated* on the two ends of the β range: C1 and a
  on the smallest β (``fit.calibration_betas``), c and b on the zero-temperature
  curves (β = ∞), so that the bound can be tested on the β in between, which
  it was not fitted on;
* the exponent of β of the finite-temperature error at an early time, per
  replica, over the β whose particle system stands for the mean field there;
* the geometric departure time per (β, replica), right-censored at the
  horizon, and the slope of departure time against log β per replica;
* the smallest median ESS over the windows the claims judge, per β.

Which β and windows stand for the mean field (the particle-number budgets, the ESS, a mean-field
reference's error) is decided in ``lowtemp.analysis.resolution``; its numbers go into fit.nc beside these.

Every interval is a Student-t interval over replicas (``fitting.t_interval``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ..model import layout, rates
from ..model.matrices import AttentionMatrices
from . import departures, fitting
from .resolution import (
    NAN_PAIR,
    Curves,
    ParticleBudget,
    Resolution,
    budget_values,
    early_snapshot,
    min_median_ess,
    reference_values,
    resolution_of,
)

log = logging.getLogger("lowtemp")

LAPLACE_EXPONENT = -1.0  # W2(ρ^β_t, ρ^∞_t) ∝ 1/β for a smooth positive density (Laplace's method)


def calibration_betas(t, beta, w2_zero, resolved, count: int, cfg: dict, name: str):
    """The calibration β and their growth fit: the ``count`` smallest resolved β that have a growth window.

    C1 and a need a log-linear growth of W2(ρ^β_t, ρ^∞_t); a β whose error
    saturates before enough exact snapshots (often the smallest) cannot calibrate
    them. The bound is then tested on the resolved β *above* the calibration β
    (``claims.check_bound_above_data``): below them the error may grow faster
    than sqrt(log(β+1)/β) as β falls (∝ 1/β for a smooth density), which the
    theorem allows. Returns (mask over β, GrowthFit or None).
    """
    chosen = np.zeros(beta.size, bool)
    for i in np.flatnonzero(resolved):
        if _growth(t, beta[[i]], w2_zero[[i]], cfg, name, f"C1 at beta = {beta[i]:g} alone") is not None:
            chosen[i] = True
            if chosen.sum() >= count:
                break
    if not chosen.any():
        return chosen, None
    return chosen, _growth(
        t, beta[chosen], w2_zero[chosen], cfg, name, f"C1 on the calibration beta {beta[chosen].tolist()}"
    )


def _rate_in_regime(t, w2, t_range, cfg, name, regime):
    """RateFit on one regime's time range, or None (logged in words) when no window qualifies there."""
    try:
        return fitting.fit_decay_rate(
            t, w2, max_residual=cfg["max_residual"], min_points=cfg["min_points"], t_range=t_range
        )
    except ValueError as exc:
        log.warning("%s: %s regime: %s", name, regime, exc)
        return None


def _growth(t, beta, w2_zero, cfg, name, what):
    try:
        return fitting.fit_growth_rate(
            t,
            beta,
            w2_zero,
            saturation=cfg["saturation"],
            max_residual=cfg["max_residual"],
            min_points=cfg["min_points"],
        )
    except ValueError as exc:
        log.warning("%s: %s: %s", name, what, exc)
        return None


def temperature_exponents(beta, early_error) -> np.ndarray:
    """Per replica, the least-squares exponent α of β in log W2 = k + α log β (``early_error`` (beta, replica))."""
    err = np.asarray(early_error, float)
    return np.array([fitting.power_law_exponent(beta, err[:, r]) for r in range(err.shape[1])])


def temperature_pairs(beta, early_error, confidence):
    """For each pair of consecutive β: the exponent of the error between them (per replica), its interval, and
    the local exponent of sqrt(log(β+1)/β) there. One least-squares exponent over all β can hide a pair where
    the error stalls or grows; the claim checks every pair too."""
    beta = np.asarray(beta, float)
    err = np.asarray(early_error, float)
    labels, intervals, bounds = [], [], []
    for i in range(beta.size - 1):
        pair = np.log(err[i + 1] / err[i]) / np.log(beta[i + 1] / beta[i])
        labels.append(f"{beta[i]:g}-{beta[i + 1]:g}")
        intervals.append(fitting.t_interval(pair, confidence))
        bounds.append(fitting.temperature_scale_exponent(beta[i : i + 2]))
    return labels, np.array(intervals).reshape(-1, 2), np.array(bounds)


#: the two regimes of the zero-temperature decay, in fit.nc's ``regime`` order
REGIMES = ("early", "late")


@dataclass(frozen=True)
class FitNumbers:
    """What the fit found: ``values`` (name -> array, one per variable of fit.nc), the coordinates they are over
    (β, replica, regime, pair of β) and the settings behind them (``attrs``)."""

    values: dict
    coords: dict
    attrs: dict


def decay_rates(c: Curves, M: AttentionMatrices, n_tokens: int, cfg: dict, name: str, conf: float) -> dict:
    """The zero-temperature decay rate of W2(ρ^∞_t, Π♯ρ0) fitted in each regime, with the predictions.

    The band around t* where the last waiting tokens escape belongs to neither regime: a slope fitted there
    lies anywhere between 0 and the late rate (docs/early_rate.md); before ``transient_end`` the bulk is still
    on its way to ±u (no channel rate applies yet)."""
    nr = c.shape[1]
    t_star = rates.regime_boundary(M, n_tokens)
    band = rates.regime_band(M, n_tokens)
    t_transient = rates.transient_end(M)
    predictions = {"early": rates.early_rate(M), "late": rates.late_rate(M)}
    ranges = {"early": (t_transient, band[0]), "late": (max(band[1], t_transient), np.inf)}
    fits = {k: _rate_in_regime(c.t, c.w2_zero_to_projection, ranges[k], cfg, name, k) for k in REGIMES}
    c_regime = np.array([fits[k].slope if fits[k] else np.full(nr, np.nan) for k in REGIMES])
    return {
        "c_regime": c_regime,
        "c_regime_mean": c_regime.mean(axis=1),
        "c_regime_interval": np.array([fitting.t_interval(x, conf) for x in c_regime]),
        "c_regime_window": np.array([fits[k].window if fits[k] else np.array(NAN_PAIR) for k in REGIMES]),
        "rate_predicted": np.array([[predictions[k].low, predictions[k].high] for k in REGIMES]),
        "rate_prediction_note": np.array([predictions[k].note for k in REGIMES], dtype=object),
        "regime_boundary": t_star,
        "regime_band": np.array(band),
        "transient_end": t_transient,
        "rate_lower": M.rate_bounds[0],
        "rate_upper": M.rate_bounds[1],
    }


def collapse_growth(c: Curves, cfg: dict, name: str, conf: float) -> dict:
    """C1 over all β (the data collapse of W2(ρ^β_t, ρ^∞_t)/sqrt(log(β+1)/β)), and per β alone."""
    nb, nr = c.shape
    growth = _growth(c.t, c.beta, c.w2_zero_temperature, cfg, name, "C1 over all beta")
    C1 = growth.C1 if growth else np.full(nr, np.nan)
    return {
        "C1": C1,
        "C1_mean": growth.mean if growth else np.nan,
        "C1_interval": np.array(fitting.t_interval(C1, conf)),
        "C1_per_beta": growth.C1_per_beta if growth else np.full((nb, nr), np.nan),
        "log_a": growth.log_a if growth else np.full((nb, nr), np.nan),
        "C1_window": growth.windows if growth else np.full((nb, 2), np.nan),
    }


def bound_constants(c: Curves, res: Resolution, decay: dict, resolved_to_departure, cfg: dict, name: str) -> dict:
    """The bound's constants: a and C1 calibrated on the smallest resolved β, b and c on β = ∞ (``decay``);
    the bound is tested on the other β."""
    cal_beta, cal_growth = calibration_betas(
        c.t, c.beta, c.w2_zero_temperature, resolved_to_departure, int(cfg["calibration_betas"]), cfg, name
    )
    bound_C1 = cal_growth.mean if cal_growth else np.nan
    fitted_rates = decay["c_regime"].mean(axis=1)
    bound_c = np.nanmin(fitted_rates) if np.isfinite(fitted_rates).any() else np.nan  # the slower regime bounds all t
    # b up to the end of the last decay window: past it W2(ρ^∞_t, Π♯ρ0) may sit on a numerical floor, where
    # w0·e^{ct} grows without bound and would inflate b (the exponential decay is verified up to there only)
    c_window = decay["c_regime_window"]
    verified = c.t <= (np.nanmax(c_window[:, 1]) if np.isfinite(c_window).any() else -np.inf)
    bound_b = (
        fitting.calibrated_decay_prefactor(c.t[verified], c.w2_zero_to_projection[:, verified], bound_c)
        if verified.any()
        else np.nan
    )
    bound_a = fitting.calibrated_growth_prefactor(
        c.t, c.beta[cal_beta], c.w2_projection[cal_beta], res.judged[cal_beta], bound_C1, bound_b, bound_c
    )
    return {
        "calibration_beta": cal_beta,
        "bound_C1": bound_C1,
        "bound_c": bound_c,
        "bound_b": bound_b,
        "bound_a": bound_a,
    }


def temperature_scaling(c: Curves, res: Resolution, cfg: dict, conf: float) -> tuple[dict, list, float]:
    """The finite-temperature error at the early time and its exponent of β over the resolved β: the exact
    snapshot nearest ``early_time`` (exact W2 may be skipped) within half of it, and only for β that have not
    departed by then (after it the error measures the end phase). Returns the values, the pair labels and the
    early time used."""
    nb, nr = c.shape
    k_early, t_early = early_snapshot(c.t, c.w2_zero_temperature, float(cfg["early_time"]))
    early_error = c.w2_zero_temperature[..., k_early] if k_early is not None else np.full((nb, nr), np.nan)
    ess_early = (
        min_median_ess(c.ess_median, np.broadcast_to(c.t <= t_early, (nb, c.t.size)))
        if k_early is not None
        else np.full(nb, np.nan)
    )
    with np.errstate(invalid="ignore"):
        departed_early = np.any(res.departure <= t_early, axis=1)
    resolved_early = res.resolved(ess_early, None if res.reference is None else res.reference.early)
    used = resolved_early & np.all(np.isfinite(early_error) & (early_error > 0), axis=1) & ~departed_early
    alpha = temperature_exponents(c.beta[used], early_error[used]) if used.sum() >= 2 else np.full(nr, np.nan)
    bound_exponent = fitting.temperature_scale_exponent(c.beta[used]) if used.sum() >= 2 else np.nan
    pair_labels, pair_intervals, pair_bounds = temperature_pairs(c.beta[used], early_error[used], conf)
    values = {
        "early_error": early_error,
        "temperature_beta_used": used,
        "temperature_pair_interval": pair_intervals,
        "temperature_pair_bound_exponent": pair_bounds,
        "temperature_exponent": alpha,
        "temperature_exponent_interval": np.array(fitting.t_interval(alpha, conf)),
        "temperature_bound_exponent": bound_exponent,
        "ess_min_early": ess_early,
        "resolved_early": resolved_early,
    }
    return values, pair_labels, t_early


def departure_slopes(c: Curves, res: Resolution, ess_to_departure, conf: float) -> dict:
    """The departure time from the metastable phase against log β: per-replica bounds on its slope over the
    β whose departure is resolved, and their one-sided interval; and which law in β it follows
    (``departures.departure_law_bounds``, ``departures.departure_law``: log β or a power of β, from its curvature
    against log β with ≥ 3 β), with the exponent of the power law."""
    nb, nr = c.shape
    ess_to_horizon = min_median_ess(c.ess_median, np.ones((nb, c.t.size), bool))
    meta_used = np.where(res.measured, res.departure_within, ess_to_departure >= res.ess_threshold)
    slack = 0.0
    if res.reference is not None:
        # a departure is known to a snapshot interval; a coarser reference within one interval of it widens that
        # range by the shift (the slope bounds account for it), one farther leaves the β out
        meta_used = res.reference.departure_shift <= res.step * (1 + 1e-9)  # times are rounded: one interval is one
        slack = np.where(np.isfinite(res.reference.departure_shift), res.reference.departure_shift, 0.0)
    args = (
        c.beta[meta_used],
        res.departure[meta_used],
        res.censored[meta_used],
        float(c.t[-1]),
        res.step,
        np.broadcast_to(slack, c.beta.shape)[meta_used],
    )
    nan_bounds = (np.full(nr, np.nan), np.full(nr, np.nan))
    slope_low, slope_high = departures.departure_slope_bounds(*args) if meta_used.sum() >= 2 else nan_bounds
    law = (  # the curvatures need 3 β (NaN with 2), the exponent 2
        departures.departure_law_bounds(*args)
        if meta_used.sum() >= 2
        else dict.fromkeys(("linear", "log", "power"), nan_bounds)
    )
    law_interval = {k: np.array(fitting.one_sided_bounds(*v, conf)) for k, v in law.items()}
    return {
        "departure_time": res.departure,
        "departure_censored": res.censored,
        "metastable_beta_used": meta_used,
        "metastable_slope": np.stack([slope_low, slope_high], axis=1),
        "metastable_slope_interval": np.array(fitting.one_sided_bounds(slope_low, slope_high, conf)),
        "departure_curvature_linear": np.stack(law["linear"], axis=1),
        "departure_curvature_linear_interval": law_interval["linear"],
        "departure_curvature_log": np.stack(law["log"], axis=1),
        "departure_curvature_log_interval": law_interval["log"],
        "departure_power": np.stack(law["power"], axis=1),
        "departure_power_interval": law_interval["power"],
        "departure_law": np.int8(departures.departure_law(law_interval["linear"], law_interval["log"])),
        "judged_until": res.until,
        "resolved_to_horizon": res.resolved(
            ess_to_horizon, None if res.reference is None else res.reference.to_horizon
        ),
        "ess_min_to_horizon": ess_to_horizon,
    }


def fit_experiment(
    name: str,
    dist: xr.Dataset,
    M: AttentionMatrices,
    cfg: dict,
    ess_threshold: float,
    n_tokens: int,
    particle_budgets: tuple[ParticleBudget, ...] | None = None,
) -> FitNumbers:
    """fit.nc's numbers from distances.nc (``cfg``: the experiment's ``fit`` block, schema defaults applied);
    ``lowtemp.store.analyses.fit_dataset`` lays them out.

    A β is *resolved* over a window when the particle-number budget measured at it
    (``particle_budgets``, see ``particle_budget_verdicts``) says its N error is within
    ``fit.particle_error_fraction`` of the claim's tolerance; at a β without a budget, when
    its median ESS stays at or above ``ess_threshold`` there.
    """
    layout.require_canonical(dist, "distances")  # the estimators index curves as (beta, replica, time)
    dist = dist.sortby("beta")
    c = Curves.of(dist)
    conf = float(cfg["confidence"])
    res = resolution_of(c, dist, M, cfg, ess_threshold, particle_budgets)
    ess_to_departure = min_median_ess(c.ess_median, np.any(res.judged, axis=1))
    resolved_to_departure = res.resolved(
        ess_to_departure, None if res.reference is None else res.reference.to_departure
    )
    decay = decay_rates(c, M, n_tokens, cfg, name, conf)
    temperature, pair_labels, t_early = temperature_scaling(c, res, cfg, conf)
    values = {
        **decay,
        **collapse_growth(c, cfg, name, conf),
        **bound_constants(c, res, decay, resolved_to_departure, cfg, name),
        **temperature,
        **departure_slopes(c, res, ess_to_departure, conf),
        **budget_values(res, c.beta, particle_budgets),
        "resolved_to_departure": resolved_to_departure,
        "ess_min_to_departure": ess_to_departure,
        **reference_values(res.reference),
    }
    return FitNumbers(
        values,
        coords={
            "beta": c.beta,
            "replica": c.replicas,
            "bound": ["start", "stop"],
            "regime": list(REGIMES),
            "pair": pair_labels,
        },
        attrs=dict(
            early_time=t_early,
            requested_early_time=float(cfg["early_time"]),
            horizon=float(c.t[-1]),
            end_phase_gap=res.gap,
            laplace_exponent=LAPLACE_EXPONENT,
            confidence=conf,
            ess_threshold=float(ess_threshold),
            particle_error_fraction=res.fraction,
            tokens=int(n_tokens),
            leading_A_dimension=int(M.E1.shape[1]),
        ),
    )


def describe(fit: xr.Dataset, name: str) -> list[str]:
    """Log lines for the fitted constants, in words where a constant could not be fitted."""

    def num(value, fmt=".4f"):
        return format(float(value), fmt) if np.isfinite(value) else None

    lines = []
    for k, regime in enumerate(fit.regime.values):
        c = num(fit["c_regime_mean"].values[k])
        lo, hi = fit["c_regime_interval"].values[k]
        p_lo, p_hi = fit["rate_predicted"].values[k]
        lines.append(
            f"{name}: {regime} regime: "
            + (
                f"c = {c} [{lo:.4f}, {hi:.4f}] on t in [{fit['c_regime_window'].values[k][0]:g}, "
                f"{fit['c_regime_window'].values[k][1]:g}]"
                if c
                else "no log-linear decay window, c not fitted"
            )
            + f"; predicted [{p_lo:.4f}, {p_hi:.4f}]"
        )
    C1 = num(fit["C1_mean"])
    lines.append(
        f"{name}: "
        + (
            f"C1 = {C1} {np.round(fit['C1_interval'].values, 4).tolist()}"
            if C1
            else "no growth window for W2(rho^beta_t, rho^inf_t): C1 not fitted"
        )
    )
    a, b = num(fit["bound_a"], ".4g"), num(fit["bound_b"], ".4g")
    lines.append(
        f"{name}: "
        + (
            f"bound calibrated on beta {fit.beta.values[fit['calibration_beta'].values].tolist()}"
            f": a = {a}, C1 = {float(fit['bound_C1']):.4f}, b = {b}, c = {float(fit['bound_c']):.4f}"
            if a and b
            else "the bound could not be calibrated (see the warnings above)"
        )
    )
    return lines
