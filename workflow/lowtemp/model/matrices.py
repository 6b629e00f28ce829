"""Attention matrices K, Q, V; B = QᵀK, A = VBᵀ; Assumption 1.

``check_assumption_1`` is the single place that decides whether a triple
(K, Q, V) satisfies Assumption 1: B invertible (and not ill-conditioned),
A = VBᵀ symmetric, and a spectral gap γ = μ1 − μ2 > 0. A violation raises
``AssumptionViolation`` whose message names the violated condition.

Families (``generate_matrices``):

* ``spectral``: A = U diag(μ) Uᵀ with a random orthogonal frame U and the
  prescribed spectrum μ; B with singular values log-spaced between σmin and
  σmax (prescribed conditioning), either symmetric positive definite,
  B = W diag(σ) Wᵀ (``B_frames="symmetric"``, the default: xᵀBx > 0, a token
  attends most to tokens near itself), or B = W diag(σ) Zᵀ with independent
  random frames (``B_frames="independent"``); V = A B^{-T}; Q a random
  orthogonal matrix and K = Q B, so QᵀK = B.
* ``end_phase``: A = U diag(μ) Uᵀ and a symmetric V = W diag(ν) Wᵀ whose
  leading eigenvector makes the angle ``angle_V`` (degrees, default 90:
  orthogonal) with E1(A) (the other columns of W are random), B = A V^{-1}
  so that VBᵀ = A. The finite-temperature end phase (Conjecture 1) then moves
  tokens away from E1(A).
* ``explicit``: K, Q, V given as nested lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: default largest admissible condition number of B
MAX_CONDITION_B = 1e8
#: relative tolerance for the symmetry of A = VBᵀ
SYMMETRY_RTOL = 1e-10
#: relative tolerance under which eigenvalues count as equal (eigenspace grouping)
EIGENVALUE_RTOL = 1e-8


class AssumptionViolation(ValueError):
    """The matrices violate Assumption 1; the message names the condition."""


def random_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """Haar-distributed orthogonal d×d matrix (QR of a Gaussian, signs fixed)."""
    g = rng.standard_normal((d, d))
    q, r = np.linalg.qr(g)
    return q * np.sign(np.diag(r))


def _orthonormal_basis(vectors: np.ndarray, rtol: float = 1e-8) -> np.ndarray:
    """Orthonormal basis (columns) of the real span of the columns of ``vectors``."""
    u, s, _ = np.linalg.svd(vectors, full_matrices=False)
    rank = int(np.sum(s > rtol * max(s.max(initial=0.0), 1e-300)))
    return u[:, :rank]


def _descending_eigh(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (descending) and orthonormal eigenvectors (columns, same order) of the symmetric part of A."""
    mu, U = np.linalg.eigh(0.5 * (A + A.T))
    order = np.argsort(mu)[::-1]
    return mu[order], U[:, order]


def _levels(mu: np.ndarray, rtol: float) -> list[tuple[int, int]]:
    """Index ranges [start, stop) of the eigenvalue levels of descending ``mu``: an eigenvalue within
    rtol·max(1, max|μ|) of a level's largest member joins that level (the one grouping of the package)."""
    tol = rtol * max(1.0, float(np.abs(mu).max()))
    levels, start = [], 0
    for i in range(1, mu.size + 1):
        if i == mu.size or mu[i] < mu[start] - tol:
            levels.append((start, i))
            start = i
    return levels


def eigenlevels(A: np.ndarray, rtol: float = EIGENVALUE_RTOL) -> list[tuple[float, np.ndarray]]:
    """Distinct eigenvalues μ_1 > μ_2 > … of symmetric A (each level's mean) with orthonormal bases of their
    eigenspaces."""
    mu, U = _descending_eigh(A)
    return [(float(np.mean(mu[a:b])), U[:, a:b]) for a, b in _levels(mu, rtol)]


def leading_eigenspace_symmetric(A: np.ndarray, rtol: float = EIGENVALUE_RTOL):
    """Eigenvalues μ (descending) and an orthonormal basis of E1, the eigenspace of μ1 (the first level)."""
    mu, U = _descending_eigh(A)
    _, stop = _levels(mu, rtol)[0]
    return mu, U[:, :stop]


def leading_eigenspace_general(M: np.ndarray, by: str, rtol: float = EIGENVALUE_RTOL):
    """Real orthonormal basis of the leading (generalised real) eigenspace of M.

    ``by="real"``: eigenvalues of largest real part; ``by="modulus"``: of largest
    modulus. A complex pair contributes the real 2-plane spanned by the real and
    imaginary parts of its eigenvector.
    """
    lam, W = np.linalg.eig(M)
    key = lam.real if by == "real" else np.abs(lam)
    if by not in ("real", "modulus"):
        raise ValueError(f"by must be 'real' or 'modulus', got {by!r}")
    tol = rtol * max(1.0, float(np.abs(lam).max()))
    chosen = key >= key.max() - tol
    vecs = W[:, chosen]
    return lam[chosen], _orthonormal_basis(np.concatenate([vecs.real, vecs.imag], axis=1))


