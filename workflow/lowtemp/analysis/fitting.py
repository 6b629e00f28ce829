"""Fitting the constants of Theorem 1 on arrays (``lowtemp.analysis.estimates`` assembles fit.nc from them).

Theorem 1:  W2(ρ^β_t, Π_♯ρ0) ≲ a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−c t}.

* c: the decay rate of W2(ρ^∞_t, Π_♯ρ0) (zero temperature), fitted in one
  regime at a time (``t_range``; the regimes are derived in docs/early_rate.md);
* C1: the growth rate of W2(ρ^β_t, ρ^∞_t) / sqrt(log(β+1)/β) (finite-temperature
  error), one slope shared by all β (fixed-effects regression with an
  intercept per β);
* the departure time (``geometric_departure``): the first time after the
  metastable phase that the tokens are farther from E1(A) than half the way to
  V's leading eigenspace (its slope against log β and its law in β: ``lowtemp.analysis.departures``);
* a and b: prefactors calibrated on one part of the data (the bound is tested
  on the rest, ``lowtemp.analysis.claims``);
* intervals over replicas: Student-t (``t_interval``).

Window choice (``log_linear_window``): among the contiguous runs of snapshot
times whose values lie inside the admissible range, the longest one on which the
least-squares line through log(y) stays within ``max_residual`` (natural-log
units, i.e. a relative deviation of about that size) of every point and has the
requested slope sign; ties go to the earliest run. The window is chosen once,
on the mean over replicas of log(y); the slope is then fitted on that window
for every replica, and the uncertainty is the spread of those slopes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

DEFAULT_MIN_LOG_DROP = 1.0


def temperature_scale(beta) -> np.ndarray:
    """sqrt(log(β+1)/β), the finite-temperature error scale of Theorem 1."""
    beta = np.asarray(beta, dtype=float)
    return np.sqrt(np.log1p(beta) / beta)


def line_fit(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and intercept of y against t."""
    slope, intercept = np.polyfit(np.asarray(t, float), np.asarray(y, float), 1)
    return float(slope), float(intercept)


def log_linear_window(
    t: np.ndarray,
    logy: np.ndarray,
    *,
    sign: int,
    max_residual: float,
    min_points: int,
    admissible: np.ndarray | None = None,
) -> tuple[int, int] | None:
    """Index range [start, stop) of the longest log-linear window, or None if none qualifies."""
    t = np.asarray(t, float)
    logy = np.asarray(logy, float)
    ok = np.isfinite(logy) if admissible is None else (np.asarray(admissible) & np.isfinite(logy))
    n = t.size
    best = None
    for start in range(n):
        if not ok[start]:
            continue
        if not ok[start : start + min_points].all():
            continue
        for stop in range(start + min_points, n + 1):
            if not ok[stop - 1]:
                break
            if best is not None and stop - start <= best[1] - best[0]:
                continue
            slope, intercept = line_fit(t[start:stop], logy[start:stop])
            if np.sign(slope) != sign:
                continue
            resid = np.abs(logy[start:stop] - (slope * t[start:stop] + intercept))
            if resid.max() <= max_residual:
                best = (start, stop)
    return best


@dataclass(frozen=True)
class RateFit:
    """Per-replica slopes and intercepts of log(y) on a common window."""

    slope: np.ndarray  # (replica,)
    intercept: np.ndarray  # (replica,)
    window: tuple[float, float]  # (t_start, t_stop), inclusive
    window_index: tuple[int, int]  # [start, stop)

    @property
    def mean(self) -> float:
        return float(np.mean(self.slope))

    @property
    def sem(self) -> float:
        """Standard error of the mean over replicas (0 for one replica)."""
        n = self.slope.size
        return float(np.std(self.slope, ddof=1) / np.sqrt(n)) if n > 1 else 0.0


def _log(y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(y, float))


