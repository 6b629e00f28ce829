"""The sampling of the tokens behind a W2 curve: how far over a bound n tokens may lie when the measure they
sample is under it (docs/claims.md, "Sampling of the tokens").

Where E1(A) is one line, Π♯ρ0 is two atoms, and one token that ends across the split between them weighs 4/n in
W2² whatever β is: ``bound_above_data`` judges a point over the bound with this rule, not by the plain
comparison.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom, gamma


def under_bound_but_for_tokens_across(bound, w2_projection, spread, moving_low, across, net, tokens: int, alpha: float):
    """Per point: W2(ρ_t, Π♯ρ0) of n tokens lies under ``bound``, or over it no further than the sampling of those
    tokens explains at level alpha, E1(A) one-dimensional (docs/claims.md, "Sampling of the tokens").

    The exact plan to Π♯ρ0 = m₊δ_u + m₋δ_{−u} (``transport.w2.w2_two_atoms``) sends every token to its nearer atom
    but the ``net`` ones the masses force to the farther, the cheapest, each at 4|⟨x,u⟩| more: W2² = D² + 4·c̄·net/n,
    D = ``spread`` (``dist_leading_A``), c̄ their mean |⟨x,u⟩|. ``moving_low`` (…, j = 0 … MOVED) bounds from below,
    at level alpha/2, W2² of the measure the tokens sample were it to send j tokens' mass net
    (``projection.moving_cost_lower``): under B it sends at most the largest such j, n·p_max
    (``largest_net_sent``), and none at all when the bound at j = 0, its spread, is over B². ``net`` is a difference
    of tokens crossing each way (``across`` in all), so it is tested at alpha/2 against n·p_max
    (``_net_across_plausible``). Over the bound beyond sampling: the spread over it, or the net count implausible,
    or W2² more than D² + 4·net/n (no two-atom plan of these counts).
    """
    w, d = np.asarray(w2_projection, float), np.asarray(spread, float)
    k, g, b = np.asarray(net, float), np.asarray(across, float), np.asarray(bound, float)
    n_p_max = largest_net_sent(moving_low, b)
    plausible = _net_across_plausible(g, k, np.maximum(n_p_max, 0.0), alpha / 2.0)
    # the excess over the spread is the net tokens' doing (an identity of the exact plan, to rounding): curves
    # that are not two-atom W2 of these counts get no allowance
    explained = w**2 - 4.0 * k / tokens <= d**2 * (1.0 + 1e-9) + 1e-15
    return (w <= b) | (explained & (n_p_max >= 0.0) & plausible)


def largest_net_sent(moving_low, bound) -> np.ndarray:
    """The most tokens' mass (real, interpolated linearly in j) a measure under ``bound`` can send net across, given
    ``moving_low`` (…, j = 0 … MOVED), the lower bound on W2² of the measure sending j: the largest j with
    moving_low(j) ≤ B²; −1 where even j = 0 (the spread) is over; past MOVED, extended at the last step's cost
    (a lower bound, the cost of each further token being at least that of the last); NaN where moving_low
    is NaN."""
    c = np.asarray(moving_low, float)
    b2 = np.square(np.asarray(bound, float))[..., None]
    last = np.sum(c <= b2, axis=-1) - 1  # c is nondecreasing in j
    j = np.clip(last, 0, c.shape[-1] - 2)
    lo = np.take_along_axis(c, j[..., None], -1)[..., 0]
    hi = np.take_along_axis(c, j[..., None] + 1, -1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.where(hi > lo, (b2[..., 0] - lo) / (hi - lo), np.inf)
    within = np.where(last < c.shape[-1] - 1, np.minimum(step, 1.0), step)
    return np.where(np.isnan(c[..., 0]), np.nan, np.where(last < 0, -1.0, j + within))


def _net_across_plausible(g: np.ndarray, k: np.ndarray, n_p_max: np.ndarray, alpha: float) -> np.ndarray:
    """Whether ``k`` of ``g`` tokens across, net, is plausible at level alpha for a measure moving a net mass at most
    p_max one way (``n_p_max`` = n·p_max) and any mass both ways.

    Each token crosses one way (mass a₁) or the other (a₂) or not at all, so given the g across the ways are
    Binomial(g, r), r = a₁/(a₁ + a₂) ≤ ½ + n·p_max/(2λ), λ = n(a₁ + a₂): the more cross, the nearer a fair coin
    the net mass allows. λ is not known: with probability 1 − alpha/2 it is at least λ_lo, the Poisson lower
    bound from g, so r ≤ r_max = min(1, ½ + n·p_max/(2λ_lo)); the split is then tested at alpha/2:
    P(|2·Binomial(g, r_max) − g| ≥ k) ≥ alpha/2. The two halves of alpha bound the level (measured:
    tests/analysis/test_sampling.py)."""
    lam_lo = np.where(g > 0, gamma.ppf(alpha / 2.0, np.maximum(g, 1.0)), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(lam_lo > 0, np.minimum(1.0, 0.5 + n_p_max / (2.0 * lam_lo)), 1.0)
    upper = binom.sf(np.ceil((g + k) / 2.0) - 1, g, r)  # P(ways ≥ (g + k)/2)
    lower = binom.cdf(np.floor((g - k) / 2.0), g, r)  # P(ways ≤ (g − k)/2): the other direction
    return (k <= 0) | (np.minimum(1.0, upper + lower) >= alpha / 2.0)
