"""Mean-field reference solutions of Eq. 2 where a symmetry makes them one-dimensional: the solver and its solution.

Two reductions (derivation, accuracy and measured convergence: docs/mean_field.md):

The reductions themselves (``lowtemp.dynamics.reduction``, no numba, what the config check uses):

* ``circle`` (d = 2, any B and V): a token is an angle θ, x = (cos θ, sin θ).
* ``axisymmetric`` (d = 3): B = b_a e eᵀ + b_p (I − e eᵀ) and V = v_a e eᵀ + v_p (I − e eᵀ)
  for one unit axis e, and ρ0 invariant under rotations about e. The density then
  depends on the polar angle θ = ∠(x, e) alone, and (reflection symmetry through
  every plane containing e) every token keeps its azimuth φ.

Both are solved by the same Lagrangian scheme: the Lagrangian coordinate ϑ (θ on
the circle, the polar angle on S²) is cut into cells [ϑ_k, ϑ_{k+1}] of fixed mass
m_k, the density on each cell is its linear reconstruction (per unit angle on the circle,
per unit area on S²; ``meanfield_cells``), and the cell edges move with the mean-field velocity of that
piecewise-linear density, dϑ_k/dt = v(ϑ_k). Mass is conserved exactly (a cell's
mass never changes), and the velocity is the softmax average of V y over the
cells' linear density reconstruction, integrated over every cell to a relative accuracy
``QUADRATURE_RTOL`` in log space (``meanfield_softmax``, its Gauss–Legendre rules and Bessel functions in
``meanfield_quadrature``).

The initial cells are uniform in angle, or graded towards the points of E1⊥ (the
unstable set of the zero-temperature flow) on request; cells that stretch (the
one straddling the finite-β separatrix between two clusters) are split as they
grow, with the density unchanged (``meanfield_cells.split_cells``), so every cell stays resolved.
This module moves the edges (``solve``, DOP853) and holds the result (``MeanFieldSolution``).

Arrays: ``edges`` has layout (time, edge); tokens (…, token, dim) as everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.integrate import DOP853

from ..model import projection
from . import integrate
from .meanfield_cells import (
    cell_measure,
    density_slopes,
    initial_masses,
    mass_fraction,
    split_cells,
    stable_cos_difference,
    unit_position,
)
from .meanfield_softmax import edge_velocity
from .reduction import RESOLVED_WIDTH, Reduction, check_edges, graded_edges, uniform_edges

#: tolerances of the edges' ODE (angles, so absolute and relative alike)
ODE_RTOL = 1e-10
ODE_ATOL = 1e-12
#: cells are split when wider than this many times the initial ``width`` (checked every ``remesh_every``)
SPLIT_FACTOR = 2.0
#: most remeshing and snapshot stops one solve may take (a horizon or remesh_every out of scale is refused)
MAX_STOPS = 1_000_000


class CellsUnresolved(RuntimeError):
    """A cell has contracted below RESOLVED_WIDTH: the edges' angles cannot carry the solution further."""


