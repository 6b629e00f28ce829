"""The sampling of the tokens behind a W2 curve: how far over a bound n tokens may lie when the measure they
sample is under it (docs/claims.md, "Sampling of the tokens").

Where E1(A) is one line, Π♯ρ0 is two atoms, and one token that ends across the split between them weighs 4/n in
W2² whatever β is: ``bound_above_data`` judges a point over the bound with this rule, not by the plain
comparison.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom, gamma


def under_bound_but_for_tokens_across(bound, w2_projection, spread, spread_low, across, net, tokens: int, alpha: float):
    """Per point: W2(ρ_t, Π♯ρ0) of n tokens lies under ``bound``, or over it no further than the sampling of those
    tokens explains at level alpha, E1(A) one-dimensional (docs/claims.md, "Sampling of the tokens").

    The exact plan to Π♯ρ0 = m₊δ_u + m₋δ_{−u} (``transport.w2.w2_two_atoms``) sends every token to its nearer atom
    but the ``net`` ones the masses force to the farther, each at 4|⟨x,u⟩| more: W2² = D² + 4·c̄·net/n, D =
    ``spread`` (``dist_leading_A``), c̄ the forced tokens' mean |⟨x,u⟩|. The measure the tokens sample has W2² =
    D_c² + 4·m̄·p, p its net mass across, m̄ its |⟨x,u⟩| there. D is a mean over tokens: ``spread_low`` bounds D_c
    from below at level alpha/2 (``projection.distance_to_eigenspace_lower``). One token across weighs 4c̄/n
    whatever β is, and ``net`` is a difference of tokens crossing each way (``across`` in all), so it is tested,
    at alpha/2, against the largest net mass a measure under B can move, p_max = (B² − D_low²)/(4c̄)
    (``_net_across_plausible``). Over the bound beyond sampling: D_low > B, or the net count implausible, or
    W2² more than D² + 4·net/n (no two-atom plan of these counts).
    """
    w, d, d_low = (np.asarray(v, float) for v in (w2_projection, spread, spread_low))
    k, g, b = np.asarray(net, float), np.asarray(across, float), np.asarray(bound, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = np.where(k > 0, np.clip(tokens * (w**2 - d**2) / (4.0 * k), 1e-12, 1.0), 1.0)  # c̄
        n_p_max = tokens * np.clip((b**2 - d_low**2) / (4.0 * cost), 0.0, 1.0)
        plausible = _net_across_plausible(g, k, n_p_max, alpha / 2.0)
        # the excess over the spread is the net tokens' doing (an identity of the exact plan, to rounding): curves
        # that are not two-atom W2 of these counts get no allowance
        explained = w**2 - 4.0 * k / tokens <= d**2 * (1.0 + 1e-9) + 1e-15
        return (w <= b) | (explained & (d_low <= b) & plausible)


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
