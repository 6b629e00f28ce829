"""Which β of an experiment stand for the mean field, and over which windows the claims may judge them.

Three rules decide it, per β (``Resolution.resolved``):

* the particle-number budget where convergence.nc's study measured one (``ParticleBudget``, read by
  ``study_budgets``; ``particle_budget_verdicts``): the remaining N error of W2 within
  ``fit.particle_error_fraction`` of it, and the departure time's slope per doubling of N within that
  fraction of the snapshot interval;
* elsewhere, the median effective sample size of the softmax against ``ess_threshold`` over the window
  a claim judges (``min_median_ess``);
* for a mean-field experiment, the error of its reference against its coarser solution alone
  (``ReferenceBudget``, ``reference_budget``).

The windows themselves end at each curve's departure from the metastable phase (``resolution_of``).
``lowtemp.analysis.estimates`` writes what these rules found into fit.nc (``budget_values``,
``reference_values``), and ``describe_resolution`` says it in the fit's log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ..model import layout
from ..model.matrices import AttentionMatrices
from . import fitting, particle_budget

NAN_PAIR = (np.nan, np.nan)


def min_median_ess(ess_median, window) -> np.ndarray:
    """Per β, the smallest over the window (beta, time mask) of the median over replicas of the median ESS."""
    med = np.median(np.asarray(ess_median, float), axis=1)  # (beta, time)
    return np.array([np.min(med[i, w]) if np.any(w) else np.nan for i, w in enumerate(np.asarray(window, bool))])


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


def study_budgets(conv: xr.Dataset, fraction: float) -> tuple[ParticleBudget, ...]:
    """The ``ParticleBudget`` of convergence.nc's particle-number study at each of its β, with the N its W2 bound
    would need to reach ``fraction`` of W2 before the earliest departure (``particle_budget.tokens_needed``)."""
    layout.require_canonical(conv, "convergence")
    if "beta" not in conv.dims:  # written when the study ran at one β (the attribute): the same numbers, one entry
        conv = conv.expand_dims(beta=[float(conv.attrs["beta"])])
    return tuple(_budget_at(conv.isel(beta=i), fraction) for i in range(conv.sizes["beta"]))


def _budget_at(conv: xr.Dataset, fraction: float) -> ParticleBudget:
    """The ``ParticleBudget`` of one β of convergence.nc (``conv`` selected at it)."""
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
            per_exponent=conv["w2_remaining_bound_per_exponent"].values,
        )
        needed = particle_budget.tokens_needed(w2, window, fraction)
    low, high = (float(v) for v in conv["departure_slope_per_doubling"].values)
    return ParticleBudget(
        beta=float(conv["beta"]),
        w2_ratio=float(conv["w2_budget_ratio"]),
        slope_bound=float(conv["departure_slope_bound"]),
        interval=float(np.min(np.diff(t))),
        tokens=n_star,
        tokens_needed=needed,
        slope_interval=(low, high),
    )


def _budget_for(beta: float, budgets) -> ParticleBudget | None:
    """The budget measured at ``beta``, or None. Matched to rounding only (as the study's reuse of runs is): a budget
    at 1000 says nothing about β = 999.99."""
    for b in budgets or ():
        if np.isclose(beta, b.beta, rtol=1e-12, atol=0.0):
            return b
    return None


def particle_budget_verdicts(beta, budgets, fraction: float):
    """Per β: (measured, W2 resolved, departure resolved) by the particle-number budgets (a sequence of
    ``ParticleBudget``, one per β the study ran at, or None).

    A β is resolved for the claims on W2 (``bound_above_data``, ``temperature_scaling``,
    ``conjecture_1``) when the remaining N error's bound is at most ``fraction`` of the W2 it would
    change, and for ``metastable_log_beta`` when the bound on the departure time's slope per doubling
    of N is at most ``fraction`` of the snapshot interval (a slope with no departure to measure, NaN,
    does not block it). Where nothing was measured (no study at that β) ``measured`` is False and
    the ESS rule decides alone.
    """
    beta = np.asarray(beta, float)
    found = [_budget_for(b, budgets) for b in beta]
    measured = np.array([b is not None for b in found], bool)
    w2_ok = np.array([b is None or bool(b.w2_ratio <= fraction) for b in found], bool)
    dep_ok = np.array(
        [b is None or bool(np.isnan(b.slope_bound) or b.slope_bound <= fraction * b.interval) for b in found], bool
    )
    return measured, w2_ok, dep_ok


@dataclass(frozen=True)
class ReferenceBudget:
    """How well a mean-field experiment's reference resolves what each claim judges, per β (distances.nc's
    ``reference_error``: the W2 bound between the reference and its coarser solution).

    ``early`` (beta): the error over W2(ρ^β_t, ρ^∞_t) at the early time, largest over replicas;
    ``to_departure`` and ``to_horizon`` (beta): the error over W2(ρ^β_t, Π♯ρ0), largest over the replicas'
    judged windows (up to departure) and over the whole run; ``departure_shift`` (beta): the largest
    |departure of the reference − departure of the coarser one| over replicas (0 when both are censored,
    inf when only one departed)."""

    early: np.ndarray
    to_departure: np.ndarray
    to_horizon: np.ndarray
    departure_shift: np.ndarray


def early_snapshot(t, w2_zero, early: float):
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
    err = dist["reference_error"].values
    w2_zero = dist["w2_zero_temperature"].values
    w2_proj = dist["w2_projection"].values
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
    coarse_dep, coarse_cens = fitting.geometric_departure(t, dist["reference_dist_leading_A"].values, gap)
    shift = fitting.departure_shift(departure, censored, coarse_dep, coarse_cens)
    return ReferenceBudget(early, to_departure, to_horizon, np.max(shift, axis=1))


@dataclass(frozen=True)
class Curves:
    """distances.nc's curves as the estimators read them, under the file's names: times, β (sorted) and arrays
    (beta, replica, time)."""

    t: np.ndarray
    beta: np.ndarray
    replicas: np.ndarray
    w2_zero_to_projection: np.ndarray  # W2(ρ^∞_t, Π♯ρ0)
    w2_zero_temperature: np.ndarray  # W2(ρ^β_t, ρ^∞_t)
    w2_projection: np.ndarray  # W2(ρ^β_t, Π♯ρ0)
    ess_median: np.ndarray  # median ESS over the tokens
    dist_leading_A: np.ndarray  # distance to measures on E1(A)

    @classmethod
    def of(cls, dist: xr.Dataset) -> Curves:
        """The curves of distances.nc, sorted by β."""
        dist = dist.sortby("beta")
        names = ("w2_zero_to_projection", "w2_zero_temperature", "w2_projection", "ess_median", "dist_leading_A")
        return cls(
            t=dist.time.values,
            beta=dist.beta.values,
            replicas=dist.replica.values,
            **{n: dist[n].values for n in names},
        )

    @property
    def shape(self) -> tuple[int, int]:
        """(β, replicas)."""
        return self.beta.size, self.replicas.size


@dataclass(frozen=True)
class Resolution:
    """What decides, per β, which windows the claims may judge: the departures from the metastable phase, the
    particle-number budget where it was measured (else the median ESS against ``ess_threshold``), and a
    mean-field experiment's reference error (``reference``, which then decides alone)."""

    gap: float
    departure: np.ndarray  # (beta, replica)
    censored: np.ndarray
    until: np.ndarray
    judged: np.ndarray  # (beta, replica, time)
    measured: np.ndarray  # (beta,)
    w2_within: np.ndarray
    departure_within: np.ndarray
    ess_threshold: float
    fraction: float
    step: float
    reference: ReferenceBudget | None

    def resolved(self, ess_min: np.ndarray, reference_error: np.ndarray | None) -> np.ndarray:
        """Per β: the W2 budget where measured, else ``ess_min`` ≥ ess_threshold; the reference's error
        (``reference_error`` ≤ fraction) for a mean-field experiment."""
        if self.reference is not None:
            return reference_error <= self.fraction
        return np.where(self.measured, self.w2_within, ess_min >= self.ess_threshold)


