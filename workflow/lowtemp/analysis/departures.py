"""Which law in β the departure times follow, from departures known only to a snapshot range.

A departure detected at snapshot t_k (``fitting.geometric_departure``) happened in (t_k − Δt, t_k]; one still
metastable at the horizon T lies in (T, ∞). The slope of τ against log β, the quadratic coefficient of τ in log β
(0 for τ = a + k·log β) and that of log τ (0 for τ = c·β^p) are linear functionals Σ w_i y_i of the departures
(``polynomial_weights``), so each is bounded exactly by the ends of those ranges (``functional_bounds``): a
curvature whose whole range excludes 0 rules its law out (``departure_law``). Derivation: docs/claims.md.
"""

from __future__ import annotations

import enum
import math

import numpy as np


def polynomial_weights(x, degree: int) -> np.ndarray:
    """Weights w with Σ w_i y_i the coefficient of x^degree in the least-squares polynomial of that degree
    through (x_i, y_i): the last row of the pseudo-inverse of the Vandermonde matrix (x centred first, which leaves
    the leading coefficient as it is). Degree 1 gives the slope, w_i = (x_i − x̄)/Σ(x − x̄)²; degree 2 the
    quadratic coefficient, 0 for points on a line. A weight within rounding of 0 (the middle one of three equally
    spaced points, in the slope) is set to 0: that point has no say. NaN with ``degree`` points or fewer."""
    x = np.asarray(x, float)
    if x.size <= degree:
        return np.full(x.shape, np.nan)
    w = np.linalg.pinv(np.vander(x - x.mean(), degree + 1))[0]
    return np.where(np.abs(w) <= 1e-12 * np.max(np.abs(w)), 0.0, w)


def departure_weights(beta, departure, censored, degree: int) -> np.ndarray:
    """(beta, replica) weights of the degree-``degree`` coefficient against x = log β (``polynomial_weights``),
    per replica over the β whose departure is known (departed, or censored: beyond the horizon); 0 at the β
    whose tokens never arrived, NaN for a replica with ``degree`` known β or fewer."""
    x = np.log(np.asarray(beta, float))
    known = np.isfinite(np.asarray(departure, float)) | np.asarray(censored, bool)
    w = np.zeros(known.shape)
    shared: dict[bytes, np.ndarray] = {}  # replicas that know the same β share their weights
    for r, k in enumerate(known.T):
        if k.tobytes() not in shared:
            shared[k.tobytes()] = polynomial_weights(x[k], degree)
        w[k, r] = shared[k.tobytes()]
        if k.sum() <= degree:
            w[:, r] = np.nan
    return w


def departure_ranges(departure, censored, horizon: float, step: float, slack=0.0) -> tuple[np.ndarray, np.ndarray]:
    """(earliest, latest) time of each departure, (beta, replica): one detected at snapshot t_k happened in
    (t_k − step − slack, t_k + slack] (``slack``: per β, or one number), a censored one in (horizon, +inf); NaN
    where the tokens never arrived."""
    dep = np.asarray(departure, float)
    cen = np.asarray(censored, bool)
    e = np.asarray(slack, float)
    e = e.reshape(e.shape + (1,) * (dep.ndim - e.ndim))
    return np.where(cen, horizon, dep - step - e), np.where(cen, np.inf, dep + e)


