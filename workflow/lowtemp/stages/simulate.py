"""Stages ``finite_temperature`` (particles, or the mean-field reference of a ``model: mean_field`` experiment)
and ``zero_temperature``: the token trajectories.

Called by ``workflow/scripts/`` (thin Snakemake adapters) or from a notebook; ``experiment`` is one
validated entry of the config's ``experiments`` (or its ``lowtemp.config.params`` slice).
"""

from __future__ import annotations

import logging
import time as _time

import numpy as np

from ..config.experiment import field_kernel, initial_measure, integration_tolerance, measure_of, time_grid
from ..dynamics import fields, integrate, kernels, meanfield, reduction, sphere_levels, sphere_meanfield
from ..model import exact, projection
from ..store import checkpoint, datasets, netcdf
from .joblog import progress_logger

log = logging.getLogger("lowtemp")


def _simulate_with_checkpoint(field, X0, grid, method, tolerance, label, checkpoint_path, checkpoint_every):
    """``integrate.simulate_resumable`` with the job's checkpoint and progress log; logs the integrator's record.

    Returns the positions, the ``integrate.StepRecord`` and the checkpoint (call ``discard()``
    once the output is written), or None.
    """
    ckpt = checkpoint.simulation_checkpoint(checkpoint_path, field, X0, grid, method, tolerance, checkpoint_every)
    progress = progress_logger(label, grid, X0.shape[1], X0.shape[0])
    positions, record = integrate.simulate_resumable(
        field, X0, grid, method, ckpt, progress=progress, label=label, tolerance=tolerance
    )
    drift = record.drift  # (replica, time)
    r, k = np.unravel_index(np.argmax(drift), drift.shape)
    log.info(
        "%s: %s, %d field evaluations, %d accepted and %d rejected steps; largest norm drift of a step "
        "before renormalisation %.3e (snapshot interval ending at t = %g, replica %d; the run stops above %g)",
        label,
        method,
        record.evaluations.sum(),
        record.accepted.sum(),
        record.rejected.sum(),
        drift[r, k],
        grid.times[k],
        r,
        integrate.DRIFT_TOLERANCE,
    )
    return positions, record, ckpt


def stage_finite_temperature(
    name, experiment, root_seed, beta, matrices_path, tokens_path, output, checkpoint_path=None, checkpoint_every=300.0
):
    """Simulate the particle system at inverse temperature β and write finite_temperature/beta<β>.nc:
    positions, the integrator's norm drift, and the effective sample size (median and 5th percentile
    over tokens). A non-finite ESS raises FloatingPointError naming the run, snapshot, replica and token.
    With ``model: mean_field`` the positions are the mean-field reference's push-forward of the initial
    tokens instead (``stage_mean_field``)."""
    if experiment["model"] == "mean_field":
        stage_mean_field(name, experiment, root_seed, beta, matrices_path, tokens_path, output)
        return
    M, X0 = datasets.load_inputs(matrices_path, tokens_path)
    grid = time_grid(experiment)
    beta = float(beta)
    method, tolerance = experiment["integrator"], integration_tolerance(experiment)
    kernel = field_kernel(experiment)
    field = kernels.AttentionField(M.B, M.V, beta, kernel)
    log.info(
        "%s: finite temperature beta = %g, %s, %s, kernel %s",
        name,
        beta,
        method,
        integrate.describe_steps(grid, method, tolerance),
        kernel,
    )
    positions, record, ckpt = _simulate_with_checkpoint(
        field,
        X0,
        grid,
        method,
        tolerance,
        f"{name} beta = {beta:g}",
        checkpoint_path,
        checkpoint_every,
    )
    ess = field.trajectory_ess(positions)  # (replica, time, token)
    if not np.all(np.isfinite(ess)):
        # a NaN would pass the threshold check below silently (NaN < x is False) and reach the claims
        r, k, i = np.argwhere(~np.isfinite(ess))[0]
        raise FloatingPointError(
            f"{name}: beta = {beta:g}: the effective sample size is {ess[r, k, i]} at t = {grid.times[k]:g} "
            f"(snapshot {k}), replica {r}, token {i} (kernel {kernel}); {int(np.sum(~np.isfinite(ess)))} "
            f"non-finite values in all"
        )
    ds = datasets.finite_temperature_dataset(positions, record, ess, grid, beta, method, tolerance, kernel)
    log.info(
        "%s: beta = %g: smallest median effective sample size %.1f (judged against ess_threshold by the fit)",
        name,
        beta,
        float(np.min(np.median(ds["ess_median"].values, axis=0))),
    )
    netcdf.write_netcdf(ds, output, "finite_temperature", netcdf.provenance(name, experiment, root_seed, beta=beta))
    checkpoint.discard(ckpt)


#: the edges' ODE tolerances in a pipeline run: far below the cells' own error (1e-4…1e-2 of W2, what
#: ``reference_error`` measures), and about a third cheaper than the solver's defaults
MEAN_FIELD_RTOL, MEAN_FIELD_ATOL = 1e-6, 1e-10


