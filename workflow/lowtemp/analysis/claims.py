"""The paper's statements as checks on one experiment's numbers (``results/<experiment>/claims.nc``).

Every check reads the constants and intervals of ``fit.nc`` (``lowtemp.analysis.estimates``,
computed once) and the curves of ``distances.nc``; it estimates nothing itself.
Each returns a ``verdicts.Claim``: its status (``verdicts.Status``: PASSED, FAILED, INCONCLUSIVE,
UNDER-RESOLVED, NOT EVALUABLE; ``lowtemp.analysis.verdicts`` says when each is given), the number it is
about, that number's interval over replicas (Student-t, from fit.nc), the target, and one line with the
numbers.

The checks (inequalities of the paper are one-sided checks):

1. ``rate_early`` and ``rate_late`` (Theorem 1, zero temperature): the decay
   rate of W2(ρ^∞_t, Π♯ρ0) fitted in each regime matches the sharp prediction of
   that regime (docs/early_rate.md): its interval meets the predicted range
   widened by ``claims.rate_tolerance``. [γ/σmax(B), γ/σmin(B)] is shown as context.
2. ``bound_above_data`` (Theorem 1): the bound a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−ct},
   calibrated on the smallest resolved β with a growth window (a, C1) and on
   β = ∞ (b, c), lies above W2(ρ^β_t, Π♯ρ0) of every (replica, resolved β above
   the calibration β) curve up to its departure at ≥ ``claims.bound_fraction``
   of the points.
3. ``temperature_scaling`` (Theorem 1 is an upper bound): the finite-temperature
   error at an early time decays in β at least as fast as sqrt(log(β+1)/β): the
   upper end of the exponent's interval is ≤ the bound's local exponent. The
   Laplace prediction −1 for smooth densities is shown beside it.
4. ``metastable_log_beta``: the departure time grows with log β: the lower end of
   the interval of the slope (censored departures at their lower bound) is > 0.
   Beside the verdict, its numbers say which law in β the departure times follow
   (log β, a power of β, neither, undecided; ``departure_law_text``).
5. ``conjecture_1`` (end phase): every resolved (β, replica) whose tokens left
   the metastable phase ends within ``claims.end_phase_tolerance`` of V's leading
   eigenspace (largest real part); the eigenspace the tokens chose is stored per β.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..model import layout
from . import departures, fitting, sampling
from .verdicts import Claim, Status, listed_betas, particles_needed, passed_if, unresolved_rule

EIGENSPACES = {
    "E1(A)": "dist_leading_A",
    "E1(V), largest real part": "dist_leading_V",
    "E1(V), largest modulus": "dist_leading_V_modulus",
}


# ---------------------------------------------------------------- 1. the rate of each regime
def check_rate(fit: xr.Dataset, regime: str, tolerance: float) -> Claim:
    """The fitted decay rate of one regime against that regime's prediction (widened by ``tolerance``)."""
    k = list(fit.regime.values).index(regime)
    name = f"rate_{regime}"
    statement = f"the {regime}-regime decay rate of W2(ρ^∞_t, Π♯ρ0) matches its prediction"
    p_lo, p_hi = (float(v) for v in fit["rate_predicted"].values[k])
    note = str(fit["rate_prediction_note"].values[k])
    context = f"[γ/σmax, γ/σmin] = [{float(fit['rate_lower']):.4f}, {float(fit['rate_upper']):.4f}]"
    mean = float(fit["c_regime_mean"].values[k])
    lo, hi = (float(v) for v in fit["c_regime_interval"].values[k])
    target = (p_lo * (1 - tolerance), p_hi * (1 + tolerance))
    if not np.isfinite(mean):
        start = float(fit["transient_end"])
        band = fit["regime_band"].values
        span = (start, band[0]) if regime == "early" else (max(start, band[1]), float(fit.attrs["horizon"]))
        why = (
            f"the early regime's asymptotic part is empty at this N: the bulk's transient lasts until "
            f"t = {start:.3g} and the finite-N band starts at t = {band[0]:.3g}; raise tokens"
            if regime == "early" and span[0] >= span[1]
            else f"no log-linear window in t in [{span[0]:.3g}, {span[1]:.3g}]"
        )
        return Claim(
            name, statement, Status.NOT_EVALUABLE, target=target, numbers=f"{why}; prediction {note}; {context}"
        )
    if not np.isfinite(lo):
        return Claim(
            name,
            statement,
            Status.NOT_EVALUABLE,
            mean,
            (lo, hi),
            target,
            f"c = {mean:.4f} from one replica: no interval; prediction {note}",
        )
    # an equivalence test: inside the widened prediction passes, wholly outside fails
    status = (
        Status.PASSED
        if target[0] <= lo and hi <= target[1]
        else Status.FAILED
        if hi < target[0] or lo > target[1]
        else Status.INCONCLUSIVE
    )
    w0, w1 = fit["c_regime_window"].values[k]
    return Claim(
        name,
        statement,
        status,
        mean,
        (lo, hi),
        target,
        f"c = {mean:.4f} [{lo:.4f}, {hi:.4f}] on t in [{w0:g}, {w1:g}] against the prediction "
        f"[{p_lo:.4f}, {p_hi:.4f}] ± {100 * tolerance:g}% ({note}); {context}",
    )


