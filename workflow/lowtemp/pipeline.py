"""The pipeline's stages as functions of plain parameters and paths.

Each stage reads its inputs (``datasets.load_matrices``, ``datasets.load_initial_tokens``,
``io.read_netcdf``), calls the numerics and writes one NetCDF laid out by
``lowtemp.datasets``. Snakemake scripts (``workflow/scripts/``) are thin adapters
onto these functions; they can also be called from a notebook. ``experiment`` is
one entry of the validated config's ``experiments`` mapping (schema defaults
applied), or the slice of it the stage reads (``params.STAGE_KEYS``); what the
config decides (time grid, kernel, exact-W2 snapshots) comes from
``lowtemp.experiment``.
"""

from __future__ import annotations

import logging
import time as _time

import numpy as np

from . import checkpoint, claims, datasets, dynamics, estimates, exact, integrate, io, kernels, meanfield, measures, \
    projection, transport
from .experiment import build_matrices, exact_w2_snapshots, field_kernel, integration_tolerance, time_grid
from .joblog import progress_logger
from .seeding import generator

log = logging.getLogger("lowtemp")


def _inputs(matrices_path, tokens_path):
    """The stored inputs every later stage starts from: the checked matrices and the initial tokens."""
    return datasets.load_matrices(matrices_path), datasets.load_initial_tokens(tokens_path)


