"""Stages ``distances_beta`` and ``distances``: W2 to Π♯ρ0 and to the zero-temperature flow, and the distances
to the eigenspaces, per replica and time.

Called by ``workflow/scripts/`` (thin Snakemake adapters) or from a notebook; ``experiment`` is one
validated entry of the config's ``experiments`` (or its ``lowtemp.config.params`` slice).
"""

from __future__ import annotations

import logging
import time as _time

import numpy as np

from ..config.experiment import exact_w2_snapshots
from ..model import projection
from ..store import checkpoint, datasets, io
from ..transport import w2

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
    fin = io.read_netcdf(finite_path, "finite_temperature")
    Y = fin["positions"].values  # (replica, time, token, dim)
    Z = io.read_netcdf(zero_path, "zero_temperature")["positions"].values
    nr, nt = Y.shape[:2]
    beta = float(fin.beta)
    out = {k: np.full((nr, nt), np.nan) for k in ("w2_projection", "coupling_zero_temperature")}
    for r in range(nr):
        for k in range(nt):
            out["w2_projection"][r, k] = w2.w2_to_projection(Y[r, k], X0[r], M.E1)
            out["coupling_zero_temperature"][r, k] = w2.synchronous_coupling(Y[r, k], Z[r, k])
    exact, ckpt = _exact_w2_loop(name, beta, Y, Z, exact_w2_snapshots(experiment, nt), checkpoint_path)
    out["w2_zero_temperature"], out["w2_zero_temperature_sq_bound"] = exact["w2"], exact["w2_sq_bound"]
    out.update(_eigenspace_distances(Y, M))
    io.write_netcdf(
        datasets.distances_beta_dataset(out, fin),
        output,
        "distances_beta",
        io.provenance(name, experiment, root_seed, beta=beta),
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
    Z = io.read_netcdf(zero_path, "zero_temperature")["positions"].values  # (replica, time, token, dim)
    nr, nt = Z.shape[:2]
    w0 = np.array([[w2.w2_to_projection(Z[r, k], X0[r], M.E1) for k in range(nt)] for r in range(nr)])
    ds = datasets.distances_dataset(
        [io.read_netcdf(p, "distances_beta") for p in parts],
        w0,
        _eigenspace_distances(Z, M, datasets.ZERO_SUFFIX),
    )
    log.info("%s: distances collected for beta = %s", name, ds.beta.values.tolist())
    io.write_netcdf(ds, output, "distances", io.provenance(name, experiment, root_seed))
