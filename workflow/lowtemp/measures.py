"""Initial measures ρ0 on S^{d-1} with strictly positive smooth densities (SPEC §2.2).

Every sampler returns tokens with layout (replica, token, dim), unit norm to
rounding. Named measures (``sample_initial_tokens``):

* ``uniform``: the normalised surface measure (normalised Gaussians);
* ``vmf_mixture``: a mixture of von Mises–Fisher laws (density ∝ e^{κ⟨μ,x⟩},
  strictly positive and smooth for finite κ), sampled with Wood's algorithm;
* ``projected_gaussian``: x = y/|y| with y ~ N(m, s² I) (positive smooth density
  because the Gaussian charges every ray).

All three have strictly positive Lipschitz densities (Assumption 3).
``assumption_2_moment`` reports the Monte Carlo estimate of ∫|P1 x|^{-p} dρ0.
"""

from __future__ import annotations

import numpy as np


def normalise(X: np.ndarray) -> np.ndarray:
    """Rows (last axis) scaled to unit Euclidean norm."""
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


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
    mean = np.asarray(mean, dtype=float)
    mean = mean / np.linalg.norm(mean)
    dim = mean.size
    w = _vmf_cosines(rng, float(kappa), dim, n)
    v = rng.standard_normal((n, dim))
    v -= np.outer(v @ mean, mean)  # uniform direction in the tangent space at μ
    v = normalise(v)
    return w[:, None] * mean + np.sqrt(np.clip(1.0 - w**2, 0.0, None))[:, None] * v


def vmf_mixture(rng: np.random.Generator, replicas: int, tokens: int, dim: int, *,
                kappas, means=None, weights=None) -> np.ndarray:
    """Mixture of vMF laws; ``means`` given (one per κ) or drawn uniformly once (shared by replicas)."""
    kappas = np.atleast_1d(np.asarray(kappas, dtype=float))
    k = kappas.size
    if np.any(kappas < 0) or not np.all(np.isfinite(kappas)):
        raise ValueError(f"vmf_mixture: kappas must be finite and >= 0, got {kappas.tolist()}")
    if means is None:
        means = uniform(rng, 1, k, dim)[0]
    means = np.asarray(means, dtype=float)
    if means.shape != (k, dim):
        raise ValueError(f"vmf_mixture: means must have shape ({k}, {dim}), got {means.shape}")
    if np.any(np.linalg.norm(means, axis=1) == 0):
        raise ValueError("vmf_mixture: a mean direction is the zero vector")
    weights = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, dtype=float)
    if weights.shape != (k,) or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
        raise ValueError(f"vmf_mixture: weights must be {k} non-negative numbers summing to 1")
    labels = rng.choice(k, size=(replicas, tokens), p=weights)
    X = np.empty((replicas, tokens, dim))
    for j in range(k):
        sel = labels == j
        X[sel] = von_mises_fisher(rng, means[j], kappas[j], int(sel.sum()))
    return X


def projected_gaussian(rng: np.random.Generator, replicas: int, tokens: int, dim: int, *,
                       mean, scale: float) -> np.ndarray:
    """x = y/|y|, y ~ N(mean, scale² I)."""
    mean = np.asarray(mean, dtype=float)
    if mean.shape != (dim,):
        raise ValueError(f"projected_gaussian: mean must have length {dim}, got {mean.shape}")
    if not scale > 0:
        raise ValueError(f"projected_gaussian: scale must be > 0, got {scale}")
    return normalise(mean + scale * rng.standard_normal((replicas, tokens, dim)))


MEASURES = {
    "uniform": uniform,
    "vmf_mixture": vmf_mixture,
    "projected_gaussian": projected_gaussian,
}


def sample_initial_tokens(name: str, rng: np.random.Generator, replicas: int, tokens: int,
                          dim: int, **params) -> np.ndarray:
    """Tokens (replica, token, dim) drawn i.i.d. from the named initial measure."""
    try:
        sample = MEASURES[name]
    except KeyError:
        raise ValueError(f"unknown initial measure {name!r}; known: {sorted(MEASURES)}") from None
    for label, n in (("replicas", replicas), ("tokens", tokens), ("dim", dim)):
        if int(n) != n or n < 1:
            raise ValueError(f"{label} must be a positive integer, got {n!r}")
    return sample(rng, int(replicas), int(tokens), int(dim), **params)


def assumption_2_moment(X: np.ndarray, E1: np.ndarray, p: float = 0.5) -> np.ndarray:
    """Per replica, the empirical moment mean_i |P1 x_i|^{-p} (Assumption 2)."""
    norms = np.linalg.norm(X @ E1, axis=-1)
    with np.errstate(divide="ignore"):
        return np.mean(norms ** (-p), axis=-1)
