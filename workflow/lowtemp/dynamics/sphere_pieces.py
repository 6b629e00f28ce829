"""The pieces of one triangle in the S² softmax (``sphere_softmax``): a kept triangle whose exponent κ⟨b̂, y⟩ + ℓ
varies by more than the (loosened) variation is cut, recursively, until it varies by at most that on a piece, and a
piece whose bound lies below the query's L − depth is skipped (``triangle_sums``); the lower bound of log Z that
follows a triangle's pieces towards the kernel's centre (``descended_lower``); the running sums.

How a piece is cut depends on what varies on it (``_split``). Where the kernel does (a triangle wider than the
kernel, whose peak may lie inside it) it is halved into four chord quarters. Where ℓ does more than the kernel (a
triangle in a contracted cluster: its edges far shorter than the kernel's width, ℓ varying by tens of e-folds
across it, linearly) it is bisected at the midpoint of its edge of largest ℓ difference, while that edge is at
least half as long as the piece's longest (the halves stay round): a variation V then takes about V/variation
pieces, not (V/variation)².

A piece is a sub-triangle of the triangle's chord triangle: its corners (off the sphere, in the chord plane) and ℓ
at them, linear, in one row of 13 numbers (corners, ℓ, bits: log₂ of the triangle's area over the piece's — a
quarter adds 2, a half 1); its points are projected radially, as the triangle's are, so the pieces of a triangle
tile its spherical triangle once. Derivation: docs/sphere_mean_field.md ("The softmax in log space").
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .sphere_levels import MAX_HALVINGS
from .sphere_mesh import RULE_BARY, RULE_WEIGHTS

#: the largest variation a minor triangle or piece is loosened to (``loosened``): four times the default variation.
#: A cap of four times *any* variation cost twice the nodes at variation 1.5 for no accuracy (the coarse-mesh test
#: at β = 1000: 24 733 against 11 261 nodes per query, the same errors to three digits)
LOOSEST_VARIATION = 12.0
LOG2 = math.log(2.0)


@njit(cache=True, inline="always")
def loosened(variation, below):
    """The variation allowed on a triangle or piece whose share of Z is at most e^{−below}: the rule's relative
    error grows like the sixth power of the variation, so ``variation``·e^{below/6} keeps its absolute error below
    that of a dominant one; at most LOOSEST_VARIATION, never less than ``variation``."""
    if below <= 0.0:
        return variation
    return max(variation, min(LOOSEST_VARIATION, variation * math.exp(below / 6.0)))


@njit(cache=True, inline="always")
def _log_area_distance(a, q, c):
    """log(flat area × distance of the chord plane from the origin) = log(|n·a|/2), n = (q − a) × (c − a), for the
    chord triangle of the vertices a, q, c, each a tuple (x, y, z) (scalars, so an inlined call adds no reference
    counting to the loops)."""
    ax, ay, az = a
    qx, qy, qz = q
    cx, cy, cz = c
    e1x, e1y, e1z = qx - ax, qy - ay, qz - az
    e2x, e2y, e2z = cx - ax, cy - ay, cz - az
    nx = e1y * e2z - e1z * e2y
    ny = e1z * e2x - e1x * e2z
    nz = e1x * e2y - e1y * e2x
    return math.log(0.5 * abs(nx * ax + ny * ay + nz * az))


@njit(cache=True, inline="always")
def _add(s, w, dx, dy, dz):
    """The ten running sums (S0, S1, S2 about b̂) plus one node of weight w at y − b̂ = (dx, dy, dz)."""
    return (
        s[0] + w, s[1] + w * dx, s[2] + w * dy, s[3] + w * dz, s[4] + w * dx * dx, s[5] + w * dx * dy,
        s[6] + w * dx * dz, s[7] + w * dy * dy, s[8] + w * dy * dz, s[9] + w * dz * dz,
    )  # fmt: skip


@njit(cache=True, inline="always")
def _scaled(s, c):
    return (c * s[0], c * s[1], c * s[2], c * s[3], c * s[4], c * s[5], c * s[6], c * s[7], c * s[8], c * s[9])


#: the smallest piece, in bits (log₂ of the triangle's area over the piece's): a quarter MAX_HALVINGS halvings deep
MAX_BITS = 2 * MAX_HALVINGS
#: rows of the piece stack a depth-first sub-division needs: a quartering spends 2 bits and leaves 3 pieces waiting,
#: a bisection 1 and 1, so at most 1.5 waiting per bit, and the one taken
PIECE_STACK = 3 * MAX_HALVINGS + 1


@njit(cache=True, inline="always")
def _piece_bounds(p, ell, bhat, kappa, cos_r):
    """Bounds of κ(⟨b̂, y⟩ − 1) + ℓ over one piece (a sub-triangle of T's chord triangle, corners ``p`` = (x0, y0,
    z0, x1, …, z2), ℓ ``ell`` at them, projected radially): (largest, largest − smallest). The projection lies within
    an angle ρ of its centroid's, sin ρ ≤ R/cos r_T (R: the piece's largest centroid-to-corner distance; every chord
    point of T lies at least cos r_T from the origin), so ⟨b̂, y⟩ lies between cos(min(θ_c + ρ, π)) and
    cos(max(θ_c − ρ, 0)) there; ℓ, linear, is extreme at the corners."""
    gx, gy, gz = (p[0] + p[3] + p[6]) / 3.0, (p[1] + p[4] + p[7]) / 3.0, (p[2] + p[5] + p[8]) / 3.0
    far = max(
        (p[0] - gx) ** 2 + (p[1] - gy) ** 2 + (p[2] - gz) ** 2,
        (p[3] - gx) ** 2 + (p[4] - gy) ** 2 + (p[5] - gz) ** 2,
        (p[6] - gx) ** 2 + (p[7] - gy) ** 2 + (p[8] - gz) ** 2,
    )
    sin_rho = min(1.0, math.sqrt(far) / cos_r)
    cos_rho = math.sqrt(1.0 - sin_rho * sin_rho)
    g = math.sqrt(gx * gx + gy * gy + gz * gz)
    bx, by, bz = bhat
    c = (gx * bx + gy * by + gz * bz) / g
    sx, sy, sz = gy * bz - gz * by, gz * bx - gx * bz, gx * by - gy * bx
    sin_c = math.sqrt(sx * sx + sy * sy + sz * sz) / g  # |b̂ × ŷ_c|: sin θ_c without cancellation
    top = 1.0 if c >= cos_rho else c * cos_rho + sin_c * sin_rho
    # cos(min(θ_c + ρ, π)): −1 where the piece may reach b̂'s antipode (θ_c + ρ ≥ π, i.e. −c ≥ cos ρ)
    bottom = -1.0 if (sin_rho >= 1.0 or -c >= cos_rho) else max(-1.0, c * cos_rho - sin_c * sin_rho)
    ell_top = max(ell[0], ell[1], ell[2])
    return kappa * (top - 1.0) + ell_top, kappa * (top - bottom) + ell_top - min(ell[0], ell[1], ell[2])


@njit(cache=True, inline="always")
def _piece_sums(s, p, ell, kernel, log_geom):
    """s plus the 7-point rule on one piece (corners ``p``, ℓ ``ell`` at them as in ``_piece_bounds``) against
    e^{−κ|y − b̂|²/2} (``kernel`` = (b̂x, b̂y, b̂z, κ/2, the piece's share of T's area))."""
    bx, by, bz, half, scale = kernel
    for q in range(7):
        l0, l1, l2 = RULE_BARY[q, 0], RULE_BARY[q, 1], RULE_BARY[q, 2]
        px = l0 * p[0] + l1 * p[3] + l2 * p[6]
        py = l0 * p[1] + l1 * p[4] + l2 * p[7]
        pz = l0 * p[2] + l1 * p[5] + l2 * p[8]
        rinv = 1.0 / math.sqrt(px * px + py * py + pz * pz)
        dx, dy, dz = px * rinv - bx, py * rinv - by, pz * rinv - bz
        expo = -half * (dx * dx + dy * dy + dz * dz) + l0 * ell[0] + l1 * ell[1] + l2 * ell[2] + log_geom
        s = _add(s, scale * RULE_WEIGHTS[q] * math.exp(expo) * rinv * rinv * rinv, dx, dy, dz)
    return s


#: a piece on which ℓ varies by more than the allowed variation δ_P while the kernel's part of its bound is at most
#: δ_P·KERNEL_FLAT takes the exp-linear rule (``_exp_linear_sums``) instead of being cut: for a kernel ramp of K
#: over the piece the 2-point Gauss rule errs about K⁴e^K/4 320, 2.4·10⁻⁵ at δ = 3 and 1.2·10⁻⁶ at δ = 1.5, where
#: the 7-point rule errs up to 1.9·10⁻⁴ and 2.9·10⁻⁶ on an exponent varying linearly by δ
#: (tests/dynamics/test_sphere_softmax.py; docs/sphere_mean_field.md, "Adaptive rule")
KERNEL_FLAT = 1.0 / 6.0
#: ... and the kernel's bend on it (``_kernel_bend``: how far it may lie from its affine interpolant) at most
#: KERNEL_BEND·δ_P²: near the kernel's centre the kernel is a bump, not a ramp, and the 2 × 2 rule errs about
#: 7·10⁻³ × (its depth)² there, where the 7-point rule on pieces varying by δ errs 1.5·10⁻⁶ (δ = 1.5) and 9·10⁻⁵
#: (δ = 3): a bend of 0.002δ² keeps it below both
KERNEL_BEND = 0.002
#: the Legendre nodes of the 2-point Gauss rule on [0, 1] (weights ½ each)
_LEGENDRE2 = (0.5 - 0.5 / math.sqrt(3.0), 0.5 + 0.5 / math.sqrt(3.0))
#: below this e-fold range the moments of e^{−Eu} on [0, 1] come from their Taylor series (20 terms: 1/20! < 10⁻¹⁸)
_SERIES_RANGE = 1.0


@njit(cache=True, inline="always")
def _decay_moments(e):
    """K_k = ∫₀¹ u^k e^{−e·u} du, k = 0 … 4 (e ≥ 0): by the series Σ_j (−e)^j / (j!(k + j + 1)) below
    ``_SERIES_RANGE``, else upwards, K_k = (k K_{k−1} − e^{−e})/e (each step multiplies a rounding error by
    k/e ≤ 4; near e = 1 the difference k K_{k−1} − e^{−e} cancels mildly: 2.3·10⁻¹⁵ absolute at most over
    e = 1 … 6 against k!·P(k + 1, e)/e^{k+1}, P the regularised incomplete gamma function)."""
    if e < _SERIES_RANGE:
        k0 = k1 = k2 = k3 = k4 = 0.0
        term = 1.0
        for j in range(20):
            k0 += term / (j + 1)
            k1 += term / (j + 2)
            k2 += term / (j + 3)
            k3 += term / (j + 4)
            k4 += term / (j + 5)
            term *= -e / (j + 1)
        return k0, k1, k2, k3, k4
    tail = math.exp(-e)
    k0 = -math.expm1(-e) / e
    k1 = (k0 - tail) / e
    k2 = (2.0 * k1 - tail) / e
    k3 = (3.0 * k2 - tail) / e
    return k0, k1, k2, k3, (4.0 * k3 - tail) / e


@njit(cache=True, inline="always")
def _gauss2(m0, m1, m2, m3):
    """The 2-point Gauss rule of a positive weight on [0, 1] from its moments m0 … m3: (node, node, weight, weight).
    About the weight's mean the orthogonal quadratic is y² − (c₃/c₂)y − c₂ (c₂, c₃ its central moments), whose roots
    are the nodes; the weights put the mean at the mean."""
    mean = m1 / m0
    c2 = max(m2 / m0 - mean * mean, 1e-300)
    c3 = m3 / m0 - 3.0 * mean * m2 / m0 + 2.0 * mean * mean * mean
    r = c3 / c2
    root = math.sqrt(r * r + 4.0 * c2)
    hi, lo = 0.5 * (r + root), 0.5 * (r - root)
    return mean + lo, mean + hi, m0 * hi / root, -m0 * lo / root


@njit(cache=True, inline="always")
def _fan_sums(s, apex, base, ell, kernel, log_weight):
    """s plus the sub-triangle (``apex`` and the two ends of ``base``, chord points (x, y, z)) on whose base ℓ is
    constant: ``ell`` = (ℓ at the apex, ℓ on the base). With y = apex + a·(base point at b − apex), a, b ∈ [0, 1],
    the chord area is 2a da db (of the sub-triangle's) and ℓ = ℓ_apex + a(ℓ_base − ℓ_apex): e^{ℓ} is integrated
    exactly along a by the Gauss rule of its weight (a·e^{ℓ}, measured from the end where ℓ is largest), the rest
    (kernel, Jacobian, moments) by the 2 × 2 rule. ``kernel`` = (b̂x, b̂y, b̂z, κ/2); ``log_weight`` the log of the
    sub-triangle's share of T's area plus T's solid-angle factor less the shift."""
    bx, by, bz, half = kernel
    drop = ell[1] - ell[0]
    k0, k1, k2, k3, k4 = _decay_moments(abs(drop))
    if drop <= 0.0:  # ℓ largest at the apex: the weight a·e^{−|drop|·a}
        a0, a1, w0, w1 = _gauss2(k1, k2, k3, k4)
        top = ell[0]
    else:  # largest on the base: with u = 1 − a, the weight (1 − u)e^{−drop·u}
        u0, u1, w0, w1 = _gauss2(k0 - k1, k1 - k2, k2 - k3, k3 - k4)
        a0, a1, top = 1.0 - u0, 1.0 - u1, ell[1]
    for along, w in ((a0, w0), (a1, w1)):
        for across in _LEGENDRE2:
            px = apex[0] + along * (base[0][0] + across * (base[1][0] - base[0][0]) - apex[0])
            py = apex[1] + along * (base[0][1] + across * (base[1][1] - base[0][1]) - apex[1])
            pz = apex[2] + along * (base[0][2] + across * (base[1][2] - base[0][2]) - apex[2])
            rinv = 1.0 / math.sqrt(px * px + py * py + pz * pz)
            dx, dy, dz = px * rinv - bx, py * rinv - by, pz * rinv - bz
            expo = -half * (dx * dx + dy * dy + dz * dz) + top + log_weight
            s = _add(s, w * math.exp(expo) * rinv * rinv * rinv, dx, dy, dz)  # 2·w·½: area 2a, Legendre ½
    return s


@njit(cache=True, inline="always")
def _kernel_bend(p, half, cos_r):
    """A bound of |K − K₁| on a piece (chord corners ``p``; ``half`` = κ/2), K = κ(⟨b̂, y⟩ − 1) at the radial
    projection y of a chord point and K₁ its affine interpolant from the corners: K₁ interpolates K at the corners,
    so the gap is at most ½·max‖∇²K‖·h² (h the longest edge), and on the chord plane (|p| ≥ cos r_T, directions
    within sin r_T of the tangent plane) ‖∇²⟨b̂, p/|p|⟩‖ ≤ (1 + 2 sin r_T + 3 sin² r_T)/cos² r_T."""
    h2 = 0.0
    for a, b in ((0, 1), (1, 2), (2, 0)):
        dx, dy, dz = p[3 * a] - p[3 * b], p[3 * a + 1] - p[3 * b + 1], p[3 * a + 2] - p[3 * b + 2]
        h2 = max(h2, dx * dx + dy * dy + dz * dz)
    sin_r = math.sqrt(max(0.0, 1.0 - cos_r * cos_r))
    return half * h2 * (1.0 + 2.0 * sin_r + 3.0 * sin_r * sin_r) / (cos_r * cos_r)


@njit(cache=True, inline="always")
def _exp_linear_sums(s, p, ell, kernel, log_geom):
    """s plus one piece (as in ``_piece_sums``) by the exp-linear rule: the level line of ℓ through the corner of
    middle ℓ cuts it into two fans (``_fan_sums``), each with its base on that line, whose shares of the piece's area
    are f and 1 − f, f = (ℓ_mid − ℓ_min)/(ℓ_max − ℓ_min) (ℓ's range is at least 5/6 of the allowed variation where
    it is called). Exact for e^{ℓ} times any polynomial of degree 3 in each fan's coordinates; 8 nodes however far ℓ
    varies."""
    bx, by, bz, half, scale = kernel
    lo, mid, hi = 0, 1, 2  # the corners in increasing ℓ
    if ell[lo] > ell[mid]:
        lo, mid = mid, lo
    if ell[mid] > ell[hi]:
        mid, hi = hi, mid
    if ell[lo] > ell[mid]:
        lo, mid = mid, lo
    corner = ((p[0], p[1], p[2]), (p[3], p[4], p[5]), (p[6], p[7], p[8]))
    f = (ell[mid] - ell[lo]) / (ell[hi] - ell[lo])
    a, b, m = corner[lo], corner[hi], corner[mid]
    cut = (a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2]))
    log_scale = log_geom + math.log(scale)
    if f > 0.0:
        s = _fan_sums(s, a, (m, cut), (ell[lo], ell[mid]), (bx, by, bz, half), log_scale + math.log(f))
    if f < 1.0:
        s = _fan_sums(s, b, (m, cut), (ell[hi], ell[mid]), (bx, by, bz, half), log_scale + math.log1p(-f))
    return s