# ---------------------------------------------------------------- 2. the calibrated bound above held-out data
def fitted_bound(fit: xr.Dataset) -> tuple[float, float, float, float]:
    """a, C1, b, c of the calibrated bound a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−ct} (fit.nc ``bound_*``)."""
    return tuple(float(fit[k]) for k in ("bound_a", "bound_C1", "bound_b", "bound_c"))


def _bound_not_judged(fit: xr.Dataset, cal_beta: np.ndarray, resolved: np.ndarray, above: np.ndarray):
    """(status, numbers) where the calibrated bound cannot be judged on held-out data (nothing resolved, no bound,
    nothing above the calibration β, every such β under-resolved, a = 0), else None."""
    beta = fit.beta.values
    a, C1, b, c = fitted_bound(fit)
    if not resolved.any():
        return (
            Status.UNDER_RESOLVED,
            f"every β under-resolved up to departure ({unresolved_rule(fit)}): nothing to calibrate on",
        )
    if not np.all(np.isfinite([a, C1, b, c])):
        return (
            Status.NOT_EVALUABLE,
            "the bound could not be calibrated: no resolved β with a growth window of "
            "W2(ρ^β_t, ρ^∞_t), or no decay window at β = ∞ (see logs/fit.log)",
        )
    if not above.any():
        return Status.NOT_EVALUABLE, f"no β above the calibration β {listed_betas(beta, cal_beta)} to test the bound on"
    if not (above & resolved).any():
        return (
            Status.UNDER_RESOLVED,
            f"calibrated on β {listed_betas(beta, cal_beta)}; every β above it is under-resolved "
            f"({unresolved_rule(fit)}: "
            f"{listed_betas(beta, above & ~resolved)})",
        )
    if not a > 0:
        return (
            Status.NOT_EVALUABLE,
            f"a = 0: the calibration data never exceed b·e^(−ct) = {b:.3g}·e^(−{c:.3g} t), so the "
            f"β term of the bound is untested",
        )
    return None


def _held_out_fractions(fit: xr.Dataset, dist: xr.Dataset, held: np.ndarray) -> tuple[dict, np.ndarray, int]:
    """{(β index, replica): the fraction of its judged points under the bound} of every held-out curve, the worst
    fraction per β (NaN where none is judged), and how many judged points were over the bound by no more than the
    sampling of the tokens explains (``sampling.under_bound_but_for_tokens_across``: the lower bound on what sending
    tokens across the split of Π♯ρ0's atoms costs the measure sampled, and the tokens across)."""
    t, beta = dist.time.values, fit.beta.values
    a, C1, b, c = fitted_bound(fit)
    w = dist["w2_projection"].sel(beta=beta).values
    judged = fitting.judged_mask(t, fit["judged_until"].values) & np.isfinite(w)
    curves, fractions, sampled = {}, np.full(beta.size, np.nan), 0
    d, moving_low, g, k = _sampling_curves(dist, beta)
    two_atoms = int(fit.attrs["leading_A_dimension"]) == 1
    n, alpha = int(fit.attrs["tokens"]), 1.0 - float(fit.attrs["confidence"])
    for i in np.flatnonzero(held):
        bound = fitting.bound_curve(t, beta[i], a, C1, b, c)
        for r in range(w.shape[1]):
            on = judged[i, r]
            if on.any():
                under = bound[on] >= w[i, r, on]
                if two_atoms:
                    plain = under
                    under = sampling.under_bound_but_for_tokens_across(
                        bound[on], w[i, r, on], d[i, r, on], moving_low[i, r, on], g[i, r, on], k[i, r, on], n, alpha
                    )
                    sampled += int(np.sum(under & ~plain))
                curves[i, r] = float(np.mean(under))
        fractions[i] = min((f for (j, _), f in curves.items() if j == i), default=np.nan)
    return curves, fractions, sampled