def fit_decay_rate(
    t: np.ndarray,
    w2: np.ndarray,
    *,
    floor: float = 1e-7,
    max_residual: float,
    min_points: int,
    t_range: tuple[float, float] = (-np.inf, np.inf),
    min_log_drop: float = DEFAULT_MIN_LOG_DROP,
) -> RateFit:
    """c from W2(ρ^∞_t, Π_♯ρ0) with shape (replica, time): log W2 ≈ log b − c t.

    Only snapshots with ``t_range[0] ≤ t ≤ t_range[1]`` are admissible (one
    regime of the decay, see ``rates.regime_boundary``), and values below
    ``floor`` (where rounding, not the dynamics, sets W2) are not. A window
    must also see W2 fall by a factor e^{min_log_drop} at least: a plateau
    (a numerical floor, a stalled curve) is log-linear with a slope near 0 and
    would otherwise pass for a decay rate.
    """
    t = np.asarray(t, float)
    logw = _log(w2)
    mean_log = np.mean(logw, axis=0)
    admissible = np.all(np.asarray(w2) > floor, axis=0) & (t >= t_range[0]) & (t <= t_range[1])
    win = log_linear_window(
        t, mean_log, sign=-1, max_residual=max_residual, min_points=min_points, admissible=admissible
    )
    if win is not None and mean_log[win[0]] - mean_log[win[1] - 1] < min_log_drop:
        raise ValueError(
            f"the longest log-linear window of W2(ρ^∞_t, Π_♯ρ0) in t in [{t[win[0]]:.3g}, "
            f"{t[win[1] - 1]:.3g}] drops by less than e^{min_log_drop:g}: a plateau, not a decay"
        )
    if win is None:
        raise ValueError(
            f"no log-linear decay window found for W2(ρ^∞_t, Π_♯ρ0) in t in "
            f"[{t_range[0]:.3g}, {t_range[1]:.3g}]; lengthen the horizon or add snapshots"
        )
    s = slice(*win)
    fits = np.array([line_fit(t[s], lw[s]) for lw in logw])
    return RateFit(
        slope=-fits[:, 0], intercept=fits[:, 1], window=(float(t[win[0]]), float(t[win[1] - 1])), window_index=win
    )


@dataclass(frozen=True)
class GrowthFit:
    """C1 shared over β, per replica; intercepts and windows per β."""

    C1: np.ndarray  # (replica,)
    log_a: np.ndarray  # (beta, replica) intercepts of log(W2 / scale)
    windows: np.ndarray  # (beta, 2) time window per β (NaN where no window)
    C1_per_beta: np.ndarray  # (beta, replica) slope fitted for each β alone

    @property
    def mean(self) -> float:
        return float(np.nanmean(self.C1)) if np.isfinite(self.C1).any() else float("nan")

    @property
    def sem(self) -> float:
        n = np.sum(np.isfinite(self.C1))
        if n == 0:
            return float("nan")
        return float(np.nanstd(self.C1, ddof=1) / np.sqrt(n)) if n > 1 else 0.0


def fit_growth_rate(
    t: np.ndarray,
    beta: np.ndarray,
    w2_zero: np.ndarray,
    *,
    saturation: float,
    max_residual: float,
    min_points: int,
) -> GrowthFit:
    """C1 from W2(ρ^β_t, ρ^∞_t) with shape (beta, replica, time); NaN snapshots are skipped.

    y = log(W2/sqrt(log(β+1)/β)) ≈ log a + C1 t; for each β the window is the
    longest increasing log-linear run with t > 0 and W2 below ``saturation`` times
    the largest W2 of that β (the growth stops where the clusters have left,
    wherever that is). C1 is the common slope of all windows (an intercept per β),
    fitted per replica.
    """
    beta = np.asarray(beta, float)
    # snapshots where the exact distance was not computed (NaN) are left out
    keep = np.all(np.isfinite(w2_zero), axis=(0, 1))
    t, w2_zero = np.asarray(t)[keep], np.asarray(w2_zero)[..., keep]
    y = _log(w2_zero) - _log(temperature_scale(beta))[:, None, None]
    nb, nr, _ = y.shape
    windows = np.full((nb, 2), np.nan)
    slices = []
    for i in range(nb):
        w = np.asarray(w2_zero[i])
        admissible = (t > 0) & np.all(w < saturation * w.max(axis=-1, keepdims=True), axis=0) & np.all(w > 0, axis=0)
        win = log_linear_window(
            t, np.mean(y[i], axis=0), sign=+1, max_residual=max_residual, min_points=min_points, admissible=admissible
        )
        slices.append(None if win is None else slice(*win))
        if win is not None:
            windows[i] = (t[win[0]], t[win[1] - 1])
    if all(s is None for s in slices):
        raise ValueError("no log-linear growth window found for W2(ρ^β_t, ρ^∞_t) at any β")
    C1 = np.empty(nr)
    log_a = np.full((nb, nr), np.nan)
    per_beta = np.full((nb, nr), np.nan)
    for r in range(nr):
        num = den = 0.0
        for i, s in enumerate(slices):
            if s is None:
                continue
            tt, yy = t[s], y[i, r, s]
            num += np.sum((tt - tt.mean()) * (yy - yy.mean()))
            den += np.sum((tt - tt.mean()) ** 2)
            per_beta[i, r] = line_fit(tt, yy)[0]
        C1[r] = num / den
        for i, s in enumerate(slices):
            if s is not None:
                log_a[i, r] = np.mean(y[i, r, s] - C1[r] * t[s])
    return GrowthFit(C1=C1, log_a=log_a, windows=windows, C1_per_beta=per_beta)