@njit(cache=True, inline="always")
def _push_piece(stack, top, corners, bits):
    """Row ``top`` of ``stack`` := the piece of ``corners`` (three (x, y, z, ℓ)) and ``bits``; the new top."""
    for v in range(3):
        for r in range(3):
            stack[top, 3 * v + r] = corners[v][r]
        stack[top, 9 + v] = corners[v][3]
    stack[top, 12] = bits
    return top + 1


@njit(cache=True, inline="always")
def _push_quarters(stack, top, row):
    """Push the four quarters of the piece ``row`` (corners, ℓ, bits: 13 numbers) by its
    edges' midpoints; the new top."""
    x0, y0, z0, x1, y1, z1, x2, y2, z2 = row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8]
    e0, e1, e2, h = row[9], row[10], row[11], row[12] + 2.0
    m01 = (0.5 * (x0 + x1), 0.5 * (y0 + y1), 0.5 * (z0 + z1), 0.5 * (e0 + e1))
    m12 = (0.5 * (x1 + x2), 0.5 * (y1 + y2), 0.5 * (z1 + z2), 0.5 * (e1 + e2))
    m20 = (0.5 * (x2 + x0), 0.5 * (y2 + y0), 0.5 * (z2 + z0), 0.5 * (e2 + e0))
    quarters = (
        ((x0, y0, z0, e0), m01, m20),
        (m01, (x1, y1, z1, e1), m12),
        (m20, m12, (x2, y2, z2, e2)),
        (m12, m20, m01),
    )
    for corners in quarters:
        top = _push_piece(stack, top, corners, h)
    return top