#: what the sampling rule reads from distances.nc
SAMPLING_VARIABLES = ("dist_leading_A", "w2sq_moving_low", "tokens_across", "tokens_across_net")


def _sampling_curves(dist: xr.Dataset, beta: np.ndarray) -> tuple[np.ndarray, ...]:
    """``SAMPLING_VARIABLES`` at ``beta``, or ValueError naming the missing ones (a distances.nc written by an
    earlier version of ``distances_beta``, which did not store them)."""
    missing = [v for v in SAMPLING_VARIABLES if v not in dist]
    if missing:
        raise ValueError(
            f"distances.nc lacks {missing}, which bound_above_data's sampling rule reads: it was written by an "
            f"earlier version of the distances_beta stage; rerun it (snakemake --forcerun distances_beta)"
        )
    return tuple(dist[v].sel(beta=beta).values for v in SAMPLING_VARIABLES)


def check_bound_above_data(fit: xr.Dataset, dist: xr.Dataset, fraction: float) -> Claim:
    """The calibrated bound against W2(ρ^β_t, Π♯ρ0) of every held-out (β, replica) curve, up to its departure."""
    name, statement = "bound_above_data", "the calibrated bound lies above held-out W2(ρ^β_t, Π♯ρ0) up to departure"
    beta = fit.beta.values
    cal_beta = fit["calibration_beta"].values.astype(bool)
    resolved = fit["resolved_to_departure"].values.astype(bool)
    above = beta > (beta[cal_beta].max() if cal_beta.any() else np.inf)
    held = above & resolved
    long_name = "fraction of held-out points (t up to departure) where the bound is above"
    refusal = _bound_not_judged(fit, cal_beta, resolved, above)
    if refusal is not None:
        per_beta = {"bound_fraction_above": (np.full(beta.size, np.nan), long_name)}
        return Claim(name, statement, refusal[0], per_beta=per_beta, numbers=refusal[1])
    curves, fractions, sampled = _held_out_fractions(fit, dist, held)
    per_beta = {"bound_fraction_above": (fractions, long_name)}
    if not curves:
        return Claim(
            name,
            statement,
            Status.NOT_EVALUABLE,
            per_beta=per_beta,
            numbers=f"no held-out curve reached the metastable phase (β {listed_betas(beta, held)})",
        )
    a, C1, b, c = fitted_bound(fit)
    worst = min(curves, key=curves.get)
    value = curves[worst]
    skipped = (
        f"; β {listed_betas(beta, above & ~resolved)} under-resolved, not judged" if (above & ~resolved).any() else ""
    )
    shown = ", ".join(f"β={beta[i]:g}: {fractions[i]:.2f}" for i in np.flatnonzero(held))
    return Claim(
        name,
        statement,
        passed_if(value >= fraction),
        value,
        (value, value),
        (fraction, 1.0),
        f"every held-out curve must lie under the bound at ≥ {fraction:g} of its points up to departure; "
        f"the worst of {len(curves)} (β = {beta[worst[0]]:g}, replica {worst[1]}) does at {value:.3f}; "
        f"calibrated on β {listed_betas(beta, cal_beta)} and β = ∞: a = {a:.3g}, C1 = {C1:.3g}, b = {b:.3g}, "
        f"c = {c:.3g}; worst curve per β {shown}{skipped}{_sampled_words(sampled, int(fit.attrs['tokens']))}",
        per_beta,
    )


def _sampled_words(sampled: int, tokens: int) -> str:
    """The points counted under the bound though over it, where the sampling of the tokens explains the excess."""
    if not sampled:
        return ""
    return (
        f"; {sampled} judged point(s) over the bound by no more than the sampling of {tokens} tokens explains (the "
        f"spread's lower bound under it, and no more tokens across the split of Π♯ρ0's atoms, each up to "
        f"{4.0 / tokens:.3g} of W2², than a measure under it may send there), counted under it"
    )


