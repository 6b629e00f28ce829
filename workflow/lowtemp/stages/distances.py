"""Stages ``distances_beta`` and ``distances``: W2 to Π♯ρ0 and to the zero-temperature flow, and the distances
to the eigenspaces, per replica and time; and, for a ``model: mean_field`` experiment with ``mean_field.particles``,
``particle_error_beta`` and ``particle_error``: W2 between the particle system and the mean-field reference's
push-forward of the same initial tokens (docs/particle_error.md).

Called by ``workflow/scripts/`` (thin Snakemake adapters) or from a notebook; ``experiment`` is one
validated entry of the config's ``experiments`` (or its ``lowtemp.config.params`` slice).
"""

from __future__ import annotations

import logging
import time as _time

import numpy as np

from ..config.experiment import exact_w2_snapshots, field_kernel, integration_tolerance, time_grid
from ..config.plan import ConfigError, particle_error_tokens
from ..dynamics import integrate, kernels
from ..model import projection, seeding
from ..store import checkpoint, datasets, netcdf
from ..transport import w2
from .joblog import progress_logger

log = logging.getLogger("lowtemp")


def _eigenspace_distances(X, M, suffix=""):
    """Distances of the clouds X (replica, time, token, dim) to measures on E1(A) and V's leading eigenspaces."""
    return {
        f"dist_leading_A{suffix}": projection.distance_to_eigenspace(X, M.E1),
        f"dist_leading_V{suffix}": projection.distance_to_eigenspace(X, M.E1_V_real),
        f"dist_leading_V_modulus{suffix}": projection.distance_to_eigenspace(X, M.E1_V_modulus),
    }


def stage_distances_beta(
    name, experiment, root_seed, matrices_path, tokens_path, finite_path, zero_path, output, checkpoint_path=None
):
    """Distances for one β: (replica, time) arrays, written to distances/beta<β>.nc.

    The exact W2(ρ^β_t, ρ^∞_t) at the configured snapshots is the expensive part: with
    ``checkpoint_path`` every solve is checkpointed (``checkpoint.SolveCheckpoint``), so a killed
    job resumes and loses at most the solve it was in.
    """
    M, X0 = datasets.load_inputs(matrices_path, tokens_path)
    fin = netcdf.read_netcdf(finite_path, "finite_temperature")
    Y = fin["positions"].values  # (replica, time, token, dim)
    Z = netcdf.read_netcdf(zero_path, "zero_temperature")["positions"].values
    nr, nt = Y.shape[:2]
    beta = float(fin.beta)
    out = {
        "w2_projection": w2.w2_to_projection_curves(Y, X0, M.E1),
        "coupling_zero_temperature": np.array(
            [[w2.synchronous_coupling(Y[r, k], Z[r, k]) for k in range(nt)] for r in range(nr)]
        ),
    }
    exact, ckpt = _exact_w2_loop(name, beta, Y, Z, exact_w2_snapshots(experiment, nt), checkpoint_path)
    out["w2_zero_temperature"], out["w2_zero_temperature_sq_bound"] = exact["w2"], exact["w2_sq_bound"]
    out.update(_eigenspace_distances(Y, M))
    out["tokens_across"], out["tokens_across_net"] = projection.tokens_across(Y, X0, M.E1)
    # half the claims' level: bound_above_data spends the other half on the tokens across (docs/claims.md)
    level = (1.0 - float(experiment["fit"]["confidence"])) / 2.0
    resampling = seeding.generator(root_seed, name, "resampling", repr(beta))
    out["w2sq_moving_low"] = projection.moving_cost_lower(Y, X0, M.E1, level, resampling)
    netcdf.write_netcdf(
        datasets.distances_beta_dataset(out, fin),
        output,
        "distances_beta",
        netcdf.provenance(name, experiment, root_seed, beta=beta),
    )
    checkpoint.discard(ckpt)