@njit(cache=True, inline="always")
def _push_halves(stack, top, row, k):
    """Push the two halves of the piece ``row`` cut at the midpoint of the edge opposite its corner k, each with the
    piece's orientation; the new top."""
    a, b = (k + 1) % 3, (k + 2) % 3
    keep = (row[3 * k], row[3 * k + 1], row[3 * k + 2], row[9 + k])
    first = (row[3 * a], row[3 * a + 1], row[3 * a + 2], row[9 + a])
    last = (row[3 * b], row[3 * b + 1], row[3 * b + 2], row[9 + b])
    f0, f1, f2, f3 = first
    l0, l1, l2, l3 = last
    mid = (0.5 * (f0 + l0), 0.5 * (f1 + l1), 0.5 * (f2 + l2), 0.5 * (f3 + l3))
    bits = row[12] + 1.0
    top = _push_piece(stack, top, (keep, first, mid), bits)  # (k, a, m) and (k, m, b): the piece's orientation
    return _push_piece(stack, top, (keep, mid, last), bits)


@njit(cache=True, inline="always")
def _edge(row, v):
    """(squared length, |ℓ difference|) of the edge of the piece ``row`` opposite its corner v."""
    a, b = (v + 1) % 3, (v + 2) % 3
    dx, dy, dz = row[3 * a] - row[3 * b], row[3 * a + 1] - row[3 * b + 1], row[3 * a + 2] - row[3 * b + 2]
    return dx * dx + dy * dy + dz * dz, abs(row[9 + a] - row[9 + b])