# --------------------------------------------------------- 3. the error decays in β at least as fast as the bound
def _temperature_verdict(fit: xr.Dataset, lo: float, hi: float, theory: float) -> tuple[Status, str]:
    """The status of temperature_scaling from the exponent's interval [lo, hi] against the bound's local exponent
    ``theory`` and from every pair of consecutive β, with the words on the pairs."""
    pairs = fit["temperature_pair_interval"].values
    pair_bound = fit["temperature_pair_bound_exponent"].values
    slower = [str(p) for p, (p_lo, _), pb in zip(fit.pair.values, pairs, pair_bound) if p_lo > pb]
    unsure = [str(p) for p, (_, p_hi), pb in zip(fit.pair.values, pairs, pair_bound) if p_hi > pb]
    status = (
        Status.FAILED
        if lo > theory or slower
        else Status.PASSED
        if hi <= theory and not unsure
        else Status.INCONCLUSIVE
    )
    pair_text = (
        f"; slower between β {', '.join(slower)}"
        if slower
        else f"; not resolved pair by pair between β {', '.join(unsure)}"
        if unsure
        else "; every pair of consecutive β too"
    )
    return status, pair_text


def _temperature_not_judged(fit: xr.Dataset):
    """(status, numbers) where the β exponent cannot be fitted (no exact W2 near the early time, fewer than two
    usable β), else None."""
    beta = fit.beta.values
    used = fit["temperature_beta_used"].values.astype(bool)
    t_early = float(fit.attrs["early_time"])
    if not np.isfinite(t_early):
        return (
            Status.NOT_EVALUABLE,
            f"no exact W2(ρ^β_t, ρ^∞_t) within half of fit.early_time = "
            f"{float(fit.attrs['requested_early_time']):g} (distances.exact_every skips it)",
        )
    if used.sum() < 2:
        low_ess = ~fit["resolved_early"].values.astype(bool)
        status = Status.UNDER_RESOLVED if (low_ess & ~used).any() else Status.NOT_EVALUABLE
        why = (
            f"under-resolved over [0, {t_early:g}] ({unresolved_rule(fit)}) at β = {listed_betas(beta, low_ess)}"
            if status == Status.UNDER_RESOLVED
            else f"fewer than two β with a positive exact W2 at t = {t_early:g} that had not departed by then"
        )
        return status, f"{why}: fewer than two β to fit an exponent"
    return None


def check_temperature_scaling(fit: xr.Dataset) -> Claim:
    """One-sided: the error decays in β at least as fast as sqrt(log(β+1)/β), over the whole range and pair by pair.

    PASSED when the upper end of the exponent's interval is at most the bound's local
    exponent and no pair of consecutive β shows a slower decay (its interval wholly
    above that pair's local exponent); FAILED when the exponent's interval, or a
    pair's, lies wholly above; INCONCLUSIVE otherwise.
    """
    name = "temperature_scaling"
    statement = "W2(ρ^β_t, ρ^∞_t) at a fixed early t decays in β at least as fast as sqrt(log(β+1)/β)"
    beta = fit.beta.values
    used = fit["temperature_beta_used"].values.astype(bool)
    alpha = fit["temperature_exponent"].values
    lo, hi = (float(v) for v in fit["temperature_exponent_interval"].values)
    theory = float(fit["temperature_bound_exponent"])
    t_early = float(fit.attrs["early_time"])
    per_beta = {
        "early_error_mean": (
            fit["early_error"].values.mean(axis=1),
            f"W2(rho^beta_t, rho^inf_t) at t = {t_early:g}, replica mean",
        )
    }
    refusal = _temperature_not_judged(fit)
    if refusal is not None:
        return Claim(name, statement, refusal[0], per_beta=per_beta, numbers=refusal[1])
    mean = float(np.mean(alpha[np.isfinite(alpha)])) if np.isfinite(alpha).any() else float("nan")
    if not np.isfinite(hi):
        return Claim(
            name,
            statement,
            Status.NOT_EVALUABLE,
            mean,
            (lo, hi),
            (-np.inf, theory),
            f"exponent {mean:.3f} from one replica: no interval",
            per_beta,
        )
    status, pair_text = _temperature_verdict(fit, lo, hi, theory)
    relation = {
        Status.PASSED: "decays at least as fast as",
        Status.FAILED: "decays slower than",
        Status.INCONCLUSIVE: "is not shown to decay as fast as",
    }
    return Claim(
        name,
        statement,
        status,
        mean,
        (lo, hi),
        (-np.inf, theory),
        f"exponent of β at t = {t_early:g}: {mean:.3f} [{lo:.3f}, {hi:.3f}] over β {listed_betas(beta, used)}; "
        f"the error {relation[status]} sqrt(log(β+1)/β) (local exponent {theory:.3f}){pair_text}; "
        f"Laplace's method predicts {float(fit.attrs['laplace_exponent']):g} for a smooth positive density",
        per_beta,
    )


