"""The pipeline's stages as functions of plain parameters and paths (SPEC §2).

Each stage reads its inputs with ``lowtemp.io``, calls the numerics and writes one
NetCDF. Snakemake scripts are thin adapters onto these functions; they can also be
called from a notebook. ``experiment`` is one entry of the validated config's
``experiments`` mapping (schema defaults applied).
"""

from __future__ import annotations

import logging
import time as _time

import numpy as np
import xarray as xr

from . import checkpoint, claims, dynamics, estimates, exact, fitting, integrate, io, kernels, matrices, measures, projection, transport
from .seeding import generator

log = logging.getLogger("lowtemp")


class ConfigError(ValueError):
    """The config is inconsistent; the message names the key."""


# ---------------------------------------------------------------- config checks
def time_grid(experiment: dict) -> integrate.TimeGrid:
    t = experiment["time"]
    return integrate.TimeGrid(horizon=float(t["horizon"]), snapshots=int(t["snapshots"]), dt=float(t["dt"]))


def snapshot_times(experiment: dict) -> list[float]:
    """The three times of the sphere snapshots (default 0, horizon/3, horizon)."""
    horizon = float(experiment["time"]["horizon"])
    return list(experiment["figures"].get("snapshot_times") or [0.0, horizon / 3, horizon])


def build_matrices(name: str, experiment: dict, root_seed: int) -> matrices.AttentionMatrices:
    """Generate the experiment's K, Q, V (stream ``(name, "matrices")``) and check Assumption 1."""
    params = dict(experiment["matrices"])
    family = params.pop("family")
    return matrices.generate_matrices(family, int(experiment["dim"]), generator(root_seed, name, "matrices"),
                                      **params)


def validate_experiment(name: str, experiment: dict, root_seed: int) -> matrices.AttentionMatrices:
    """Checks the schema cannot express; raises ConfigError naming the key. Cheap (d×d work)."""
    where = f"experiments.{name}"
    d = int(experiment["dim"])
    betas = [float(b) for b in experiment["betas"]]
    if len(set(betas)) != len(betas):
        raise ConfigError(f"{where}.betas has duplicate values: {betas}")
    if any(not np.isfinite(b) or b <= 0 for b in betas):
        raise ConfigError(f"{where}.betas must be positive and finite, got {betas}")
    try:
        grid = time_grid(experiment)
    except ValueError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    for t in snapshot_times(experiment):
        if not 0 <= t <= grid.horizon:
            raise ConfigError(f"{where}.figures.snapshot_times: {t} is outside [0, time.horizon = {grid.horizon}]")
    m = experiment["matrices"]
    for key in ("eigenvalues", "eigenvalues_V"):
        if key in m and len(m[key]) != d:
            raise ConfigError(f"{where}.matrices.{key} must have length dim = {d}, got {len(m[key])}")
    kernel = experiment.get("kernel", "auto")
    if kernel in ("dense", "cap") and d not in (2, 3):
        raise ConfigError(f"{where}.kernel: {kernel!r} supports dim 2 and 3, got dim = {d}; use 'numpy' or 'auto'")
    if m["family"] == "explicit":
        for key in ("K", "Q", "V"):
            try:
                shape = np.shape(np.asarray(m[key], dtype=float))
            except ValueError:
                raise ConfigError(f"{where}.matrices.{key} is not a rectangular matrix (rows of unequal length)") from None
            if shape != (d, d):
                raise ConfigError(f"{where}.matrices.{key} must be a {d}x{d} matrix (dim = {d}), got shape {shape}")
    _check_initial_measure_shapes(where, experiment["initial_measure"], d)
    try:
        M = build_matrices(name, experiment, root_seed)
    except matrices.AssumptionViolation as exc:
        raise matrices.AssumptionViolation(f"{where}.matrices: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{where}.matrices: {exc}") from None
    _check_initial_measure_assumptions(where, experiment["initial_measure"], M)
    if "convergence" in experiment:  # the optional studies' block: steps dividing the grid, N list, …
        from . import convergence  # imported here: convergence imports this module

        convergence.study_settings(name, experiment)
    return M


