"""Fitting the constants of Theorem 1 (SPEC §2.6).

Theorem 1:  W2(ρ^β_t, Π_♯ρ0) ≲ a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−c t}.

* c: the decay rate of W2(ρ^∞_t, Π_♯ρ0) (zero temperature);
* C1: the growth rate of W2(ρ^β_t, ρ^∞_t) / sqrt(log(β+1)/β) (finite-temperature
  error), one slope shared by all β (fixed-effects regression with an
  intercept per β);
* the departure time: the first time after its minimum that W2(ρ^β_t, Π_♯ρ0)
  rises a given factor above that minimum; fitted against log β.

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

DEFAULT_MAX_RESIDUAL = 0.05
DEFAULT_MIN_POINTS = 5


def temperature_scale(beta) -> np.ndarray:
    """sqrt(log(β+1)/β), the finite-temperature error scale of Theorem 1."""
    beta = np.asarray(beta, dtype=float)
    return np.sqrt(np.log1p(beta) / beta)


def line_fit(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and intercept of y against t."""
    slope, intercept = np.polyfit(np.asarray(t, float), np.asarray(y, float), 1)
    return float(slope), float(intercept)


def log_linear_window(t: np.ndarray, logy: np.ndarray, *, sign: int,
                      max_residual: float = DEFAULT_MAX_RESIDUAL,
                      min_points: int = DEFAULT_MIN_POINTS,
                      admissible: np.ndarray | None = None) -> tuple[int, int] | None:
    """Index range [start, stop) of the longest log-linear window, or None if none qualifies."""
    t = np.asarray(t, float)
    logy = np.asarray(logy, float)
    ok = np.isfinite(logy) if admissible is None else (np.asarray(admissible) & np.isfinite(logy))
    n = t.size
    best = None
    for start in range(n):
        if not ok[start]:
            continue
        if not ok[start:start + min_points].all():
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


def fit_decay_rate(t: np.ndarray, w2: np.ndarray, *, floor: float = 1e-7,
                   max_residual: float = DEFAULT_MAX_RESIDUAL,
                   min_points: int = DEFAULT_MIN_POINTS) -> RateFit:
    """c from W2(ρ^∞_t, Π_♯ρ0) with shape (replica, time): log W2 ≈ log b − c t.

    Values below ``floor`` (where rounding, not the dynamics, sets W2) are not admissible.
    """
    logw = _log(w2)
    mean_log = np.mean(logw, axis=0)
    admissible = np.all(np.asarray(w2) > floor, axis=0)
    win = log_linear_window(t, mean_log, sign=-1, max_residual=max_residual,
                            min_points=min_points, admissible=admissible)
    if win is None:
        raise ValueError("no log-linear decay window found for W2(ρ^∞_t, Π_♯ρ0); "
                         "lengthen the horizon or add snapshots")
    s = slice(*win)
    fits = np.array([line_fit(t[s], lw[s]) for lw in logw])
    return RateFit(slope=-fits[:, 0], intercept=fits[:, 1],
                   window=(float(t[win[0]]), float(t[win[1] - 1])), window_index=win)


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


def fit_growth_rate(t: np.ndarray, beta: np.ndarray, w2_zero: np.ndarray, *,
                    saturation: float = 0.5, max_residual: float = DEFAULT_MAX_RESIDUAL,
                    min_points: int = DEFAULT_MIN_POINTS) -> GrowthFit:
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
        admissible = (t > 0) & np.all(w < saturation * w.max(axis=-1, keepdims=True), axis=0) \
            & np.all(w > 0, axis=0)
        win = log_linear_window(t, np.mean(y[i], axis=0), sign=+1, max_residual=max_residual,
                                min_points=min_points, admissible=admissible)
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


def departure_time(t: np.ndarray, w2_projection: np.ndarray, factor: float = 2.0) -> np.ndarray:
    """First time after the minimum at which W2(ρ^β_t, Π_♯ρ0) exceeds ``factor`` × minimum.

    ``w2_projection`` has time on its last axis; NaN where the curve never rises that far.
    """
    w = np.asarray(w2_projection, float)
    flat = w.reshape(-1, w.shape[-1])
    out = np.full(flat.shape[0], np.nan)
    for k, curve in enumerate(flat):
        i_min = int(np.argmin(curve))
        above = np.nonzero(curve[i_min:] > factor * curve[i_min])[0]
        if above.size:
            out[k] = t[i_min + above[0]]
    return out.reshape(w.shape[:-1])


def bound_curve(t: np.ndarray, beta: float, a: float, C1: float, b: float, c: float) -> np.ndarray:
    """a·sqrt(log(β+1)/β)·e^{C1 t} + b·e^{−c t}."""
    return a * temperature_scale(beta) * np.exp(C1 * t) + b * np.exp(-c * t)


# ---------------------------------------------------------------- uncertainty over replicas
DEFAULT_CONFIDENCE = 0.95
DEFAULT_BOOTSTRAP = 4000


def bootstrap_interval(per_replica, statistic, rng: np.random.Generator, *, n_boot: int = DEFAULT_BOOTSTRAP,
                       confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over replicas.

    ``per_replica`` has replicas on its first axis; each bootstrap sample draws
    that many replicas with replacement and evaluates ``statistic`` on them
    (NaN results are dropped). With R replicas there are at most C(2R−1, R)
    distinct resamples (35 for R = 4), so the interval is coarse for small R:
    it states the spread between independent initial clouds, nothing finer.
    """
    data = np.asarray(per_replica, float)
    n = data.shape[0]
    if n < 2:
        value = float(statistic(data))
        return value, value
    if not np.isfinite(data).any():
        return float("nan"), float("nan")
    idx = rng.integers(0, n, size=(n_boot, n))
    stats = np.array([statistic(data[i]) for i in idx], dtype=float)
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return float("nan"), float("nan")
    tail = 50.0 * (1.0 - confidence)
    lo, hi = np.percentile(stats, [tail, 100.0 - tail])
    return float(lo), float(hi)


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
def envelope_prefactor_decay(t, w2_zero, c: float, window) -> float:
    """b: the smallest prefactor with b·e^{−ct} ≥ W2(ρ^∞_t, Π♯ρ0) at every replica and snapshot of c's window.

    A least-squares intercept puts the line through the middle of the data, so
    about half of the points lie above it; a bound needs the envelope.
    """
    t = np.asarray(t, float)
    inside = (t >= window[0]) & (t <= window[1])
    if not (np.isfinite(c) and inside.any()):
        return float("nan")
    return float(np.nanmax(np.asarray(w2_zero, float)[..., inside] * np.exp(c * t[inside])))


def envelope_prefactor_growth(t, beta, w2_zero, C1: float, windows) -> float:
    """a: the smallest prefactor with a·sqrt(log(β+1)/β)·e^{C1 t} ≥ W2(ρ^β_t, ρ^∞_t) at every β, replica and
    exact snapshot of that β's C1 window (one a for all β, as in Theorem 1)."""
    t = np.asarray(t, float)
    w = np.asarray(w2_zero, float)
    best = float("nan")
    if not np.isfinite(C1):
        return best
    for i, b in enumerate(np.asarray(beta, float)):
        lo, hi = windows[i]
        inside = (t >= lo) & (t <= hi) & np.all(np.isfinite(w[i]), axis=0)
        if np.isfinite(lo) and inside.any():
            value = float(np.max(w[i][:, inside] / temperature_scale(b) * np.exp(-C1 * t[inside])))
            best = value if not np.isfinite(best) else max(best, value)
    return best