# ---------------------------------------------------------------- stage 1: matrices
def stage_matrices(name, experiment, root_seed, output):
    """Generate K, Q, V (``experiment.build_matrices``) and write matrices.nc."""
    M = build_matrices(name, experiment, root_seed)
    log.info("%s: matrices (%s) gamma=%.4g sigma(B) in [%.4g, %.4g], dim E1=%d, rate bounds [%.4g, %.4g]",
             name, experiment["matrices"]["family"], M.gamma, M.sigma_min, M.sigma_max, M.E1.shape[1],
             *M.rate_bounds)
    io.write_netcdf(datasets.matrices_dataset(M), output, "matrices", io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- stage 2: initial tokens
def stage_initial_tokens(name, experiment, root_seed, matrices_path, output):
    """Sample the tokens from ρ0 (stream ``(name, "initial_tokens")``) and write initial_tokens.nc."""
    M = datasets.load_matrices(matrices_path)
    params = dict(experiment["initial_measure"])
    measure = params.pop("name")
    rng = generator(root_seed, name, "initial_tokens")
    X0 = measures.sample_initial_tokens(measure, rng, experiment["replicas"], experiment["tokens"],
                                        experiment["dim"], **params)
    moment = measures.assumption_2_moment(X0, M.E1, p=0.5)
    log.info("%s: %d replicas x %d tokens from %s; Assumption 2 moment (p=1/2) %s", name, X0.shape[0],
             X0.shape[1], measure, np.array2string(moment, precision=3))
    io.write_netcdf(datasets.initial_tokens_dataset(X0, moment), output, "initial_tokens",
                    io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- stages 3–4: simulations
def _simulate_with_checkpoint(field, X0, grid, method, tolerance, label, checkpoint_path, checkpoint_every,
                              arrays, **settings):
    """``checkpoint.simulate_resumable`` with the job's progress log; logs the integrator's record.

    Returns the positions, the ``integrate.StepRecord`` and the checkpoint (call ``discard()``
    once the output is written), or None.
    """
    progress = progress_logger(label, grid, X0.shape[1], X0.shape[0])
    positions, record, ckpt = checkpoint.simulate_resumable(field, X0, grid, method, label, checkpoint_path,
                                                            checkpoint_every, arrays, progress, tolerance=tolerance,
                                                            **settings)
    drift = record.drift
    k, r = np.unravel_index(np.argmax(drift), drift.shape)
    log.info("%s: %s, %d field evaluations, %d accepted and %d rejected steps; largest norm drift of a step "
             "before renormalisation %.3e (snapshot interval ending at t = %g, replica %d; the run stops above %g)",
             label, method, record.evaluations.sum(), record.accepted.sum(), record.rejected.sum(), drift[k, r],
             grid.times[k], r, integrate.DRIFT_TOLERANCE)
    return positions, record, ckpt


def _finish(ckpt) -> None:
    if ckpt is not None:
        ckpt.discard()


def stage_finite_temperature(name, experiment, root_seed, beta, matrices_path, tokens_path, output,
                             checkpoint_path=None, checkpoint_every=300.0):
    """Simulate the particle system at inverse temperature β and write finite_temperature/beta<β>.nc:
    positions, the integrator's norm drift, and the effective sample size (median and 5th percentile
    over tokens). A non-finite ESS raises FloatingPointError naming the run, snapshot, replica and token.
    With ``model: mean_field`` the positions are the mean-field reference's push-forward of the initial
    tokens instead (``stage_mean_field``)."""
    if experiment.get("model", "particles") == "mean_field":
        stage_mean_field(name, experiment, root_seed, beta, matrices_path, tokens_path, output)
        return
    M, X0 = _inputs(matrices_path, tokens_path)
    grid = time_grid(experiment)
    beta = float(beta)
    method, tolerance = experiment["integrator"], integration_tolerance(experiment)
    kernel = field_kernel(experiment)
    field = lambda X: kernels.attention_field(X, M.B, M.V, beta, kernel)  # noqa: E731
    log.info("%s: finite temperature beta = %g, %s, %s, kernel %s", name, beta, method,
             integrate.describe_steps(grid, method, tolerance), kernel)
    positions, record, ckpt = _simulate_with_checkpoint(field, X0, grid, method, tolerance,
                                                        f"{name} beta = {beta:g}", checkpoint_path, checkpoint_every,
                                                        arrays=(M.B, M.V), beta=beta, kernel=kernel)
    ess = np.stack([kernels.effective_sample_size(X, M.B, M.V, beta, kernel) for X in positions])
    if not np.all(np.isfinite(ess)):
        # a NaN would pass the threshold check below silently (NaN < x is False) and reach the claims
        k, r, i = np.argwhere(~np.isfinite(ess))[0]
        raise FloatingPointError(
            f"{name}: beta = {beta:g}: the effective sample size is {ess[k, r, i]} at t = {grid.times[k]:g} "
            f"(snapshot {k}), replica {r}, token {i} (kernel {kernel}); {int(np.sum(~np.isfinite(ess)))} "
            f"non-finite values in all")
    ds = datasets.finite_temperature_dataset(positions, record, ess, grid, beta, method, tolerance, kernel)
    log.info("%s: beta = %g: smallest median effective sample size %.1f (judged against ess_threshold by the "
             "fit)", name, beta, float(np.min(np.median(ds["ess_median"].values, axis=1))))
    io.write_netcdf(ds, output, "finite_temperature", io.provenance(name, experiment, root_seed, beta=beta))
    _finish(ckpt)


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
    (NaN): the reference has no finite sample."""
    M, X0 = _inputs(matrices_path, tokens_path)
    grid = time_grid(experiment)
    beta = float(beta)
    measure = dict(experiment["initial_measure"])
    measure_name = measure.pop("name")
    settings = experiment.get("mean_field", {})
    width, depth = float(settings.get("width", 0.1)), float(settings.get("depth", 1e-3))
    red = meanfield.reduce(M.B, M.V, measure_name, measure)
    solutions = {}
    for w in (width, 2 * width):
        label = f"{name} beta = {beta:g}: mean field, cells of width {w:g}"
        log.info("%s graded to %g (%s)", label, depth, red.geometry)
        start = _time.perf_counter()
        solutions[w] = meanfield.solve(
            red, beta, grid.times, measure=measure_name, params=measure, width=w, depth=depth,
            rtol=MEAN_FIELD_RTOL, atol=MEAN_FIELD_ATOL,
            progress=lambda t, info, label=label: log.info("%s: t = %g, %d cells, %d field evaluations", label, t,
                                                           info["cells"], info["nfev"]))
        log.info("%s: done in %.1f s (%s)", label, _time.perf_counter() - start, solutions[w].info)
    fine, coarse = solutions[width], solutions[2 * width]
    positions, coarse_positions = fine.push_forward(X0), coarse.push_forward(X0)
    error = np.sqrt(np.mean(np.sum((positions - coarse_positions) ** 2, axis=-1), axis=-1))  # (time, replica)
    ds = datasets.mean_field_dataset(positions, error, projection.distance_to_eigenspace(coarse_positions, M.E1),
                                     fine, grid, beta, width, depth)
    log.info("%s: beta = %g: largest reference error (W2 bound between the widths %g and %g) %.3g at t = %g", name,
             beta, width, 2 * width, float(error.max()), float(grid.times[np.argmax(error.max(axis=1))]))
    io.write_netcdf(ds, output, "finite_temperature", io.provenance(name, experiment, root_seed, beta=beta))


def stage_zero_temperature(name, experiment, root_seed, matrices_path, tokens_path, output,
                           checkpoint_path=None, checkpoint_every=300.0):
    """Integrate the zero-temperature dynamics (Eq. 3) and write zero_temperature.nc: positions, the
    integrator's norm drift, the exact time-changed solution and the largest deviation from it."""
    M, X0 = _inputs(matrices_path, tokens_path)
    grid = time_grid(experiment)
    method, tolerance = experiment["integrator"], integration_tolerance(experiment)
    field = lambda X: dynamics.zero_temperature_field(X, M.A, M.B)  # noqa: E731
    positions, record, ckpt = _simulate_with_checkpoint(field, X0, grid, method, tolerance,
                                                        f"{name} zero temperature", checkpoint_path, checkpoint_every,
                                                        arrays=(M.A, M.B))
    reference = exact.exact_zero_temperature(X0, M.A, M.B, grid.times)
    error = np.max(np.abs(positions - reference), axis=(1, 2, 3))
    ds = datasets.zero_temperature_dataset(positions, record, reference, error, grid, method, tolerance)
    log.info("%s: zero temperature: max deviation from the exact solution %.3e (at t = %g)", name,
             error.max(), grid.horizon)
    io.write_netcdf(ds, output, "zero_temperature", io.provenance(name, experiment, root_seed))
    _finish(ckpt)


# ---------------------------------------------------------------- stage 5: distances
def _eigenspace_distances(X, M, suffix=""):
    """Distances of the clouds X (replica, time, token, dim) to measures on E1(A) and V's leading eigenspaces."""
    return {
        f"dist_leading_A{suffix}": projection.distance_to_eigenspace(X, M.E1),
        f"dist_leading_V{suffix}": projection.distance_to_eigenspace(X, M.E1_V_real),
        f"dist_leading_V_modulus{suffix}": projection.distance_to_eigenspace(X, M.E1_V_modulus),
    }


def stage_distances_beta(name, experiment, root_seed, matrices_path, tokens_path, finite_path, zero_path, output,
                         checkpoint_path=None):
    """Distances for one β: (replica, time) arrays, written to distances/beta<β>.nc.

    The exact W2(ρ^β_t, ρ^∞_t) at the configured snapshots is the expensive part: with
    ``checkpoint_path`` every solve is checkpointed (``checkpoint.SolveCheckpoint``), so a killed
    job resumes and loses at most the solve it was in.
    """
    M, X0 = _inputs(matrices_path, tokens_path)
    fin = io.read_netcdf(finite_path, "finite_temperature")
    Y = fin["positions"].values
    Z = io.read_netcdf(zero_path, "zero_temperature")["positions"].values
    nt, nr = Y.shape[:2]
    beta = float(fin.beta)
    out = {k: np.full((nr, nt), np.nan) for k in ("w2_projection", "coupling_zero_temperature")}
    for r in range(nr):
        for k in range(nt):
            out["w2_projection"][r, k] = transport.w2_to_projection(Y[k, r], X0[r], M.E1)
            out["coupling_zero_temperature"][r, k] = transport.synchronous_coupling(Y[k, r], Z[k, r])
    exact, ckpt = _exact_w2_loop(name, beta, Y, Z, exact_w2_snapshots(experiment, nt), checkpoint_path)
    out["w2_zero_temperature"], out["w2_zero_temperature_sq_bound"] = exact["w2"], exact["w2_sq_bound"]
    out.update(_eigenspace_distances(np.swapaxes(Y, 0, 1), M))
    io.write_netcdf(datasets.distances_beta_dataset(out, fin), output, "distances_beta",
                    io.provenance(name, experiment, root_seed, beta=beta))
    _finish(ckpt)


def _exact_w2_loop(name, beta, Y, Z, exact_at, checkpoint_path):
    """W2(ρ^β_t, ρ^∞_t) (replica, time) at the snapshots ``exact_at`` (NaN elsewhere) and the certified bound on
    its square, one certified solve (``transport.w2_certified``) at a time, resuming from and writing
    ``checkpoint_path`` when given. Returns the arrays {"w2", "w2_sq_bound"} and the checkpoint (None without a
    path), to discard once the output is written."""
    nt, nr = Y.shape[:2]
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
        values["w2"][r, k], values["w2_sq_bound"][r, k] = transport.w2_certified(Y[k, r], Z[k, r])
        done[r, k] = True
        if ckpt is not None:
            ckpt.save(values, done)
        if k == snapshots[-1] or _time.perf_counter() - logged >= 60.0:  # progress for long jobs
            logged = _time.perf_counter()
            log.info("%s beta=%g: exact W2 %d / %d solves done (replica %d / %d at t index %d), %.1f s elapsed",
                     name, beta, int(done.sum()), done.size // nt * snapshots.size, r + 1, nr, k,
                     _time.perf_counter() - start)
    return values, ckpt


def stage_collect_distances(name, experiment, root_seed, matrices_path, tokens_path, zero_path, parts, output):
    """Stack the per-β distances along ``beta`` and add the zero-temperature curves; write distances.nc."""
    M, X0 = _inputs(matrices_path, tokens_path)
    Z = io.read_netcdf(zero_path, "zero_temperature")["positions"].values
    nt, nr = Z.shape[:2]
    w0 = np.array([[transport.w2_to_projection(Z[k, r], X0[r], M.E1) for k in range(nt)] for r in range(nr)])
    ds = datasets.distances_dataset([io.read_netcdf(p, "distances_beta") for p in parts], w0,
                                    _eigenspace_distances(np.swapaxes(Z, 0, 1), M, datasets.ZERO_SUFFIX))
    log.info("%s: distances collected for beta = %s", name, ds.beta.values.tolist())
    io.write_netcdf(ds, output, "distances", io.provenance(name, experiment, root_seed))


# ---------------------------------------------------------------- stage 6: fit
def stage_fit(name, experiment, root_seed, matrices_path, distances_path, output, convergence_path=None):
    """fit.nc: every constant and interval of the experiment, computed once (``estimates.fit_experiment``).

    With ``convergence_path`` (an experiment with a ``convergence`` block), its
    particle-number budget decides for which claims the study's β is resolved.
    """
    M = datasets.load_matrices(matrices_path)
    ds = io.read_netcdf(distances_path, "distances")
    budget = None
    if convergence_path is not None:
        conv = io.read_netcdf(convergence_path, "convergence")
        budget = estimates.study_budget(conv, float(experiment["fit"]["particle_error_fraction"]))
    out = estimates.fit_experiment(name, ds, M, experiment["fit"], float(experiment["ess_threshold"]),
                                   int(experiment["tokens"]), particle_budget=budget)
    for line in estimates.describe(out, name):
        log.info("%s", line)
    for beta, low in zip(out.beta.values, out["ess_min_to_horizon"].values):
        if "reference_error_to_horizon" in out:  # a mean-field experiment: no ESS, its reference's error decides
            log.info("%s: beta = %g: mean-field reference error over W2, early %.3g, to departure %.3g; departure "
                     "shift at twice the cell width %.3g", name, beta,
                     *(float(out[k].sel(beta=beta)) for k in ("reference_error_early", "reference_error_to_departure",
                                                              "reference_departure_shift")))
            continue
        if budget is not None and np.isclose(beta, budget.beta):  # the budget decides here, the ESS is a diagnostic
            log.info("%s: beta = %g, N = %d: particle-number budget: remaining N error of W2 <= %.3g x W2 (95%%; "
                     "%.3g x W2 reached at N ~ %.3g), departure time per doubling of N in [%.3g, %.3g]; median ESS "
                     "down to %.1f (a diagnostic here)", name, beta, budget.tokens, budget.w2_ratio,
                     float(experiment["fit"]["particle_error_fraction"]), budget.tokens_needed,
                     *budget.slope_interval, low)
            continue
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