def _check_initial_measure_shapes(where: str, mu: dict, d: int) -> None:
    where = f"{where}.initial_measure"
    for key in ("mean", "center"):
        if key in mu and len(mu[key]) != d:
            raise ConfigError(f"{where}.{key} must have length dim = {d}, got {len(mu[key])}")
    for key in ("means", "points"):
        if key in mu and any(len(v) != d for v in mu[key]):
            raise ConfigError(f"{where}.{key}: every vector must have length dim = {d}")
        if key in mu and any(not np.any(np.asarray(v, dtype=float)) for v in mu[key]):
            raise ConfigError(f"{where}.{key}: a vector is zero (it has no direction on the sphere)")
    if "center" in mu and not np.any(np.asarray(mu["center"], dtype=float)):
        raise ConfigError(f"{where}.center is the zero vector")
    if "means" in mu and len(mu["means"]) != len(mu.get("kappas", [])):
        raise ConfigError(f"{where}.means and kappas must have the same length")
    if "weights" in mu:
        components = "points" if mu["name"] == "atoms" else "kappas"
        n = len(mu.get(components, []))
        weights = np.asarray(mu["weights"], dtype=float)
        if weights.size != n:
            raise ConfigError(f"{where}.weights must have one entry per {components[:-1]} ({n}), got {weights.size}")
        if not np.isclose(weights.sum(), 1.0):
            raise ConfigError(f"{where}.weights must sum to 1, got {weights.sum():.6g}")


def _check_initial_measure_assumptions(where: str, mu: dict, M: matrices.AttentionMatrices) -> None:
    """Assumption 3 (positive density) unless waived, and Assumption 2 (∫|P1 x|^(-1/2) dρ0 < ∞)."""
    where = f"{where}.initial_measure"
    name = mu["name"]
    if mu.get("positive_density", True) and not measures.has_positive_density(name, mu):
        what = f"a cap of angle {mu['angle']:g}° has zero density outside it" if name == "cap" else \
            "finitely many atoms have no density"
        raise matrices.AssumptionViolation(
            f"{where}: {name!r} is not a positive density on the sphere ({what}; Assumption 3). "
            f"Set {where}.positive_density: false to run it outside the theorem")
    if name == "atoms":
        bad = measures.atoms_on_E1_complement(mu["points"], M.E1)
        if bad.size:
            raise matrices.AssumptionViolation(
                f"{where}: Assumption 2 fails: point(s) {bad.tolist()} lie on E1⊥ (P1 x = 0), so "
                f"∫|P1 x|^(-1/2) dρ0 is infinite; these tokens never reach E1 and Π is undefined for them")


# ---------------------------------------------------------------- stage 1: matrices
def matrices_dataset(M: matrices.AttentionMatrices) -> xr.Dataset:
    sq = ("row", "col")
    ds = xr.Dataset(
        {
            "K": (sq, M.K, io.attrs("key matrix K")),
            "Q": (sq, M.Q, io.attrs("query matrix Q")),
            "V": (sq, M.V, io.attrs("value matrix V")),
            "B": (sq, M.B, io.attrs("B = Q^T K")),
            "A": (sq, M.A, io.attrs("A = V B^T (symmetrised)")),
            "mu": (("eigen",), M.mu, io.attrs("eigenvalues of A, descending")),
            "E1": (("dim", "e1"), M.E1, io.attrs("orthonormal basis of E1, the leading eigenspace of A")),
            "E1_V_real": (("dim", "e1_v_real"), M.E1_V_real,
                          io.attrs("orthonormal basis of the leading eigenspace of V (largest real part)")),
            "E1_V_modulus": (("dim", "e1_v_modulus"), M.E1_V_modulus,
                             io.attrs("orthonormal basis of the leading eigenspace of V (largest modulus)")),
            "V_eigenvalues_real": (("eigen",), M.V_eigenvalues.real, io.attrs("real part of V's eigenvalues")),
            "V_eigenvalues_imag": (("eigen",), M.V_eigenvalues.imag, io.attrs("imaginary part of V's eigenvalues")),
            "gamma": ((), M.gamma, io.attrs("spectral gap mu1 - mu2 of A")),
            "sigma_min": ((), M.sigma_min, io.attrs("smallest singular value of B")),
            "sigma_max": ((), M.sigma_max, io.attrs("largest singular value of B")),
            "rate_lower": ((), M.rate_bounds[0], io.attrs("gamma / sigma_max(B)", "1/time")),
            "rate_upper": ((), M.rate_bounds[1], io.attrs("gamma / sigma_min(B)", "1/time")),
        }
    )
    ds.attrs["dim_E1"] = M.E1.shape[1]
    ds.attrs["V_leading_differs"] = int(M.E1_V_real.shape != M.E1_V_modulus.shape
                                        or not np.allclose(M.E1_V_real @ M.E1_V_real.T,
                                                           M.E1_V_modulus @ M.E1_V_modulus.T))
    return ds