def stage_mean_field(name, experiment, root_seed, beta, matrices_path, tokens_path, output):
    """finite_temperature/beta<β>.nc of a ``model: mean_field`` experiment: the mean-field reference
    (``meanfield.solve``, cells of ``mean_field.width`` graded to ``mean_field.depth``) pushes every
    replica's initial tokens forward, so the later stages measure the mean field ρ^β_t on the same tokens
    as the particles would be. It is solved again at twice the width; the root mean square distance
    between the two push-forwards of the same tokens (``reference_error``, an upper bound of W2 between
    them) bounds the finer solution's error where the cells converge at order ≥ 1, and decides with the
    coarser solution's ``reference_dist_leading_A`` which β the fit counts as resolved. There is no ESS
    (NaN): the reference has no finite sample. In d = 3 without symmetry (``reduction.geometry``: "sphere") the
    reference is the S² mesh solver at two icosphere levels instead (``_sphere_mean_field``)."""
    M, X0 = datasets.load_inputs(matrices_path, tokens_path)
    grid = time_grid(experiment)
    beta = float(beta)
    measure_name, measure = measure_of(experiment)
    if reduction.geometry(M.B, M.V, measure_name, measure) == "sphere":
        # vMF means drawn as the initial tokens drew them: the mesh carries the density the tokens sample
        ds = _sphere_mean_field(name, experiment, beta, M, X0, grid, *initial_measure(name, experiment, root_seed))
        netcdf.write_netcdf(ds, output, "finite_temperature", netcdf.provenance(name, experiment, root_seed, beta=beta))
        return
    width, depth = float(experiment["mean_field"]["width"]), float(experiment["mean_field"]["depth"])
    red = reduction.reduce(M.B, M.V, measure_name, measure)
    solutions = {
        w: _one_dimensional_reference(name, red, beta, grid, measure_name, measure, w, depth)
        for w in (width, 2 * width)
    }
    fine, coarse = solutions[width], solutions[2 * width]
    positions, coarse_positions = fine.push_forward(X0), coarse.push_forward(X0)
    error = np.sqrt(np.mean(np.sum((positions - coarse_positions) ** 2, axis=-1), axis=-1))  # (replica, time)
    ds = datasets.mean_field_dataset(
        positions,
        error,
        projection.distance_to_eigenspace(coarse_positions, M.E1),
        np.sum(fine.owner >= 0, axis=1),
        grid,
        beta,
        {
            "geometry": red.geometry,
            "width": width,
            "depth": depth,
            "field_evaluations": int(fine.evaluations),
        },
    )
    log.info(
        "%s: beta = %g: largest reference error (W2 bound between the widths %g and %g) %.3g at t = %g",
        name,
        beta,
        width,
        2 * width,
        float(error.max()),
        float(grid.times[np.argmax(error.max(axis=0))]),
    )
    netcdf.write_netcdf(ds, output, "finite_temperature", netcdf.provenance(name, experiment, root_seed, beta=beta))


def _one_dimensional_reference(name, red, beta, grid, measure_name, measure, width, depth):
    """The one-dimensional mean-field reference (``meanfield.solve``) with cells of ``width`` graded to ``depth``,
    its progress and cost logged."""
    label = f"{name} beta = {beta:g}: mean field, cells of width {width:g}"
    log.info("%s graded to %g (%s)", label, depth, red.geometry)
    start = _time.perf_counter()
    solution = meanfield.solve(
        red,
        beta,
        grid.times,
        measure=measure_name,
        params=measure,
        width=width,
        depth=depth,
        rtol=MEAN_FIELD_RTOL,
        atol=MEAN_FIELD_ATOL,
        progress=lambda t, info: log.info(
            "%s: t = %g, %d cells, %d field evaluations", label, t, info["cells"], info["nfev"]
        ),
    )
    log.info("%s: done in %.1f s (%s)", label, _time.perf_counter() - start, solution.info)
    return solution


