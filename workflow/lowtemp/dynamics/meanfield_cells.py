"""The Lagrangian cells of the one-dimensional mean-field reference (``meanfield``) and the density on them.

The Lagrangian coordinate ϑ (θ on the circle, the polar angle on S²) is cut into cells [ϑ_k, ϑ_{k+1}] of fixed
mass m_k (``initial_masses``: ρ0's mass of each cell); a cell's measure is its arc length or area
(``cell_measure``), and the density on it is its linear reconstruction (per unit angle on the circle, per unit
area on S²; ``density_slopes``), which says where inside a cell a mass fraction lies (``mass_fraction``,
``unit_position``). Cells that stretch are split with the density unchanged (``split_cells``). No numba.
Derivation: docs/mean_field.md, "The Lagrangian discretisation".
"""

from __future__ import annotations

import math

import numpy as np

from ..model import measures
from .meanfield_quadrature import scaled_bessel
from .reduction import Reduction


def cell_measure(red: Reduction, edges: np.ndarray) -> np.ndarray:
    """Arc length (circle) or area (S²) of every cell, from its edges; accurate for tiny cells."""
    if red.geometry == "circle":
        return np.diff(edges, axis=-1)
    # area 2π(cos θ_k − cos θ_{k+1}) = 4π sin(mid) sin(half-width)
    lo, hi = edges[..., :-1], edges[..., 1:]
    return 4.0 * np.pi * np.sin(0.5 * (lo + hi)) * np.sin(0.5 * (hi - lo))


def stable_cos_difference(lo, hi):
    """cos lo − cos hi = 2 sin((lo + hi)/2) sin((hi − lo)/2), exact for tiny cells."""
    return 2.0 * np.sin(0.5 * (lo + hi)) * np.sin(0.5 * (hi - lo))


# ---------------------------------------------------------------------------------------------
# Initial cells: masses from ρ0 (the edges, uniform or graded towards E1⊥: ``reduction``).


def _log_density0(red: Reduction, measure: str, params: dict, theta: np.ndarray) -> np.ndarray:
    """log of ρ0's density at the Lagrangian angles (per unit angle on the circle, per area on S²)."""
    if measure == "uniform":
        total = 2 * np.pi if red.geometry == "circle" else 4 * np.pi
        return np.full(theta.shape, -math.log(total))
    kappas = measures.check_kappas(params["kappas"])
    weights = measures.check_weights(params.get("weights"), kappas.size)
    means = np.asarray(params["means"], dtype=float)
    means = means / np.linalg.norm(means, axis=1, keepdims=True)
    parts = []
    for kappa, w, mean in zip(kappas, weights, means):
        if red.geometry == "circle":
            cosine = np.cos(theta - math.atan2(mean[1], mean[0]))
            # vMF on S¹: e^{κ cos}/(2π I_0(κ)) = e^{κ(cos − 1)}/(2π e^{−κ}I_0(κ))
            log_norm = math.log(2 * np.pi) + math.log(scaled_bessel(kappa)[0])
        else:
            cosine = np.cos(theta) * float(mean @ red.frame[:, 0])
            # vMF on S²: κ e^{κ cos}/(4π sinh κ) = κ e^{κ(cos − 1)}/(2π(1 − e^{−2κ}))
            # (κ = 0: the uniform law, 1/(4π))
            log_norm = (
                math.log(2 * np.pi) + math.log(-math.expm1(-2 * kappa)) - math.log(kappa)
                if kappa > 0
                else math.log(4 * np.pi)
            )
        parts.append(math.log(w) + kappa * (cosine - 1.0) - log_norm)
    return np.logaddexp.reduce(np.stack(parts), axis=0)


def initial_masses(red: Reduction, edges: np.ndarray, measure: str, params: dict) -> np.ndarray:
    """ρ0's mass of every cell, by Gauss–Legendre on sub-intervals (relative accuracy as the field's)."""
    kappa = max(measures.check_kappas(params["kappas"]).max(), 0.0) if measure == "vmf_mixture" else 0.0
    nodes, weights = np.polynomial.legendre.leggauss(12)
    masses = np.zeros(edges.size - 1)
    width = np.diff(edges)
    n_sub = np.maximum(1, np.ceil((kappa + 1.0) * width / 2.0)).astype(int)
    for s_count in np.unique(n_sub):
        cells = np.nonzero(n_sub == s_count)[0]
        h = width[cells] / s_count
        for s in range(s_count):
            mid = edges[cells] + (s + 0.5) * h
            theta = mid[:, None] + 0.5 * h[:, None] * nodes[None, :]
            f = np.exp(_log_density0(red, measure, params, theta))
            if red.geometry == "axisymmetric":
                f = f * 2 * np.pi * np.sin(theta)
            masses[cells] += 0.5 * h * (f @ weights)
    return masses


# ---------------------------------------------------------------------------------------------
# The density inside a cell: its linear reconstruction.