def resolution_of(c: Curves, dist: xr.Dataset, M: AttentionMatrices, cfg: dict, ess_threshold: float, budgets):
    """The ``Resolution`` of an experiment's curves (``budgets``: its particle-number budgets, one per β of the
    study, or None)."""
    gap = fitting.subspace_gap(M.E1, M.E1_V_real)
    departure, censored = fitting.geometric_departure(c.t, c.dist_leading_A, gap)
    until = fitting.judged_until(c.t, departure, censored, gap)
    judged = fitting.judged_mask(c.t, until)
    fraction = float(cfg["particle_error_fraction"])
    measured, w2_within, departure_within = particle_budget_verdicts(c.beta, budgets, fraction)
    k_early, _ = early_snapshot(c.t, c.w2_zero_temperature, float(cfg["early_time"]))
    reference = reference_budget(dist, k_early, judged, departure, censored, gap) if "reference_error" in dist else None
    return Resolution(
        gap=gap,
        departure=departure,
        censored=censored,
        until=until,
        judged=judged,
        measured=measured,
        w2_within=w2_within,
        departure_within=departure_within,
        ess_threshold=float(ess_threshold),
        fraction=fraction,
        step=float(np.min(np.diff(c.t))) if c.t.size > 1 else 0.0,
        reference=reference,
    )