# ---------------------------------------------------------------- 4. departure time ∝ log β
def departure_law_text(fit: xr.Dataset) -> str:
    """The law in β the departure times follow, in words, from fit.nc's ``departure_law`` and the intervals
    behind it (``departures.departure_law``): reported beside metastable_log_beta's verdict, which is about growth
    alone."""
    if "departure_law" not in fit:
        return "; law in β: not in this fit.nc (written before the law test: rerun fit)"
    law = departures.DepartureLaw(int(fit["departure_law"]))
    used = fit["metastable_beta_used"].values.astype(bool)
    (lin_lo, lin_hi), (log_lo, log_hi), (p_lo, p_hi) = (
        (float(v) for v in fit[f"departure_{k}_interval"].values)
        for k in ("curvature_linear", "curvature_log", "power")
    )
    if law is departures.DepartureLaw.NOT_EVALUABLE:
        why = f"{used.sum()} β used, 3 needed" if used.sum() < 3 else "fewer than two replicas with a curvature"
        power = f"; exponent of β [{p_lo:.3g}, {p_hi:.3g}]" if not np.isnan([p_lo, p_hi]).any() else ""
        return f"; law in β: not evaluable ({why}{power})"
    how = ""
    if law is departures.DepartureLaw.NEITHER:
        how = ": " + departures.neither_law_words(lin_lo, log_lo)
    elif law is departures.DepartureLaw.UNDECIDED:
        censored = fit["departure_censored"].values.astype(bool)[used].any()
        faster = ": faster than log β, a power of β or faster," if lin_lo > 0 else ""
        how = f"{faster} at this confidence (more β or replicas would decide it" + (
            "; censored departures leave the curvatures unbounded on one side: a longer horizon would bound them)"
            if censored
            else ")"
        )
    return (
        f"; law in β: {law.words}{how} (quadratic coefficient in log β of τ [{lin_lo:.3g}, {lin_hi:.3g}], 0 for "
        f"log β; of log τ [{log_lo:.3g}, {log_hi:.3g}], 0 for a power of β; exponent of β [{p_lo:.3g}, {p_hi:.3g}])"
    )


def _departures_not_judged(fit: xr.Dataset, shown: str):
    """(status, numbers) where the departures cannot be judged against log β (no end phase, fewer than two β
    resolved or reaching the metastable phase), else None; ``shown`` lists the departure times."""
    beta = fit.beta.values
    used = fit["metastable_beta_used"].values.astype(bool)
    gap = float(fit.attrs["end_phase_gap"])
    if not gap > 0:
        return Status.NOT_EVALUABLE, "V's leading eigenspace meets E1(A): there is no end phase to depart for"
    arrived = np.isfinite(fit["departure_time"].values) | fit["departure_censored"].values.astype(bool)
    if used.sum() < 2:
        status = Status.UNDER_RESOLVED if (arrived.any(axis=1) & ~used).any() else Status.NOT_EVALUABLE
        return (
            status,
            f"fewer than two β whose departure is resolved (not {unresolved_rule(fit, departure=True)}); "
            f"under-resolved β {listed_betas(beta, ~used)} ({shown})",
        )
    if arrived[used].any(axis=1).sum() < 2:
        return (
            Status.NOT_EVALUABLE,
            f"fewer than two resolved β reached the metastable phase (within {gap / 2:.3g} of E1(A)) ({shown})",
        )
    return None


