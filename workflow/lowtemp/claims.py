"""The paper's statements as checks on one experiment's numbers (``results/<experiment>/claims.nc``).

Each check returns a ``Claim``: its status (passed, failed, or not evaluable
with the reason), the number it is about, an interval over replicas
(percentile bootstrap, ``fitting.bootstrap_interval``), the target it is
compared with, and one line with the numbers. A check that fails is reported
as failed; no tolerance here is tuned to make a check pass.

1. ``rate_in_bounds`` (Theorem 1, zero temperature): the fitted decay rate c of
   W2(ρ^∞_t, Π♯ρ0) lies in [γ/σmax(B), γ/σmin(B)]. Passed when the replica
   mean does; the interval is reported beside it.
2. ``bound_above_data`` (Theorem 1): the fitted bound
   a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−ct} (``fitted_bound``: the fitted rates
   and the envelope prefactors over the fit windows, as drawn in the figures)
   lies above the replica mean of
   W2(ρ^β_t, Π♯ρ0) at no less than ``bound_fraction`` of the (β, t) points with
   t up to that β's departure time (all t where it never departs).
3. ``temperature_scaling`` (Theorem 1): at a fixed early time the
   finite-temperature error W2(ρ^β_t, ρ^∞_t) scales like sqrt(log(β+1)/β):
   the fitted exponent α of β (log W2 = k + α log β over the β grid) has an
   interval containing the local exponent of sqrt(log(β+1)/β) over the same
   grid (≈ −0.5 + the log correction).
4. ``metastable_log_beta`` (the metastable time scale ∝ log β): the slope of
   the mean departure time against log β is positive (interval above 0).
5. ``conjecture_1`` (end phase): at the last snapshot, for every β whose
   tokens left the metastable phase (a departure time inside the horizon), the
   distance of the tokens to V's leading eigenspace (largest real part) is at
   most ``end_phase_tolerance``; not evaluable when no β departed. For each β the eigenspace the tokens are
   closest to at the end (E1(A), V's by real part, V's by modulus) is stored,
   so the run says which one the dynamics chose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from . import fitting, io

PASSED, FAILED, NOT_EVALUABLE = 1, 0, -1
STATUS_WORD = {PASSED: "PASSED", FAILED: "FAILED", NOT_EVALUABLE: "NOT EVALUABLE"}

DEFAULTS = {"bound_fraction": 0.9, "early_time": 1.0, "end_phase_tolerance": 0.1}

EIGENSPACES = {"E1(A)": "dist_leading_A", "E1(V), largest real part": "dist_leading_V",
               "E1(V), largest modulus": "dist_leading_V_modulus"}


@dataclass
class Claim:
    name: str
    statement: str
    status: int
    value: float = float("nan")
    interval: tuple[float, float] = (float("nan"), float("nan"))
    target: tuple[float, float] = (float("nan"), float("nan"))
    numbers: str = ""
    per_beta: dict = field(default_factory=dict)  # name -> (values over β, attrs)

    def line(self) -> str:
        return f"{STATUS_WORD[self.status]} {self.name}: {self.numbers}"


def _status(ok: bool) -> int:
    return PASSED if ok else FAILED


# ---------------------------------------------------------------- 1. rate in [γ/σmax, γ/σmin]
def check_rate_in_bounds(c_replicas, rate_bounds, rng, **boot) -> Claim:
    c = np.asarray(c_replicas, float)
    lo, hi = (float(v) for v in rate_bounds)
    mean = float(np.mean(c))
    if not np.isfinite(mean):
        return Claim("rate_in_bounds", "the zero-temperature rate c lies in [γ/σmax(B), γ/σmin(B)]", NOT_EVALUABLE,
                     target=(lo, hi), numbers="no decay window was found for c (see logs/fit.log)")
    interval = fitting.bootstrap_interval(c, np.mean, rng, **boot)
    ok = lo <= mean <= hi
    inside = "inside" if lo <= interval[0] and interval[1] <= hi else "not inside"
    return Claim("rate_in_bounds", "the zero-temperature rate c lies in [γ/σmax(B), γ/σmin(B)]", _status(ok),
                 mean, interval, (lo, hi),
                 f"c = {mean:.4f} [{interval[0]:.4f}, {interval[1]:.4f}] against [{lo:.4f}, {hi:.4f}] "
                 f"(the interval is {inside} the bounds)")


# ---------------------------------------------------------------- 2. the fitted bound lies above the data
def fitted_bound(fit: xr.Dataset) -> tuple[float, float, float, float]:
    """a, C1, b, c of the fitted bound a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−ct}.

    C1 and c are the fitted rates; a and b are the envelope prefactors stored by
    the fit (``bound_a``, ``bound_b``: the smallest values above the data inside
    the fit windows), one a for all β as in Theorem 1.
    """
    return float(fit["bound_a"]), float(fit["C1_mean"]), float(fit["bound_b"]), float(fit["c_mean"])


def check_bound_above_data(t, beta, w2_projection, departure, a, C1, b, c, fraction) -> Claim:
    """``w2_projection`` (beta, replica, time); ``departure`` (beta,) mean departure times (NaN: never)."""
    t = np.asarray(t, float)
    mean = np.nanmean(np.asarray(w2_projection, float), axis=1)
    above = []
    counts = np.zeros(len(beta))
    for i, b_i in enumerate(beta):
        upto = t <= departure[i] if np.isfinite(departure[i]) else np.ones_like(t, bool)
        bound = fitting.bound_curve(t[upto], b_i, a, C1, b, c)
        hits = bound >= mean[i, upto]
        above.append(hits)
        counts[i] = hits.mean() if hits.size else np.nan
    hits = np.concatenate(above) if above else np.array([], bool)
    if hits.size == 0 or not np.all(np.isfinite([a, C1, b, c])):
        return Claim("bound_above_data", "the fitted bound lies above W2(ρ^β_t, Π♯ρ0) up to departure",
                     NOT_EVALUABLE, numbers="no (β, t) points or no fitted constants")
    value = float(hits.mean())
    per_beta = ", ".join(f"β={b_i:g}: {f:.2f}" for b_i, f in zip(beta, counts))
    return Claim("bound_above_data", "the fitted bound lies above W2(ρ^β_t, Π♯ρ0) up to departure",
                 _status(value >= fraction), value, (value, value), (fraction, 1.0),
                 f"bound above the data at {value:.3f} of {hits.size} (β, t) points, required {fraction:g} "
                 f"(a = {a:.3g}, C1 = {C1:.3g}, b = {b:.3g}, c = {c:.3g}; per β {per_beta})",
                 {"bound_fraction_above": (counts, io.attrs("fraction of t up to departure where the bound is above"))})


# ---------------------------------------------------------------- 3. error ∝ sqrt(log(β+1)/β) at an early time
def check_temperature_scaling(beta, early_error, rng, early_time, **boot) -> Claim:
    """``early_error`` (beta, replica): W2(ρ^β_t, ρ^∞_t) at the early time."""
    beta = np.asarray(beta, float)
    err = np.asarray(early_error, float)
    theory = fitting.temperature_scale_exponent(beta)
    name, statement = "temperature_scaling", "W2(ρ^β_t, ρ^∞_t) at a fixed early t scales like sqrt(log(β+1)/β)"
    usable = np.all(np.isfinite(err) & (err > 0), axis=1)
    if usable.sum() < 2:
        return Claim(name, statement, NOT_EVALUABLE, target=(theory, theory),
                     numbers=f"fewer than two β with a positive exact W2 at t = {early_time:g}")
    b, e = beta[usable], err[usable]
    alpha = fitting.power_law_exponent(b, e.mean(axis=1))
    interval = fitting.bootstrap_interval(e.T, lambda s: fitting.power_law_exponent(b, s.mean(axis=0)), rng, **boot)
    ok = interval[0] <= theory <= interval[1]
    relation = ("decays faster than the bound's rate" if interval[1] < theory else
                "decays slower than the bound's rate" if interval[0] > theory else "matches the bound's rate")
    return Claim(name, statement, _status(ok), alpha, interval, (theory, theory),
                 f"exponent of β at t = {early_time:g}: {alpha:.3f} [{interval[0]:.3f}, {interval[1]:.3f}] over "
                 f"β in [{b.min():g}, {b.max():g}]; sqrt(log(β+1)/β) has local exponent {theory:.3f}: the error "
                 f"{relation}",
                 {"early_error_mean": (np.nanmean(err, axis=1),
                                       io.attrs(f"W2(rho^beta_t, rho^inf_t) at t = {early_time:g}, replica mean"))})


# ---------------------------------------------------------------- 4. departure time ∝ log β
def check_metastable_log_beta(beta, departure_replicas, rng, **boot) -> Claim:
    """``departure_replicas`` (beta, replica), NaN where a replica never departs."""
    beta = np.asarray(beta, float)
    dep = np.asarray(departure_replicas, float)
    name, statement = "metastable_log_beta", "the departure time grows like log β"

    def slope(sample):  # sample: (replica, beta)
        with np.errstate(all="ignore"):
            mean = np.nanmean(sample, axis=0) if np.isfinite(sample).any() else np.full(sample.shape[1], np.nan)
        ok = np.isfinite(mean)
        return fitting.line_fit(np.log(beta[ok]), mean[ok])[0] if ok.sum() >= 2 else np.nan

    value = slope(dep.T)
    if not np.isfinite(value):
        return Claim(name, statement, NOT_EVALUABLE, target=(0.0, np.inf),
                     numbers="fewer than two β with a departure inside the horizon")
    interval = fitting.bootstrap_interval(dep.T, slope, rng, **boot)
    with np.errstate(all="ignore"):
        mean = np.nanmean(dep, axis=1)
    shown = ", ".join(f"β={b:g}: {m:.2f}" for b, m in zip(beta, mean))
    return Claim(name, statement, _status(interval[0] > 0), value, interval, (0.0, np.inf),
                 f"slope of the departure time against log β: {value:.3f} [{interval[0]:.3f}, {interval[1]:.3f}] "
                 f"(departure times {shown})",
                 {"departure_time_mean": (mean, io.attrs("departure time, mean over replicas that depart", "1"))})


# ---------------------------------------------------------------- 5. Conjecture 1
def check_conjecture_1(beta, final_distances: dict, tolerance, departed=None) -> Claim:
    """``final_distances``: for each key of ``EIGENSPACES``, (beta, replica) distances at the last snapshot.

    ``departed`` (beta,): whether the tokens left the metastable phase (a departure time inside
    the horizon). The end phase is judged on those β only; when none departed the claim is not
    evaluable (the horizon ends inside the metastable phase).
    """
    beta = np.asarray(beta, float)
    departed = np.ones(beta.size, bool) if departed is None else np.asarray(departed, bool)
    means = {k: np.nanmean(np.asarray(v, float), axis=1) for k, v in final_distances.items()}
    names = list(EIGENSPACES)
    stacked = np.stack([means[k] for k in names])
    chosen = np.array([names[i] for i in np.argmin(stacked, axis=0)], dtype=object)
    to_v = means["E1(V), largest real part"]
    shown = "; ".join(f"β={b:g}{'' if departed[i] else ' (no departure)'}: A {means['E1(A)'][i]:.3f}, "
                      f"V(Re) {to_v[i]:.3f}, V(|λ|) {means['E1(V), largest modulus'][i]:.3f} -> {chosen[i]}"
                      for i, b in enumerate(beta))
    per_beta = {f"final_{EIGENSPACES[k]}": (means[k], io.attrs(f"distance to {k} at the last snapshot, replica mean"))
                for k in names}
    per_beta["chosen_eigenspace"] = (chosen, io.attrs("the eigenspace the tokens are closest to at the last snapshot"))
    name, statement = "conjecture_1", "after the metastable phase, tokens concentrate on V's leading eigenspace"
    if not departed.any():
        return Claim(name, statement, NOT_EVALUABLE, target=(0.0, float(tolerance)),
                     numbers=f"no β left the metastable phase before the horizon ({shown})", per_beta=per_beta)
    value = float(np.max(to_v[departed]))
    return Claim(name, statement, _status(value <= tolerance), value, (value, value), (0.0, float(tolerance)),
                 f"largest final distance to V's leading eigenspace (largest real part) over the β that departed "
                 f"{value:.3f}, tolerance {tolerance:g} ({shown})", per_beta)


# ---------------------------------------------------------------- all of them
def nearest_exact_snapshot(t, values, target: float) -> int:
    """Index of the snapshot nearest ``target`` where every value is finite (exact W2 computed)."""
    t = np.asarray(t, float)
    ok = np.all(np.isfinite(np.asarray(values, float)), axis=tuple(range(np.ndim(values) - 1))) & (t > 0)
    if not ok.any():
        raise ValueError("no snapshot with an exact W2(ρ^β_t, ρ^∞_t)")
    idx = np.flatnonzero(ok)
    return int(idx[np.argmin(np.abs(t[idx] - target))])


def evaluate(distances: xr.Dataset, fit: xr.Dataset, rate_bounds, cfg: dict, rng: np.random.Generator,
             boot: dict) -> tuple[list[Claim], dict]:
    """All five checks from the stored distances and fit; returns the claims and the common details."""
    t = distances.time.values
    beta = distances.beta.values
    w2_zero = distances["w2_zero_temperature"].transpose("beta", "replica", "time").values
    k_early = nearest_exact_snapshot(t, w2_zero, float(cfg["early_time"]))
    dep = fit["departure_time"].transpose("beta", "replica").values
    with np.errstate(all="ignore"):
        dep_mean = np.nanmean(dep, axis=1)
    a, C1, b, c = fitted_bound(fit)
    final = {k: distances[v].transpose("beta", "replica", "time").values[..., -1] for k, v in EIGENSPACES.items()}
    claims = [
        check_rate_in_bounds(fit["c"].values, rate_bounds, rng, **boot),
        check_bound_above_data(t, beta, distances["w2_projection"].transpose("beta", "replica", "time").values,
                               dep_mean, a, C1, b, c, float(cfg["bound_fraction"])),
        check_temperature_scaling(beta, w2_zero[..., k_early], rng, float(t[k_early]), **boot),
        check_metastable_log_beta(beta, dep, rng, **boot),
        check_conjecture_1(beta, final, float(cfg["end_phase_tolerance"]), departed=np.isfinite(dep_mean)),
    ]
    details = {"early_time": float(t[k_early]),
               "min_ess_median": distances["ess_median"].transpose("beta", "replica", "time").values.min(axis=(1, 2))}
    return claims, details


def claims_dataset(claims: list[Claim], beta, details: dict) -> xr.Dataset:
    ds = xr.Dataset(
        {
            "status": (("claim",), np.array([c.status for c in claims], np.int8),
                       io.attrs("1 passed, 0 failed, -1 not evaluable")),
            "value": (("claim",), np.array([c.value for c in claims]), io.attrs("the number the claim is about")),
            "interval_low": (("claim",), np.array([c.interval[0] for c in claims]),
                             io.attrs("lower end of the bootstrap interval over replicas")),
            "interval_high": (("claim",), np.array([c.interval[1] for c in claims]),
                              io.attrs("upper end of the bootstrap interval over replicas")),
            "target_low": (("claim",), np.array([c.target[0] for c in claims]), io.attrs("the claim's target, low")),
            "target_high": (("claim",), np.array([c.target[1] for c in claims]), io.attrs("the claim's target, high")),
            "statement": (("claim",), np.array([c.statement for c in claims], dtype=object), io.attrs("the claim")),
            "summary": (("claim",), np.array([c.line() for c in claims], dtype=object),
                        io.attrs("status and the numbers behind it")),
            "min_ess_median": (("beta",), details["min_ess_median"],
                               io.attrs("smallest median effective sample size over replicas and times")),
        },
        coords={"claim": [c.name for c in claims], "beta": np.asarray(beta, float)},
    )
    for c in claims:
        for key, (values, attrs) in c.per_beta.items():
            ds[key] = (("beta",), values, attrs)
    ds.attrs["early_time"] = details["early_time"]
    return ds