def _sphere_mean_field(name, experiment, beta, M, X0, grid, measure_name, measure):
    """The mean-field reference in d = 3 without symmetry (``sphere_meanfield``): the icosphere of
    ``mean_field.level`` (default: one above the coarsest level that resolves β) and the level below it, each
    remeshed as it moves, the initial tokens carried as tracers; the root mean square distance between the two
    levels' tracers is the error estimate, as on the circle. A mesh that outgrows ``mean_field.max_triangles``
    before the horizon stops the job with an error naming the time (no file is written)."""
    block = experiment["mean_field"]
    # a level per β reaches this job as its own β's entry (``config.params.for_beta``)
    coarse_level, fine_level = sphere_levels.reference_levels(M.B, beta, block.get("level"))
    max_triangles = int(block["max_triangles"])
    solutions = {}
    for level in (fine_level, coarse_level):
        label = f"{name} beta = {beta:g}: S² mean field, icosphere level {level}"
        variation = sphere_levels.reference_variation(level, M.B, beta)
        settings = sphere_meanfield.reference_settings(level, max_triangles, variation)
        log.info(
            "%s: remeshed every %g to edges of %.3g rad, softmax variation %g",
            label,
            settings.remesh_every,
            settings.edge,
            variation,
        )
        start = _time.perf_counter()
        solution = sphere_meanfield.solve(
            M.B,
            M.V,
            beta,
            grid.times,
            sphere_meanfield.initial_mesh(measure_name, measure, level),
            X0,
            settings,
            progress=lambda t, info, label=label, start=start: log.info(
                "%s: t = %g, %d triangles, %d field evaluations, %.0f s",
                label,
                t,
                info["triangles"],
                info["nfev"],
                _time.perf_counter() - start,
            ),
        )
        fold = sphere_meanfield.fold_w2(solution)
        if fold.max() > sphere_levels.FOLD_W2_TOLERANCE:
            k = int(np.argmax(fold > sphere_levels.FOLD_W2_TOLERANCE))
            raise RuntimeError(
                f"{label}: the mesh folded over itself: by t = {grid.times[k]:g} its folds and their repairs may have "
                f"moved W2 by {fold[k]:.3g} (more than {sphere_levels.FOLD_W2_TOLERANCE:g}); the flow is not resolved "
                "at this level's edge length (docs/sphere_mean_field.md, 'Folds')"
            )
        if fold.max() > 0:
            k = int(np.argmax(fold > 0))
            log.warning(
                "%s: the mesh folded in its tail from t = %g and was repaired: W2 moved by at most %.3g by the "
                "horizon (%d triangles left inside out at most; below the tolerance %g; stored as reference_fold_w2)",
                label,
                grid.times[k],
                float(fold.max()),
                int(solution.diagnostics["inverted"].max()),
                sphere_levels.FOLD_W2_TOLERANCE,
            )
        if solution.info["resolved_until"] < grid.horizon:
            raise RuntimeError(
                f"{label}: the mesh outgrew mean_field.max_triangles = {max_triangles} at t = "
                f"{solution.info['resolved_until']:g}, before the horizon {grid.horizon:g}; raise max_triangles "
                "(memory and time grow with it) or shorten time.horizon"
            )
        log.info("%s: done in %.1f s (%s)", label, _time.perf_counter() - start, solution.info)
        solutions[level] = solution
    fine, coarse = solutions[fine_level], solutions[coarse_level]
    # the levels' distance, plus what the folds may have cost the finer one (its bound, larger of the two levels'):
    # the error estimate then covers the repairs by the triangle inequality
    fold_w2 = np.maximum(sphere_meanfield.fold_w2(fine), sphere_meanfield.fold_w2(coarse))
    levels = np.sqrt(np.mean(np.sum((fine.tracers - coarse.tracers) ** 2, axis=-1), axis=-1))  # (replica, time)
    error = levels + fold_w2
    log.info(
        "%s: beta = %g: largest reference error (W2 bound between the levels %d and %d) %.3g at t = %g",
        name,
        beta,
        fine_level,
        coarse_level,
        float(error.max()),
        float(grid.times[np.argmax(error.max(axis=0))]),
    )
    return datasets.mean_field_dataset(
        fine.tracers,
        error,
        projection.distance_to_eigenspace(coarse.tracers, M.E1),
        fine.diagnostics["triangles"],
        grid,
        beta,
        {
            "geometry": "sphere",
            "level": fine_level,
            "coarse_level": coarse_level,
            "edge": sphere_levels.reference_edge(fine_level),
            "variation": sphere_levels.reference_variation(fine_level, M.B, beta),
            "field_evaluations": int(fine.info["nfev"]),
            "seconds": float(fine.info["seconds"]),
        },
        fold_w2=fold_w2,
    )


def stage_zero_temperature(
    name, experiment, root_seed, matrices_path, tokens_path, output, checkpoint_path=None, checkpoint_every=300.0
):
    """Integrate the zero-temperature dynamics (Eq. 3) and write zero_temperature.nc: positions, the
    integrator's norm drift, the exact time-changed solution and the largest deviation from it."""
    M, X0 = datasets.load_inputs(matrices_path, tokens_path)
    grid = time_grid(experiment)
    method, tolerance = experiment["integrator"], integration_tolerance(experiment)
    field = fields.ZeroTemperatureField(M.A, M.B)
    positions, record, ckpt = _simulate_with_checkpoint(
        field,
        X0,
        grid,
        method,
        tolerance,
        f"{name} zero temperature",
        checkpoint_path,
        checkpoint_every,
    )
    reference = exact.exact_zero_temperature(X0, M.A, M.B, grid.times)
    error = np.max(np.abs(positions - reference), axis=(0, 2, 3))  # per time
    ds = datasets.zero_temperature_dataset(positions, record, reference, error, grid, method, tolerance)
    log.info(
        "%s: zero temperature: max deviation from the exact solution %.3e (at t = %g)", name, error.max(), grid.horizon
    )
    netcdf.write_netcdf(ds, output, "zero_temperature", netcdf.provenance(name, experiment, root_seed))
    checkpoint.discard(ckpt)
