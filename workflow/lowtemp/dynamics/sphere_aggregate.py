"""Queries of a contracted cluster evaluated as one: the softmax at the group's centre and its derivative in the
query stand for every member, checked at the member where the expansion is worst.

Why: the mesh's vertices crowd into the clusters as they contract (most of a late mesh's vertices lie within 10⁻²
rad of a cluster centre), and each vertex is a query that integrates every triangle it keeps. A query x sees the
softmax measure μ_x(dy) ∝ e^{β⟨Bᵀx, y⟩} ρ(dy); moving x by δ reweights it by e^{β⟨Bᵀδ, y⟩}, so

    m(x_c + δ) = m_c + β C_c Bᵀ δ + O(β²|Bᵀδ|² κ₃),     C(x_c + δ) = C_c + β κ₃[Bᵀδ] + O(β²|Bᵀδ|² κ₄),

with m_c, C_c the mean and covariance at the centre and κ₃, κ₄ the third and fourth cumulants of μ_{x_c}. The
mean's slope βC_cBᵀ is exact from the centre's own pass; the covariance's slope is taken from two probes, the
centre moved by the group's radius along two tangent directions (one-sided differences, so C is first-order
accurate too: the group's members lie on the sphere, within the tangent plane to second order). For a query inside
a cluster μ_x is the cluster itself, of width σ, so κ_k ~ σ^k and the remainders are far below the solver's
tolerances while |δ| ≤ σ; for a query whose softmax is broad they are not, and the check below sends its group to
the exact pass.

Groups: the queries in one cell of a 3-D grid of side ``AGGREGATION_CELL`` (radians at the sphere), when the cell
holds at least ``MIN_GROUP`` of them. Each group's centre (the normalised mean of its members), its two probes and
its check point (the member with the largest |Bᵀδ|, where the leading remainder is largest) are evaluated exactly
with the queries outside every group; a group whose expansion misses the exact velocity at its check point by more
than ``VELOCITY_TOLERANCE`` or the divergence by more than ``DIVERGENCE_TOLERANCE`` is evaluated exactly, member by
member. The velocity and divergence are then P_x V m(x) and tr D − xᵀDx − 2x·Vm(x), D = βV C(x) Bᵀ, as for any
query (``sphere_softmax.velocity_divergence``).
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from . import sphere_sources
from .sphere_mesh import SphereMesh, log_normalisers
from .sphere_softmax import Softmax, softmax, velocity_divergence

#: side of the grid cells that group queries (radians at the sphere)
AGGREGATION_CELL = 0.02
#: fewest queries in a cell for it to be a group: a group costs four exact queries (centre, two probes, check)
MIN_GROUP = 12
#: largest miss of the expanded velocity at a group's check point (radians per unit time): over a horizon of 30 it
#: adds at most 3e-7 rad, below the reference solve's absolute tolerance (1e-5)
VELOCITY_TOLERANCE = 1e-8
#: largest miss of the expanded divergence at a group's check point (e-folds per unit time): an order below the
#: softmax quadrature's own error on the divergence (1e-5 of its scale against central differences,
#: tests/dynamics/test_sphere_softmax.py)
DIVERGENCE_TOLERANCE = 1e-6


def query_cells(queries: np.ndarray, cell: float) -> tuple[np.ndarray, np.ndarray]:
    """(group per query, −1 outside every group; number of groups): queries sharing a grid cell of side ``cell``,
    the cells holding at least ``MIN_GROUP`` of them."""
    keys = np.floor(queries / cell).astype(np.int64)
    _, cell_of, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    cell_of = cell_of.ravel()
    big = counts >= MIN_GROUP
    number = np.cumsum(big) - 1
    group = np.where(big[cell_of], number[cell_of], -1)
    return group, int(big.sum())


def _take(sm: Softmax, index) -> Softmax:
    """The softmax of the queries ``index`` (an index array or a slice)."""
    return Softmax(*(np.asarray(getattr(sm, f.name))[index] for f in fields(Softmax)))


def _tangent_basis(centre: np.ndarray) -> np.ndarray:
    """(group, 2, 3): two orthonormal tangent vectors at each centre."""
    helper = np.where(np.abs(centre[:, :1]) < 0.9, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]])
    e1 = np.cross(centre, helper)
    e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
    return np.stack([e1, np.cross(centre, e1)], axis=1)


def _expanded(x, centre, sm_centre: Softmax, cov_slope, B: np.ndarray, beta: float) -> Softmax:
    """Mean and covariance at x from the centre's (module docstring): m_c + βC_cBᵀ(x − x_c), and C_c plus its
    slope along the two tangent directions (``cov_slope``: (query, 2, 3, 3) per unit of each component of the
    tangent basis, with the basis (query, 2, 3) applied by the caller: ``cov_slope`` = (slope, basis))."""
    delta = x - centre
    slope, basis = cov_slope
    along = np.einsum("qkj,qj->qk", basis, delta)  # δ's tangent components
    cov = sm_centre.cov + np.einsum("qk,qkij->qij", along, slope)
    mean = sm_centre.mean + beta * np.einsum("qij,qj->qi", sm_centre.cov, delta @ B)
    log_z = sm_centre.log_z + beta * np.einsum("qi,qi->q", delta @ B, sm_centre.mean)
    zeros = np.zeros(x.shape[0], dtype=np.int64)
    return Softmax(log_z, mean, cov, zeros, zeros, zeros)


def _group_points(queries: np.ndarray, group: np.ndarray, members: np.ndarray, n_groups: int, B: np.ndarray):
    """(centres (group, 3), check point (group,): a member's index, tangent basis (group, 2, 3), the two probes
    [(group, 3)] * 2) of every group: the centre is the normalised mean of its members."""
    centre = np.zeros((n_groups, 3))
    np.add.at(centre, group[members], queries[members])
    centre /= np.linalg.norm(centre, axis=1, keepdims=True)
    offset = queries[members] - centre[group[members]]
    # the check point: the member with the largest |Bᵀδ|; the probes: the centre moved by the group's radius along
    # each tangent direction, for the covariance's slope
    order = np.lexsort((-np.linalg.norm(offset @ B, axis=1), group[members]))
    check = members[order[np.searchsorted(group[members][order], np.arange(n_groups))]]
    radius = np.zeros(n_groups)
    np.maximum.at(radius, group[members], np.linalg.norm(offset, axis=1))
    radius = np.maximum(radius, 1e-12)
    basis = _tangent_basis(centre)
    probes = [centre + radius[:, None] * basis[:, k] for k in range(2)]
    probes = [p / np.linalg.norm(p, axis=1, keepdims=True) for p in probes]
    return centre, check, basis, probes


def _covariance_slope(probe_cov: np.ndarray, centre_cov: np.ndarray, centre, basis, probes) -> np.ndarray:
    """(group, 2, 3, 3): C's slope along each tangent direction of every group, one-sided from the probes'
    covariances (``probe_cov``: every group's first probe, then every group's second) and the centres'."""
    n_groups = centre.shape[0]
    # slope of C per unit of each tangent component: the probe's tangent component is e_k·(p_k − x_c)
    return np.stack(
        [
            (probe_cov[k * n_groups : (k + 1) * n_groups] - centre_cov)
            / np.einsum("qj,qj->q", basis[:, k], probes[k] - centre)[:, None, None]
            for k in range(2)
        ],
        axis=1,
    )