@njit(cache=True, inline="always")
def _split(stack, top, row, kernel_spread, allowed):
    """Cut the piece ``row`` in two (``_push_halves``) across its edge of largest ℓ difference where the kernel's
    part of its variation bound (``kernel_spread``) is within half the ``allowed`` variation, so that what is left to
    cut is ℓ, linear, and that edge is at least half as long as the piece's longest (the halves stay about as round
    as the piece: a long thin half would keep the piece's cap radius, and with it the kernel's part and the
    curvature of the radial projection along it), or where only one bit is left; into quarters
    (``_push_quarters``), which shrink everything, otherwise. The new top."""
    l0, g0 = _edge(row, 0)
    l1, g1 = _edge(row, 1)
    l2, g2 = _edge(row, 2)
    k, gap, length = 0, g0, l0
    if g1 > gap:
        k, gap, length = 1, g1, l1
    if g2 > gap:
        k, gap, length = 2, g2, l2
    round_enough = 4.0 * length >= max(l0, l1, l2)
    if row[12] + 2.0 > MAX_BITS or (kernel_spread <= 0.5 * allowed and round_enough):
        return _push_halves(stack, top, row, k)
    return _push_quarters(stack, top, row)


@njit(cache=True, inline="always")
def _load_triangle(stack, row, t, mesh):
    """Row ``row`` of ``stack`` := triangle t as a piece (its chord corners, ℓ at them, no halving)."""
    points, log_density, triangles, _ = mesh
    for v in range(3):
        for r in range(3):
            stack[row, 3 * v + r] = points[triangles[t, v], r]
        stack[row, 9 + v] = log_density[triangles[t, v]]
    stack[row, 12] = 0.0