def _exact_w2_loop(name, beta, Y, Z, exact_at, checkpoint_path):
    """W2(ρ^β_t, ρ^∞_t) (replica, time) at the snapshots ``exact_at`` (NaN elsewhere) and the certified bound on
    its square, one certified solve (``w2_certified``) at a time, resuming from and writing
    ``checkpoint_path`` when given. Returns the arrays {"w2", "w2_sq_bound"} and the checkpoint (None without a
    path), to discard once the output is written."""
    nr, nt = Y.shape[:2]
    ckpt = None
    keys = ("w2", "w2_sq_bound")
    if checkpoint_path is None:
        values, done = {key: np.full((nr, nt), np.nan) for key in keys}, np.zeros((nr, nt), dtype=bool)
    else:
        fp = checkpoint.fingerprint(Y, Z, exact_at, beta=beta)
        ckpt = checkpoint.SolveCheckpoint(checkpoint_path, fp, keys, (nr, nt))
        values, done = ckpt.load()
    snapshots = np.flatnonzero(exact_at)
    start = logged = _time.perf_counter()
    for r, k in [(r, k) for r in range(nr) for k in snapshots if not done[r, k]]:
        values["w2"][r, k], values["w2_sq_bound"][r, k] = w2.w2_certified(Y[r, k], Z[r, k])
        done[r, k] = True
        if ckpt is not None:
            ckpt.save(values, done)
        if k == snapshots[-1] or _time.perf_counter() - logged >= 60.0:  # progress for long jobs
            logged = _time.perf_counter()
            log.info(
                "%s beta=%g: exact W2 %d / %d solves done (replica %d / %d at t index %d), %.1f s elapsed",
                name,
                beta,
                int(done.sum()),
                done.size // nt * snapshots.size,
                r + 1,
                nr,
                k,
                _time.perf_counter() - start,
            )
    return values, ckpt


def stage_distances(name, experiment, root_seed, matrices_path, tokens_path, zero_path, parts, output):
    """Stack the per-β distances along ``beta`` and add the zero-temperature curves; write distances.nc."""
    M, X0 = datasets.load_inputs(matrices_path, tokens_path)
    Z = netcdf.read_netcdf(zero_path, "zero_temperature")["positions"].values  # (replica, time, token, dim)
    ds = datasets.distances_dataset(
        [netcdf.read_netcdf(p, "distances_beta") for p in parts],
        w2.w2_to_projection_curves(Z, X0, M.E1),
        _eigenspace_distances(Z, M, datasets.ZERO_SUFFIX),
    )
    log.info("%s: distances collected for beta = %s", name, ds.beta.values.tolist())
    netcdf.write_netcdf(ds, output, "distances", netcdf.provenance(name, experiment, root_seed))


# ------------------------------------------------------------------ particles against the mean-field reference
#: largest distance between the reference's push-forward at t = 0 and the initial tokens it is said to move: the
#: push-forward is the identity at t = 0 to rounding (about 1e-15), so a larger one means it moved other tokens
PUSH_FORWARD_IDENTITY_TOLERANCE = 1e-9


def reference_positions(finite, X0: np.ndarray, times: np.ndarray, path) -> np.ndarray:
    """The mean-field reference's push-forward (replica, time, token, dim) stored in the finite-temperature file
    ``finite`` (read from ``path``), checked to be the push-forward of the initial tokens X0 (replica, token, dim)
    on the snapshot times ``times``: a mean-field file, the same times in the same order, the same replicas and
    tokens, finite, and X0 itself at t = 0. ValueError naming the file and what differs."""
    if finite.attrs.get("model") != "mean_field":
        raise ValueError(
            f"{path}: not a mean-field reference (model {finite.attrs.get('model', 'particles')!r}); the particle "
            f"error is measured against the finite-temperature file of a model: mean_field experiment"
        )
    stored = finite["time"].values
    if stored.shape != times.shape or not np.allclose(stored, times, rtol=0.0, atol=1e-12 * max(1.0, times[-1])):
        raise ValueError(
            f"{path}: its times {np.round(stored, 6).tolist()} are not the experiment's snapshot times "
            f"{np.round(times, 6).tolist()} (time.horizon, time.snapshots)"
        )
    P = finite["positions"].values
    if P.shape[0] != X0.shape[0] or P.shape[2:] != X0.shape[1:]:
        raise ValueError(
            f"{path}: its push-forward holds {P.shape[0]} replicas of {P.shape[2]} tokens in dim {P.shape[3]}, the "
            f"initial tokens {X0.shape[0]} of {X0.shape[1]} in dim {X0.shape[2]}"
        )
    if not np.all(np.isfinite(P)):
        raise ValueError(f"{path}: the reference's push-forward has non-finite positions")
    moved = float(np.max(np.linalg.norm(P[:, 0] - X0, axis=-1)))
    if not moved <= PUSH_FORWARD_IDENTITY_TOLERANCE:
        raise ValueError(
            f"{path}: at t = {times[0]:g} the reference's push-forward is up to {moved:.3g} away from the initial "
            f"tokens (at most {PUSH_FORWARD_IDENTITY_TOLERANCE:g}: the identity there): it moved other tokens"
        )
    return P