def functional_bounds(weights, early, late) -> tuple[np.ndarray, np.ndarray]:
    """Per replica (the last axis), the smallest and largest Σ_i w_i y_i over y_i in [early_i, late_i] (the sum
    is monotone in each y_i, so the ends are attained): the lower bound takes y_i = early_i where w_i > 0 and
    late_i where w_i < 0, the upper bound the other ends; an infinite end makes that bound infinite. A point with
    w_i = 0 has no say; NaN where a nonzero weight meets an unknown y_i (NaN end), or a weight is NaN.
    ``weights``: (point,) or (point, replica)."""
    early, late = np.asarray(early, float), np.asarray(late, float)
    w = np.asarray(weights, float)
    w = np.broadcast_to(w.reshape(w.shape + (1,) * (early.ndim - w.ndim)), early.shape)
    pos, neg = w > 0, w < 0
    # lower bound: terms finite or −inf; upper bound: finite or +inf (early < +inf, late > −inf)
    low = np.where(pos, early, np.where(neg, late, 0.0))
    high = np.where(pos, late, np.where(neg, early, 0.0))
    with np.errstate(invalid="ignore"):
        low_terms = np.where(pos | neg, w * low, 0.0)
        high_terms = np.where(pos | neg, w * high, 0.0)
        lower = np.sum(low_terms, axis=0)
        upper = np.sum(high_terms, axis=0)
    unknown = np.any(np.isnan(w) | ((pos | neg) & (np.isnan(early) | np.isnan(late))), axis=0)
    return np.where(unknown, np.nan, lower), np.where(unknown, np.nan, upper)


def departure_functional_bounds(weights, departure, censored, horizon: float, step: float, slack=0.0):
    """Per replica, lower and upper bounds on Σ_i w_i τ_i over the departure times' ranges
    (``departure_ranges``, ``functional_bounds``): a censored τ_i with w_i > 0 leaves no upper bound (+inf), one
    with w_i < 0 no lower bound (−inf)."""
    return functional_bounds(weights, *departure_ranges(departure, censored, horizon, step, slack))


def departure_log_functional_bounds(weights, departure, censored, horizon: float, step: float, slack=0.0):
    """As ``departure_functional_bounds`` for Σ_i w_i log τ_i: log is increasing, so the ends of each range map
    through it; a range that reaches down to 0 (t_k − step − slack ≤ 0) has log τ unbounded below (−inf)."""
    early, late = departure_ranges(departure, censored, horizon, step, slack)
    with np.errstate(divide="ignore", invalid="ignore"):
        return functional_bounds(weights, np.log(np.maximum(early, 0.0)), np.log(np.maximum(late, 0.0)))


def departure_slope_bounds(beta, departure, censored, horizon: float, step: float, slack=0.0):
    """Per replica, lower and upper bounds on the least-squares slope of departure time against log β.

    The slope is linear in the departure times with weight w_i = (x_i − x̄)/Σ(x − x̄)²,
    x = log β (or log N) (``departure_weights``). A departure detected at snapshot t_k happened in
    (t_k − step, t_k]; a censored one lies beyond ``horizon``. The lower bound takes each time at the end
    of its range that lowers the slope (t_k − step, or the horizon when censored, for
    w_i > 0; t_k for w_i < 0, −inf if censored), the upper bound the other ends (+inf
    for a censored time with w_i > 0) (``departure_functional_bounds``). β without a metastable phase (never
    arrived) are left out. ``slack`` (per β, or one number) widens each known departure's range to
    (t_k − step − slack, t_k + slack]: the departure of a mean-field reference is known only to within
    the shift of its coarser twin's. Returns two arrays over replicas (NaN with fewer than two β).
    """
    w = departure_weights(beta, departure, censored, 1)
    return departure_functional_bounds(w, departure, censored, horizon, step, slack)


class DepartureLaw(enum.IntEnum):
    """Which law in β the departure times follow (``departure_law``); the integer is fit.nc's ``departure_law``."""

    POWER = 2  # a power of β
    LOG = 1  # log β
    NEITHER = 0  # neither: both curvatures exclude 0
    UNDECIDED = -1
    NOT_EVALUABLE = -2  # fewer than three β, or fewer than two replicas with a curvature

    @property
    def words(self) -> str:
        return {
            DepartureLaw.POWER: "a power of β",
            DepartureLaw.LOG: "log β",
            DepartureLaw.NEITHER: "neither log β nor a power of β",
            DepartureLaw.UNDECIDED: "undecided",
            DepartureLaw.NOT_EVALUABLE: "not evaluable",
        }[self]