@njit(cache=True)
def descended_lower(t, query, mesh, tables, stack):
    """A lower bound of log Z from triangle t (the query's kernel ``query`` = (b̂x, b̂y, b̂z, κ)): the largest over
    the pieces met following, from T, the quarter whose centroid has the largest exponent κ⟨b̂, ŷ⟩ + ℓ (towards the
    integrand's peak) down MAX_HALVINGS halvings, of
    log(the piece's solid angle, at least its chord area × the plane's distance) + log c_T + the smallest
    κ(⟨b̂, y⟩ − 1) + ℓ on it (``_piece_bounds``). On a triangle much wider than the kernel the cap's own bound
    lies hundreds of e-folds below Z; the piece around the kernel's centre lies a few below."""
    bx, by, bz, kappa = query
    points, _, triangles, _ = mesh
    i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
    log_geom = _log_area_distance(
        (points[i, 0], points[i, 1], points[i, 2]),
        (points[j, 0], points[j, 1], points[j, 2]),
        (points[k, 0], points[k, 1], points[k, 2]),
    )
    log_geom += tables.log_c[t]
    cos_r = tables.cos_r[t]
    _load_triangle(stack, 0, t, mesh)
    best = -np.inf
    for h in range(MAX_HALVINGS + 1):
        row = stack[0]
        p = (row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8])
        upper, spread = _piece_bounds(p, (row[9], row[10], row[11]), (bx, by, bz), kappa, cos_r)
        best = max(best, log_geom - 2.0 * LOG2 * h + upper - spread)
        if h == MAX_HALVINGS:
            break
        _push_quarters(stack, 1, row)
        pick, top = 1, -np.inf
        for r in range(1, 5):  # the quarter whose centroid has the largest exponent: towards the integrand's peak
            q = stack[r]
            gx, gy, gz = q[0] + q[3] + q[6], q[1] + q[4] + q[7], q[2] + q[5] + q[8]
            centroid = kappa * (gx * bx + gy * by + gz * bz) / math.sqrt(gx * gx + gy * gy + gz * gz)
            centroid += (q[9] + q[10] + q[11]) / 3.0
            if centroid > top:
                pick, top = r, centroid
        for r in range(13):
            stack[0, r] = stack[pick, r]
    return best


