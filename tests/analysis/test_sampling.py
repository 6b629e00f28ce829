"""The sampling allowance of ``bound_above_data`` (``lowtemp.analysis.sampling``): clouds of n tokens drawn from
measures exactly at a bound, and well over it, judged through the real exact W2 to Π♯ρ0, the distance to E1(A) and
its lower bound over resampled tokens, and the counts across the split of Π♯ρ0's two atoms."""

from __future__ import annotations

import numpy as np
import pytest

from lowtemp.analysis import sampling
from lowtemp.model import projection
from lowtemp.transport import w2

U, E1 = np.array([1.0, 0.0, 0.0]), np.eye(3)[:, :1]


def at_the_bound(bound, spread, across_at, both_ways):
    """Per-side crossing probabilities (from u's side, from −u's) of the measure whose W2 to Π♯ρ0 is ``bound``:
    tokens that stay have a Gaussian spread of root mean square ``spread`` about their atom, ``both_ways`` of each
    side crosses, those that cross sit at |⟨x,u⟩| = ``across_at`` on the other side, and the rest of B² is a net
    mass p moved from u's side: B² = D² + 4·across_at·p, D² the mean squared distance to the nearer atom."""
    s2, m, b = spread**2, across_at, both_ways
    p = (bound**2 - s2 * (1.0 - b) - (2.0 - 2.0 * m) * b) / (2.0 + 2.0 * m - s2)
    assert p >= 0.0, "the spread and the tokens crossing both ways are already over the bound"
    return b + 2.0 * p, b


def clouds(rng, n, spread, cross, across_at, draws):
    """``draws`` clouds of n tokens, each started at a random atom ±u and crossing with probability ``cross`` =
    (from u's side, from −u's) to |⟨x,u⟩| = ``across_at`` on the other side, the others spread about their atom
    (``at_the_bound``): (initial tokens, tokens) (draws, n, 3)."""
    side = rng.choice([-1.0, 1.0], size=(draws, n))
    X0 = np.zeros((draws, n, 3))
    X0[..., 0] = side
    flip = rng.random((draws, n)) < np.where(side > 0, cross[0], cross[1])
    X = np.concatenate([side[..., None], rng.normal(0.0, spread / np.sqrt(2.0), (draws, n, 2))], axis=-1)
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    phi = rng.uniform(0.0, 2.0 * np.pi, (draws, n))
    ring = np.sqrt(1.0 - across_at**2)
    crossed = np.stack([-side * across_at, ring * np.cos(phi), ring * np.sin(phi)], axis=-1)
    return X0, np.where(flip[..., None], crossed, X)


def over_rate(n, bound, spread=0.014, across_at=1.0, both_ways=0.0, cross=None, draws=400, seed=0, plain=False):
    """How often a cloud of n tokens from ``at_the_bound``'s measure (or one crossing with ``cross``) is called over
    ``bound`` beyond sampling (alpha = 0.05), from its exact W2 to Π♯ρ0, its distance to E1(A) and that distance's
    lower bound over resampled tokens, and its counts across; with ``plain``, how often w > bound."""
    rng = np.random.default_rng(seed)
    cross = at_the_bound(bound, spread, across_at, both_ways) if cross is None else cross
    X0, X = clouds(rng, n, spread, cross, across_at, draws)
    w = np.array([w2.w2_two_atoms(x, U, projection.two_atom_masses(x0, U)) for x0, x in zip(X0, X)])
    if plain:
        return float(np.mean(w > bound))
    d = projection.distance_to_eigenspace(X, E1)
    d_low = projection.distance_to_eigenspace_lower(X[:, None], E1, 0.025, rng)[:, 0]
    across, net = (v[:, 0] for v in projection.tokens_across(X[:, None], X0, E1))
    return float(np.mean(~sampling.under_bound_but_for_tokens_across(bound, w, d, d_low, across, net, n, 0.05)))


#: the level 0.05 plus three standard errors of 300 draws
LEVEL_SLACK = 0.05 + 3.0 * np.sqrt(0.05 * 0.95 / 300)
#: (spread, |⟨x,u⟩| of the tokens across, share of each side crossing both ways) of measures at the bound
AT_THE_BOUND = {
    "net mass at the atoms": (0.014, 1.0, 0.0),
    "5 % both ways on top": (0.014, 1.0, 0.05),
    "20 % both ways on top": (0.014, 1.0, 0.2),
    "tokens across at 0.4": (0.014, 0.4, 0.0),
    "tokens across near the split": (0.014, 0.1, 0.0),
    "spread alone": ("bound", 1.0, 0.0),
}


