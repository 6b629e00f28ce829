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

Every interval is a Student-t interval over replicas (``fitting.t_interval``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ..model import rates
from ..model.matrices import AttentionMatrices
from ..store import io
from . import fitting, particle_budget

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


def min_median_ess(ess_median, window) -> np.ndarray:
    """Per β, the smallest over the window (beta, time mask) of the median over replicas of the median ESS."""
    med = np.median(np.asarray(ess_median, float), axis=1)  # (beta, time)
    return np.array([np.min(med[i, w]) if np.any(w) else np.nan for i, w in enumerate(np.asarray(window, bool))])


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


NAN_PAIR = (np.nan, np.nan)


@dataclass(frozen=True)
class ParticleBudget:
    """What convergence.nc's particle-number study measured at its β (``particle_budget``): the 95 %
    upper bound of the remaining N error of W2(ρ^β_t, Π♯ρ0) relative to W2 itself, largest before the
    earliest departure, and the bound on |d(departure time)/d log2 N| with the snapshot interval."""

    beta: float
    w2_ratio: float  # remaining-error bound / W2 (inf: not a power law in the range; NaN: nothing to judge)
    slope_bound: float  # bound on |slope| of the departure time per doubling of N (NaN: no departures)
    interval: float  # snapshot interval, the departure's own resolution
    tokens: int = 0  # the experiment's N, where the budget is judged
    tokens_needed: float = np.nan  # N at which the W2 bound would reach the fraction (particle_budget.tokens_needed)
    slope_interval: tuple[float, float] = NAN_PAIR  # 95 % interval of the departure's slope per doubling


def study_budget(conv: xr.Dataset, fraction: float) -> ParticleBudget:
    """The ``ParticleBudget`` of convergence.nc's particle-number study, with the N its W2 bound would need to
    reach ``fraction`` of W2 before the earliest departure (``particle_budget.tokens_needed``)."""
    t = conv["time"].values
    window = (t > 0) & (t <= float(conv["budget_window_end"]))
    n_star = int(conv.attrs["budget_tokens"])
    needed = float("nan")  # a convergence.nc written before the per-exponent bounds were kept names no N
    if "w2_remaining_bound_per_exponent" in conv:
        w2 = particle_budget.Budget(
            bound=conv["w2_remaining_bound"].values,
            exponent=conv["w2_budget_exponent"].values,
            value=conv["w2_at_tokens"].values,
            exponents=conv["budget_exponent"].values,
            at=float(n_star),
            per_exponent=conv["w2_remaining_bound_per_exponent"].transpose("budget_exponent", "time").values,
        )
        needed = particle_budget.tokens_needed(w2, window, fraction)
    low, high = (float(v) for v in conv["departure_slope_per_doubling"].values)
    return ParticleBudget(
        beta=float(conv.attrs["beta"]),
        w2_ratio=float(conv["w2_budget_ratio"]),
        slope_bound=float(conv["departure_slope_bound"]),
        interval=float(np.min(np.diff(t))),
        tokens=n_star,
        tokens_needed=needed,
        slope_interval=(low, high),
    )


def particle_budget_verdicts(beta, budget: ParticleBudget | None, fraction: float):
    """Per β: (measured, W2 resolved, departure resolved) by the particle-number budget.

    A β is resolved for the claims on W2 (``bound_above_data``, ``temperature_scaling``,
    ``conjecture_1``) when the remaining N error's bound is at most ``fraction`` of the W2 it would
    change, and for ``metastable_log_beta`` when the bound on the departure time's slope per doubling
    of N is at most ``fraction`` of the snapshot interval (a slope with no departure to measure, NaN,
    does not block it). Where nothing was measured (no study, or another β) ``measured`` is False and
    the ESS rule decides alone.
    """
    beta = np.asarray(beta, float)
    measured = np.zeros(beta.size, bool) if budget is None else np.isclose(beta, budget.beta)
    if budget is None:
        return measured, np.ones(beta.size, bool), np.ones(beta.size, bool)
    w2_ok = bool(budget.w2_ratio <= fraction)
    dep_ok = bool(np.isnan(budget.slope_bound) or budget.slope_bound <= fraction * budget.interval)
    return measured, np.where(measured, w2_ok, True), np.where(measured, dep_ok, True)


@dataclass(frozen=True)
class ReferenceBudget:
    """How well a mean-field experiment's reference resolves what each claim judges, per β (distances.nc's
    ``reference_error``: the W2 bound between the reference and its solution at twice the cell width).

    ``early`` (beta): the error over W2(ρ^β_t, ρ^∞_t) at the early time, largest over replicas;
    ``to_departure`` and ``to_horizon`` (beta): the error over W2(ρ^β_t, Π♯ρ0), largest over the replicas'
    judged windows (up to departure) and over the whole run; ``departure_shift`` (beta): the largest
    |departure of the reference − departure of the coarser one| over replicas (0 when both are censored,
    inf when only one departed)."""

    early: np.ndarray
    to_departure: np.ndarray
    to_horizon: np.ndarray
    departure_shift: np.ndarray


def _early_snapshot(t, w2_zero, early: float):
    """(index, time) of the exact snapshot nearest ``early`` within early/2 (exact W2 may be skipped), or
    (None, NaN)."""
    exact = np.all(np.isfinite(w2_zero), axis=1) & (t > 0)  # (beta, time)
    near = np.any(exact, axis=0) & (np.abs(t - early) <= 0.5 * early)
    if not near.any():
        return None, float("nan")
    k = int(np.flatnonzero(near)[np.argmin(np.abs(t[near] - early))])
    return k, float(t[k])


def reference_budget(
    dist: xr.Dataset, k_early: int | None, judged: np.ndarray, departure: np.ndarray, censored: np.ndarray, gap: float
) -> ReferenceBudget:
    """``ReferenceBudget`` of a mean-field experiment's distances (``judged``: (beta, replica, time))."""
    t = dist.time.values
    err = dist["reference_error"].transpose("beta", "replica", "time").values
    w2_zero = dist["w2_zero_temperature"].transpose("beta", "replica", "time").values
    w2_proj = dist["w2_projection"].transpose("beta", "replica", "time").values
    nb = err.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        if k_early is None:
            early = np.full(nb, np.nan)
        else:
            early = np.max(err[..., k_early] / w2_zero[..., k_early], axis=1)
        ratio = err / w2_proj
        to_departure = np.array(
            [np.max(ratio[b][judged[b]], initial=0.0) if judged[b].any() else np.inf for b in range(nb)]
        )
        to_horizon = np.max(ratio, axis=(1, 2))
    coarse_dep, coarse_cens = fitting.geometric_departure(
        t, dist["reference_dist_leading_A"].transpose("beta", "replica", "time").values, gap
    )
    both_censored = censored & coarse_cens
    one_only = censored != coarse_cens
    with np.errstate(invalid="ignore"):
        shift = np.where(both_censored, 0.0, np.where(one_only, np.inf, np.abs(departure - coarse_dep)))
    shift = np.where(np.isnan(departure) & np.isnan(coarse_dep) & ~one_only, 0.0, shift)  # neither arrived
    return ReferenceBudget(early, to_departure, to_horizon, np.nanmax(np.where(np.isnan(shift), np.inf, shift), axis=1))


def fit_experiment(
    name: str,
    dist: xr.Dataset,
    M: AttentionMatrices,
    cfg: dict,
    ess_threshold: float,
    n_tokens: int,
    particle_budget: ParticleBudget | None = None,
) -> xr.Dataset:
    """fit.nc from distances.nc (``cfg``: the experiment's ``fit`` block, schema defaults applied).

    A β is *resolved* over a window when the particle-number budget measured at it
    (``particle_budget``, see ``particle_budget_verdicts``) says its N error is within
    ``fit.particle_error_fraction`` of the claim's tolerance; at a β without a budget, when
    its median ESS stays at or above ``ess_threshold`` there.
    """
    dist = dist.sortby("beta")
    t = dist.time.values
    beta = dist.beta.values
    reps = dist.replica.values
    nb, nr = beta.size, reps.size
    conf = float(cfg["confidence"])
    w0 = dist["w2_zero_to_projection"].transpose("replica", "time").values
    w2_zero = dist["w2_zero_temperature"].transpose("beta", "replica", "time").values
    w2_proj = dist["w2_projection"].transpose("beta", "replica", "time").values
    ess = dist["ess_median"].transpose("beta", "replica", "time").values
    nan2 = np.array([np.nan, np.nan])

    # ---- zero-temperature rate, per regime
    # the band around t* where the last waiting tokens escape belongs to neither regime: a slope
    # fitted there lies anywhere between 0 and the late rate (docs/early_rate.md)
    t_star = rates.regime_boundary(M, n_tokens)
    # before transient_end the bulk is still on its way to ±u (no channel rate applies yet)
    band = rates.regime_band(M, n_tokens)
    t_transient = rates.transient_end(M)
    predictions = {"early": rates.early_rate(M), "late": rates.late_rate(M)}
    ranges = {"early": (t_transient, band[0]), "late": (max(band[1], t_transient), np.inf)}
    regime_fits = {k: _rate_in_regime(t, w0, ranges[k], cfg, name, k) for k in ranges}
    c_regime = np.array([regime_fits[k].slope if regime_fits[k] else np.full(nr, np.nan) for k in ranges])
    c_window = np.array([regime_fits[k].window if regime_fits[k] else nan2 for k in ranges])
    c_interval = np.array([fitting.t_interval(c, conf) for c in c_regime])

    # ---- C1 over all β (data collapse)
    growth = _growth(t, beta, w2_zero, cfg, name, "C1 over all beta")
    C1 = growth.C1 if growth else np.full(nr, np.nan)

    # ---- the bound, calibrated on the smallest β (a, C1) and on β = ∞ (b, c); tested on the other β
    dist_A = dist["dist_leading_A"].transpose("beta", "replica", "time").values
    gap = fitting.subspace_gap(M.E1, M.E1_V_real)
    departure, censored = fitting.geometric_departure(t, dist_A, gap)
    until = fitting.judged_until(t, departure, censored, gap)
    judged = fitting.judged_mask(t, until)
    ess_to_departure = min_median_ess(ess, np.any(judged, axis=1))
    measured, w2_within, departure_within = particle_budget_verdicts(
        beta, particle_budget, float(cfg["particle_error_fraction"])
    )
    resolved_to_departure = np.where(measured, w2_within, ess_to_departure >= ess_threshold)
    fraction = float(cfg["particle_error_fraction"])
    step = float(np.min(np.diff(t))) if t.size > 1 else 0.0
    k_early, t_early = _early_snapshot(t, w2_zero, float(cfg["early_time"]))
    reference = reference_budget(dist, k_early, judged, departure, censored, gap) if "reference_error" in dist else None
    if reference is not None:  # a mean-field experiment: its reference's own error decides, there is no ESS
        resolved_to_departure = reference.to_departure <= fraction
    cal_beta, cal_growth = calibration_betas(
        t, beta, w2_zero, resolved_to_departure, int(cfg["calibration_betas"]), cfg, name
    )
    bound_C1 = cal_growth.mean if cal_growth else np.nan
    fitted_rates = c_regime.mean(axis=1)
    bound_c = np.nanmin(fitted_rates) if np.isfinite(fitted_rates).any() else np.nan  # the slower regime bounds all t
    # b up to the end of the last decay window: past it W2(ρ^∞_t, Π♯ρ0) may sit on a numerical floor, where
    # w0·e^{ct} grows without bound and would inflate b (the exponential decay is verified up to there only)
    verified = t <= (np.nanmax(c_window[:, 1]) if np.isfinite(c_window).any() else -np.inf)
    bound_b = fitting.calibrated_decay_prefactor(t[verified], w0[:, verified], bound_c) if verified.any() else np.nan
    bound_a = fitting.calibrated_growth_prefactor(
        t, beta[cal_beta], w2_proj[cal_beta], judged[cal_beta], bound_C1, bound_b, bound_c
    )

    # ---- the finite-temperature error at an early time, exponent of β over the resolved β
    # the exact snapshot nearest early_time (exact W2 may be skipped), within half of early_time, and
    # only for β that have not departed by then (after it the error measures the end phase)
    early = float(cfg["early_time"])
    early_error = w2_zero[..., k_early] if k_early is not None else np.full((nb, nr), np.nan)
    ess_early = (
        min_median_ess(ess, np.broadcast_to(t <= t_early, (nb, t.size))) if k_early is not None else np.full(nb, np.nan)
    )
    with np.errstate(invalid="ignore"):
        departed_early = np.any(departure <= t_early, axis=1)
    resolved_early = np.where(measured, w2_within, ess_early >= ess_threshold)
    if reference is not None:
        resolved_early = reference.early <= fraction
    used = resolved_early & np.all(np.isfinite(early_error) & (early_error > 0), axis=1) & ~departed_early
    alpha = temperature_exponents(beta[used], early_error[used]) if used.sum() >= 2 else np.full(nr, np.nan)
    bound_exponent = fitting.temperature_scale_exponent(beta[used]) if used.sum() >= 2 else np.nan
    pair_labels, pair_intervals, pair_bounds = temperature_pairs(beta[used], early_error[used], conf)

    # ---- departure time against log β
    horizon = float(t[-1])
    ess_to_horizon = min_median_ess(ess, np.ones((nb, t.size), bool))
    meta_used = np.where(measured, departure_within, ess_to_departure >= ess_threshold)
    resolved_to_horizon = np.where(measured, w2_within, ess_to_horizon >= ess_threshold)
    slack = 0.0
    if reference is not None:
        # a departure is known to a snapshot interval; a coarser reference within one interval of it widens that
        # range by the shift (the slope bounds account for it), one farther leaves the β out
        meta_used = reference.departure_shift <= step * (1 + 1e-9)  # times are rounded: one interval is one
        slack = np.where(np.isfinite(reference.departure_shift), reference.departure_shift, 0.0)
        resolved_to_horizon = reference.to_horizon <= fraction
    slope_low, slope_high = (
        fitting.departure_slope_bounds(
            beta[meta_used],
            departure[meta_used],
            censored[meta_used],
            horizon,
            step,
            np.broadcast_to(slack, beta.shape)[meta_used],
        )
        if meta_used.sum() >= 2
        else (np.full(nr, np.nan), np.full(nr, np.nan))
    )

    level = f"{100 * conf:g}% Student-t interval over replicas of the mean"
    A = io.attrs
    data = {
        "c_regime": (
            ("regime", "replica"),
            c_regime,
            A("decay rate of W2(rho^inf_t, Pi_# rho0) fitted in each regime", "1/time"),
        ),
        "c_regime_mean": (
            ("regime",),
            c_regime.mean(axis=1),
            A("decay rate per regime, mean over replicas (NaN: no window)", "1/time"),
        ),
        "c_regime_interval": (("regime", "bound"), c_interval, A(f"decay rate per regime, {level}", "1/time")),
        "c_regime_window": (("regime", "bound"), c_window, A("time window of the decay fit per regime", "1")),
        "rate_predicted": (
            ("regime", "bound"),
            np.array([[p.low, p.high] for p in predictions.values()]),
            A("predicted decay rate per regime (low, high; equal when sharp)", "1/time"),
        ),
        "rate_prediction_note": (
            ("regime",),
            np.array([p.note for p in predictions.values()], dtype=object),
            A("the formula of the predicted rate"),
        ),
        "regime_boundary": (
            (),
            t_star,
            A("time t* at which the N tokens pass from the early (mean-field) to the late (finite-N) regime", "1"),
        ),
        "regime_band": (("bound",), np.array(band), A("transition band around t*, left out of both rate fits", "1")),
        "transient_end": (
            (),
            t_transient,
            A(
                "time before which the bulk's nonlinear transient, not a channel, sets "
                "the decay (rates.transient_end); left out of both rate fits",
                "1",
            ),
        ),
        "rate_lower": ((), M.rate_bounds[0], A("gamma / sigma_max(B)", "1/time")),
        "rate_upper": ((), M.rate_bounds[1], A("gamma / sigma_min(B)", "1/time")),
        "C1": (
            ("replica",),
            C1,
            A("growth rate C1 of W2(rho^beta_t, rho^inf_t)/sqrt(log(beta+1)/beta), shared over beta", "1/time"),
        ),
        "C1_mean": ((), growth.mean if growth else np.nan, A("C1, mean over replicas", "1/time")),
        "C1_interval": (("bound",), np.array(fitting.t_interval(C1, conf)), A(f"C1, {level}", "1/time")),
        "C1_per_beta": (
            ("beta", "replica"),
            growth.C1_per_beta if growth else np.full((nb, nr), np.nan),
            A("growth rate fitted for each beta alone", "1/time"),
        ),
        "log_a": (
            ("beta", "replica"),
            growth.log_a if growth else np.full((nb, nr), np.nan),
            A("intercept log a per beta of the C1 fit"),
        ),
        "C1_window": (
            ("beta", "bound"),
            growth.windows if growth else np.full((nb, 2), np.nan),
            A("time window of the C1 fit per beta", "1"),
        ),
        "calibration_beta": (
            ("beta",),
            cal_beta,
            A(
                "beta used to calibrate the bound: the smallest resolved beta "
                "with a growth window; the bound is tested on the resolved beta "
                "above them"
            ),
        ),
        "bound_C1": ((), bound_C1, A("C1 of the bound, fitted on the calibration beta", "1/time")),
        "bound_c": ((), bound_c, A("c of the bound: the slower of the two regime rates", "1/time")),
        "bound_b": ((), bound_b, A("b: smallest value with b e^{-ct} above W2(rho^inf_t, Pi_# rho0) (beta = inf)")),
        "bound_a": (
            (),
            bound_a,
            A(
                "a: smallest value with a sqrt(log(beta+1)/beta) e^{C1 t} + b e^{-ct} above "
                "W2(rho^beta_t, Pi_# rho0) on the calibration data up to departure"
            ),
        ),
        "early_error": (
            ("beta", "replica"),
            early_error,
            A(
                f"W2(rho^beta_t, rho^inf_t) at the early time t = {t_early:g} (NaN: no exact snapshot "
                f"within early_time/2)"
            ),
        ),
        "temperature_beta_used": (
            ("beta",),
            used,
            A(
                "beta resolved over [0, early time] (median ESS >= "
                "ess_threshold), not departed by then, with a positive exact W2: "
                "the exponent's beta"
            ),
        ),
        "temperature_pair_interval": (
            ("pair", "bound"),
            pair_intervals,
            A(f"exponent of beta between consecutive used beta, {level}"),
        ),
        "temperature_pair_bound_exponent": (
            ("pair",),
            pair_bounds,
            A("local exponent of sqrt(log(beta+1)/beta) between the same beta"),
        ),
        "temperature_exponent": (("replica",), alpha, A("exponent of beta of early_error over the used beta")),
        "temperature_exponent_interval": (
            ("bound",),
            np.array(fitting.t_interval(alpha, conf)),
            A(f"exponent of beta, {level}"),
        ),
        "temperature_bound_exponent": (
            (),
            bound_exponent,
            A("local exponent of sqrt(log(beta+1)/beta) over the used beta"),
        ),
        "departure_time": (
            ("beta", "replica"),
            departure,
            A(
                "first time after the metastable phase at which the tokens are farther than "
                "end_phase_gap/2 from E1(A); NaN: never arrived or censored",
                "1",
            ),
        ),
        "departure_censored": (
            ("beta", "replica"),
            censored,
            A("still in the metastable phase at the horizon (departure beyond it)"),
        ),
        "metastable_beta_used": (
            ("beta",),
            meta_used,
            A(
                "beta whose departure time is resolved: the departure "
                "slope per doubling of N within the budget where measured, "
                "else median ESS >= ess_threshold up to departure"
            ),
        ),
        "metastable_slope": (
            ("replica", "bound"),
            np.stack([slope_low, slope_high], axis=1),
            A(
                "bounds on the slope of departure time against log beta per replica (departures "
                "known to a snapshot step, censored ones beyond the horizon; +-inf: unbounded)",
                "1",
            ),
        ),
        "metastable_slope_interval": (
            ("bound",),
            np.array(fitting.one_sided_bounds(slope_low, slope_high, conf)),
            A(
                f"one-sided {100 * conf:g}% Student-t lower bound of the slope's lower "
                f"bounds and upper bound of its upper bounds",
                "1",
            ),
        ),
        "judged_until": (
            ("beta", "replica"),
            until,
            A(
                "last time of the metastable phase judged against the bound (departure; horizon if "
                "censored or no end phase; NaN: never arrived, not judged)",
                "1",
            ),
        ),
        "ess_min_early": (("beta",), ess_early, A("smallest median ESS over [0, early time]")),
        "particle_budget_measured": (
            ("beta",),
            measured,
            A(
                "the particle-number budget was measured at this beta "
                "(convergence.nc): it decides, the ESS is a diagnostic"
            ),
        ),
        "particle_budget_w2_ratio": (
            ("beta",),
            np.where(measured, np.nan if particle_budget is None else particle_budget.w2_ratio, np.nan),
            A(
                "95% upper bound of the remaining N error of W2(rho^beta_t, Pi_# rho0) over W2, "
                "largest before the earliest departure (NaN: not measured)"
            ),
        ),
        "particle_budget_departure_slope": (
            ("beta",),
            np.where(measured, np.nan if particle_budget is None else particle_budget.slope_bound, np.nan),
            A("95% upper bound of |d departure time / d log2 N| (NaN: not measured or no departure)", "1"),
        ),
        "particle_budget_departure_slope_interval": (
            ("beta", "bound"),
            np.where(
                measured[:, None],
                np.array(NAN_PAIR if particle_budget is None else particle_budget.slope_interval),
                np.nan,
            ),
            A("95% interval of d departure time / d log2 N (NaN: not measured or too few departures)", "1"),
        ),
        "particle_budget_w2_resolved": (
            ("beta",),
            w2_within & measured,
            A("the W2 budget was measured here and met (particle_budget_w2_ratio <= particle_error_fraction)"),
        ),
        "particle_budget_departure_resolved": (
            ("beta",),
            departure_within & measured,
            A(
                "the departure budget was measured here and met (slope bound <= particle_error_fraction of a "
                "snapshot interval, or no departure to judge)"
            ),
        ),
        "particle_budget_tokens_needed": (
            ("beta",),
            np.where(measured, np.nan if particle_budget is None else particle_budget.tokens_needed, np.nan),
            A(
                "the N at which the W2 budget's bound would reach "
                "particle_error_fraction of W2, projected with its own power law "
                "(the slowest exponent that fits; inf: no exponent fits; NaN: not "
                "measured)"
            ),
        ),
        "resolved_early": (
            ("beta",),
            resolved_early,
            A("resolved over [0, early time]: the W2 budget where measured, else median ESS >= ess_threshold"),
        ),
        "resolved_to_departure": (
            ("beta",),
            resolved_to_departure,
            A("resolved up to the last departure: the W2 budget where measured, else median ESS"),
        ),
        "resolved_to_horizon": (
            ("beta",),
            resolved_to_horizon,
            A("resolved over the whole run: the W2 budget where measured, else median ESS"),
        ),
        "ess_min_to_departure": (("beta",), ess_to_departure, A("smallest median ESS up to the last departure")),
        "ess_min_to_horizon": (("beta",), ess_to_horizon, A("smallest median ESS over the whole run")),
    }
    if reference is not None:
        data.update(
            {
                "reference_error_early": (
                    ("beta",),
                    reference.early,
                    A(
                        "mean-field reference: its error bound over W2(rho^beta_t, rho^inf_t) at the "
                        "early time, largest over replicas (temperature_scaling: resolved at most "
                        "fit.particle_error_fraction)"
                    ),
                ),
                "reference_error_to_departure": (
                    ("beta",),
                    reference.to_departure,
                    A(
                        "mean-field reference: its error bound over W2(rho^beta_t, Pi_# rho0), "
                        "largest up to departure (bound_above_data, conjecture_1)"
                    ),
                ),
                "reference_error_to_horizon": (
                    ("beta",),
                    reference.to_horizon,
                    A("mean-field reference: its error bound over W2(rho^beta_t, Pi_# rho0), largest over the run"),
                ),
                "reference_departure_shift": (
                    ("beta",),
                    reference.departure_shift,
                    A(
                        "mean-field reference: largest |departure time - that of the reference "
                        "at twice the cell width| over replicas (metastable_log_beta: resolved "
                        "at most fit.particle_error_fraction of a snapshot interval)",
                        "1",
                    ),
                ),
            }
        )
    out = xr.Dataset(
        data,
        coords={"beta": beta, "replica": reps, "bound": ["start", "stop"], "regime": list(ranges), "pair": pair_labels},
    )
    out.attrs.update(
        early_time=t_early,
        requested_early_time=early,
        horizon=float(t[-1]),
        end_phase_gap=gap,
        laplace_exponent=LAPLACE_EXPONENT,
        confidence=conf,
        ess_threshold=float(ess_threshold),
        particle_error_fraction=float(cfg["particle_error_fraction"]),
        tokens=int(n_tokens),
    )
    return out


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
