"""Predicted decay rates of W2(ρ^∞_t, Π_♯ρ0) in t: early (mean field) and late (finite N).

The derivation is in docs/early_rate.md; equation numbers (R1)–(R9) below refer
to it. Notation: A = VBᵀ symmetric with distinct eigenvalue levels
μ_1 > μ_2 > … > μ_L, eigenspaces E_1, …, E_L of dimensions m_1, …, m_L,
γ = μ_1 − μ_2; the zero-temperature token x(t) = e^{sA}x0/|e^{sA}x0| runs on
the clock ds/dt = 1/|Bᵀx| (``lowtemp.model.exact``).

* W2²(ρ^∞_t, Π_♯ρ0) = ∫ (2 − 2|P1 x|) dρ^∞_t exactly (R2), a sum over tokens.
* A token that has reached u ∈ E1 ∩ S decays at the per-token rate γ/|Bᵀu| (R3).
* A token that starts near E_1⊥ first waits at a point w of E_k ∩ S (k ≥ 2);
  the mass still waiting there decays like e^{−C_k s}, with
  C_k = Σ_{j<k} m_j (μ_j − μ_k) (R4), while the clock is |Bᵀw|; so that
  channel decays at r_k(w) = C_k / (2|Bᵀw|) in W2 (R5). For k = 2,
  C_2 = (dim E1)·γ: the mass within ε of E1⊥ scales like ε^{dim E1}.
* Early (mean field): the slowest channel wins (R7),
  r = min( min_{u∈E1∩S} γ/|Bᵀu| , min_{k≥2} min_{w∈E_k∩S} C_k/(2|Bᵀw|) ).
* Late (N tokens, all escaped): γ/|BᵀΠ(x_i)| for the slowest token (R8).
* Boundary: N tokens run out of waiting tokens at t* = log N / (2 r_w), r_w the
  slowest waiting channel (R9); the last escape fluctuates by O(1/(2 r_w)).

Where a channel is a continuum (dim E_k ≥ 2, or dim E1 ≥ 2 for the per-token
rate) and |Bᵀw| is not constant on it, the rate is an interval over that set:
a finite window sees a weighted average, which tends to the lower end as t
grows (Laplace's method, slope ≈ low + q/(4t)). Pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .matrices import AttentionMatrices, eigenlevels

#: relative tolerance under which two rates (or clocks) count as equal
RATE_RTOL = 1e-9
#: default half-width of the transition band around t*, in units of 1/(2 r_w):
#: at t* − 3/(2 r_w) about e³ ≈ 20 tokens still wait (the cloud follows the mean
#: field), at t* + 3/(2 r_w) one token still waits with probability ≈ 1 − exp(−e⁻³) ≈ 5 %
DEFAULT_BAND_UNITS = 3.0

EARLY = "early (mean field)"
LATE = "late (finite N)"
MIXED = "mixed"


@dataclass(frozen=True)
class RatePrediction:
    """A predicted decay rate of W2 in t: the interval [low, high] (low = high when sharp)."""

    low: float
    high: float
    regime: str  # EARLY, LATE or MIXED
    note: str  # one line: the formula, and why it is an interval if it is

    @property
    def sharp(self) -> bool:
        return self.high - self.low <= RATE_RTOL * max(1.0, abs(self.high))

    def contains(self, rate: float, tol: float = 0.0) -> bool:
        """low − tol ≤ rate ≤ high + tol."""
        return self.low - tol <= rate <= self.high + tol


@dataclass(frozen=True)
class Channel:
    """One way for mass to stay away from Π_♯ρ0: tokens at a stationary set E_k ∩ S.

    ``level`` 1 is the per-token channel (tokens that reached E1 ∩ S, cost 2γ,
    Eq. R3); ``level`` k ≥ 2 is the waiting channel at E_k ∩ S (cost C_k, Eq. R4).
    ``cost`` is the exponent of W2² per unit of the token's own time s; the clock
    |Bᵀw| ranges over [clock_min, clock_max] on E_k ∩ S (the singular values of
    BᵀE_k). The rate of W2 in t is cost/(2|Bᵀw|) (Eq. R5, R6).
    """

    level: int
    mu: float
    multiplicity: int
    cost: float
    clock_min: float
    clock_max: float

    @property
    def low(self) -> float:
        return self.cost / (2.0 * self.clock_max)

    @property
    def high(self) -> float:
        return self.cost / (2.0 * self.clock_min)

    @property
    def constant_clock(self) -> bool:
        return self.clock_max - self.clock_min <= RATE_RTOL * self.clock_max

    @property
    def name(self) -> str:
        return "E1 (per token)" if self.level == 1 else f"waiting at E{self.level}"


def clock_range(B: np.ndarray, E: np.ndarray) -> tuple[float, float]:
    """min and max of the clock |Bᵀw| over unit w in span(E): the extreme singular values of BᵀE."""
    sv = np.linalg.svd(B.T @ E, compute_uv=False)
    return float(sv[-1]), float(sv[0])


def channels(M: AttentionMatrices) -> list[Channel]:
    """The per-token channel (level 1, Eq. R3/R6) and the waiting channels (levels ≥ 2, Eq. R4/R5)."""
    levels = eigenlevels(M.A)
    mu1 = levels[0][0]
    gamma = mu1 - levels[1][0]
    out = []
    for k, (mu_k, E_k) in enumerate(levels, start=1):
        if k == 1:
            cost = 2.0 * gamma  # |P⊥x|² ~ e^{−2γs} per token
        else:  # every unstable block E_j (j < k) must start small: mass ~ Π_j ε_j^{m_j}
            cost = sum(E_j.shape[1] * (mu_j - mu_k) for mu_j, E_j in levels[: k - 1])
        lo, hi = clock_range(M.B, E_k)
        out.append(Channel(level=k, mu=mu_k, multiplicity=E_k.shape[1], cost=float(cost), clock_min=lo, clock_max=hi))
    return out


def _equal(a: float, b: float) -> bool:
    return abs(a - b) <= RATE_RTOL * max(1.0, abs(a), abs(b))


def _describe(ch: Channel) -> str:
    if ch.level == 1:
        formula = "γ/|Bᵀu|, u ∈ E1∩S (per-token rate, Eq. R6)"
    else:
        formula = (
            f"C_{ch.level}/(2|Bᵀw|), w ∈ E{ch.level}∩S, C_{ch.level} = Σ_(j<{ch.level}) "
            f"m_j(μ_j − μ_{ch.level}) = {ch.cost:.6g} (waiting channel, Eq. R5)"
        )
    if ch.constant_clock:
        return formula + f" = {ch.low:.6g}"
    w = "u" if ch.level == 1 else "w"
    return (
        formula + f" ∈ [{ch.low:.6g}, {ch.high:.6g}]: interval because |Bᵀ{w}| ranges over "
        f"[{ch.clock_min:.4g}, {ch.clock_max:.4g}] on the {ch.multiplicity}-dim eigenspace "
        f"(a window sees a weighted average; t → ∞ tends to the low end)"
    )


def early_rate(M: AttentionMatrices) -> RatePrediction:
    """Mean-field decay rate of W2(ρ^∞_t, Π_♯ρ0) in t (docs/early_rate.md, Eq. R7).

    The minimum over channels of their slowest rate; the interval is the range of
    the minimising channel over its stationary set (sharp when the clock |Bᵀw| is
    constant there, e.g. dim E_k = 1). It is the t → ∞ rate of the mean field;
    a finite window's slope approaches it as in docs/early_rate.md §5.
    """
    chans = channels(M)
    low = min(ch.low for ch in chans)
    winners = [ch for ch in chans if _equal(ch.low, low)]
    high = max(ch.high for ch in winners)
    if _equal(high, low):
        high = low
    note = " | ".join(_describe(ch) for ch in winners)
    if len(winners) > 1:
        note += " | tie between channels: W2² carries an extra factor t (slope approaches from below)"
    return RatePrediction(low=low, high=high, regime=EARLY, note="early: " + note)


def late_rate(M: AttentionMatrices) -> RatePrediction:
    """Per-token rate γ/|Bᵀu|, u ∈ E1 ∩ S, that N tokens show once all have escaped (Eq. R8).

    Sharp for dim E1 = 1 (|Bᵀu| = |Bᵀ(−u)|); for dim E1 ≥ 2 the interval
    [γ/σmax(BᵀE1), γ/σmin(BᵀE1)], the slowest token setting the observed rate.
    """
    ch = channels(M)[0]
    high = ch.low if ch.constant_clock else ch.high
    return RatePrediction(low=ch.low, high=high, regime=LATE, note="late: " + _describe(ch))


#: the bulk of ρ0 starts at angle ≈ 60° from E1 (|cos θ| is uniform on [0, 1] for the uniform measure on S²:
#: its median is 1/2) and is in the linear regime of its fixed point once tan θ < 0.1 (6°)
TRANSIENT_START_TAN = math.tan(math.radians(60.0))
TRANSIENT_END_TAN = 0.1


def transient_end(M: AttentionMatrices) -> float:
    """Time after which the early rate (Eq. R7) describes the mean field: the bulk has reached its fixed point.

    Near u the angle of a token obeys tan θ(s) = tan θ0 · e^{−γ s} (linearisation of
    e^{sA}x0/|e^{sA}x0|), so the bulk (θ0 ≈ 60°) is within tan θ < 0.1 after
    s = log(tan 60° / 0.1)/γ ≈ 2.85/γ, i.e. after t = σmax(B)·2.85/γ on the slowest
    clock. Before that the decay of W2 is the nonlinear transient of the bulk, not a
    channel: on the mean-field quadratures of tests/model/test_rates.py the local slope is
    up to 50 % off the prediction at t = 1 and within the claims' tolerance from
    this time on (docs/early_rate.md).
    """
    return math.log(TRANSIENT_START_TAN / TRANSIENT_END_TAN) * M.sigma_max / M.gamma


def waiting_rate(M: AttentionMatrices) -> float:
    """r_w: the slowest rate among the waiting channels (levels ≥ 2), min_k C_k/(2σmax(BᵀE_k))."""
    return min(ch.low for ch in channels(M)[1:])


def _check_tokens(n_tokens) -> float:
    n = float(n_tokens)
    if not (n >= 1):
        raise ValueError(f"n_tokens must be at least 1, got {n_tokens!r}")
    return n


def regime_boundary(M: AttentionMatrices, n_tokens: int) -> float:
    """t* = log N / (2 r_w): when the expected number of tokens still waiting near E1⊥ falls to one (Eq. R9).

    The mass waiting in channel k decays like e^{−C_k s} in the waiting tokens'
    own time s = t/|Bᵀw|, i.e. like e^{−2 r_k t}; with N tokens it is gone once
    N e^{−2 r_w t} ≈ 1. For dim E1 = m and the usual slowest channel (k = 2):
    t* = |Bᵀe2| log N / (m γ). ``n_tokens = inf`` (the mean field) gives inf.
    The last escape fluctuates by O(1/(2 r_w)) around t* (see ``regime_band``).
    """
    n = _check_tokens(n_tokens)
    if math.isinf(n):
        return math.inf
    return math.log(n) / (2.0 * waiting_rate(M))


def regime_band(M: AttentionMatrices, n_tokens: int, halfwidth: float | None = None) -> tuple[float, float]:
    """(t* − h, t* + h): before it N tokens follow the mean field, after it all have escaped.

    Default h = 3/(2 r_w): the number of tokens still waiting is Poisson with mean
    N e^{−2 r_w t}, ≈ e³ ≈ 20 at the early edge and ≈ e⁻³ at the late edge (one
    still waiting with probability ≈ 5 %). Inside the band, when r_w is below every
    per-token rate, a lone waiting token holds W2² near 2/N and the slope can be
    anywhere from 0 to the late rate (docs/early_rate.md §6).
    """
    t_star = regime_boundary(M, n_tokens)
    h = DEFAULT_BAND_UNITS / (2.0 * waiting_rate(M)) if halfwidth is None else float(halfwidth)
    if not (h >= 0):
        raise ValueError(f"halfwidth must be >= 0, got {halfwidth!r}")
    return max(t_star - h, 0.0), t_star + h


def classify_window(
    M: AttentionMatrices, n_tokens: int, window: tuple[float, float], halfwidth: float | None = None
) -> RatePrediction:
    """The prediction for a fit window [t0, t1] of W2 for N tokens.

    Early (Eq. R7) if the window ends before the band of ``regime_band``, late
    (Eq. R8) if it starts after it, otherwise "mixed": the union of the two
    intervals, with its low end lowered to 0 when the waiting channels are slower
    than every escaped token (r_w < min γ/|Bᵀu|): inside the band a lone waiting
    token can then hold W2 nearly constant.
    ``halfwidth=0`` gives the bare boundary t* (ending before t* → early,
    starting after → late).
    """
    t0, t1 = (float(w) for w in window)
    if not (math.isfinite(t0) and t0 >= 0 and t1 > t0):
        raise ValueError(f"window must be (t0, t1) with 0 <= t0 < t1, got {window!r}")
    lo_edge, hi_edge = regime_band(M, n_tokens, halfwidth)
    early, late = early_rate(M), late_rate(M)
    if t1 <= lo_edge:
        return early
    if t0 >= hi_edge:
        return late
    high = max(early.high, late.high)
    note = (
        f"mixed: window [{t0:.4g}, {t1:.4g}] overlaps the transition band "
        f"[{lo_edge:.4g}, {hi_edge:.4g}] around t* = log N/(2 r_w) (Eq. R9); union of early "
        f"[{early.low:.4g}, {early.high:.4g}] and late [{late.low:.4g}, {late.high:.4g}]"
    )
    low = min(early.low, late.low)
    if waiting_rate(M) < late.low * (1.0 - RATE_RTOL):
        # the last waiting tokens outlive the escaped ones: a lone waiting token
        # holds W2² near 2/N while the rest decays, so the slope can drop to 0
        # (W2 never increases: each token's distance to E1 ∩ S is non-increasing)
        low = 0.0
        note += "; a lone waiting token can hold W2 nearly constant, so the low end is 0"
    return RatePrediction(low=low, high=high, regime=MIXED, note=note)