def exact_softmax(mesh: SphereMesh, B, beta: float, variation: float, log_c: np.ndarray, sources: bool):
    """The exact pass of one field evaluation as a function of (queries, depth): ``sphere_softmax.softmax``, or
    with ``sources`` the pass with triangles aggregated as sources, its tree built once here for every call, where
    at least ``sphere_sources.WORTHWHILE`` of the triangles lie in nodes tight enough to aggregate (below that the
    tree's pass costs as much as the exact one or more: docs/sphere_mean_field.md)."""
    built = sphere_sources.sources(mesh, B, beta, variation, log_c) if sources else None
    if built is None or built.tree.tight_share < sphere_sources.WORTHWHILE:
        return lambda queries, depth: softmax(mesh, B, beta, queries, variation, depth, log_c)
    return lambda queries, depth: sphere_sources.tree_softmax(
        mesh, B, beta, queries, variation, depth, log_c, built=built
    )


def aggregated_field(
    mesh: SphereMesh,
    B: np.ndarray,
    V: np.ndarray,
    beta: float,
    queries: np.ndarray,
    variation: float,
    depth: float,
    cell: float = AGGREGATION_CELL,
    sources: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Velocity (query, 3) and divergence (query,) at every query, groups of crowded queries expanded about their
    centres where their check point allows it (module docstring); counts: groups, expanded (queries whose values
    come from an expansion), refused (groups evaluated exactly after their check), exact (queries evaluated
    exactly: those alone, the refused groups' members, and four per group). ``sources``: the exact passes by
    ``exact_softmax``'s choice (triangles aggregated as sources where the mesh is crowded enough)."""
    queries = np.ascontiguousarray(queries, dtype=float)
    log_c = log_normalisers(mesh)  # shared by both exact passes
    exact_pass = exact_softmax(mesh, B, beta, variation, log_c, sources)
    group, n_groups = query_cells(queries, cell)
    alone, members = np.flatnonzero(group < 0), np.flatnonzero(group >= 0)
    centre, check, basis, probes = _group_points(queries, group, members, n_groups, B)
    exact = np.concatenate([queries[alone], centre, *probes, queries[check]])
    sm = exact_pass(exact, depth)
    v_exact, div_exact = velocity_divergence(exact, sm, B, V, beta)
    a, g0, g2 = alone.size, alone.size + n_groups, alone.size + 3 * n_groups
    at_centre = _take(sm, slice(a, g0))
    slope = _covariance_slope(sm.cov[g0:g2], at_centre.cov, centre, basis, probes)
    v_check, div_check = v_exact[g2:], div_exact[g2:]
    guess = _expanded(queries[check], centre, at_centre, (slope, basis), B, beta)
    v_guess, div_guess = velocity_divergence(queries[check], guess, B, V, beta)
    good = (np.linalg.norm(v_guess - v_check, axis=1) <= VELOCITY_TOLERANCE) & (
        np.abs(div_guess - div_check) <= DIVERGENCE_TOLERANCE
    )
    v, div = np.empty_like(queries), np.empty(queries.shape[0])
    v[alone], div[alone] = v_exact[:a], div_exact[:a]
    trusted = members[good[group[members]]]
    g = group[trusted]
    sm_members = _expanded(queries[trusted], centre[g], _take(at_centre, g), (slope[g], basis[g]), B, beta)
    v[trusted], div[trusted] = velocity_divergence(queries[trusted], sm_members, B, V, beta)
    refused = members[~good[group[members]]]
    if refused.size:
        sm_refused = exact_pass(queries[refused], depth)
        v[refused], div[refused] = velocity_divergence(queries[refused], sm_refused, B, V, beta)
    v[check], div[check] = v_check, div_check  # computed exactly anyway
    counts = {
        "groups": n_groups,
        "expanded": int(trusted.size - np.count_nonzero(good)),
        "refused": int(np.count_nonzero(~good)),
        "exact": int(alone.size + refused.size + 4 * n_groups),
    }
    return v, div, counts