@pytest.mark.parametrize(("n", "bound"), [(64, 0.13), (256, 0.085), (1024, 0.05)])
@pytest.mark.parametrize("measure", list(AT_THE_BOUND))
def test_the_sampling_allowance_keeps_its_level_on_measures_at_the_bound(n, bound, measure):
    """Clouds drawn from measures exactly at the bound are called over it at most at the level 0.05 (plus three
    standard errors of 300 draws; measured 0 … 2 % over n = 64 … 4096) on these measures at the bound: through a net
    mass across the split of Π♯ρ0's atoms with the tokens across at the atoms, with 5 or 20 % of each side
    crossing both ways on top (their net count is noise of order √(2·0.05·n)), with the tokens across left at
    |⟨x,u⟩| = 0.4 or 0.1 (each weighs less than 4/n in W2² and adds to the distance to the nearer atom), or
    through the spread alone (the distance to the nearer atom fluctuates about the bound) — though one token
    across puts W2 at 2/√n, over these bounds. Each of these broke an earlier form of the rule: the spread
    judged as exact (over at up to 41 %), every token across costed at 4/n (up to 53 % at n = 4096), a fair
    coin and "all one way" accepted separately (21 %), a lower bound over resampled tokens of W2 itself (72 %
    with 5 % crossing both ways at n = 1024: the net count is a difference, which resampling does not
    centre). Not every measure: with 20 or more net tokens and near-split tokens of about the net mass on the
    receiving side the rule calls 10–28 % over (docs/claims.md, "What the checks cannot see")."""
    spread, across_at, both_ways = AT_THE_BOUND[measure]
    spread = bound if spread == "bound" else spread
    assert 2.0 / np.sqrt(n) > bound
    assert over_rate(n, bound, spread, across_at, both_ways, draws=300) <= LEVEL_SLACK


def test_the_sampling_allowance_keeps_its_level_where_many_tokens_go_one_way():
    """At n = 4096 a measure at B = 0.17 sends 29 tokens one way on average: the rule's one-way end keeps the level,
    the tokens across at the atoms or at |⟨x,u⟩| = 0.4 (costed by their own mean |⟨x,u⟩|, not 1)."""
    for across_at in (1.0, 0.4):
        assert over_rate(4096, 0.17, 0.014, across_at, 0.0, draws=200) <= 0.05 + 3.0 * np.sqrt(0.05 * 0.95 / 200)


def test_the_sampling_allowance_calls_measures_well_over_the_bound_over_it():
    """What the rule can see (200 draws each): a spread 1.5 times the bound, whatever n; a net mass across making W2
    6 times the bound at n = 256 (about 7 tokens one way); twice the bound at n = 4096. What it cannot: four
    times the bound through about four tokens one way at n = 256 is called over it in about a third of the clouds
    (measured 0.35), six times with 5 % crossing both ways in about 0.7. And the plain comparison w ≤ B, which it
    replaces, calls a measure at the bound over it in most clouds once tokens cross both ways."""
    for n, bound in ((256, 0.085), (1024, 0.05)):
        assert over_rate(n, bound, 1.5 * bound, cross=(0.0, 0.0), draws=200, seed=2) > 0.9
    p = ((6.0 * 0.085) ** 2 - 0.014**2) / 4.0
    assert over_rate(256, 0.085, cross=(2.0 * p, 0.0), draws=200, seed=1) > 0.8
    p = ((2.0 * 0.1) ** 2 - 0.014**2) / 4.0
    assert over_rate(4096, 0.1, cross=(2.0 * p, 0.0), draws=100, seed=1) > 0.8
    assert over_rate(256, 0.085, both_ways=0.05, draws=200, seed=3, plain=True) > 0.5


def test_one_token_across_at_the_sphere_runs_bound_is_sampling():
    """n = 256, a bound of 0.085 and a spread of 0.014 (the held-out β = 1000 curve of the S² run at t ≈ 10): one
    token across puts W2 at sqrt(0.014² + 4/256) = 0.126, over the bound and explained by sampling; so are three
    all one way (a fair coin's 1 in 4) and seven (0.027 with the measure's split 0.59 : 0.41 on 2.4 crossing, the
    Poisson lower bound at 0.0125, against 0.0125); nine all one way are not (0.006), nor is a spread whose lower
    bound is over the bound, with nothing across, nor twelve tokens across at |⟨x,u⟩| = 0.3 where the measure
    may send only about 1.5."""
    n, d, bound = 256, 0.014, 0.085
    for tokens, under in ((1, True), (3, True), (7, True), (9, False)):
        w = np.sqrt(d**2 + 4.0 * tokens / n * (1.0 - 1e-4))  # the tokens across a little off their atom
        assert sampling.under_bound_but_for_tokens_across(bound, w, d, d, tokens, tokens, n, 0.05) == under, tokens
    assert sampling.under_bound_but_for_tokens_across(bound, 0.09, 0.09, 0.08, 0, 0, n, 0.05)  # spread sampled
    assert not sampling.under_bound_but_for_tokens_across(bound, 0.09, 0.09, 0.086, 0, 0, n, 0.05)
    assert sampling.under_bound_but_for_tokens_across(bound, 0.08, 0.09, 0.09, 0, 0, n, 0.05)  # under is under
    w = np.sqrt(d**2 + 4.0 * 12 * 0.3 / n)
    assert not sampling.under_bound_but_for_tokens_across(bound, w, d, d, 12, 12, n, 0.05)
    assert sampling.under_bound_but_for_tokens_across(bound, w, d, d, 40, 12, n, 0.05)  # 26 one way, 14 the other