def check_metastable_log_beta(fit: xr.Dataset) -> Claim:
    """The departure time grows with log β: PASSED when the slope's one-sided lower bound is above 0, FAILED when
    its upper bound is below 0, INCONCLUSIVE in between (NOT EVALUABLE when censoring leaves it unbounded below
    and not shown negative). Where a slope was computed, the numbers also say which law in β the departure times
    follow (``departure_law_text``); it does not change the status."""
    name, statement = "metastable_log_beta", "the departure time grows with log β"
    beta = fit.beta.values
    dep = fit["departure_time"].values
    cen = fit["departure_censored"].values.astype(bool)
    used = fit["metastable_beta_used"].values.astype(bool)
    mean = fitting.mean_of_finite(dep)
    per_beta = {
        "departure_time_mean": (mean, "departure time, mean over the replicas that departed"),
        "departure_censored_count": (
            cen.sum(axis=1).astype(float),
            "replicas still in the metastable phase at the horizon",
        ),
    }
    shown = ", ".join(
        f"β={b:g}: {m:.2f}" + (f" ({n} censored)" if n else "") for b, m, n in zip(beta, mean, cen.sum(axis=1))
    )
    refusal = _departures_not_judged(fit, shown)
    if refusal is not None:
        return Claim(name, statement, refusal[0], per_beta=per_beta, numbers=refusal[1])
    lo, hi = (float(v) for v in fit["metastable_slope_interval"].values)
    bounds = fit["metastable_slope"].values
    value = float(np.mean(bounds[np.isfinite(bounds)])) if np.isfinite(bounds).any() else float("nan")
    if np.isnan(lo) or np.isnan(hi):
        status, numbers = Status.NOT_EVALUABLE, f"fewer than two replicas with a slope: no bound ({shown})"
    elif np.isneginf(lo) and not hi < 0:
        status = Status.NOT_EVALUABLE
        numbers = (
            f"a smaller β was still metastable at the horizon in some replica, so the slope has no lower "
            f"bound; lengthen time.horizon ({shown})"
        )
    else:
        status = Status.PASSED if lo > 0 else Status.FAILED if hi < 0 else Status.INCONCLUSIVE
        numbers = (
            f"slope of the departure time against log β over β {listed_betas(beta, used)}: one-sided bounds "
            f"[{lo:.3f}, {hi:.3f}] (departures known to a snapshot step; censored ones beyond the horizon); "
            f"departure times {shown}"
        )
    return Claim(name, statement, status, value, (lo, hi), (0.0, np.inf), numbers + departure_law_text(fit), per_beta)


# ---------------------------------------------------------------- 5. Conjecture 1
def check_conjecture_1(fit: xr.Dataset, dist: xr.Dataset, tolerance: float) -> Claim:
    """Every resolved (β, replica) that departed ends within ``tolerance`` of V's leading eigenspace."""
    beta = fit.beta.values
    final = {k: dist[v].values[..., -1] for k, v in EIGENSPACES.items()}
    means = {k: v.mean(axis=1) for k, v in final.items()}
    names = list(EIGENSPACES)
    chosen = np.array([names[i] for i in np.argmin(np.stack([means[k] for k in names]), axis=0)], dtype=object)
    per_beta = {
        f"final_{EIGENSPACES[k]}": (means[k], f"distance to {k} at the last snapshot, replica mean") for k in names
    }
    per_beta["chosen_eigenspace"] = (chosen, "the eigenspace the tokens are closest to at the last snapshot")
    departed = np.isfinite(fit["departure_time"].values) & np.isfinite(dist["dist_leading_V"].values[..., -1])
    to_v = final["E1(V), largest real part"]
    resolved = end_phase_resolved(fit, dist, to_v, tolerance)
    shown = "; ".join(
        f"β={b:g} ({departed[i].sum()} of {departed.shape[1]} departed): A {means['E1(A)'][i]:.3f}, "
        f"V(Re) {means[names[1]][i]:.3f}, V(|λ|) {means[names[2]][i]:.3f} -> {chosen[i]}"
        for i, b in enumerate(beta)
    )
    name, statement = "conjecture_1", "after the metastable phase, tokens concentrate on V's leading eigenspace"
    moving = departed & still_approaching(dist) & ~(to_v <= tolerance)  # within the tolerance already: judged
    judged = departed & resolved & ~moving
    arriving = (
        f"; {int(np.sum(moving & resolved))} (β, replica) still approaching it at the horizon "
        f"(distance fell by more than {fitting.STILL_APPROACHING_DROP:.0%} over its last tenth), not judged: "
        f"lengthen time.horizon"
        if np.any(moving & resolved)
        else ""
    )
    if not judged.any():
        if np.any(moving & resolved):
            return Claim(
                name,
                statement,
                Status.INCONCLUSIVE,
                target=(0.0, float(tolerance)),
                numbers=f"no resolved (β, replica) settled after departing{arriving} ({shown})",
                per_beta=per_beta,
            )
        status = Status.UNDER_RESOLVED if departed.any() else Status.NOT_EVALUABLE
        why = (
            f"the β that departed are under-resolved ({end_phase_rule(fit, dist)}): "
            f"{listed_betas(beta, np.any(departed & ~resolved, axis=1))}"
            if status == Status.UNDER_RESOLVED
            else "no β left the metastable phase before the horizon"
        )
        return Claim(
            name, statement, status, target=(0.0, float(tolerance)), numbers=f"{why} ({shown})", per_beta=per_beta
        )
    value = float(np.max(to_v[judged]))
    return Claim(
        name,
        statement,
        passed_if(value <= tolerance),
        value,
        (value, value),
        (0.0, float(tolerance)),
        f"largest final distance to V's leading eigenspace (largest real part) over the {judged.sum()} "
        f"resolved (β, replica) that departed: {value:.3f}, tolerance {tolerance:g}{arriving} ({shown})",
        per_beta,
    )