@dataclass
class MeanFieldSolution:
    """The Lagrangian cells at ``times``.

    Cells are split as they stretch (``solve``), so their number grows with time. Layout (time, edge)
    for ``edges`` and (time, cell) for ``masses``, ``owner``, ``fraction_lo``, ``fraction_hi``, padded
    after each snapshot's last entry (NaN; owner −1). Every cell lies inside one initial cell (splits only
    subdivide): ``owner`` is its index among ``initial_edges``' cells and [fraction_lo, fraction_hi] the part
    of that initial cell's mass it holds. That pair is the Lagrangian coordinate, kept relative to one
    initial cell so that a cell of mass 1e-30 is located as exactly as a heavy one.
    """

    reduction: Reduction
    beta: float
    times: np.ndarray
    initial_edges: np.ndarray
    edges: np.ndarray
    masses: np.ndarray
    owner: np.ndarray
    fraction_lo: np.ndarray
    fraction_hi: np.ndarray
    evaluations: int = 0
    info: dict = field(default_factory=dict)
    initial_masses: np.ndarray | None = None

    def _cells(self, k: int) -> np.ndarray:
        return self.owner[k] >= 0

    def snapshot(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(edges, masses) of snapshot k, without padding (empty beyond ``info['resolved_until']``)."""
        cells = self._cells(k)
        return self.edges[k][: cells.sum() + 1] if cells.any() else self.edges[k][:0], self.masses[k][cells]

    def density(self, k: int) -> np.ndarray:
        """Density of every cell at snapshot k: per unit angle (circle), per unit area (S²)."""
        edges, masses = self.snapshot(k)
        return masses / cell_measure(self.reduction, edges)

    def distance_to_eigenspace(self, E: np.ndarray) -> np.ndarray:
        """sqrt(∫ |x − Px/|Px||² dρ_t) per snapshot (= 2 − 2|Px| on the sphere, computed without its cancellation:
        ``projection.squared_distance_to_great_sphere``), P the projector onto span(E) (E: (d, k) orthonormal).

        The mean-field counterpart of ``projection.distance_to_eigenspace``: 8-point Gauss–Legendre on every
        cell. On S² the integrand must not depend on the azimuth: E the axis, or the plane orthogonal to it.
        """
        E = np.asarray(E, dtype=float).reshape(self.reduction.frame.shape[0], -1)
        local = self.reduction.frame.T @ E  # E in the reduction's frame
        P = local @ local.T
        if self.reduction.geometry == "axisymmetric" and not (
            np.allclose(P, np.diag([1.0, 0, 0]), atol=1e-9) or np.allclose(P, np.diag([0, 1.0, 1.0]), atol=1e-9)
        ):
            raise ValueError(
                "mean-field reference: on S² the distance is computed to the axis or to the plane orthogonal to it only"
            )
        nodes, weights = np.polynomial.legendre.leggauss(8)
        out = np.empty(self.times.size)
        for k in range(self.times.size):
            edges, masses = self.snapshot(k)
            if masses.size == 0:  # beyond what the reference resolved (``solve(truncate=True)``)
                out[k] = np.nan
                continue
            lo, hi = edges[:-1, None], edges[1:, None]
            theta = 0.5 * (lo + hi) + 0.5 * (hi - lo) * nodes
            if self.reduction.geometry == "circle":
                x = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
                dens = np.ones_like(theta)  # density per unit angle is constant on the cell
            else:
                x = np.stack([np.cos(theta), np.sin(theta), np.zeros_like(theta)], axis=-1)
                dens = np.sin(theta)  # area element
            f = projection.squared_distance_to_great_sphere(x, local)
            cell_mean = (f * dens) @ weights / (dens @ weights)
            out[k] = math.sqrt(max(float(masses @ cell_mean), 0.0))
        return out

    def lagrangian_coordinate(self, X0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(initial cell, fraction of its mass before the token) of tokens X0 (…, token, dim) at t = 0."""
        X0 = np.asarray(X0, dtype=float)
        local = X0 @ self.reduction.frame
        edges = self.initial_edges
        if self.reduction.geometry == "circle":
            theta0 = np.arctan2(local[..., 1], local[..., 0])
            theta0 = edges[0] + (theta0 - edges[0]) % (2 * np.pi)
            k = np.clip(np.searchsorted(edges, theta0, side="right") - 1, 0, edges.size - 2)
            unit = (theta0 - edges[k]) / (edges[k + 1] - edges[k])
        else:
            theta0 = np.arccos(np.clip(local[..., 0], -1.0, 1.0))
            k = np.clip(np.searchsorted(edges, theta0, side="right") - 1, 0, edges.size - 2)
            # fraction of the cell's area above the token, written stably
            unit = stable_cos_difference(edges[k], theta0) / stable_cos_difference(edges[k], edges[k + 1])
        slopes = (
            np.zeros(edges.size - 1)
            if self.initial_masses is None
            else density_slopes(self.reduction, edges, self.initial_masses)
        )
        return k, mass_fraction(np.clip(unit, 0.0, 1.0), slopes[k])

    def push_forward(self, X0: np.ndarray) -> np.ndarray:
        """The reference's flow map applied to tokens X0 (…, token, dim) at t = 0: layout (…, time, token, dim).

        A token keeps its Lagrangian coordinate (``lagrangian_coordinate``); at time t it sits in the cell of
        its initial cell that holds its mass fraction, where the cell's linear density reconstruction
        (``density_slopes``: linear in θ on the circle, in cos θ on S²) puts it, azimuth kept. The same
        reconstruction gives the fraction at t = 0, so the map is the identity there. NaN beyond
        ``info['resolved_until']``.
        """
        X0 = np.asarray(X0, dtype=float)
        red = self.reduction
        owner0, phi = self.lagrangian_coordinate(X0)
        local = X0 @ red.frame
        out = np.empty(integrate.trajectory_shape(X0.shape, self.times.size))
        for t in range(self.times.size):
            edges, masses = self.snapshot(t)
            if masses.size == 0:
                out[..., t, :, :] = np.nan
                continue
            cells = self._cells(t)
            owner, lo_f, hi_f = self.owner[t][cells], self.fraction_lo[t][cells], self.fraction_hi[t][cells]
            # cells are ordered by (owner, fraction): search the key owner + fraction, then keep the result among
            # the cells of the token's own initial cell (the key's rounding cannot move it to another owner)
            first = np.searchsorted(owner, owner0, side="left")
            last = np.searchsorted(owner, owner0, side="right") - 1
            k = np.clip(np.searchsorted(owner + lo_f, owner0 + phi, side="right") - 1, first, last)
            frac = np.clip((phi - lo_f[k]) / (hi_f[k] - lo_f[k]), 0.0, 1.0)
            frac = unit_position(frac, density_slopes(red, edges, masses)[k])
            lo, hi = edges[k], edges[k + 1]
            if red.geometry == "circle":
                theta = lo + frac * (hi - lo)
                out[..., t, :, :] = np.stack([np.cos(theta), np.sin(theta)], axis=-1) @ red.frame.T
                continue
            z = np.clip(np.cos(lo) - frac * stable_cos_difference(lo, hi), -1.0, 1.0)
            s = np.sqrt((1.0 - z) * (1.0 + z))
            radial = np.hypot(local[..., 1], local[..., 2])
            with np.errstate(invalid="ignore", divide="ignore"):
                cphi = np.where(radial > 0, local[..., 1] / radial, 1.0)
                sphi = np.where(radial > 0, local[..., 2] / radial, 0.0)
            out[..., t, :, :] = np.stack([z, s * cphi, s * sphi], axis=-1) @ red.frame.T
        return out


def _closed_edges(y: np.ndarray, circle: bool) -> np.ndarray:
    """All edges from the ODE's unknowns: the circle's last edge is its first plus 2π, S²'s ends are the poles."""
    return np.append(y, y[0] + 2 * np.pi) if circle else np.concatenate([[0.0], y, [np.pi]])


@dataclass
class _EdgeODE:
    """The edges' ODE dϑ_k/dt = v(ϑ_k) for the cells' current ``masses`` (set at every stop); callable as DOP853's
    right-hand side, counting its evaluations in ``nfev``. ``t_now``, the start of the current stretch, names where
    a cell contracted below the resolution."""

    red: Reduction
    beta: float
    fast: bool
    masses: np.ndarray | None = None
    t_now: float = 0.0
    nfev: int = 0

    def __call__(self, _t, y):
        self.nfev += 1
        e = _closed_edges(y, self.red.geometry == "circle")
        narrowest = np.min(np.diff(e))
        if not narrowest > 0:
            # a trial stage whose edges crossed: NaN fails the error test, so the step is rejected
            return np.full_like(y, np.nan)
        if narrowest < RESOLVED_WIDTH:
            # conservative: a trial stage below the resolution ends the solve (rejecting it instead let the
            # stepper crawl towards the limit); the solve may so stop a little early, never go on wrongly
            raise CellsUnresolved(
                f"mean-field reference at β = {self.beta}: a cell contracted to {narrowest:.2g} rad "
                f"after t = {self.t_now:g}, below the float64 resolution of angles "
                f'({RESOLVED_WIDTH:.2g} rad; docs/mean_field.md, "Limits")'
            )
        return edge_velocity(self.red, e, self.masses, self.beta, y, fast=self.fast)


class StepUnderflow(RuntimeError):
    """The Runge–Kutta pair's step fell below what float64 resolves at its time (SciPy's "failed" status), the field
    finite wherever it was evaluated: the flow outran the discretisation, a resolution limit."""


class NonFiniteField(RuntimeError):
    """The right-hand side returned a value that is not finite: a fault to report, never a resolution limit (SciPy
    would reject such steps until its step underflowed and call that a failure like any other)."""


def _advance_edges(
    rhs, t0: float, t1: float, y0: np.ndarray, rtol: float, atol: float, step: float | None, dense=(), method=DOP853
) -> tuple[np.ndarray, int, float, list[np.ndarray]]:
    """Integrate the edges' ODE from t0 to t1 by ``method`` (a SciPy ``OdeSolver``: DOP853 unless told); (y(t1),
    steps taken, the step to start the next stretch, y at each time of ``dense``, non-decreasing within (t0, t1),
    from the steps' dense output).

    The controller's step is carried from one stretch between stops (remeshings, snapshots) to the next:
    restarting at every stop with SciPy's initial-step guess and its growth limit of 10 per step cost about
    three steps per stretch where one or two suffice (the error control is the same either way). The step
    carried is the controller's last untruncated proposal (the final step is cut to land on t1). A time of
    ``dense`` is read from the interpolant of the step that spans it (DOP853's of order 7, three more
    evaluations of ``rhs`` per step that spans one; RK45's of order 4, none), so a snapshot need not end a step.
    """

    def finite(t, y):
        f = rhs(t, y)
        if not np.all(np.isfinite(f)):
            raise NonFiniteField(f"the right-hand side is not finite at t = {t:g}")
        return f

    solver = method(finite, t0, y0, t1, rtol=rtol, atol=atol, first_step=None if step is None else min(step, t1 - t0))
    taken, proposal, at = 0, solver.h_abs, []
    while solver.status == "running":
        proposal = solver.h_abs
        message = solver.step()
        if solver.status == "failed":
            raise StepUnderflow(f"the integrator failed at t = {solver.t:g}: {message}")
        taken += 1
        spanned = [t for t in dense[len(at) :] if t <= solver.t]
        if spanned:
            interpolant = solver.dense_output()
            at.extend(interpolant(t) for t in spanned)
    return solver.y, taken, max(proposal, solver.h_abs), at


def _checked_times(beta: float, times, remesh_every: float) -> np.ndarray:
    """``times`` as an array, after refusing a β, ``times`` or ``remesh_every`` that ``solve`` cannot take."""
    times = np.asarray(times, dtype=float)
    if not (beta > 0 and math.isfinite(beta)):
        raise ValueError(f"mean-field reference: beta must be finite and > 0, got {beta}")
    if (
        times.ndim != 1
        or times.size == 0
        or not np.all(np.isfinite(times))
        or times[0] < 0
        or np.any(np.diff(times) < 0)
    ):
        raise ValueError("mean-field reference: times must be finite, ≥ 0 and non-decreasing")
    if not (remesh_every > 0 and math.isfinite(remesh_every)):
        raise ValueError(f"mean-field reference: remesh_every must be finite and > 0, got {remesh_every}")
    if times[-1] / remesh_every + times.size > MAX_STOPS:
        raise ValueError(
            f"mean-field reference: horizon {times[-1]:g} over remesh_every {remesh_every:g} makes more "
            f"than {MAX_STOPS} stops"
        )
    return times


def _first_edges(red: Reduction, width: float, depth: float | None, edges0: np.ndarray | None) -> np.ndarray:
    """The initial cells' edges: ``edges0``, else graded to ``depth``, else uniform (``solve``), checked."""
    if edges0 is not None:
        edges = np.asarray(edges0, dtype=float)
    elif depth is not None:
        edges = graded_edges(red, width, depth)
    else:
        edges = uniform_edges(red, width)
    check_edges(red, edges)
    return edges


def stop_times(times, every: float) -> np.ndarray:
    """The stops of a solve: every time in ``times`` (non-decreasing, ≥ 0) and every multiple of ``every`` before
    the last, a multiple within 10⁻⁹·``every`` of a time in ``times`` merged into it: a multiple computed in floating
    point (3 × 0.1) would otherwise stop, and remesh, a rounding error away from the snapshot it stands for."""
    times = np.asarray(times, dtype=float)
    grid = every * np.arange(max(int(math.ceil(times[-1] / every)), 0))
    grid = grid[grid < times[-1]]
    near = np.searchsorted(times, grid)
    gap = np.minimum(
        np.abs(grid - times[np.minimum(near, times.size - 1)]), np.abs(grid - times[np.maximum(near - 1, 0)])
    )
    return np.union1d(times, grid[gap > 1e-9 * every])


def remesh_stops(times, every: float) -> np.ndarray:
    """The stops of a solve that reads its snapshots from the steps' dense output (``_advance_edges``): the stops
    of ``stop_times`` on the grid of multiples of ``every`` (a snapshot within 10⁻⁹·``every`` of a multiple stands
    for it) and the last time; a snapshot between two of them ends no step and no stretch."""
    stops = stop_times(times, every)
    on_grid = np.abs(stops - every * np.round(stops / every)) <= 1e-9 * every
    return stops[on_grid | (stops == np.asarray(times, dtype=float)[-1])]


def _march(ode: _EdgeODE, times, edges, masses, *, widest, remesh_every, rtol, atol, progress, truncate):
    """Move the cells through every stop (every ``remesh_every`` and every time in ``times``), splitting cells
    wider than ``widest`` at each; (the snapshots (edges, masses, owner, fraction_lo, fraction_hi) at ``times``
    reached, the steps taken)."""
    circle = ode.red.geometry == "circle"
    lagrangian = (np.arange(masses.size), np.zeros(masses.size), np.ones(masses.size))
    stops = stop_times(times, remesh_every)
    recorded = []
    t_now, steps, step = 0.0, 0, None
    for stop in stops:
        if stop > t_now:
            y0 = edges[:-1] if circle else edges[1:-1]
            ode.masses, ode.t_now = masses, t_now
            try:
                y, taken, step, _ = _advance_edges(ode, t_now, float(stop), y0, rtol, atol, step)
            except CellsUnresolved:
                if not truncate:
                    raise
                break
            except RuntimeError as err:
                raise RuntimeError(
                    f"mean-field reference: the edges' ODE failed at β = {ode.beta} between t = {t_now:g} and "
                    f"{stop:g} ({err})"
                ) from None
            edges = _closed_edges(y, circle)
            if not np.all(np.diff(edges) > 0):
                raise FloatingPointError(f"mean-field reference: cell edges crossed at β = {ode.beta}, t = {stop:g}")
            steps += taken
            t_now = float(stop)
        edges, masses, lagrangian = split_cells(ode.red, edges, masses, widest, lagrangian)
        for _ in range(int(np.sum(times == stop))):
            recorded.append((edges.copy(), masses.copy(), *(a.copy() for a in lagrangian)))
        if np.any(times == stop) and progress is not None:
            progress(float(stop), {"cells": int(masses.size), "nfev": ode.nfev, "steps": steps})
    return recorded, steps


def _solution(ode: _EdgeODE, times, initial_edges, initial_mass, recorded, steps) -> MeanFieldSolution:
    """The snapshots ``recorded`` by ``_march``, padded to the most cells, as a ``MeanFieldSolution``."""
    if not recorded:
        raise CellsUnresolved(f"mean-field reference at β = {ode.beta}: cells unresolved before the first snapshot")
    resolved_until = float(times[len(recorded) - 1])
    cells = max(r[1].size for r in recorded)
    E = np.full((times.size, cells + 1), np.nan)
    Mass, Lo, Hi = (np.full((times.size, cells), np.nan) for _ in range(3))
    Owner = np.full((times.size, cells), -1, dtype=np.int64)
    for k, (e, m, o, lo, hi) in enumerate(recorded):
        n = m.size
        E[k, : n + 1], Mass[k, :n], Owner[k, :n], Lo[k, :n], Hi[k, :n] = e, m, o, lo, hi
    return MeanFieldSolution(
        ode.red,
        float(ode.beta),
        times,
        initial_edges,
        E,
        Mass,
        Owner,
        Lo,
        Hi,
        evaluations=ode.nfev,
        initial_masses=initial_mass,
        info={
            "steps": steps,
            "nfev": ode.nfev,
            "cells": int(cells),
            "cells_initial": int(initial_edges.size - 1),
            "resolved_until": resolved_until,
        },
    )


def solve(
    red: Reduction,
    beta: float,
    times,
    *,
    measure: str = "uniform",
    params: dict | None = None,
    width: float = 0.05,
    depth: float | None = None,
    edges0: np.ndarray | None = None,
    remesh_every: float = 0.25,
    rtol: float = ODE_RTOL,
    atol: float = ODE_ATOL,
    progress: Callable[[float, dict], None] | None = None,
    truncate: bool = False,
    fast: bool = True,
) -> MeanFieldSolution:
    """Move the Lagrangian cells with the mean-field velocity from t = 0 to every time in ``times``.

    ``width`` is the largest initial cell (radians); with ``depth`` the cells are also graded towards
    E1⊥ down to that distance (``graded_edges``; without it the cells are uniform, the family whose
    convergence is measured); ``edges0`` replaces both. Every ``remesh_every`` (and at
    every snapshot) cells wider than SPLIT_FACTOR·width are split (``split_cells``): a cell that
    straddles the finite-β separatrix stretches between two clusters, and splitting keeps its
    density resolved. DOP853 with ``rtol``/``atol`` on the edges' angles, its step carried across the stops
    (``_advance_edges``).
    ``progress(t, info)`` is called at every snapshot (info: cells, field evaluations, steps so far).

    A cell narrower than RESOLVED_WIDTH (contracting clusters shrink their cells exponentially) ends
    what float64 angles can carry: the solve raises ``CellsUnresolved`` as soon as a trial stage asks for
    one (so it may stop a little early), or with ``truncate`` the snapshots from then on are NaN and
    ``info["resolved_until"]`` is the last snapshot reached. ``fast=False`` evaluates the velocity by the plain
    quadrature rule (``meanfield_softmax.softmax_means``), the benchmark's baseline.
    """
    params = dict(params or {})
    times = _checked_times(beta, times, remesh_every)
    edges = _first_edges(red, width, depth, edges0)
    initial_edges = edges.copy()
    masses = initial_masses(red, edges, measure, params)
    initial_mass = masses.copy()
    widest = SPLIT_FACTOR * float(np.max(np.diff(edges)))
    ode = _EdgeODE(red, beta, fast)
    recorded, steps = _march(
        ode,
        times,
        edges,
        masses,
        widest=widest,
        remesh_every=remesh_every,
        rtol=rtol,
        atol=atol,
        progress=progress,
        truncate=truncate,
    )
    return _solution(ode, times, initial_edges, initial_mass, recorded, steps)