def budget_values(res: Resolution, beta, budgets) -> dict:
    """The particle-number budgets' numbers at each β where one was measured (NaN elsewhere)."""
    measured = res.measured
    found = [_budget_for(b, budgets) for b in np.asarray(beta, float)]

    def at_measured(value):
        return np.array([np.nan if b is None else value(b) for b in found], float)

    return {
        "particle_budget_measured": measured,
        "particle_budget_w2_ratio": at_measured(lambda b: b.w2_ratio),
        "particle_budget_departure_slope": at_measured(lambda b: b.slope_bound),
        "particle_budget_departure_slope_interval": np.array(
            [NAN_PAIR if b is None else b.slope_interval for b in found], float
        ).reshape(len(found), 2),
        "particle_budget_w2_resolved": res.w2_within & measured,
        "particle_budget_departure_resolved": res.departure_within & measured,
        "particle_budget_tokens_needed": at_measured(lambda b: b.tokens_needed),
    }


def reference_values(reference: ReferenceBudget | None) -> dict:
    """A mean-field experiment's reference error per β (nothing for a particle experiment)."""
    if reference is None:
        return {}
    return {
        "reference_error_early": reference.early,
        "reference_error_to_departure": reference.to_departure,
        "reference_error_to_horizon": reference.to_horizon,
        "reference_departure_shift": reference.departure_shift,
    }


def describe_resolution(fit: xr.Dataset, name: str, budgets, fraction: float) -> list[tuple[int, str]]:
    """(logging level, line) per β of fit.nc: what decided whether it stands for the mean field there (the
    mean-field reference's error, the particle-number budget measured at it, else its median ESS against
    ``fit.attrs["ess_threshold"]``: a warning where it falls below)."""
    lines = []
    threshold, tokens = float(fit.attrs["ess_threshold"]), int(fit.attrs["tokens"])
    for beta, low in zip(fit.beta.values, fit["ess_min_to_horizon"].values):
        if "reference_error_to_horizon" in fit:  # a mean-field experiment: no ESS, its reference's error decides
            early, to_departure, shift = (
                float(fit[k].sel(beta=beta))
                for k in ("reference_error_early", "reference_error_to_departure", "reference_departure_shift")
            )
            lines.append(
                (
                    logging.INFO,
                    f"{name}: beta = {beta:g}: mean-field reference error over W2, early {early:.3g}, to departure "
                    f"{to_departure:.3g}; departure shift against the coarser solution {shift:.3g}",
                )
            )
            continue
        budget = next((b for b in budgets or () if np.isclose(beta, b.beta)), None)
        if budget is not None:  # the budget decides here, the ESS is a diagnostic
            lo, hi = budget.slope_interval
            lines.append(
                (
                    logging.INFO,
                    f"{name}: beta = {beta:g}, N = {int(budget.tokens):d}: particle-number budget: remaining N error "
                    f"of W2 <= {budget.w2_ratio:.3g} x W2 (95%; {fraction:.3g} x W2 reached at N ~ "
                    f"{budget.tokens_needed:.3g}), departure time per doubling of N in [{lo:.3g}, {hi:.3g}]; "
                    f"median ESS down to {low:.1f} (a diagnostic here)",
                )
            )
            continue
        if not low >= threshold:
            lines.append(
                (
                    logging.WARNING,
                    f"{name}: beta = {beta:g}, N = {tokens:d}: median effective sample size falls to {low:.1f} < "
                    f"{threshold:g}; the particle system does not stand for the mean field there (N must grow like "
                    "beta^((d-1)/2)); the claims leave this beta out where it falls inside their window",
                )
            )
    return lines