@njit(cache=True, inline="always")
def triangle_sums(s, t, kernel, mesh, tables, stack):
    """The ten running sums ``s`` (``_add``) plus triangle t against the kernel e^{−κ|y − b̂|²/2 − shift}
    (``kernel`` = (b̂x, b̂y, b̂z, κ/2, shift, L, depth, variation, tolerance, spread): L the query's proven lower
    bound of log Z, ``spread`` a bound of the exponent's variation over T from its cap), and how many nodes that
    took. Within ``tolerance`` (``variation`` loosened for T), T takes the evaluation's static nodes (one piece);
    otherwise its chord triangle is cut into quarters or halves (``_split``; ``stack``: PIECE_STACK rows of 13)
    until the exponent κ⟨b̂, y⟩ + ℓ varies by at most ``variation`` on a piece (``_piece_bounds``), loosened as a
    triangle is by the piece's own bound, and the 7-point rule integrates it. A piece whose bound, as if it held all
    of T's area, stays below L − depth is skipped: the skipped pieces of one triangle, disjoint, hold less than
    e^{L − depth} together. A piece still too varied at MAX_BITS (a quarter MAX_HALVINGS halvings deep) is
    integrated and flagged: nodes returned negative (``MeshTooCoarse``)."""
    bx, by, bz, half, shift, lower, depth, variation, tolerance, spread = kernel
    if spread <= tolerance:
        node_y, node_lw = tables.node_y, tables.node_lw
        for n in range(7 * t, 7 * t + 7):
            dx, dy, dz = node_y[n, 0] - bx, node_y[n, 1] - by, node_y[n, 2] - bz
            s = _add(s, math.exp(node_lw[n] - half * (dx * dx + dy * dy + dz * dz) - shift), dx, dy, dz)
        return s, 7
    points, log_density, triangles, _ = mesh
    i, j, k = triangles[t, 0], triangles[t, 1], triangles[t, 2]
    a = (points[i, 0], points[i, 1], points[i, 2])
    q = (points[j, 0], points[j, 1], points[j, 2])
    c = (points[k, 0], points[k, 1], points[k, 2])
    log_geom = _log_area_distance(a, q, c) + tables.log_c[t] - shift
    cos_r = tables.cos_r[t]
    # the largest 1/|p|³ on T is 1/cos³ r_T: a piece is skipped where κ(⟨b̂, y⟩ − 1) + ℓ stays below this on it
    cutoff = lower - depth - shift - log_geom + 3.0 * math.log(cos_r)
    _load_triangle(stack, 0, t, mesh)
    top, nodes, coarse = 1, 0, False
    while top:
        top -= 1
        row = stack[top]
        p = (row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8])
        ell = (row[9], row[10], row[11])
        upper, spread = _piece_bounds(p, ell, (bx, by, bz), 2.0 * half, cos_r)
        if upper < cutoff:
            continue
        # the piece's share of Z is at most e^{−below}
        allowed = loosened(variation, depth - (upper - cutoff) + LOG2 * row[12])
        if spread > allowed and row[12] < MAX_BITS:
            kernel_spread = spread - (max(ell[0], ell[1], ell[2]) - min(ell[0], ell[1], ell[2]))
            flat = kernel_spread <= KERNEL_FLAT * allowed
            if flat and _kernel_bend(p, half, cos_r) <= KERNEL_BEND * allowed * allowed:  # ℓ is what varies
                s = _exp_linear_sums(s, p, ell, (bx, by, bz, half, 0.5 ** row[12]), log_geom)
                nodes += 8
                continue
            top = _split(stack, top, row, kernel_spread, allowed)
            continue
        coarse = coarse or spread > allowed
        s = _piece_sums(s, p, ell, (bx, by, bz, half, 0.5 ** row[12]), log_geom)
        nodes += 7
    return s, -nodes if coarse else nodes