def departure_law_bounds(beta, departure, censored, horizon: float, step: float, slack=0.0) -> dict:
    """Per replica, (lower, upper) bounds on the three linear functionals of the departure times that tell the
    laws apart, with x = log β: ``"linear"``, k_lin, the quadratic coefficient of the least-squares fit of τ
    against (x, x²); ``"log"``, k_log, the same for log τ; ``"power"``, p, the slope of log τ against x. A law
    τ = a + s·log β has k_lin = 0 (and k_log < 0: the log of a line is concave); τ = c·β^p has k_log = 0 (and
    k_lin > 0 for p > 0). Bounds as in ``departure_slope_bounds``, through log for k_log and p."""
    w2 = departure_weights(beta, departure, censored, 2)
    w1 = departure_weights(beta, departure, censored, 1)
    args = (departure, censored, horizon, step, slack)
    return {
        "linear": departure_functional_bounds(w2, *args),
        "log": departure_log_functional_bounds(w2, *args),
        "power": departure_log_functional_bounds(w1, *args),
    }


def _sign_beyond_rounding(lo: float, hi: float) -> int:
    """+1 where [lo, hi] lies above 0, −1 below, 0 where it holds 0 or misses it by no more than rounding: a true
    departure exactly at the end of its range gives a curvature of ±1e-15 where the law's is 0."""
    eps = 1e-9 * max([1.0] + [abs(v) for v in (lo, hi) if math.isfinite(v)])
    return 1 if lo > eps else -1 if hi < -eps else 0


def departure_law(linear_interval, log_interval) -> DepartureLaw:
    """The law from the intervals of k_lin and k_log (``departure_law_bounds``; each made of two one-sided
    bounds): a power of β when k_lin's lies above 0 and k_log's contains 0 between finite ends; log β when k_log's
    lies below 0 and k_lin's contains 0 between finite ends; neither when both exclude 0 otherwise (k_lin, k_log >
    0: faster than any power; k_lin > 0 > k_log: between log β and a power; both < 0: slower than log β);
    undecided in the other cases; not evaluable when either interval is NaN. Under a log-β law "a power of β"
    needs k_lin's lower bound above its true value 0, and under a power law "log β" needs k_log's upper bound below
    0: each happens at most 1 − confidence of the time. An interval with an infinite end (a censored departure
    leaves no upper bound) holds 0 whatever the data, so it cannot name the law that needs 0: censored departures
    that grow faster than log β read "undecided" (a power of β or faster), not "a power of β"."""
    (lin_lo, lin_hi), (log_lo, log_hi) = (tuple(float(v) for v in i) for i in (linear_interval, log_interval))
    if np.isnan([lin_lo, lin_hi, log_lo, log_hi]).any():
        return DepartureLaw.NOT_EVALUABLE
    lin_sign, log_sign = _sign_beyond_rounding(lin_lo, lin_hi), _sign_beyond_rounding(log_lo, log_hi)
    if lin_sign > 0 and log_sign == 0 and math.isfinite(log_lo) and math.isfinite(log_hi):
        return DepartureLaw.POWER
    if log_sign < 0 and lin_sign == 0 and math.isfinite(lin_lo) and math.isfinite(lin_hi):
        return DepartureLaw.LOG
    if lin_sign and log_sign:
        return DepartureLaw.NEITHER
    return DepartureLaw.UNDECIDED


def neither_law_words(lin_lo: float, log_lo: float) -> str:
    """How departure times that follow ``DepartureLaw.NEITHER`` grow, from the signs of the curvatures' intervals
    (``departure_law``: both exclude 0, so each lower bound's sign is the interval's)."""
    return {
        (True, True): "log τ convex in log β, curving up more than any c·β^p (as a + c·β^p, a > 0, does)",
        (True, False): "between log β and a power of β",
        (False, False): "slower than log β",
        (False, True): "τ concave but log τ convex in log β (contradictory)",
    }[(lin_lo > 0, log_lo > 0)]