def load_matrices(path) -> matrices.AttentionMatrices:
    """Matrices from matrices.nc, re-checked against Assumption 1."""
    ds = io.read_netcdf(path, "matrices")
    return matrices.check_assumption_1(ds["K"].values, ds["Q"].values, ds["V"].values)


def stage_matrices(name, experiment, root_seed, output):
    M = build_matrices(name, experiment, root_seed)
    log.info("%s: matrices (%s) gamma=%.4g sigma(B) in [%.4g, %.4g], dim E1=%d, rate bounds [%.4g, %.4g]",
             name, experiment["matrices"]["family"], M.gamma, M.sigma_min, M.sigma_max, M.E1.shape[1],
             *M.rate_bounds)
    io.write_netcdf(matrices_dataset(M), output, "matrices", io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- stage 2: initial tokens
def stage_initial_tokens(name, experiment, root_seed, matrices_path, output):
    M = load_matrices(matrices_path)
    params = dict(experiment["initial_measure"])
    measure = params.pop("name")
    rng = generator(root_seed, name, "initial_tokens")
    X0 = measures.sample_initial_tokens(measure, rng, experiment["replicas"], experiment["tokens"],
                                        experiment["dim"], **params)
    moment = measures.assumption_2_moment(X0, M.E1, p=0.5)
    ds = xr.Dataset(
        {
            "tokens": (("replica", "token", "dim"), X0, io.attrs("initial token positions x_i(0) on the sphere")),
            "assumption_2_moment": (("replica",), moment,
                                    io.attrs("empirical moment mean_i |P1 x_i|^(-1/2) (Assumption 2)")),
        },
        coords={"replica": np.arange(X0.shape[0])},
    )
    if M.E1.shape[1] == 1:
        ds["projection_masses"] = (("replica", "atom"), projection.two_atom_masses(X0, M.E1[:, 0]),
                                   io.attrs("masses of Pi_# rho0 at +u and -u"))
        ds = ds.assign_coords(atom=["+u", "-u"])
    log.info("%s: %d replicas x %d tokens from %s; Assumption 2 moment (p=1/2) %s", name, X0.shape[0],
             X0.shape[1], measure, np.array2string(moment, precision=3))
    io.write_netcdf(ds, output, "initial_tokens", io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- stages 3–4: simulations
def _progress_logger(label: str, grid: integrate.TimeGrid, n_tokens: int, n_replicas: int):
    start = _time.perf_counter()
    every = max(1, grid.snapshots // 20)

    def progress(t: float, step: int):
        k = step // grid.steps_per_snapshot
        if k % every == 0 or k == grid.snapshots:
            elapsed = _time.perf_counter() - start
            log.info("%s: t = %.3f / %.3f (step %d / %d, %d tokens x %d replicas), %.1f s elapsed",
                     label, t, grid.horizon, step, grid.total_steps, n_tokens, n_replicas, elapsed)

    return progress


def _positions_dataset(positions, grid, description, drift):
    """The simulation outputs shared by both temperatures: positions and the integrator's norm drift."""
    return xr.Dataset(
        {"positions": (("time", "replica", "token", "dim"), positions, io.attrs(description)),
         "norm_drift": (("time", "replica"), drift,
                        io.attrs("largest | |x| - 1 | of any token after an integrator step and before its "
                                 "renormalisation, over the steps since the previous snapshot (0 at t = 0): "
                                 "a lower bound on those steps' local error, O(h^5) per step for rk4, "
                                 f"O(h^2) for euler; a step above {integrate.DRIFT_TOLERANCE:g} stops the run"))},
        coords={"time": ("time", grid.times, io.attrs("time t (depth of the infinite-depth transformer)", "1")),
                "replica": np.arange(positions.shape[1])},
    )


def field_kernel(experiment: dict, beta: float, M: matrices.AttentionMatrices) -> str:
    """The kernel of the finite-temperature field: the config's ``kernel``, or the automatic rule."""
    kernel = experiment.get("kernel", "auto")
    if kernel == "auto":
        return kernels.choose_kernel(beta, int(experiment["tokens"]), int(experiment["dim"]), M.sigma_min)
    return kernel


def _simulate_with_checkpoint(field, X0, grid, method, label, checkpoint_path, checkpoint_every, arrays,
                              **settings):
    """``integrate.simulate`` resuming from, and writing, a checkpoint when ``checkpoint_path`` is given.

    The checkpoint's fingerprint covers X0, the field's ``arrays`` (matrices), the
    integrator, the time grid and the field's other ``settings`` (β, kernel).
    Returns the positions, the norm drift (time, replica) and the checkpoint (call
    ``discard()`` once the output is written), or None; logs the largest drift.
    """
    progress = _progress_logger(label, grid, X0.shape[1], X0.shape[0])
    ckpt = None
    if checkpoint_path is None:
        positions, drift = integrate.simulate(field, X0, grid, method, progress, label=label, return_drift=True)
    else:
        fp = checkpoint.fingerprint(X0, *arrays, method=method, horizon=grid.horizon, snapshots=grid.snapshots,
                                    step=grid.step, **settings)
        ckpt = checkpoint.SimulationCheckpoint(checkpoint_path, fp, grid.times, checkpoint_every)
        positions, drift = integrate.simulate(field, X0, grid, method, progress, label=label,
                                              resume=ckpt.load(X0.shape), on_snapshot=ckpt, return_drift=True)
    k, r = np.unravel_index(np.argmax(drift), drift.shape)
    log.info("%s: largest norm drift of a step before renormalisation %.3e (snapshot interval ending at t = %g, "
             "replica %d; the run stops above %g)", label, drift[k, r], grid.times[k], r, integrate.DRIFT_TOLERANCE)
    return positions, drift, ckpt


def _finish(ckpt) -> None:
    if ckpt is not None:
        ckpt.discard()


def stage_finite_temperature(name, experiment, root_seed, beta, matrices_path, tokens_path, output,
                             checkpoint_path=None, checkpoint_every=300.0):
    """Simulate the particle system at inverse temperature β and write finite_temperature/beta<β>.nc:
    positions, the integrator's norm drift, and the effective sample size (median and 5th percentile
    over tokens). A non-finite ESS raises FloatingPointError naming the run, snapshot, replica and token."""
    M = load_matrices(matrices_path)
    X0 = io.read_netcdf(tokens_path, "initial_tokens")["tokens"].values
    grid = time_grid(experiment)
    beta = float(beta)
    method = experiment["integrator"]
    kernel = field_kernel(experiment, beta, M)
    field = lambda X: kernels.attention_field(X, M.B, M.V, beta, kernel)  # noqa: E731
    log.info("%s: finite temperature beta = %g, %s, step %.4g, %d steps, kernel %s", name, beta, method,
             grid.step, grid.total_steps, kernel)
    positions, drift, ckpt = _simulate_with_checkpoint(field, X0, grid, method, f"{name} beta = {beta:g}",
                                                       checkpoint_path, checkpoint_every, arrays=(M.B, M.V),
                                                       beta=beta, kernel=kernel)
    ess = np.stack([kernels.effective_sample_size(X, M.B, M.V, beta, kernel) for X in positions])
    if not np.all(np.isfinite(ess)):
        # a NaN would pass the threshold check below silently (NaN < x is False) and reach the claims
        k, r, i = np.argwhere(~np.isfinite(ess))[0]
        raise FloatingPointError(
            f"{name}: beta = {beta:g}: the effective sample size is {ess[k, r, i]} at t = {grid.times[k]:g} "
            f"(snapshot {k}), replica {r}, token {i} (kernel {kernel}); {int(np.sum(~np.isfinite(ess)))} "
            f"non-finite values in all")
    ds = _positions_dataset(positions, grid, "token positions at finite temperature", drift)
    ds["ess_median"] = (("time", "replica"), np.median(ess, axis=-1),
                        io.attrs("median over tokens of the effective sample size 1/sum_j w_ij^2"))
    ds["ess_p05"] = (("time", "replica"), np.percentile(ess, 5, axis=-1),
                     io.attrs("5th percentile over tokens of the effective sample size"))
    ds = ds.assign_coords(beta=((), beta, io.attrs("inverse temperature beta")))
    ds.attrs.update(integrator=method, step=grid.step, kernel=kernel)
    log.info("%s: beta = %g: smallest median effective sample size %.1f (judged against ess_threshold by the "
             "fit)", name, beta, float(np.min(np.median(ds["ess_median"].values, axis=1))))
    io.write_netcdf(ds, output, "finite_temperature", io.provenance(name, experiment, root_seed, beta=beta))
    _finish(ckpt)


def stage_zero_temperature(name, experiment, root_seed, matrices_path, tokens_path, output,
                           checkpoint_path=None, checkpoint_every=300.0):
    """Integrate the zero-temperature dynamics (Eq. 3) and write zero_temperature.nc: positions, the
    integrator's norm drift, the exact time-changed solution and the largest deviation from it."""
    M = load_matrices(matrices_path)
    X0 = io.read_netcdf(tokens_path, "initial_tokens")["tokens"].values
    grid = time_grid(experiment)
    method = experiment["integrator"]
    field = lambda X: dynamics.zero_temperature_field(X, M.A, M.B)  # noqa: E731
    positions, drift, ckpt = _simulate_with_checkpoint(field, X0, grid, method, f"{name} zero temperature",
                                                       checkpoint_path, checkpoint_every, arrays=(M.A, M.B))
    reference = exact.exact_zero_temperature(X0, M.A, M.B, grid.times)
    error = np.max(np.abs(positions - reference), axis=(1, 2, 3))
    ds = _positions_dataset(positions, grid, "token positions at zero temperature (Eq. 3, integrated)", drift)
    ds["positions_exact"] = (("time", "replica", "token", "dim"), reference,
                             io.attrs("exact time-changed solution e^{s(t)A}x0/|e^{s(t)A}x0|"))
    ds["max_error_vs_exact"] = (("time",), error, io.attrs("max |x_integrated - x_exact| over all tokens"))
    ds.attrs.update(integrator=method, step=grid.step)
    log.info("%s: zero temperature: max deviation from the exact solution %.3e (at t = %g)", name,
             error.max(), grid.horizon)
    io.write_netcdf(ds, output, "zero_temperature", io.provenance(name, experiment, root_seed))
    _finish(ckpt)


# ---------------------------------------------------------------- stage 5: distances
def _eigenspace_distances(X, M, prefix=""):
    return {
        f"dist_leading_A{prefix}": projection.distance_to_eigenspace(X, M.E1),
        f"dist_leading_V{prefix}": projection.distance_to_eigenspace(X, M.E1_V_real),
        f"dist_leading_V_modulus{prefix}": projection.distance_to_eigenspace(X, M.E1_V_modulus),
    }


_DIST_ATTRS = {
    "w2_projection": io.attrs("W2(rho^beta_t, Pi_# rho0), chordal cost"),
    "w2_zero_temperature": io.attrs("W2(rho^beta_t, rho^inf_t), chordal cost, exact (POT); NaN at snapshots "
                                    "skipped by distances.exact_every"),
    "coupling_zero_temperature": io.attrs(
        "sqrt(mean_i |x_i^beta(t) - x_i^inf(t)|^2), synchronous-coupling upper bound on w2_zero_temperature"),
    "w2_zero_to_projection": io.attrs("W2(rho^inf_t, Pi_# rho0), chordal cost"),
    "dist_leading_A": io.attrs("distance to measures on E1(A) ∩ S: sqrt(mean(2 - 2|P1 x|))"),
    "dist_leading_V": io.attrs("distance to measures on V's leading eigenspace (largest real part) ∩ S"),
    "dist_leading_V_modulus": io.attrs("distance to measures on V's leading eigenspace (largest modulus) ∩ S"),
}


def exact_w2_snapshots(experiment: dict, n_times: int) -> np.ndarray:
    """Snapshots at which the exact N×N W2(ρ^β_t, ρ^∞_t) is solved: every ``distances.exact_every``-th and the last."""
    every = int(experiment.get("distances", {}).get("exact_every", 1))
    mask = np.arange(n_times) % every == 0
    mask[-1] = True
    return mask


def stage_distances_beta(name, experiment, root_seed, matrices_path, tokens_path, finite_path, zero_path, output):
    """Distances for one β: (replica, time) arrays."""
    M = load_matrices(matrices_path)
    X0 = io.read_netcdf(tokens_path, "initial_tokens")["tokens"].values
    fin = io.read_netcdf(finite_path, "finite_temperature")
    Y = fin["positions"].values
    Z = io.read_netcdf(zero_path, "zero_temperature")["positions"].values
    nt, nr = Y.shape[:2]
    out = {k: np.full((nr, nt), np.nan)
           for k in ("w2_projection", "w2_zero_temperature", "coupling_zero_temperature")}
    exact = exact_w2_snapshots(experiment, nt)
    start = _time.perf_counter()
    for r in range(nr):
        for k in range(nt):
            out["w2_projection"][r, k] = transport.w2_to_projection(Y[k, r], X0[r], M.E1)
            out["coupling_zero_temperature"][r, k] = transport.synchronous_coupling(Y[k, r], Z[k, r])
            if exact[k]:  # the N×N exact solve, at the configured snapshots only
                out["w2_zero_temperature"][r, k] = transport.w2(Y[k, r], Z[k, r])
        log.info("%s beta=%g: distances for replica %d / %d done, %.1f s elapsed", name, float(fin.beta),
                 r + 1, nr, _time.perf_counter() - start)
    for key, val in _eigenspace_distances(np.swapaxes(Y, 0, 1), M).items():
        out[key] = val
    ds = xr.Dataset({k: (("replica", "time"), v, _DIST_ATTRS[k]) for k, v in out.items()},
                    coords={"time": fin["time"], "replica": fin["replica"], "beta": fin["beta"]})
    ds["ess_median"] = (("replica", "time"), fin["ess_median"].values.T, fin["ess_median"].attrs)
    ds["ess_p05"] = (("replica", "time"), fin["ess_p05"].values.T, fin["ess_p05"].attrs)
    io.write_netcdf(ds, output, "distances_beta", io.provenance(name, experiment, root_seed, beta=float(fin.beta)))


def stage_collect_distances(name, experiment, root_seed, matrices_path, tokens_path, zero_path, parts, output):
    """Stack the per-β distances along ``beta`` and add the zero-temperature curves."""
    M = load_matrices(matrices_path)
    X0 = io.read_netcdf(tokens_path, "initial_tokens")["tokens"].values
    zero = io.read_netcdf(zero_path, "zero_temperature")
    Z = zero["positions"].values
    ds = xr.concat([io.read_netcdf(p, "distances_beta") for p in parts], dim="beta").sortby("beta")
    ds = ds.drop_attrs()
    nt, nr = Z.shape[:2]
    w0 = np.array([[transport.w2_to_projection(Z[k, r], X0[r], M.E1) for k in range(nt)] for r in range(nr)])
    ds["w2_zero_to_projection"] = (("replica", "time"), w0, _DIST_ATTRS["w2_zero_to_projection"])
    for key, val in _eigenspace_distances(np.swapaxes(Z, 0, 1), M, "_zero_temperature").items():
        ds[key] = (("replica", "time"), val, io.attrs(_DIST_ATTRS[key.replace("_zero_temperature", "")]
                                                        ["long_name"] + ", zero temperature"))
    for key in list(_DIST_ATTRS):
        if key in ds:
            ds[key].attrs = _DIST_ATTRS[key]
    ds["beta"].attrs = io.attrs("inverse temperature beta")
    ds["time"].attrs = io.attrs("time t", "1")
    for v in ds.data_vars:
        ds[v] = ds[v].astype("float64")
    log.info("%s: distances collected for beta = %s", name, ds.beta.values.tolist())
    io.write_netcdf(ds, output, "distances", io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- stage 6: fit
def stage_fit(name, experiment, root_seed, matrices_path, distances_path, output):
    """fit.nc: every constant and interval of the experiment, computed once (``estimates.fit_experiment``)."""
    M = load_matrices(matrices_path)
    ds = io.read_netcdf(distances_path, "distances")
    out = estimates.fit_experiment(name, ds, M, experiment["fit"], float(experiment["ess_threshold"]),
                                   int(experiment["tokens"]))
    for line in estimates.describe(out, name):
        log.info("%s", line)
    for beta, low in zip(out.beta.values, out["ess_min_to_horizon"].values):
        if not low >= experiment["ess_threshold"]:
            log.warning("%s: beta = %g, N = %d: median effective sample size falls to %.1f < %g; the particle "
                        "system does not stand for the mean field there (N must grow like beta^((d-1)/2)); the "
                        "claims leave this beta out where it falls inside their window", name, beta,
                        int(experiment["tokens"]), low, experiment["ess_threshold"])
    io.write_netcdf(out, output, "fit", io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- stage 7: the paper's statements as checks
def stage_claims(name, experiment, root_seed, distances_path, fit_path, output):
    """claims.nc: the paper's statements judged on fit.nc and distances.nc (``claims.evaluate``)."""
    dist = io.read_netcdf(distances_path, "distances")
    fit = io.read_netcdf(fit_path, "fit")
    found = claims.evaluate(dist, fit, experiment["claims"])
    ds = claims.claims_dataset(found, fit)
    counts = {w: sum(c.status == s for c in found) for s, w in claims.STATUS_WORD.items()}
    log.info("%s: %s (intervals: %g%% Student-t over %d replicas)", name,
             ", ".join(f"{n} {w.lower()}" for w, n in counts.items() if n), 100 * float(fit.attrs["confidence"]),
             dist.sizes["replica"])
    for c in found:
        (log.info if c.status == claims.PASSED else log.warning)("%s: %s", name, c.line())
    io.write_netcdf(ds, output, "claims", io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- logging for scripts
class logged:
    """Context manager: send the package's log to ``path`` (and stderr); log any exception before it propagates."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
        self.handlers = [logging.FileHandler(self.path, mode="w"), logging.StreamHandler()]
        for h in self.handlers:
            h.setFormatter(fmt)
            log.addHandler(h)
        log.setLevel(logging.INFO)
        return log

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            log.error("stage failed: %s: %s", exc_type.__name__, exc, exc_info=(exc_type, exc, tb))
        for h in self.handlers:
            log.removeHandler(h)
            h.close()
        return False
