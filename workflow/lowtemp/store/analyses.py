"""What the files of the studies and the verdicts hold: variables, dimensions, attributes.

The analysis returns numbers (``lowtemp.analysis``); this module lays them out, one builder per file, as
``lowtemp.store.datasets`` does for the runs and the distances.

===========================  ==========================================  ==============================================
file                         builder                                     written by (``lowtemp.stages.…``)
===========================  ==========================================  ==============================================
convergence.nc               ``convergence_dataset``                     ``convergence.stage_convergence``
fit.nc                       ``fit_dataset``                             ``fit.stage_fit``
claims.nc                    ``claims_dataset``                          ``fit.stage_claims``
===========================  ==========================================  ==============================================

fit.nc's numbers come from ``lowtemp.analysis.estimates.fit_experiment``, claims.nc's from
``lowtemp.analysis.claims.evaluate``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from . import netcdf

# ------------------------------------------------------------------ convergence.nc
#: convergence.nc's variables: dimensions, long name and units (the numbers: ``lowtemp.stages.convergence``)
CONVERGENCE_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "position_difference": (
        ("integrator", "coarse_step", "check_time"),
        "Richardson difference max |X_h - X_h/2| over replicas, tokens, dims, finite temperature",
        "1",
    ),
    "position_order": (
        ("integrator", "check_time"),
        "observed order log2(e(h)/e(h/2)), finite temperature; NaN at the rounding floor",
        "1",
    ),
    "position_error_estimate": (
        ("integrator", "check_time"),
        "Richardson estimate of the position error of the run at the coarsest step: e(h) 2^p/(2^p - 1), p nominal",
        "1",
    ),
    "w2_projection_steps": (
        ("integrator", "step", "step_replica", "check_time"),
        "W2(rho^beta_t, Pi_# rho0) of the run at each step, chordal cost",
        "1",
    ),
    "w2_difference": (("integrator", "coarse_step", "check_time"), "max over replicas of |W2_h - W2_h/2|", "1"),
    "w2_order": (
        ("integrator", "check_time"),
        "observed order of W2(rho^beta_t, Pi_# rho0): log2 of the ratio of successive differences",
        "1",
    ),
    "zero_position_difference": (
        ("integrator", "coarse_step", "check_time"),
        "Richardson difference max |X_h - X_h/2|, zero temperature (Eq. 3)",
        "1",
    ),
    "zero_position_order": (("integrator", "check_time"), "observed order (Richardson), zero temperature", "1"),
    "zero_error_vs_exact": (
        ("integrator", "step", "check_time"),
        "max |X_h - X_exact| against the exact time-changed solution, zero temperature",
        "1",
    ),
    "zero_order_vs_exact": (
        ("integrator", "coarse_step", "check_time"),
        "observed order log2(E(h)/E(h/2)) against the exact solution",
        "1",
    ),
    "nominal_order": (("integrator",), "order of the scheme", "1"),
    "tolerance": (
        ("integrator", "step"),
        "local error tolerance of an adaptive integrator's run at this level (tau / 2^((q+1) k), which halves"
        " its steps k times); NaN for the fixed steps",
        "1",
    ),
    "field_evaluations": (("integrator", "step"), "field evaluations of the finite-temperature run at this level", "1"),
    "zero_field_evaluations": (
        ("integrator", "step"),
        "field evaluations of the zero-temperature run at this level",
        "1",
    ),
    "w2_projection_particles": (
        ("beta", "tokens", "replica", "time"),
        "W2(rho^beta_t, Pi_# rho0) for N tokens, fresh initial tokens per N (the experiment's own run where "
        "reused_run is 1), chordal cost",
        "1",
    ),
    "ess_particles": (
        ("beta", "tokens", "replica", "time"),
        "median over tokens of the effective sample size 1/sum_j w_ij^2 of the softmax, per N",
        "1",
    ),
    "reused_run": (
        ("beta", "tokens"),
        "1: this N is the experiment's own finite-temperature run at the study's beta (its stored tokens and "
        "positions, the first replicas), not a fresh one",
        "1",
    ),
    "w2_mean": (("beta", "tokens", "time"), "mean over replicas of W2(rho^beta_t, Pi_# rho0)", "1"),
    "w2_sem": (("beta", "tokens", "time"), "standard error over replicas (ddof 1)", "1"),
    "w2_min": (("beta", "tokens", "time"), "minimum over replicas", "1"),
    "w2_max": (("beta", "tokens", "time"), "maximum over replicas", "1"),
    "dist_leading_A_particles": (
        ("beta", "tokens", "replica", "time"),
        "distance to measures on E1(A) ∩ S, sqrt(mean(2 - 2|P1 x|)), per N",
        "1",
    ),
    "departure_particles": (
        ("beta", "tokens", "replica"),
        "departure time per N: where the distance to E1(A) rises through end_phase_gap/2, interpolated "
        "between snapshots (NaN: never arrived, or censored)",
        "1",
    ),
    "departure_censored_particles": (("beta", "tokens", "replica"), "1: still metastable at the horizon", "1"),
    "w2_remaining_bound": (
        ("beta", "time"),
        "95% upper bound of |E W2_N - W2_inf| at the experiment's N under E W2_N = W2_inf + a N^-p, p in "
        "budget_exponent_range (inf: no p in the range fits)",
        "1",
    ),
    "w2_budget_exponent": (
        ("beta", "time"),
        "the exponent p that gave the bound",
        "1",
    ),
    "w2_remaining_bound_per_exponent": (
        ("beta", "budget_exponent", "time"),
        "the bound for each exponent p of the grid (NaN: not kept: rejected, and no kept neighbour); "
        "w2_remaining_bound is the largest",
        "1",
    ),
    "w2_at_tokens": (
        ("beta", "time"),
        "mean W2(rho^beta_t, Pi_# rho0) over replicas at the particle number nearest the experiment's N",
        "1",
    ),
    "w2_budget_ratio": (("beta",), "largest w2_remaining_bound / w2_at_tokens for 0 < t <= budget_window_end", "1"),
    "budget_window_end": (
        ("beta",),
        "the earliest departure of any N and replica (the horizon if none): the W2 budget's last time",
        "1",
    ),
    "departure_slope_per_doubling": (
        ("beta", "bound"),
        "95% confidence interval of the slope of the departure time against log2 N (censoring accounted for; "
        "NaN: too few departures)",
        "1",
    ),
    "departure_slope_bound": (
        ("beta",),
        "95% upper bound of |departure slope per doubling of N| (inf: arrival at the metastable phase depends"
        " on N or the draw, or too few departures to measure; NaN: no run arrived)",
        "1",
    ),
}


def convergence_dataset(
    values: dict,
    *,
    methods,
    steps,
    check_times,
    step_replicas: int,
    tokens,
    replicas: int,
    times,
    budget_exponents,
    betas,
    attrs: dict,
) -> xr.Dataset:
    """convergence.nc: the step-halving and tolerance study (dimensions integrator, step or coarse_step,
    check_time; an adaptive integrator's level k is the tolerance that halves its step k times) and the
    particle-number study (beta, tokens, replica, time: one study per β of ``betas``, its budget's values per β
    too); ``values`` holds one array per name of
    ``CONVERGENCE_VARIABLES`` (see ``lowtemp.stages.convergence`` for each quantity; a missing or unknown name
    raises ValueError), ``attrs`` the run's settings (β, sizes, kernels, rounding floor, the budget's exponent
    range and confidence)."""
    if set(values) != set(CONVERGENCE_VARIABLES):
        raise ValueError(
            f"convergence.nc: no value for {sorted(set(CONVERGENCE_VARIABLES) - set(values))}, "
            f"no layout for {sorted(set(values) - set(CONVERGENCE_VARIABLES))}"
        )
    steps = np.asarray(steps)
    data = {
        name: (dims, values[name], netcdf.attrs(long_name, units))
        for name, (dims, long_name, units) in CONVERGENCE_VARIABLES.items()
    }
    ds = xr.Dataset(
        data,
        coords={
            "integrator": methods,
            "step": (
                "step",
                steps,
                netcdf.attrs(
                    "time step h (adaptive integrators: h/2^k stands for their level k, whose first trial step is h)",
                    "1",
                ),
            ),
            "coarse_step": ("coarse_step", steps[:-1], netcdf.attrs("coarser step h of a pair (h, h/2)", "1")),
            "check_time": ("check_time", np.asarray(check_times), netcdf.attrs("fixed time of the step study", "1")),
            "step_replica": np.arange(step_replicas),
            "beta": ("beta", np.asarray(betas, dtype=float), netcdf.attrs("inverse temperature of the particle study")),
            "tokens": ("tokens", np.asarray(tokens), netcdf.attrs("number of tokens N")),
            "bound": ["lower", "upper"],
            "replica": np.arange(replicas),
            "time": ("time", times, netcdf.attrs("time t", "1")),
            "budget_exponent": (
                "budget_exponent",
                budget_exponents,
                netcdf.attrs("exponent p of the budget's model E W2_N = W2_inf + a N^-p", "1"),
            ),
        },
    )
    ds.attrs.update(attrs)
    return ds


# ------------------------------------------------------------------ fit.nc
#: fit.nc's variables: dimensions, long name and units. In a long name, {level} stands for the intervals'
#: coverage, {t_early} for the early time and {confidence} for the confidence in percent. The numbers come
#: from ``lowtemp.analysis.estimates.fit_experiment``; this table is their one layout.
FIT_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "c_regime": (("regime", "replica"), "decay rate of W2(rho^inf_t, Pi_# rho0) fitted in each regime", "1/time"),
    "c_regime_mean": (("regime",), "decay rate per regime, mean over replicas (NaN: no window)", "1/time"),
    "c_regime_interval": (("regime", "bound"), "decay rate per regime, {level}", "1/time"),
    "c_regime_window": (("regime", "bound"), "time window of the decay fit per regime", "1"),
    "rate_predicted": (("regime", "bound"), "predicted decay rate per regime (low, high; equal when sharp)", "1/time"),
    "rate_prediction_note": (("regime",), "the formula of the predicted rate", "1"),
    "regime_boundary": (
        (),
        "time t* at which the N tokens pass from the early (mean-field) to the late (finite-N) regime",
        "1",
    ),
    "regime_band": (("bound",), "transition band around t*, left out of both rate fits", "1"),
    "transient_end": (
        (),
        "time before which the bulk's nonlinear transient, not a channel, sets the decay "
        "(rates.transient_end); left out of both rate fits",
        "1",
    ),
    "rate_lower": ((), "gamma / sigma_max(B)", "1/time"),
    "rate_upper": ((), "gamma / sigma_min(B)", "1/time"),
    "C1": (
        ("replica",),
        "growth rate C1 of W2(rho^beta_t, rho^inf_t)/sqrt(log(beta+1)/beta), shared over beta",
        "1/time",
    ),
    "C1_mean": ((), "C1, mean over replicas", "1/time"),
    "C1_interval": (("bound",), "C1, {level}", "1/time"),
    "C1_per_beta": (("beta", "replica"), "growth rate fitted for each beta alone", "1/time"),
    "log_a": (("beta", "replica"), "intercept log a per beta of the C1 fit", "1"),
    "C1_window": (("beta", "bound"), "time window of the C1 fit per beta", "1"),
    "calibration_beta": (
        ("beta",),
        "beta used to calibrate the bound: the smallest resolved beta with a growth window; the bound is "
        "tested on the resolved beta above them",
        "1",
    ),
    "bound_C1": ((), "C1 of the bound, fitted on the calibration beta", "1/time"),
    "bound_c": ((), "c of the bound: the slower of the two regime rates", "1/time"),
    "bound_b": ((), "b: smallest value with b e^{-ct} above W2(rho^inf_t, Pi_# rho0) (beta = inf)", "1"),
    "bound_a": (
        (),
        "a: smallest value with a sqrt(log(beta+1)/beta) e^{C1 t} + b e^{-ct} above W2(rho^beta_t, Pi_# rho0)"
        " on the calibration data up to departure",
        "1",
    ),
    "early_error": (
        ("beta", "replica"),
        "W2(rho^beta_t, rho^inf_t) at the early time t = {t_early} (NaN: no exact snapshot within early_time/2)",
        "1",
    ),
    "temperature_beta_used": (
        ("beta",),
        "beta resolved over [0, early time] (median ESS >= ess_threshold), not departed by then, with a "
        "positive exact W2: the exponent's beta",
        "1",
    ),
    "temperature_pair_interval": (("pair", "bound"), "exponent of beta between consecutive used beta, {level}", "1"),
    "temperature_pair_bound_exponent": (
        ("pair",),
        "local exponent of sqrt(log(beta+1)/beta) between the same beta",
        "1",
    ),
    "temperature_exponent": (("replica",), "exponent of beta of early_error over the used beta", "1"),
    "temperature_exponent_interval": (("bound",), "exponent of beta, {level}", "1"),
    "temperature_bound_exponent": ((), "local exponent of sqrt(log(beta+1)/beta) over the used beta", "1"),
    "departure_time": (
        ("beta", "replica"),
        "first time after the metastable phase at which the tokens are farther than end_phase_gap/2 from "
        "E1(A); NaN: never arrived or censored",
        "1",
    ),
    "departure_censored": (
        ("beta", "replica"),
        "still in the metastable phase at the horizon (departure beyond it)",
        "1",
    ),
    "metastable_beta_used": (
        ("beta",),
        "beta whose departure time is resolved: the departure slope per doubling of N within the budget where"
        " measured, else median ESS >= ess_threshold up to departure",
        "1",
    ),
    "metastable_slope": (
        ("replica", "bound"),
        "bounds on the slope of departure time against log beta per replica (departures known to a snapshot "
        "step, censored ones beyond the horizon; +-inf: unbounded)",
        "1",
    ),
    "metastable_slope_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of the slope's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_curvature_linear": (
        ("replica", "bound"),
        "bounds per replica on k_lin, the quadratic coefficient of the least-squares fit of the departure time "
        "against (log beta, log^2 beta) over metastable_beta_used (0 for a log-beta law; NaN: fewer than 3 beta; "
        "bounds as for metastable_slope)",
        "1",
    ),
    "departure_curvature_linear_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of k_lin's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_curvature_log": (
        ("replica", "bound"),
        "bounds per replica on k_log, the same quadratic coefficient for log(departure time) (0 for a power law "
        "c beta^p; a departure range reaching down to time 0 leaves no lower bound on its log)",
        "1",
    ),
    "departure_curvature_log_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of k_log's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_power": (
        ("replica", "bound"),
        "bounds per replica on p, the least-squares slope of log(departure time) against log beta (the exponent "
        "of beta if the departure time is a power of beta)",
        "1",
    ),
    "departure_power_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of p's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_law": (
        (),
        "law of the departure time in beta (lowtemp.analysis.departures.DepartureLaw): 2 a power of beta (k_lin's "
        "interval above 0, k_log's contains 0), 1 log beta (k_log's interval below 0, k_lin's contains 0), 0 neither "
        "log beta nor a power of beta (both intervals exclude 0 otherwise), -1 undecided (any other case), -2 not "
        "evaluable (fewer than 3 beta used, or fewer than 2 replicas with a curvature)",
        "1",
    ),
    "judged_until": (
        ("beta", "replica"),
        "last time of the metastable phase judged against the bound (departure; horizon if censored or no end"
        " phase; NaN: never arrived, not judged)",
        "1",
    ),
    "ess_min_early": (("beta",), "smallest median ESS over [0, early time]", "1"),
    "particle_budget_measured": (
        ("beta",),
        "the particle-number budget was measured at this beta (convergence.nc): it decides, the ESS is a diagnostic",
        "1",
    ),
    "particle_budget_w2_ratio": (
        ("beta",),
        "95% upper bound of the remaining N error of W2(rho^beta_t, Pi_# rho0) over W2, largest before the "
        "earliest departure (NaN: not measured)",
        "1",
    ),
    "particle_budget_departure_slope": (
        ("beta",),
        "95% upper bound of |d departure time / d log2 N| (NaN: not measured or no departure)",
        "1",
    ),
    "particle_budget_departure_slope_interval": (
        ("beta", "bound"),
        "95% interval of d departure time / d log2 N (NaN: not measured or too few departures)",
        "1",
    ),
    "particle_budget_w2_resolved": (
        ("beta",),
        "the W2 budget was measured here and met (particle_budget_w2_ratio <= particle_error_fraction)",
        "1",
    ),
    "particle_budget_departure_resolved": (
        ("beta",),
        "the departure budget was measured here and met (slope bound <= particle_error_fraction of a snapshot"
        " interval, or no departure to judge)",
        "1",
    ),
    "particle_budget_tokens_needed": (
        ("beta",),
        "the N at which the W2 budget's bound would reach particle_error_fraction of W2, projected with its "
        "own power law (the slowest exponent that fits; inf: no exponent fits; NaN: not measured)",
        "1",
    ),
    "resolved_early": (
        ("beta",),
        "resolved over [0, early time]: the W2 budget where measured, else median ESS >= ess_threshold",
        "1",
    ),
    "resolved_to_departure": (
        ("beta",),
        "resolved up to the last departure: the W2 budget where measured, else median ESS",
        "1",
    ),
    "resolved_to_horizon": (
        ("beta",),
        "resolved over the whole run: the W2 budget where measured, else median ESS",
        "1",
    ),
    "ess_min_to_departure": (("beta",), "smallest median ESS up to the last departure", "1"),
    "ess_min_to_horizon": (("beta",), "smallest median ESS over the whole run", "1"),
}
#: the mean-field reference's own error, in the fit.nc of a ``model: mean_field`` experiment
FIT_REFERENCE_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "reference_error_early": (
        ("beta",),
        "mean-field reference: its error bound over W2(rho^beta_t, rho^inf_t) at the early time, largest over"
        " replicas (temperature_scaling: resolved at most fit.particle_error_fraction)",
        "1",
    ),
    "reference_error_to_departure": (
        ("beta",),
        "mean-field reference: its error bound over W2(rho^beta_t, Pi_# rho0), largest up to departure "
        "(bound_above_data)",
        "1",
    ),
    "reference_error_to_horizon": (
        ("beta",),
        "mean-field reference: its error bound over W2(rho^beta_t, Pi_# rho0), largest over the run (shown; "
        "conjecture_1 compares the bound at the horizon with its final distance's margin to the tolerance)",
        "1",
    ),
    "reference_departure_shift": (
        ("beta",),
        "mean-field reference: largest |departure time - that of its coarser solution (twice the cell width, or one "
        "icosphere level down)| over replicas (metastable_log_beta uses a beta where it is at most one snapshot "
        "interval, and widens that beta's departure range by it)",
        "1",
    ),
}


def fit_dataset(values: dict, coords: dict, attrs: dict) -> xr.Dataset:
    """fit.nc from the estimators' ``values`` (one per name of ``FIT_VARIABLES``, and of
    ``FIT_REFERENCE_VARIABLES`` for a mean-field experiment), its coordinates and attributes (``confidence``
    and ``early_time`` fill the long names); a missing or unknown name raises ValueError."""
    layout = {**FIT_VARIABLES, **(FIT_REFERENCE_VARIABLES if "reference_error_early" in values else {})}
    if set(values) != set(layout):
        raise ValueError(
            f"fit.nc: no value for {sorted(set(layout) - set(values))}, "
            f"no layout for {sorted(set(values) - set(layout))}"
        )
    conf = float(attrs["confidence"])
    fills = {
        "{level}": f"{100 * conf:g}% Student-t interval over replicas of the mean",
        "{t_early}": f"{attrs['early_time']:g}",
        "{confidence}": f"{100 * conf:g}",
    }
    data = {}
    for name, (dims, long_name, units) in layout.items():
        for key, text in fills.items():
            long_name = long_name.replace(key, text)
        data[name] = (dims, values[name], netcdf.attrs(long_name, units))
    out = xr.Dataset(data, coords=coords)
    out.attrs.update(attrs)
    return out


def claims_dataset(claims: list, fit: xr.Dataset) -> xr.Dataset:
    """claims.nc: one row per claim (``lowtemp.analysis.verdicts.Claim``: status, value, interval, target, statement,
    ``line()``), and per β the numbers behind them (each claim's ``per_beta``: name -> (values, long name))."""
    ds = xr.Dataset(
        {
            "status": (
                ("claim",),
                np.array([c.status for c in claims], np.int8),
                netcdf.attrs(
                    "1 passed, 0 failed, -1 not evaluable, -2 under-resolved (the particle-number "
                    "budget exceeded where measured, else median ESS below ess_threshold over the judged window), "
                    "-3 inconclusive (the interval straddles "
                    "the target)"
                ),
            ),
            "value": (
                ("claim",),
                np.array([c.value for c in claims]),
                netcdf.attrs("the number the claim is about (read from fit.nc or counted on held-out data)"),
            ),
            "interval_low": (
                ("claim",),
                np.array([c.interval[0] for c in claims]),
                netcdf.attrs("lower end of the value's interval over replicas (fit.nc)"),
            ),
            "interval_high": (
                ("claim",),
                np.array([c.interval[1] for c in claims]),
                netcdf.attrs("upper end of the value's interval over replicas (fit.nc)"),
            ),
            "target_low": (
                ("claim",),
                np.array([c.target[0] for c in claims]),
                netcdf.attrs("the claim's target, low"),
            ),
            "target_high": (
                ("claim",),
                np.array([c.target[1] for c in claims]),
                netcdf.attrs("the claim's target, high"),
            ),
            "statement": (("claim",), np.array([c.statement for c in claims], dtype=object), netcdf.attrs("the claim")),
            "summary": (
                ("claim",),
                np.array([c.line() for c in claims], dtype=object),
                netcdf.attrs("status and the numbers behind it"),
            ),
            "min_ess_median": (
                ("beta",),
                fit["ess_min_to_horizon"].values,
                netcdf.attrs("smallest median effective sample size over the run"),
            ),
        },
        coords={"claim": [c.name for c in claims], "beta": fit.beta.values},
    )
    for c in claims:
        for key, (values, long_name) in c.per_beta.items():
            ds[key] = (("beta",), values, netcdf.attrs(long_name))
    ds.attrs.update(early_time=fit.attrs["early_time"], ess_threshold=fit.attrs["ess_threshold"])
    return ds