def end_phase_resolved(fit: xr.Dataset, dist: xr.Dataset, to_v: np.ndarray, tolerance: float) -> np.ndarray:
    """(beta, replica): whether the final distance ``to_v`` to V's leading eigenspace is resolved.

    A mean-field reference (distances.nc's ``reference_error``): where its error estimate at the last snapshot is
    below the distance's margin to the tolerance. That estimate is the root mean square distance between the two
    levels' tracers, token by token; the distance to an eigenspace is the W2 distance to the measures on it, so it
    moves by at most that much from one level to the other: no solution within the estimate decides otherwise.
    (The claims on W2 itself need the estimate small against that W2; the end phase needs it small against the
    margin only.) Particle runs: resolved over the whole run (fit.nc's ``resolved_to_horizon``), for every replica.
    """
    if "reference_error" not in dist:
        resolved = fit["resolved_to_horizon"].values.astype(bool)
        return np.broadcast_to(resolved[:, None], to_v.shape)
    err = dist["reference_error"].values[..., -1]
    with np.errstate(invalid="ignore"):
        return err < np.abs(to_v - tolerance)


def end_phase_rule(fit: xr.Dataset, dist: xr.Dataset) -> str:
    """What leaves a (β, replica) out of ``conjecture_1`` as under-resolved, in words (``end_phase_resolved``'s
    rule: a mean-field reference where distances.nc holds ``reference_error``)."""
    if "reference_error" in dist:
        return (
            "the mean-field reference's error estimate at the horizon not below the final distance's margin to the "
            "tolerance"
        )
    return unresolved_rule(fit)


def still_approaching(dist: xr.Dataset) -> np.ndarray:
    """(beta, replica): ``fitting.still_approaching`` on distances.nc's ``dist_leading_V``. Tokens still converging
    to E1(V) are not judged: their final distance would FAIL the conjecture on a run that stopped too early."""
    return fitting.still_approaching(dist.time.values, dist["dist_leading_V"].values)


# ---------------------------------------------------------------- all of them
def evaluate(dist: xr.Dataset, fit: xr.Dataset, cfg: dict) -> list[Claim]:
    """All checks from the stored distances and fit (``cfg``: the experiment's ``claims`` block). A claim that
    leaves out a β whose particle-number budget was measured and exceeded says what N it would need
    (``particles_needed``)."""
    layout.require_canonical(dist, "distances")  # the checks index curves as (beta, replica, time)
    layout.require_canonical(fit, "fit")
    claims = [
        check_rate(fit, "early", float(cfg["rate_tolerance"])),
        check_rate(fit, "late", float(cfg["rate_tolerance"])),
        check_bound_above_data(fit, dist, float(cfg["bound_fraction"])),
        check_temperature_scaling(fit),
        check_metastable_log_beta(fit),
        check_conjecture_1(fit, dist, float(cfg["end_phase_tolerance"])),
    ]
    t = dist.time.values
    interval = float(np.min(np.diff(t))) if t.size > 1 else float("nan")
    for c in claims[2:]:  # the claims that judge β by β (the rates are fitted at β = ∞)
        c.numbers += particles_needed(fit, interval, departure=c.name == "metastable_log_beta")
    return claims