def particle_error_curves(name, beta, X, P, exact_at, checkpoint_path=None):
    """W2 between the particle clouds X and the reference's push-forward P of the same initial tokens, both
    (replica, time, token, dim): the exact W2 and the certified bound on its square at the snapshots ``exact_at``
    (NaN elsewhere; one ``w2.w2_certified`` solve at a time, checkpointed at ``checkpoint_path``), and the
    synchronous coupling of each token with its own image at every snapshot, an upper bound of W2. Returns
    {"particle_error", "particle_error_sq_bound", "particle_coupling"} of (replica, time) arrays and the checkpoint
    (None without a path), to discard once the output is written."""
    if X.shape != P.shape:
        raise ValueError(f"particle clouds {X.shape} and reference {P.shape} differ in shape")
    exact, ckpt = _exact_w2_loop(name, beta, X, P, exact_at, checkpoint_path)
    coupling = np.array([[w2.synchronous_coupling(X[r, k], P[r, k]) for k in range(X.shape[1])] for r in range(len(X))])
    return {
        "particle_error": exact["w2"],
        "particle_error_sq_bound": exact["w2_sq_bound"],
        "particle_coupling": coupling,
    }, ckpt


def stage_particle_error_beta(
    name,
    experiment,
    root_seed,
    matrices_path,
    tokens_path,
    finite_path,
    output,
    checkpoint_prefix=None,
    checkpoint_every=300.0,
):
    """The particle system against the mean-field reference at one β: particle_error/beta<β>.nc.

    For every n of ``mean_field.particles.tokens`` (checked first, before any work: ConfigError names the key) the
    particle system (Eq. 1) runs from the first n initial tokens of every replica, with the finite-temperature
    stage's integrator, tolerance (of n) and kernel (the rule's for n) on the experiment's grid; its exact W2 to
    the reference's push-forward of the same n tokens (the first n of the finite-temperature file, which
    ``reference_positions`` checks is the push-forward of these tokens) is solved at the snapshots of
    ``distances.exact_every``. The first n of N i.i.d. draws from ρ0 are n i.i.d. draws from ρ0: every n samples
    the same measure. Beside it: the coupling bound, the particles' own W2 to the projected initial measure (as
    the reference's in distances.nc), their distance to E1(A) (their departure), their median ESS (a diagnostic)
    and the reference's own error estimate. With
    ``checkpoint_prefix`` every run and every solve is checkpointed (``<prefix>_N<n>.nc``, ``<prefix>_N<n>_w2.nc``),
    so a killed job resumes."""
    numbers = _particle_numbers(name, experiment)
    grid = time_grid(experiment)
    method = experiment["integrator"]
    exact_at = exact_w2_snapshots(experiment, grid.times.size)
    M, X0 = datasets.load_inputs(matrices_path, tokens_path)
    fin = netcdf.read_netcdf(finite_path, "finite_temperature")
    P = reference_positions(fin, X0, grid.times, finite_path)
    beta = float(fin.beta)
    rows = {key: [] for key in (*datasets.PARTICLE_ERROR_VARIABLES,) if key != "reference_error"}
    used, tolerances, ckpts = [], [], []
    for n in numbers:
        label = f"{name} beta = {beta:g}, particles N = {n}"
        field = kernels.AttentionField(M.B, M.V, beta, field_kernel(experiment, n))
        tolerance = integration_tolerance(experiment, n)
        prefix = None if checkpoint_prefix is None else f"{checkpoint_prefix}_N{n}"
        X, run_ckpt = _particle_run(label, field, X0[:, :n], grid, method, tolerance, prefix, checkpoint_every)
        curves, w2_ckpt = particle_error_curves(
            f"{name} particles N = {n}", beta, X, P[:, :, :n], exact_at, None if prefix is None else f"{prefix}_w2.nc"
        )
        for key, value in curves.items():
            rows[key].append(value)
        rows["w2_projection"].append(w2.w2_to_projection_curves(X, X0[:, :n], M.E1))
        rows["dist_leading_A"].append(projection.distance_to_eigenspace(X, M.E1))
        rows["ess_median"].append(np.median(field.trajectory_ess(X), axis=-1))
        used.append(field.kernel)
        tolerances.append(tolerance)
        ckpts += [run_ckpt, w2_ckpt]
        _log_particle_error(label, grid.times, curves["particle_error"], fin["reference_error"].values)
    values = {key: np.stack(value) for key, value in rows.items()}
    values["reference_error"] = fin["reference_error"].values
    attrs = dict(integrator=method, step=grid.step, kernels=used, tolerances=tolerances)  # datasets.PARTICLE_RUN_ATTRS
    netcdf.write_netcdf(
        datasets.particle_error_beta_dataset(values, numbers, fin, attrs),
        output,
        "particle_error_beta",
        netcdf.provenance(name, experiment, root_seed, beta=beta),
    )
    for ckpt in ckpts:
        checkpoint.discard(ckpt)