def density_slopes(red: Reduction, edges: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """The limited slope s_k ∈ [−1, 1] of every cell's linear density reconstruction, ρ ∝ 1 + s_k(2v − 1).

    v ∈ [0, 1] is the position inside the cell, linear in θ on the circle and in cos θ on S² (where the
    area element is d cos θ dφ), so the reconstruction is linear in the variable the cell's mass is uniform
    in. The slope is the monotonized-central limited difference of the neighbours' mean densities (per unit
    of that variable), clipped so that the density stays ≥ 0 on the cell; 0 at an extremum and at the poles.
    The cells' masses are unchanged (the reconstruction has the cell's mean): it only says where inside a
    cell a mass fraction lies (``MeanFieldSolution.push_forward``), to second order where the density is smooth,
    instead of the first order of a constant density.
    """
    edges = np.asarray(edges, dtype=float)
    masses = np.asarray(masses, dtype=float)
    if masses.shape != (edges.size - 1,) or not np.all(masses >= 0):
        raise ValueError(
            f"mean-field reference: need one mass ≥ 0 per cell ({edges.size - 1} cells), got shape "
            f"{masses.shape} with smallest {np.min(masses) if masses.size else float('nan'):.3g}"
        )
    if red.geometry == "circle":
        u_lo, u_hi = edges[:-1], edges[1:]
    else:  # u = −cos θ increases with θ
        u_lo, u_hi = -np.cos(edges[:-1]), -np.cos(edges[1:])
    width = cell_measure(red, edges) / (1.0 if red.geometry == "circle" else 2.0 * np.pi)
    mid = 0.5 * (u_lo + u_hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = masses / width
    if red.geometry == "circle":  # periodic neighbours
        rho_l, rho_r = np.roll(rho, 1), np.roll(rho, -1)
        mid_l, mid_r = np.roll(mid, 1), np.roll(mid, -1)
        mid_l[0] -= 2 * np.pi
        mid_r[-1] += 2 * np.pi
    else:
        rho_l, rho_r = np.concatenate([rho[:1], rho[:-1]]), np.concatenate([rho[1:], rho[-1:]])
        mid_l, mid_r = np.concatenate([mid[:1] - 1, mid[:-1]]), np.concatenate([mid[1:], mid[-1:] + 1])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        left = (rho - rho_l) / (mid - mid_l)
        right = (rho_r - rho) / (mid_r - mid)
        central = (rho_r - rho_l) / (mid_r - mid_l)
        same = np.sign(left) == np.sign(right)
        slope = np.where(
            same, np.sign(central) * np.minimum(np.abs(central), 2 * np.minimum(np.abs(left), np.abs(right))), 0.0
        )
        s = slope * 0.5 * (u_hi - u_lo) / rho
    s = np.where(np.isfinite(s), s, 0.0)
    if red.geometry != "circle":
        s[[0, -1]] = 0.0
    return np.clip(s, -1.0, 1.0)


def mass_fraction(v, s):
    """The mass fraction below position v ∈ [0, 1] of a cell whose density is ∝ 1 + s(2v − 1)."""
    return v * (1.0 + s * (v - 1.0))


def unit_position(F, s):
    """The inverse of ``mass_fraction``: the position v of mass fraction F, written without cancellation."""
    F = np.asarray(F, dtype=float)
    root = (1.0 - s) + np.sqrt(np.maximum((1.0 - s) ** 2 + 4.0 * s * F, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(F > 0, 2.0 * F / root, 0.0)  # root = 0 only at F = 0 with s = 1


# ---------------------------------------------------------------------------------------------
# Splitting cells that stretch.


def split_cells(
    red: Reduction,
    edges: np.ndarray,
    masses: np.ndarray,
    widest: float,
    lagrangian: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
):
    """Cut every cell wider than ``widest`` (radians) into equal-angle pieces no wider than it.

    A piece's mass is what the cell's linear density reconstruction (``density_slopes``, the density the
    softmax integrals and ``push_forward`` use) puts on it, and its Lagrangian fractions are that
    reconstruction's mass fractions at its ends, so every initial cell's mass is kept (a constant density per
    cell would move mass by O(slope) at every split); the slopes are recomputed from the new neighbours later.
    With ``lagrangian`` = (owner, fraction_lo, fraction_hi) per cell (``MeanFieldSolution``), the pieces' are
    returned too:
    (edges, masses[, (owner, fraction_lo, fraction_hi)]).
    """
    if lagrangian is None:
        lagrangian = (np.arange(masses.size), np.zeros(masses.size), np.ones(masses.size))
        with_lagrangian = False
    else:
        with_lagrangian = True
    owner, f_lo, f_hi = lagrangian
    width = np.diff(edges)
    pieces = np.maximum(1, np.ceil(width / widest - 1e-12)).astype(int)
    if np.all(pieces == 1):
        return (edges, masses, lagrangian) if with_lagrangian else (edges, masses)
    slopes = density_slopes(red, edges, masses)
    new_edges, new_masses = [edges[:1]], []
    new_owner, new_lo, new_hi = [], [], []
    for k in range(masses.size):
        if pieces[k] == 1:
            new_edges.append(edges[k + 1 : k + 2])
            new_masses.append(masses[k : k + 1])
            new_owner.append(owner[k : k + 1])
            new_lo.append(f_lo[k : k + 1])
            new_hi.append(f_hi[k : k + 1])
            continue
        cut = edges[k] + (edges[k + 1] - edges[k]) * np.arange(1, pieces[k] + 1) / pieces[k]
        cut[-1] = edges[k + 1]
        if red.geometry == "circle":  # the position in the cell, linear in θ (circle) or cos θ (S²)
            v = (cut - edges[k]) / (edges[k + 1] - edges[k])
        else:
            v = stable_cos_difference(edges[k], cut) / stable_cos_difference(edges[k], edges[k + 1])
        v[-1] = 1.0
        share = np.diff(np.concatenate([[0.0], mass_fraction(v, slopes[k])]))
        bounds = f_lo[k] + (f_hi[k] - f_lo[k]) * np.concatenate([[0.0], np.cumsum(share)])
        bounds[-1] = f_hi[k]
        new_edges.append(cut)
        new_masses.append(masses[k] * share)
        new_owner.append(np.full(pieces[k], owner[k]))
        new_lo.append(bounds[:-1])
        new_hi.append(bounds[1:])
    out_edges, out_masses = np.concatenate(new_edges), np.concatenate(new_masses)
    if not with_lagrangian:
        return out_edges, out_masses
    return out_edges, out_masses, (np.concatenate(new_owner), np.concatenate(new_lo), np.concatenate(new_hi))