@dataclass(frozen=True)
class AttentionMatrices:
    """K, Q, V with the derived quantities of Assumption 1."""

    K: np.ndarray
    Q: np.ndarray
    V: np.ndarray
    B: np.ndarray  # QᵀK
    A: np.ndarray  # VBᵀ, symmetrised
    mu: np.ndarray  # eigenvalues of A, descending
    E1: np.ndarray  # (d, k) orthonormal basis of the leading eigenspace of A
    gamma: float  # μ1 − μ2
    sigma_min: float  # σmin(B)
    sigma_max: float  # σmax(B)
    V_eigenvalues: np.ndarray = field(repr=False)  # complex
    E1_V_real: np.ndarray = field(repr=False)  # leading eigenspace of V by real part
    E1_V_modulus: np.ndarray = field(repr=False)  # ... by modulus

    @property
    def dim(self) -> int:
        return self.B.shape[0]

    @property
    def rate_bounds(self) -> tuple[float, float]:
        """[γ/σmax(B), γ/σmin(B)]: the range of the zero-temperature rate."""
        return self.gamma / self.sigma_max, self.gamma / self.sigma_min

    @property
    def P1(self) -> np.ndarray:
        """Orthogonal projector onto E1(A)."""
        return self.E1 @ self.E1.T


def check_assumption_1(
    K, Q, V, *, max_condition: float = MAX_CONDITION_B, symmetry_rtol: float = SYMMETRY_RTOL
) -> AttentionMatrices:
    """Validate Assumption 1 and return the derived quantities, or raise AssumptionViolation."""
    mats = {}
    for name, M in (("K", K), ("Q", Q), ("V", V)):
        M = np.asarray(M, dtype=float)
        if M.ndim != 2 or M.shape[0] != M.shape[1]:
            raise AssumptionViolation(f"matrix {name} must be square, got shape {M.shape}")
        if not np.all(np.isfinite(M)):
            raise AssumptionViolation(f"matrix {name} has NaN or Inf entries")
        mats[name] = M
    d = mats["K"].shape[0]
    if any(M.shape != (d, d) for M in mats.values()):
        shapes = {k: v.shape for k, v in mats.items()}
        raise AssumptionViolation(f"K, Q, V must have the same shape (d, d), got {shapes}")
    if d < 2:
        raise AssumptionViolation(f"dimension d must be at least 2 (tokens on S^(d-1)), got {d}")
    K, Q, V = mats["K"], mats["Q"], mats["V"]
    B = Q.T @ K
    sv = np.linalg.svd(B, compute_uv=False)
    sigma_max, sigma_min = float(sv[0]), float(sv[-1])
    if sigma_min <= 0.0 or sigma_max / sigma_min > max_condition:
        cond = np.inf if sigma_min <= 0.0 else sigma_max / sigma_min
        raise AssumptionViolation(
            f"Assumption 1 violated: B = QᵀK is singular or ill-conditioned "
            f"(σmin = {sigma_min:.3e}, σmax = {sigma_max:.3e}, condition number {cond:.3e} "
            f"> {max_condition:.1e})"
        )
    A_raw = V @ B.T
    asym = float(np.linalg.norm(A_raw - A_raw.T))
    scale = max(float(np.linalg.norm(A_raw)), 1e-300)
    if asym > symmetry_rtol * scale:
        raise AssumptionViolation(
            f"Assumption 1 violated: A = VBᵀ is not symmetric (‖A − Aᵀ‖/‖A‖ = {asym / scale:.3e} > {symmetry_rtol:.1e})"
        )
    A = 0.5 * (A_raw + A_raw.T)
    mu, E1 = leading_eigenspace_symmetric(A)
    if E1.shape[1] == d:
        raise AssumptionViolation(
            f"Assumption 1 violated: A = VBᵀ has no spectral gap (all eigenvalues equal "
            f"{mu[0]:.6g} within {EIGENVALUE_RTOL:.0e}·max(1, |μ|), the tolerance of the eigenspace grouping)"
        )
    gamma = float(mu[0] - mu[E1.shape[1]])
    lam_V = np.linalg.eigvals(V)
    return AttentionMatrices(
        K=K,
        Q=Q,
        V=V,
        B=B,
        A=A,
        mu=mu,
        E1=E1,
        gamma=gamma,
        sigma_min=sigma_min,
        sigma_max=sigma_max,
        V_eigenvalues=lam_V[np.argsort(-lam_V.real)],
        E1_V_real=leading_eigenspace_general(V, "real")[1],
        E1_V_modulus=leading_eigenspace_general(V, "modulus")[1],
    )


def _log_spaced(lo: float, hi: float, d: int) -> np.ndarray:
    return np.exp(np.linspace(np.log(hi), np.log(lo), d))


