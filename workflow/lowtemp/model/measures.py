"""Initial measures ρ0 on S^{d-1} with strictly positive smooth densities.

Every sampler returns tokens with layout (replica, token, dim), unit norm to
rounding. Named measures (``sample_initial_tokens``):

* ``uniform``: the normalised surface measure (normalised Gaussians);
* ``vmf_mixture``: a mixture of von Mises–Fisher laws (density ∝ e^{κ⟨μ,x⟩},
  strictly positive and smooth for finite κ), sampled with Wood's algorithm;
* ``projected_gaussian``: x = y/|y| with y ~ N(m, s² I) (positive smooth density
  because the Gaussian charges every ray).

All three have strictly positive Lipschitz densities (Assumption 3). Two more
measures are there to explore what happens *outside* the theorem, and the
config must say so (``positive_density: false``):

* ``cap``: uniform on the spherical cap {x : ⟨x, c⟩ ≥ cos θ} (zero density
  outside it);
* ``atoms``: i.i.d. draws from finitely many given points (no density at all;
  Assumption 2 fails when an atom lies on E1⊥).

``assumption_2_moment`` reports the Monte Carlo estimate of ∫|P1 x|^{-p} dρ0.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

#: largest concentration κ the vMF sampler takes. Wood's algorithm in float64 resolves the cosine
#: w = ⟨μ, x⟩ only while 1 − w ≈ (d − 1)/(2κ) stays well above the spacing of floats near 1, and its
#: rejection test κw − c carries a rounding error of about κ·ε: at 1e12 they are a few thousand
#: spacings and 2e-4, and the mean of 1 − w is still right to 1% (``tests/model/test_seeding_measures.py``);
#: by 1e15 it is 10% off in d = 2, at 1e16 the sampler takes log(0) (d = 2, 3), beyond 1e154 κ²
#: overflows. A vMF law that concentrated (angular spread 1e-6) is an atom in all but name.
KAPPA_MAX = 1e12

#: how far mixture weights may sum from 1: the tolerance of numpy's ``Generator.choice`` (√ε of
#: float64, about 1.5e-8), which draws the components with them, so weights this check passes are
#: never refused there, mid-job
WEIGHTS_SUM_TOLERANCE = float(np.sqrt(np.finfo(np.float64).eps))


#: below this norm the squares inside |x| lose digits (they fall below the smallest normal float): rescale first
_SAFE_NORM = float(np.sqrt(np.finfo(float).tiny)) * 2**26


def normalise(X: np.ndarray) -> np.ndarray:
    """Rows (last axis) scaled to unit Euclidean norm. A row whose norm would underflow or overflow in its squares
    (a vector of norm 1e-200, a Gaussian of scale 1e-300 about 0) is first divided by its largest entry, so it
    comes out a finite unit vector too; other rows are divided by their norm as computed (bit for bit as ever).
    A zero row stays a ZeroDivision (NaN): it has no direction."""
    X = np.asarray(X, dtype=float)
    with np.errstate(over="ignore", under="ignore"):
        norm = np.linalg.norm(X, axis=-1, keepdims=True)
    unsafe = ~((norm > _SAFE_NORM) & np.isfinite(norm))
    if np.any(unsafe):
        big = np.max(np.abs(X), axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
            scaled = np.divide(X, big, out=np.zeros_like(X), where=big > 0)
            rescued = scaled / np.linalg.norm(scaled, axis=-1, keepdims=True)
            return np.where(unsafe, rescued, X / norm)
    return X / norm


def directions(vectors, what: str) -> np.ndarray:
    """The unit vectors of ``vectors``' rows (``normalise``: a norm at the float floor, 1e-320, still gives its
    direction); ValueError naming ``what`` for a non-finite entry or a zero row (no direction on the sphere). The
    samplers and the config check both call it, so they cannot disagree on what is a direction."""
    V = np.asarray(vectors, dtype=float)
    if not np.all(np.isfinite(V)):
        raise ValueError(f"{what} must be finite, got {V.tolist()}")
    if np.any(~np.any(V != 0, axis=-1)):
        raise ValueError(f"{what}: a vector is zero (it has no direction on the sphere)")
    return normalise(V)


def uniform(rng: np.random.Generator, replicas: int, tokens: int, dim: int) -> np.ndarray:
    """Uniform measure on S^{dim-1}."""
    return normalise(rng.standard_normal((replicas, tokens, dim)))


def _vmf_cosines(rng: np.random.Generator, kappa: float, dim: int, n: int) -> np.ndarray:
    """w = ⟨μ, x⟩ for n samples of vMF(μ, κ) on S^{dim-1} (Wood 1994 rejection)."""
    if kappa == 0.0:
        return 2.0 * rng.beta((dim - 1) / 2, (dim - 1) / 2, size=n) - 1.0
    m = dim - 1
    b = m / (2.0 * kappa + np.sqrt(4.0 * kappa**2 + m**2))  # = (-2κ + sqrt(4κ² + m²)) / m, stable
    x0 = (1.0 - b) / (1.0 + b)
    c = kappa * x0 + m * np.log(1.0 - x0**2)
    out = np.empty(n)
    todo = np.arange(n)
    while todo.size:
        z = rng.beta(m / 2, m / 2, size=todo.size)
        w = (1.0 - (1.0 + b) * z) / (1.0 - (1.0 - b) * z)
        u = rng.uniform(size=todo.size)
        ok = kappa * w + m * np.log(1.0 - x0 * w) - c >= np.log(u)
        out[todo[ok]] = w[ok]
        todo = todo[~ok]
    return out


def von_mises_fisher(rng: np.random.Generator, mean: np.ndarray, kappa: float, n: int) -> np.ndarray:
    """n samples (n, dim) of the von Mises–Fisher law with unit mean direction and κ ≥ 0."""
    mean = normalise(np.asarray(mean, dtype=float))
    dim = mean.size
    w = _vmf_cosines(rng, float(kappa), dim, n)
    v = rng.standard_normal((n, dim))
    v -= np.outer(v @ mean, mean)  # uniform direction in the tangent space at μ
    v = normalise(v)
    return w[:, None] * mean + np.sqrt(np.clip(1.0 - w**2, 0.0, None))[:, None] * v


#: smallest angular spread scale/|mean| of a projected Gaussian: below it every token is the same point to about 8
#: digits, a collapsed measure whose distances (W2 to Π♯ρ0 among them) carry no digits worth certifying
PROJECTED_GAUSSIAN_MIN_SPREAD = 1e-8


def check_projected_gaussian(mean, scale: float) -> None:
    """ValueError unless scale > 0 and scale ≥ ``PROJECTED_GAUSSIAN_MIN_SPREAD``·|mean| (the tokens spread)."""
    mean = np.asarray(mean, dtype=float)
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    spread = float(scale) / float(np.max(np.abs(mean))) if np.any(mean) else math.inf
    if spread < PROJECTED_GAUSSIAN_MIN_SPREAD:
        raise ValueError(
            f"scale {scale:g} against a mean of size {float(np.max(np.abs(mean))):g} puts every token within "
            f"{spread:.2g} rad of one point (below {PROJECTED_GAUSSIAN_MIN_SPREAD:g}): a collapsed measure; raise scale"
        )


def check_kappas(kappas) -> np.ndarray:
    """The concentrations as a float array; ValueError unless each is in [0, ``KAPPA_MAX``] (so finite)."""
    kappas = np.atleast_1d(np.asarray(kappas, dtype=float))
    if not np.all((kappas >= 0) & (kappas <= KAPPA_MAX)):  # NaN fails both comparisons
        raise ValueError(
            f"kappas must be finite numbers in [0, {KAPPA_MAX:g}] (the vMF sampler's range), got {kappas.tolist()}"
        )
    return kappas


def check_weights(weights, k: int) -> np.ndarray:
    """Mixture weights of k components (equal if None); ValueError unless k numbers ≥ 0 summing to 1.

    "Sum to 1" is ``WEIGHTS_SUM_TOLERANCE``, the tolerance of the draw itself; the config check
    calls this too, so both refuse exactly the same weights.
    """
    if weights is None:
        return np.full(k, 1.0 / k)
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (k,) or not np.all(weights >= 0):
        raise ValueError(f"weights must be {k} non-negative numbers summing to 1, got {weights.tolist()}")
    total = math.fsum(weights)
    if not abs(total - 1.0) <= WEIGHTS_SUM_TOLERANCE:
        raise ValueError(f"weights must sum to 1 (to {WEIGHTS_SUM_TOLERANCE:.1e}), got {total!r}")
    return weights


def vmf_mixture(
    rng: np.random.Generator, replicas: int, tokens: int, dim: int, *, kappas, means=None, weights=None
) -> np.ndarray:
    """Mixture of vMF laws; ``means`` given (one per κ) or drawn uniformly once (shared by replicas)."""
    try:
        kappas = check_kappas(kappas)
    except ValueError as exc:
        raise ValueError(f"vmf_mixture: {exc}") from None
    k = kappas.size
    if means is None:
        means = uniform(rng, 1, k, dim)[0]
    means = np.asarray(means, dtype=float)
    if means.shape != (k, dim):
        raise ValueError(f"vmf_mixture: means must have shape ({k}, {dim}), got {means.shape}")
    directions(means, "vmf_mixture: means")
    try:
        weights = check_weights(weights, k)
    except ValueError as exc:
        raise ValueError(f"vmf_mixture: {exc}") from None
    labels = rng.choice(k, size=(replicas, tokens), p=weights)
    X = np.empty((replicas, tokens, dim))
    for j in range(k):
        sel = labels == j
        X[sel] = von_mises_fisher(rng, means[j], kappas[j], int(sel.sum()))
    return X


def projected_gaussian(
    rng: np.random.Generator, replicas: int, tokens: int, dim: int, *, mean, scale: float
) -> np.ndarray:
    """x = y/|y|, y ~ N(mean, scale² I)."""
    mean = np.asarray(mean, dtype=float)
    if mean.shape != (dim,):
        raise ValueError(f"projected_gaussian: mean must have length {dim}, got {mean.shape}")
    try:
        check_projected_gaussian(mean, scale)
    except ValueError as exc:
        raise ValueError(f"projected_gaussian: {exc}") from None
    return normalise(mean + scale * rng.standard_normal((replicas, tokens, dim)))


def cap(rng: np.random.Generator, replicas: int, tokens: int, dim: int, *, center, angle: float) -> np.ndarray:
    """Uniform on the cap {⟨x, c⟩ ≥ cos θ}, θ = ``angle`` in degrees (180: the whole sphere).

    The cosine t = ⟨x, c⟩ of the uniform law has density ∝ (1 − t²)^{(d−3)/2};
    (1 − t)/2 is Beta((d−1)/2, (d−1)/2), sampled here by its inverse CDF
    restricted to the cap; the direction orthogonal to c is uniform.
    """
    c = np.asarray(center, dtype=float)
    if c.shape != (dim,):
        raise ValueError(f"cap: center must be a vector of length {dim}, got {c.tolist()}")
    directions(c, "cap: center")  # refuses a zero or non-finite centre
    norm = np.linalg.norm(c)
    # as ever for an ordinary centre (bit for bit); rescued through ``normalise`` at the float floor
    c = c / norm if norm > _SAFE_NORM and np.isfinite(norm) else normalise(c)
    if not 0 < angle <= 180:
        raise ValueError(f"cap: angle must be in (0, 180] degrees, got {angle}")
    a = 0.5 * (dim - 1)
    u_max = 0.5 * (1.0 - np.cos(np.radians(angle)))
    u = special.betaincinv(a, a, rng.uniform(size=(replicas, tokens)) * special.betainc(a, a, u_max))
    t = 1.0 - 2.0 * u
    w = rng.standard_normal((replicas, tokens, dim))
    w -= (w @ c)[..., None] * c
    w = normalise(w)
    return normalise(t[..., None] * c + np.sqrt(np.clip(1.0 - t**2, 0.0, None))[..., None] * w)


def atoms(rng: np.random.Generator, replicas: int, tokens: int, dim: int, *, points, weights=None) -> np.ndarray:
    """Tokens drawn i.i.d. from the given points (normalised), with optional weights."""
    P = np.asarray(points, dtype=float)
    if P.ndim != 2 or P.shape[1] != dim or P.shape[0] < 1:
        raise ValueError(f"atoms: points must be a list of vectors of length {dim}, got shape {P.shape}")
    unit = directions(P, "atoms: points")
    k = P.shape[0]
    try:
        weights = check_weights(weights, k)
    except ValueError as exc:
        raise ValueError(f"atoms: {exc}") from None
    return unit[rng.choice(k, size=(replicas, tokens), p=weights)]


MEASURES = {
    "uniform": uniform,
    "vmf_mixture": vmf_mixture,
    "projected_gaussian": projected_gaussian,
    "cap": cap,
    "atoms": atoms,
}


def has_positive_density(name: str, params: dict) -> bool:
    """Whether the named measure has a strictly positive density on the whole sphere (Assumption 3)."""
    if name == "cap":
        return float(params["angle"]) >= 180.0
    return name not in ("atoms",)


def atoms_on_E1_complement(points, E1: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    """Indices of the points of an ``atoms`` measure with P1 x = 0 (|P1 x| ≤ tol |x|).

    Each such atom makes ∫|P1 x|^{-p} dρ0 infinite: Assumption 2 fails.
    """
    P = directions(points, "atoms: points")
    return np.flatnonzero(np.linalg.norm(P @ E1, axis=1) <= tol)


def sample_initial_tokens(
    name: str, rng: np.random.Generator, replicas: int, tokens: int, dim: int, **params
) -> np.ndarray:
    """Tokens (replica, token, dim) drawn i.i.d. from the named initial measure."""
    try:
        sample = MEASURES[name]
    except KeyError:
        raise ValueError(f"unknown initial measure {name!r}; known: {sorted(MEASURES)}") from None
    params.pop("positive_density", None)  # a declaration checked by the config validation, not a parameter
    for label, n in (("replicas", replicas), ("tokens", tokens), ("dim", dim)):
        if int(n) != n or n < 1:
            raise ValueError(f"{label} must be a positive integer, got {n!r}")
    return sample(rng, int(replicas), int(tokens), int(dim), **params)


def assumption_2_moment(X: np.ndarray, E1: np.ndarray, p: float = 0.5) -> np.ndarray:
    """Per replica, the empirical moment mean_i |P1 x_i|^{-p} (Assumption 2)."""
    norms = np.linalg.norm(X @ E1, axis=-1)
    with np.errstate(divide="ignore"):
        return np.mean(norms ** (-p), axis=-1)