def geometric_departure(
    t: np.ndarray, dist_A: np.ndarray, gap: float, fraction: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Departure from the metastable phase, defined by the geometry alone.

    ``dist_A`` (…, time) is the distance of the tokens to measures on E1(A) ∩ S
    (``distances.nc: dist_leading_A``); ``gap`` is the same distance for a measure
    on V's leading eigenspace (``end_phase_gap``). The tokens *arrive* at the
    metastable phase the first time ``dist_A`` drops below gap/2 and *depart* the
    first time after that it rises above gap/2 again: halfway between the two
    eigenspaces, a threshold that depends neither on N nor on the run's own
    minimum. ``fraction`` moves the threshold to that fraction of ``gap`` (arrival below it, departure above it):
    a curve that lingers near gap/2 makes its departure ill-conditioned, and the departure study reads the law in
    β at other fractions beside it. Returns ``(departure, censored)``: ``departure`` is NaN where the
    tokens never arrived (no metastable phase observed) or never departed;
    ``censored`` is True where they arrived but were still there at the last
    snapshot (the departure lies beyond the horizon: right-censored, not absent).
    """
    if not 0.0 < fraction < 1.0:  # outside (0, 1) the threshold no longer lies between the two eigenspaces
        raise ValueError(f"geometric_departure: fraction {fraction!r} of the gap must lie in (0, 1)")
    t = np.asarray(t, float)
    d = np.asarray(dist_A, float)
    flat = d.reshape(-1, d.shape[-1])
    departure = np.full(flat.shape[0], np.nan)
    censored = np.zeros(flat.shape[0], bool)
    threshold = float(fraction) * float(gap)
    if not threshold > 0:
        return departure.reshape(d.shape[:-1]), censored.reshape(d.shape[:-1])
    for k, curve in enumerate(flat):
        below = np.flatnonzero(curve < threshold)
        if below.size == 0:
            continue  # never reached E1(A): no metastable phase to leave
        above = np.flatnonzero(curve[below[0] :] > threshold)
        if above.size:
            departure[k] = t[below[0] + above[0]]
        else:
            censored[k] = True
    return departure.reshape(d.shape[:-1]), censored.reshape(d.shape[:-1])


#: a departed curve whose distance to V's leading eigenspace fell by more than this fraction over the last tenth of
#: the run is still on its way there: its final distance says when the run stopped, not where the tokens settle
STILL_APPROACHING_DROP = 0.1


def last_tenth_change(t: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """(…): the relative change of ``dist`` (…, time) over the last tenth of the span of ``t``, d(end) / d(t_0.9) − 1
    with t_0.9 the first snapshot at or after 90 % of the span, or the last but one where that is the last (a run
    with fewer than ten snapshots still compares its last step): negative where it fell, positive where it rose
    (inf from an exact zero, NaN where it stays at zero)."""
    t = np.asarray(t, float)
    d = np.asarray(dist, float)
    k = max(min(int(np.searchsorted(t, t[0] + 0.9 * (t[-1] - t[0]))), t.size - 2), 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return d[..., -1] / d[..., k] - 1.0


def still_approaching(t: np.ndarray, dist_V: np.ndarray) -> np.ndarray:
    """(…): whether the distance to V's leading eigenspace ``dist_V`` (…, time) fell by more than
    ``STILL_APPROACHING_DROP`` of itself over the last tenth of the span of ``t`` (``last_tenth_change``). Tokens
    that stay on E1(A) or settle elsewhere keep a constant distance; tokens still converging to E1(V) do not, and
    their final distance says when the run stopped, not where they settle."""
    return last_tenth_change(t, dist_V) < -STILL_APPROACHING_DROP


def moving_away(t: np.ndarray, dist_V: np.ndarray) -> np.ndarray:
    """(…): whether the distance ``dist_V`` (…, time) rose by more than ``STILL_APPROACHING_DROP`` of itself over
    the last tenth of the span of ``t``: tokens leaving V's leading eigenspace at the horizon."""
    return last_tenth_change(t, dist_V) > STILL_APPROACHING_DROP


def departure_shift(departure, censored, other, other_censored) -> np.ndarray:
    """|departure − other| per curve, two ``geometric_departure`` results compared (a finer and a coarser
    solution, particles and the mean field): 0 where the two agree in kind without a time to compare (both still
    metastable at the last snapshot given, or neither ever arrived); inf where they differ in kind (one departed,
    the other is still metastable or never arrived; one still metastable, the other never arrived). "The last
    snapshot given" is the caller's: curves cut short compare as metastable up to there."""
    a, b = np.asarray(departure, float), np.asarray(other, float)
    ca, cb = np.asarray(censored, bool), np.asarray(other_censored, bool)
    with np.errstate(invalid="ignore"):
        shift = np.abs(a - b)
    same = (ca & cb) | (np.isnan(a) & np.isnan(b) & (ca == cb))
    return np.where(same, 0.0, np.where(np.isnan(shift), np.inf, shift))


def judged_until(t, departure, censored, gap: float) -> np.ndarray:
    """(…) last time of each curve that the metastable phase covers (NaN: the curve is not judged).

    With an end phase to leave for (``gap`` > 0): up to the departure; to the
    horizon when censored (still metastable there); NaN when the tokens never
    arrived, since then the curve holds no metastable phase and its late part is
    the end phase, which Theorem 1's bound does not cover. Without one (gap = 0)
    the whole run is the metastable phase: the horizon.
    """
    t = np.asarray(t, float)
    dep = np.asarray(departure, float)
    if not gap > 0:
        return np.full(dep.shape, t[-1])
    return np.where(np.isfinite(dep), dep, np.where(np.asarray(censored, bool), t[-1], np.nan))


def judged_mask(t, until) -> np.ndarray:
    """(…, time) mask of the snapshots t ≤ ``until`` (none where ``until`` is NaN)."""
    until = np.asarray(until, float)
    return np.asarray(t, float) <= np.where(np.isfinite(until), until, -np.inf)[..., None]


def mean_of_finite(x) -> np.ndarray:
    """Row means over the finite entries (NaN for a row with none), without numpy's empty-slice warning."""
    x = np.asarray(x, float)
    n = np.isfinite(x).sum(axis=1)
    total = np.where(np.isfinite(x), x, 0.0).sum(axis=1)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def subspace_gap(E_a: np.ndarray, E_b: np.ndarray) -> float:
    """Distance sqrt(2 − 2 cos θ) between the closest unit vectors of two subspaces (θ the smallest principal angle).

    It is the value of ``projection.distance_to_eigenspace`` (sqrt(mean(2 − 2|P x|)))
    for tokens sitting at the point of span(E_b) nearest to span(E_a); 0 when the
    subspaces meet. Computed as 2 sin(θ/2) from sin θ, the smallest singular value of the smaller basis's part
    orthogonal to the other subspace: 2 − 2 cos θ would keep only rounding below θ ≈ 1e-8.
    """
    small, large = np.asarray(E_a, float), np.asarray(E_b, float)
    if small.shape[1] > large.shape[1]:
        small, large = large, small
    outside = small - large @ (large.T @ small)
    sine = float(np.linalg.svd(outside, compute_uv=False).min())
    return float(2.0 * np.sin(0.5 * np.arcsin(min(sine, 1.0))))


def bound_curve(t: np.ndarray, beta: float, a: float, C1: float, b: float, c: float) -> np.ndarray:
    """a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−c t}."""
    return a * temperature_scale(beta) * np.exp(C1 * t) + b * np.exp(-c * t)


# ---------------------------------------------------------------- uncertainty over replicas


def t_interval(per_replica, confidence: float) -> tuple[float, float]:
    """Student-t interval for the mean over replicas: mean ± t_{R−1} · s/√R (NaN values dropped).

    Replicas are independent initial clouds, so a per-replica statistic is one
    independent draw; for normally distributed draws this interval has exactly
    the stated coverage for every R ≥ 2 (``tests/analysis/test_fitting.py`` simulates it).
    A percentile bootstrap over R = 2 … 4 replicas covers far less than its
    label (measured there too). With fewer than two finite values there is no
    interval: (NaN, NaN).
    """
    x = np.asarray(per_replica, float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("nan"), float("nan")
    half = float(student_t.ppf(0.5 + confidence / 2.0, x.size - 1) * np.std(x, ddof=1) / np.sqrt(x.size))
    mean = float(np.mean(x))
    return mean - half, mean + half


def power_law_exponent(x, y) -> float:
    """Least-squares α in log y = log k + α log x (points with y > 0)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0) & np.isfinite(y)
    if ok.sum() < 2:
        return float("nan")
    return line_fit(np.log(x[ok]), np.log(y[ok]))[0]


def temperature_scale_exponent(beta) -> float:
    """The local power of β in sqrt(log(β+1)/β) over the given β (≈ −1/2 plus the log correction)."""
    beta = np.asarray(beta, float)
    return power_law_exponent(beta, temperature_scale(beta))


# ---------------------------------------------------------------- the bound's prefactors
def calibrated_decay_prefactor(t, w2_zero_to_projection, c: float) -> float:
    """b: the smallest prefactor with b·e^{−ct} ≥ W2(ρ^∞_t, Π♯ρ0) at every given replica and snapshot.

    A least-squares intercept puts the line through the middle of the data, so
    about half of the points lie above it; a bound needs the envelope. Called on
    the calibration replicas only: the bound is then tested on the others.
    """
    w = np.asarray(w2_zero_to_projection, float)
    if not np.isfinite(c):
        return float("nan")
    return float(np.nanmax(w * np.exp(c * np.asarray(t, float))))


def calibrated_growth_prefactor(t, beta, w2_projection, judged, C1: float, b: float, c: float) -> float:
    """a: the smallest prefactor with a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−ct} ≥ W2(ρ^β_t, Π♯ρ0) on the given data.

    ``w2_projection`` (beta, replica, time) and the boolean mask ``judged`` of the
    same shape (the snapshots up to each replica's departure) are the calibration
    part of the data; one a for all its β, as in Theorem 1.
    """
    if not np.all(np.isfinite([C1, b, c])):
        return float("nan")
    t = np.asarray(t, float)
    w = np.asarray(w2_projection, float)
    scale = temperature_scale(np.asarray(beta, float))[:, None, None]
    excess = np.maximum(w - b * np.exp(-c * t), 0.0) / (scale * np.exp(C1 * t))
    excess = np.where(np.asarray(judged, bool), excess, np.nan)
    return float(np.nanmax(excess)) if np.isfinite(excess).any() else float("nan")


def one_sided_bounds(lower, upper, confidence):
    """(lower confidence bound of the mean of ``lower``, upper confidence bound of the mean of ``upper``).

    Each is one-sided at ``confidence`` (Student-t over replicas); an infinite
    per-replica bound makes that side infinite, NaN where fewer than two replicas.
    """
    lo = np.asarray(lower, float)
    hi = np.asarray(upper, float)
    low = -np.inf if np.any(np.isneginf(lo)) else t_interval(lo, 2 * confidence - 1)[0]
    high = np.inf if np.any(np.isposinf(hi)) else t_interval(hi, 2 * confidence - 1)[1]
    return low, high