def spectral_family(
    d: int, rng: np.random.Generator, *, eigenvalues, sigma_min: float, sigma_max: float, B_frames: str = "symmetric"
):
    """K, Q, V with A = VBᵀ of spectrum ``eigenvalues`` and σ(B) in [sigma_min, sigma_max]."""
    if B_frames not in ("symmetric", "independent"):
        raise ValueError(f"B_frames must be 'symmetric' or 'independent', got {B_frames!r}")
    mu = np.asarray(eigenvalues, dtype=float)
    if mu.shape != (d,):
        raise ValueError(f"eigenvalues must have length d = {d}, got {mu.size}")
    if not 0 < sigma_min <= sigma_max:
        raise ValueError(f"need 0 < sigma_min <= sigma_max, got {sigma_min}, {sigma_max}")
    U = random_orthogonal(d, rng)
    A = U @ np.diag(mu) @ U.T
    W = random_orthogonal(d, rng)
    Z = W if B_frames == "symmetric" else random_orthogonal(d, rng)
    B = W @ np.diag(_log_spaced(sigma_min, sigma_max, d)) @ Z.T
    V = A @ np.linalg.inv(B.T)
    Q = random_orthogonal(d, rng)
    K = Q @ B
    return K, Q, V


def end_phase_family(
    d: int, rng: np.random.Generator, *, eigenvalues, eigenvalues_V, angle_V: float = 90.0, V_shear: float = 0.0
):
    """K, Q, V with V's leading eigenvector (largest real part) at ``angle_V`` degrees to E1(A).

    V = S diag(ν) S⁻¹ with S = W (I + V_shear·N), W a frame whose first column is
    that eigenvector and N the strictly upper triangular matrix of ones: for
    ``V_shear = 0`` V is symmetric; otherwise it has the same real spectrum ν and
    the same leading eigenvector but is not symmetric (not even normal). ν may
    hold negative values: with, e.g., ν = (1.2, 0.6, −1.5) the eigenvalue of
    largest modulus is negative and V's leading eigenspaces by real part and by
    modulus differ. B = A V^{−T}, so that VBᵀ = A (Assumption 1).
    """
    if not 0.0 <= angle_V <= 90.0:
        raise ValueError(f"angle_V must be in [0, 90] degrees, got {angle_V}")
    if not (np.isfinite(V_shear) and V_shear >= 0):
        raise ValueError(f"V_shear must be a finite number >= 0, got {V_shear}")
    mu = np.asarray(eigenvalues, dtype=float)
    nu = np.asarray(eigenvalues_V, dtype=float)
    if mu.shape != (d,) or nu.shape != (d,):
        raise ValueError(f"eigenvalues and eigenvalues_V must have length d = {d}")
    if np.any(mu == 0) or np.any(nu == 0):
        raise ValueError("eigenvalues and eigenvalues_V must be non-zero so that B = A V^-1 is invertible")
    mu = np.sort(mu)[::-1]
    nu = np.sort(nu)[::-1]
    U = random_orthogonal(d, rng)
    A = U @ np.diag(mu) @ U.T
    # V's frame: its first column is cos θ u1 + sin θ w, w a random unit vector
    # orthogonal to u1 = U[:, 0]; the remaining columns complete a random frame.
    g = rng.standard_normal((d, d))
    w = g[:, 0] - U[:, 0] * (U[:, 0] @ g[:, 0])
    theta = np.deg2rad(angle_V)
    g[:, 0] = np.cos(theta) * U[:, 0] + np.sin(theta) * w / np.linalg.norm(w)
    W, r = np.linalg.qr(g)
    W = W * np.sign(np.diag(r))
    if V_shear == 0:
        V = W @ np.diag(nu) @ W.T
        B = A @ np.linalg.inv(V)  # V symmetric: V^{-T} = V^{-1} (kept in this form: same numbers as before)
    else:
        S = W @ (np.eye(d) + V_shear * np.triu(np.ones((d, d)), 1))
        V = S @ np.diag(nu) @ np.linalg.inv(S)
        B = A @ np.linalg.inv(V).T
    Q = random_orthogonal(d, rng)
    K = Q @ B
    return K, Q, V


def explicit_family(d: int, rng: np.random.Generator, *, K, Q, V):
    """K, Q, V given explicitly (nested lists)."""
    return (np.asarray(K, dtype=float), np.asarray(Q, dtype=float), np.asarray(V, dtype=float))


FAMILIES = {
    "spectral": spectral_family,
    "end_phase": end_phase_family,
    "explicit": explicit_family,
}


def generate_matrices(family: str, d: int, rng: np.random.Generator, **params) -> AttentionMatrices:
    """Matrices of the named family, checked against Assumption 1."""
    try:
        make = FAMILIES[family]
    except KeyError:
        raise ValueError(f"unknown matrix family {family!r}; known: {sorted(FAMILIES)}") from None
    max_condition = params.pop("max_condition_B", MAX_CONDITION_B)
    K, Q, V = make(d, rng, **params)
    return check_assumption_1(K, Q, V, max_condition=max_condition)
