"""The verdicts of the paper's claims (``lowtemp.analysis.claims``): the statuses a check can reach, the
``Claim`` each check returns (one row of claims.nc), and the words for a β a check leaves out as under-resolved
(``unresolved_rule``) with the N that would resolve it (``particles_needed``). Statuses:

* PASSED / FAILED: the data could have contradicted the statement and did not / did
  (an interval-based check passes when its interval lies on the statement's side of the
  target, and fails when it lies wholly on the other side);
* INCONCLUSIVE: the interval straddles the target: the data neither support nor
  contradict the statement at the stated confidence (more replicas narrow it);
* UNDER-RESOLVED: the β the check needs have a median effective sample size below
  ``ess_threshold`` over the window it judges, so their particle system does not
  stand for the mean field and a verdict would be about N, not β;
* NOT EVALUABLE: the data hold nothing to judge (no window, no departure, …).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
import xarray as xr


class Status(enum.IntEnum):
    """A claim's verdict (module docstring); the integer is what claims.nc stores in ``status``."""

    PASSED = 1
    FAILED = 0
    NOT_EVALUABLE = -1
    UNDER_RESOLVED = -2
    INCONCLUSIVE = -3

    @property
    def word(self) -> str:
        """How logs and the summary write it: PASSED, FAILED, NOT EVALUABLE, UNDER-RESOLVED, INCONCLUSIVE."""
        return self.name.replace("NOT_", "NOT ").replace("_", "-")


NAN2 = (float("nan"), float("nan"))


@dataclass
class Claim:
    """One checked statement: status, the number judged, its interval over replicas, the target, the numbers."""

    name: str
    statement: str
    status: Status
    value: float = float("nan")
    interval: tuple[float, float] = NAN2
    target: tuple[float, float] = NAN2
    numbers: str = ""
    per_beta: dict = field(default_factory=dict)  # name -> (values over β, long name)

    def line(self) -> str:
        """The log line: status word, name, numbers."""
        return f"{self.status.word} {self.name}: {self.numbers}"


def passed_if(ok: bool) -> Status:
    """PASSED where ``ok``, else FAILED: the verdict of a check that cannot be inconclusive."""
    return Status.PASSED if ok else Status.FAILED


def listed_betas(beta, mask) -> str:
    """The β selected by ``mask``, as the claims' lines write them: [10, 100, 1000]."""
    return "[" + ", ".join(f"{b:g}" for b in np.asarray(beta)[np.asarray(mask, bool)]) + "]"


def unresolved_rule(fit: xr.Dataset, departure: bool = False) -> str:
    """What makes a β under-resolved in this fit, in words: the mean-field reference's error estimate for a
    mean-field experiment, else the particle-number budget where measured and the median ESS elsewhere."""
    fraction = float(fit.attrs.get("particle_error_fraction", np.nan))
    if "reference_departure_shift" in fit:
        if departure:
            return (
                "the mean-field reference's departure moving by more than a snapshot interval in its coarser solution"
            )
        return (
            f"the mean-field reference's error bound above {fraction:g} of the W2 the claim judges "
            f"(reference_error_* in fit.nc)"
        )
    if departure:
        return (
            f"the departure's particle-number budget exceeded where measured, else median ESS below "
            f"{float(fit.attrs['ess_threshold']):g} up to departure"
        )
    return f"median ESS below {float(fit.attrs['ess_threshold']):g}, or the particle-number budget exceeded"


# ---------------------------------------------------------------- what N an under-resolved β would need
def particles_needed(fit: xr.Dataset, interval: float, departure: bool = False) -> str:
    """For every β whose particle-number budget was measured and not met (fit.nc's own verdicts,
    ``particle_budget_w2_resolved`` and ``particle_budget_departure_resolved``), what N would resolve it, in words.

    W2 (``departure`` False): the N at which the budget's bound would reach ``particle_error_fraction`` of W2
    (fit.nc ``particle_budget_tokens_needed``, projected with the study's own power law). The departure, from its
    slope per doubling of N (``interval``: the snapshot interval, which the fraction applies to): an interval
    wholly beyond the allowed band is a departure set by N (growing like log N: no N resolves it), one that is
    unbounded on a side comes from runs still metastable at the study's horizon (a longer horizon bounds it), a
    finite wider one needs more replicas of the study, not more N. Empty where nothing was measured or it was met."""
    if "particle_budget_departure_resolved" not in fit:
        return ""
    fraction = float(fit.attrs["particle_error_fraction"])
    limit = fraction * interval
    verdict = "particle_budget_departure_resolved" if departure else "particle_budget_w2_resolved"
    failed = fit["particle_budget_measured"].values.astype(bool) & ~fit[verdict].values.astype(bool)
    parts = []
    for i in np.flatnonzero(failed):
        head = f"β = {float(fit.beta.values[i]):g} not judged: "
        if departure:
            lo, hi = (float(v) for v in fit["particle_budget_departure_slope_interval"].values[i])
            span = f"[{lo:.3g}, {hi:.3g}] per doubling of N (95 %)"
            parts.append(
                head
                + (
                    "some runs of the study reach the metastable phase and others do not (or too few depart): no N "
                    "can be named"
                    if np.isnan(lo) or np.isnan(hi)
                    else f"its departure moves by {span}, beyond ±{limit:.3g}: N sets it, and no N resolves it"
                    if lo > limit or hi < -limit
                    else f"its departure's slope is in {span}, unbounded because runs of the study are still "
                    f"metastable at its horizon: a longer study horizon would bound it"
                    if np.isinf(lo) or np.isinf(hi)
                    else f"its departure's slope is in {span}, wider than ±{limit:.3g}: more replicas of the study "
                    f"would narrow it, not N"
                )
            )
            continue
        ratio = float(fit["particle_budget_w2_ratio"].values[i])
        needed = float(fit["particle_budget_tokens_needed"].values[i])
        n = int(fit.attrs["tokens"])
        if np.isnan(ratio):
            parts.append(head + "its W2 budget could not be computed (no W2 before the study's earliest departure)")
            continue
        own = f"its remaining N error of W2 is up to {ratio:.3g} × W2 (95 %) at N = {n}"
        parts.append(
            head
            + own
            + (
                f"; ≤ {fraction:g} × W2 would need N ≈ {needed:.2g} (the study's power law in N, with the slowest "
                f"decay it does not reject)"
                if np.isfinite(needed)
                else "; no N can be named (no power law in N fits the study at some time, or W2 is 0 or not "
                "finite there)"
            )
        )
    return "; " + "; ".join(parts) if parts else ""