def _particle_numbers(name: str, experiment: dict) -> list[int]:
    """``mean_field.particles.tokens``; ConfigError where the block is absent (nothing to measure)."""
    numbers = particle_error_tokens(name, experiment)
    if not numbers:
        raise ConfigError(f"experiments.{name}.mean_field.particles is absent: there are no particle runs to measure")
    return numbers


def _particle_run(label, field, X0, grid, method, tolerance, prefix, checkpoint_every):
    """The particle system from tokens ``X0`` (replica, n, dim) on ``grid``, resumable from ``<prefix>.nc``: its
    positions and its checkpoint (None without ``prefix``)."""
    n = X0.shape[1]
    log.info(
        "%s: the first %d initial tokens of each replica, %s, %s, kernel %s",
        label,
        n,
        method,
        integrate.describe_steps(grid, method, tolerance),
        field.kernel,
    )
    X0 = np.ascontiguousarray(X0)
    path = None if prefix is None else f"{prefix}.nc"
    ckpt = checkpoint.simulation_checkpoint(path, field, X0, grid, method, tolerance, checkpoint_every)
    progress = progress_logger(label, grid, n, X0.shape[0])
    X, _ = integrate.simulate_resumable(
        field, X0, grid, method, ckpt, progress=progress, label=label, tolerance=tolerance
    )
    return X, ckpt


def _log_particle_error(label, times, error, reference_error):
    """One line per run: the particle error at the last exact snapshot and the reference's error there."""
    k = int(np.flatnonzero(np.isfinite(error[0]))[-1])
    e, r = error[:, k], reference_error[:, k]
    log.info(
        "%s: particle error at t = %g %.3g (replicas %.3g–%.3g), the reference's own error there %.3g (%.2g of it)",
        label,
        times[k],
        float(np.mean(e)),
        float(np.min(e)),
        float(np.max(e)),
        float(np.max(r)),
        float(np.max(r) / np.mean(e)) if np.mean(e) > 0 else float("nan"),
    )


def stage_particle_error(name, experiment, root_seed, parts, output):
    """Stack the per-β particle errors along ``beta``; write particle_error.nc."""
    ds = datasets.particle_error_dataset([netcdf.read_netcdf(p, "particle_error_beta") for p in parts])
    log.info(
        "%s: particle errors collected for beta = %s, N = %s", name, ds.beta.values.tolist(), ds.tokens.values.tolist()
    )
    netcdf.write_netcdf(ds, output, "particle_error", netcdf.provenance(name, experiment, root_seed))
