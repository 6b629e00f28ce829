"""Convergence studies: step halving and tolerance, and particle number (docs/convergence.md).

Step halving. There is no exact solution of the particle system at finite β, so
the error of a run at step h is estimated by Richardson's argument: a scheme of
order p gives X_h(t) = X(t) + C(t) h^p + O(h^{p+1}), hence

    e(h) = max |X_h − X_{h/2}| = |C| h^p (1 − 2^{−p}) + …,    e(h)/e(h/2) → 2^p,

so the observed order is p_obs = log2(e(h)/e(h/2)) from the runs at h, h/2, h/4,
and the error of the run at h is about e(h)·2^p/(2^p − 1) (p the nominal order:
4 for ``rk4``, 1 for ``euler``). The same is done at zero temperature (Eq. 3),
where the exact time-changed solution (``lowtemp.model.exact``) also gives the error
itself, an independent check of the estimate. Differences below
``ROUNDING_FLOOR`` are rounding, not truncation: no order is read from them. The reading itself (differences,
observed orders, error estimates, replica statistics) is ``lowtemp.analysis.richardson``; the particle-number
budget ``lowtemp.analysis.particle_budget.study_budget``.

Tolerance. An adaptive integrator (``integrate.ADAPTIVE``: an embedded pair of
orders p and q) chooses steps h ∝ τ^(1/(q+1)) for a local tolerance τ, capped
at the snapshot interval Δ. Its level k runs at τ/2^((q+1)k) with steps capped
at Δ/2^k, so its steps halve from level to level whichever bound decides them:
the same Richardson reading applies, with the observed order → p (its global
error ∝ h^p ∝ τ). Level 0 is the experiment's own setting (τ for the study's N,
cap Δ). The experiment's adaptive integrator is studied this way beside the two
fixed-step schemes, and the field evaluations of every run are recorded, so the
study also says what each accuracy costs.

Particle number. W2(ρ^β_t, Π♯ρ0) (the closed form against ±u for dim E1 = 1,
``w2_to_projection``, as in the distances stage), the distance to E1(A) (for the
departure time) and the median effective sample size of the softmax, for N doubling over at
least four values, R ≥ 4 replicas each
drawn afresh from the experiment's initial measure; where N is the experiment's own
token count and β one of its betas, the experiment's run (its first R replicas, i.i.d.
draws from the same ρ0, on the same grid) stands in for a fresh one instead of being
simulated twice (``reused_run`` in convergence.nc). Each fresh run is checkpointed like
the simulation stages. From these the particle-number budget (``lowtemp.analysis.particle_budget``):
the 95 % upper bound of the remaining N error of W2 at the experiment's N under
E W2_N = W2∞ + a·N^−p, relative to W2, before the earliest departure; and the bound on the
departure time's slope per doubling of N. The fit decides with them which claims the
study's β is resolved for (``resolution.particle_budget_verdicts``).

Arrays are in the package's one layout (``lowtemp.model.layout``): tokens (replica, token, dim), a run
(replica, time, token, dim), the runs of the step study stacked as (level, replica, time, token, dim).
"""

from __future__ import annotations

import functools
import logging
import time as _time

import numpy as np

from ..analysis import particle_budget
from ..analysis.particle_budget import BUDGET_CONFIDENCE
from ..analysis.richardson import (
    ROUNDING_FLOOR,
    errors_against,
    observed_order,
    replica_statistics,
    richardson_error,
    successive_differences,
)
from ..config.experiment import initial_measure, stream_name
from ..config.plan import ConfigError
from ..config.studies import (
    NOMINAL_ORDER,
    STEP_LEVELS,
    Settings,
    halving_grids,
    halving_steps,
    level_max_steps,
    level_tolerances,
    nominal_order,
    study_settings,
)
from ..dynamics import fields, integrate, kernels
from ..model import exact, measures, projection
from ..model.seeding import generator
from ..store import analyses, checkpoint, datasets, netcdf
from ..transport.w2 import w2_to_projection_curves
from .joblog import progress_logger

log = logging.getLogger("lowtemp")


# ------------------------------------------------------------------ step halving


def run_halving(
    field, X0: np.ndarray, grids: list[integrate.TimeGrid], method: str, indices, label: str, tolerances=None
) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the runs at h, h/2, h/4 at the snapshot ``indices``: (level, replica, time, token, dim),
    and the field evaluations of each run (level,). An adaptive ``method`` runs its level k at
    ``tolerances[k]`` (``level_tolerances``) with steps capped at ``level_max_steps``, on the grid of
    level k (its step the first trial step)."""
    adaptive = method in integrate.ADAPTIVE
    caps = level_max_steps(grids[0].horizon / grids[0].snapshots, len(grids))
    runs, evaluations = [], []
    for level, grid in enumerate(grids):
        start = _time.perf_counter()
        if adaptive:
            tol, cap = float(tolerances[level]), float(caps[level])
            what = f"tolerance {tol:.3g}, steps <= {cap:g}"
        else:
            tol, cap, what = None, None, f"step {grid.step:g}"
        positions, record = integrate.simulate(
            field, X0, grid, method, label=f"{label}, {what}", tolerance=tol, max_step=cap, return_record=True
        )
        runs.append(positions[:, list(indices)])
        evaluations.append(int(record.evaluations.sum()))
        log.info(
            "%s: %s at %s: %d steps (%d rejected), %d field evaluations, %.1f s",
            label,
            method,
            what,
            record.accepted.sum(),
            record.rejected.sum(),
            evaluations[-1],
            _time.perf_counter() - start,
        )
    return np.stack(runs), np.array(evaluations)


# ------------------------------------------------------------------ particle number
def particle_tokens(name: str, experiment: dict, root_seed: int, n: int, replicas: int) -> np.ndarray:
    """R × N tokens from ρ0, stream (name, "convergence", str(N)): (replica, token, dim)."""
    measure, params = initial_measure(name, experiment, root_seed)
    rng = generator(root_seed, stream_name(name, experiment), "convergence", str(int(n)))
    return measures.sample_initial_tokens(measure, rng, replicas, int(n), int(experiment["dim"]), **params)


# ------------------------------------------------------------------ stage


def _finite_field(S: Settings, beta, M, n_tokens):
    """The field at β for runs of ``n_tokens`` tokens, with the kernel the experiment's rule picks for N."""
    return kernels.AttentionField(M.B, M.V, beta, S.kernel(n_tokens))


def _step_study(label, S: Settings, M, X0):
    """Finite β (Richardson) and zero temperature (Richardson and exact) for every integrator of
    ``study_methods``; also the tolerances (NaN for the fixed steps) and the field evaluations of each run."""
    st = S.steps
    grids = halving_grids(max(st.times), S.interval, st.dt)
    indices = [int(round(t / S.interval)) for t in st.times]
    X0s = np.ascontiguousarray(X0[: st.replicas, : st.tokens])
    field = _finite_field(S, S.beta, M, st.tokens)
    zero_field = fields.ZeroTemperatureField(M.A, M.B)
    reference = exact.exact_zero_temperature(X0s, M.A, M.B, np.asarray(st.times))
    out = {k: [] for k in ("finite", "zero", "w2", "tolerance", "evaluations", "zero_evaluations")}
    for method in S.methods:
        tolerances = (
            level_tolerances(method, S.tolerance(st.tokens))
            if method in integrate.ADAPTIVE
            else np.full(STEP_LEVELS, np.nan)
        )
        runs, evaluations = run_halving(field, X0s, grids, method, indices, f"{label} beta = {S.beta:g}", tolerances)
        zero, zero_evaluations = run_halving(
            zero_field, X0s, grids, method, indices, f"{label} zero temperature", tolerances
        )
        for key, value in (
            ("finite", runs),
            ("zero", zero),
            ("tolerance", tolerances),
            ("evaluations", evaluations),
            ("zero_evaluations", zero_evaluations),
            ("w2", np.stack([w2_to_projection_curves(r, X0s, M.E1) for r in runs])),
        ):
            out[key].append(value)
    return {k: np.stack(v) for k, v in out.items()}, reference, field.kernel


def median_ess(positions: np.ndarray, field: kernels.AttentionField) -> np.ndarray:
    """Median over tokens of the softmax's effective sample size, (replica, time) for positions (replica, time, …)."""
    return np.median(field.trajectory_ess(positions), axis=-1)


def _particle_study(label, S: Settings, M, beta, sample, finite_path=None, checkpoint_dir=None, checkpoint_every=300.0):
    """The particle-number study's runs at one β: W2 to Π♯ρ0, the distance to E1(A) and the median ESS per N,
    (N, replica, time); whether each N reused the experiment's run, the grid, the kernels. ``sample(n, replicas)``
    draws a run's initial tokens (``particle_tokens``)."""
    pa = S.particles
    grid = S.grid
    method = S.integrator
    w2, dist_A, ess, used, reused = [], [], [], [], []
    for n in pa.tokens:
        run = f"{label} beta = {beta:g}, N = {n}"
        if finite_path is not None and n == S.tokens:
            fin = netcdf.read_netcdf(finite_path, "finite_temperature")
            k = grid.times.size
            positions = fin["positions"].values[: pa.replicas, :k]
            X0 = integrate.snapshot(positions, 0)
            used.append(str(fin.attrs.get("kernel", "")))
            reused.append(True)
            ess.append(fin["ess_median"].values[: pa.replicas, :k])
            log.info(
                "%s: the experiment's own run (%s, replicas 0-%d), not simulated again",
                run,
                finite_path,
                pa.replicas - 1,
            )
        else:
            X0 = sample(n, pa.replicas)
            field = _finite_field(S, beta, M, n)
            tolerance = S.tolerance(n)
            used.append(field.kernel)
            reused.append(False)
            log.info(
                "%s: %s, %s, kernel %s", run, method, integrate.describe_steps(grid, method, tolerance), field.kernel
            )
            path = None if checkpoint_dir is None else f"{checkpoint_dir}/convergence_particles_beta{beta!r}_N{n}.nc"
            ckpt = checkpoint.simulation_checkpoint(path, field, X0, grid, method, tolerance, checkpoint_every)
            progress = progress_logger(run, grid, n, pa.replicas)
            positions, _ = integrate.simulate_resumable(
                field, X0, grid, method, ckpt, progress=progress, label=run, tolerance=tolerance
            )
            ess.append(median_ess(positions, field))
            checkpoint.discard(ckpt)
        w2.append(w2_to_projection_curves(positions, X0, M.E1))
        dist_A.append(projection.distance_to_eigenspace(positions, M.E1))  # (replica, time)
        low = np.min(ess[-1])
        log.info(
            "%s: smallest median effective sample size %.1f (t = %g)",
            run,
            low,
            grid.times[np.unravel_index(np.argmin(ess[-1]), ess[-1].shape)[1]],
        )
    return np.stack(w2), np.stack(dist_A), np.stack(ess), reused, grid, used


def _step_study_values(label, S: Settings, M, X0) -> tuple[dict, str]:
    """The step-halving (and tolerance) study's values of convergence.nc, logged per integrator, and the kernel
    its finite-β runs used."""
    methods, st = S.methods, S.steps
    log.info(
        "%s: step halving at beta = %g, steps %s (and tolerances for %s), %d tokens x %d replicas, times %s",
        label,
        S.beta,
        halving_steps(st.dt).tolist(),
        methods[len(NOMINAL_ORDER) :],
        st.tokens,
        st.replicas,
        list(st.times),
    )
    runs, reference, step_kernel = _step_study(label, S, M, X0)
    diff = np.stack([successive_differences(r) for r in runs["finite"]])  # (integrator, pair, time)
    zero_diff = np.stack([successive_differences(r) for r in runs["zero"]])
    zero_err = np.stack([errors_against(r, reference) for r in runs["zero"]])  # (integrator, level, time)
    w2_diff = np.max(np.abs(runs["w2"][:, :-1] - runs["w2"][:, 1:]), axis=2)  # over replicas
    nominal = np.array([nominal_order(m) for m in methods], dtype=float)
    for i, m in enumerate(methods):
        log.info(
            "%s: %s at beta = %g: |X_h - X_h/2| = %s, observed order %s (nominal %d); W2 order %s; field "
            "evaluations %s",
            label,
            m,
            S.beta,
            np.array2string(diff[i, 0], precision=3),
            np.array2string(observed_order(diff[i, 0], diff[i, 1]), precision=2),
            nominal[i],
            np.array2string(observed_order(w2_diff[i, 0], w2_diff[i, 1]), precision=2),
            runs["evaluations"][i].tolist(),
        )
        log.info(
            "%s: %s at zero temperature: error vs exact %s, observed orders %s",
            label,
            m,
            np.array2string(zero_err[i], precision=3),
            np.array2string(observed_order(zero_err[i, :-1], zero_err[i, 1:]), precision=2),
        )
    return {
        "position_difference": diff,
        "position_order": observed_order(diff[:, 0], diff[:, 1]),
        "position_error_estimate": richardson_error(diff[:, 0], nominal[:, None]),
        "w2_projection_steps": runs["w2"],
        "w2_difference": w2_diff,
        "w2_order": observed_order(w2_diff[:, 0], w2_diff[:, 1]),
        "zero_position_difference": zero_diff,
        "zero_position_order": observed_order(zero_diff[:, 0], zero_diff[:, 1]),
        "zero_error_vs_exact": zero_err,
        "zero_order_vs_exact": observed_order(zero_err[:, :-1], zero_err[:, 1:]),
        "nominal_order": nominal,
        "tolerance": runs["tolerance"],
        "field_evaluations": np.asarray(runs["evaluations"], np.float64),
        "zero_field_evaluations": np.asarray(runs["zero_evaluations"], np.float64),
    }, step_kernel


def _particle_study_values(label, S: Settings, M, beta, sample, finite_path, checkpoint_dir, checkpoint_every):
    """The particle-number study's values at one β (one entry of convergence.nc's beta dimension) and its budget at
    the experiment's N (logged, with a warning where the remaining N error may exceed W2), its grid, budget
    exponents and the kernels of its runs."""
    pa = S.particles
    if beta not in S.reused:
        finite_path = None
    w2, dist_A, ess, reused, grid, particle_kernels = _particle_study(
        label, S, M, beta, sample, finite_path, checkpoint_dir, checkpoint_every
    )
    stats = replica_statistics(w2)
    budget = particle_budget.study_budget(pa.tokens, w2, dist_A, grid, S.tokens, M)
    log.info(
        "%s: beta = %g: W2(rho^beta_t, Pi_# rho0) at N = %d: remaining N error <= %.3g x W2 (95%% bound, p in "
        "[%g, %g], t in (0, %g], before the earliest departure); departure time per doubling of N in [%.3g, %.3g] "
        "(95%%)",
        label,
        beta,
        S.tokens,
        budget["w2_budget_ratio"],
        *particle_budget.P_RANGE,
        budget["budget_window_end"],
        *budget["departure_slope_per_doubling"],
    )
    if not budget["w2_budget_ratio"] <= 1.0:
        log.warning(
            "%s: at beta = %g the remaining N error of W2 may exceed W2 itself at N = %d: the particle "
            "system does not stand for the mean field there",
            label,
            beta,
            S.tokens,
        )

    values = {
        "w2_projection_particles": w2,
        "ess_particles": ess,
        "reused_run": np.asarray(reused, dtype=np.float64),
        "w2_mean": stats["mean"],
        "w2_sem": stats["sem"],
        "w2_min": stats["min"],
        "w2_max": stats["max"],
        "dist_leading_A_particles": dist_A,
        "departure_particles": budget["departure"],
        "departure_censored_particles": budget["censored"].astype(np.float64),
        "w2_remaining_bound": budget["w2_remaining_bound"],
        "w2_budget_exponent": budget["w2_budget_exponent"],
        "w2_remaining_bound_per_exponent": budget["w2_bound_per_exponent"],
        "w2_at_tokens": budget["w2_at_tokens"],
        "w2_budget_ratio": budget["w2_budget_ratio"],
        "budget_window_end": budget["budget_window_end"],
        "departure_slope_per_doubling": budget["departure_slope_per_doubling"],
        "departure_slope_bound": budget["departure_slope_bound"],
    }
    return values, grid, budget["budget_exponents"], particle_kernels


def _finite_runs_by_beta(paths) -> dict[float, str]:
    """{β: path} of finite-temperature files, each keyed by the β its provenance records."""
    paths = [paths] if isinstance(paths, str) else list(paths or ())
    out = {}
    for path in paths:
        out[float(netcdf.read_netcdf(path, "finite_temperature")["beta"])] = path
    return out


def _check_step_tokens(X0: np.ndarray, S: Settings, name: str, tokens_path) -> None:
    """ConfigError where the stored initial tokens hold fewer replicas or tokens than the step study runs on."""
    if X0.shape[0] < S.steps.replicas or X0.shape[1] < S.steps.tokens:
        raise ConfigError(
            f"{tokens_path}: holds {X0.shape[0]} replicas x {X0.shape[1]} tokens, fewer than the "
            f"step study's {S.steps.replicas} x {S.steps.tokens} (experiments.{name}.convergence.steps); "
            f"rerun the initial_tokens stage for this config"
        )


def _particle_studies(label, S: Settings, M, sample, by_beta, checkpoint_dir, checkpoint_every):
    """The particle-number study at each of its β: the values of convergence.nc stacked over β, the grid, the
    budget exponents and the kernels its runs used (``by_beta``: β -> the experiment's run there)."""
    pa = S.particles
    per_beta = []
    for beta in pa.betas:
        log.info(
            "%s: particle number at beta = %g, N = %s, %d replicas, horizon %g",
            label,
            beta,
            list(pa.tokens),
            pa.replicas,
            pa.horizon,
        )
        per_beta.append(
            _particle_study_values(label, S, M, beta, sample, by_beta.get(beta), checkpoint_dir, checkpoint_every)
        )
    values = {key: np.stack([v[0][key] for v in per_beta]) for key in per_beta[0][0]}
    kernels_used = sorted({k for v in per_beta for k in v[3]})
    return values, per_beta[0][1], per_beta[0][2], kernels_used


def stage_convergence(
    name,
    experiment,
    root_seed,
    matrices_path,
    tokens_path,
    output,
    finite_paths=(),
    checkpoint_dir=None,
    checkpoint_every=300.0,
):
    """Both studies for one experiment, written to ``convergence.nc``: the step study at the largest of the
    particle study's β (attribute ``beta``), the particle-number study at each of them (dimension ``beta``).
    ``finite_paths``: the experiment's finite-temperature files at those β, reused for N = tokens
    (``reusable_run``; each file says its β); ``checkpoint_dir``: where the fresh particle runs keep their
    checkpoints."""
    S = study_settings(name, experiment)
    sample = functools.partial(particle_tokens, name, experiment, root_seed)
    M = datasets.load_matrices(matrices_path)
    X0 = datasets.load_initial_tokens(tokens_path)
    _check_step_tokens(X0, S, name, tokens_path)
    label = f"{name} convergence"
    start = _time.perf_counter()
    st, pa = S.steps, S.particles
    step_values, step_kernel = _step_study_values(label, S, M, X0)
    log.info("%s: step halving done, %.1f s elapsed", label, _time.perf_counter() - start)

    particle_values, grid, budget_exponents, particle_kernels = _particle_studies(
        label, S, M, sample, _finite_runs_by_beta(finite_paths), checkpoint_dir, checkpoint_every
    )
    ds = analyses.convergence_dataset(
        step_values | particle_values,
        methods=list(S.methods),
        steps=halving_steps(st.dt),
        check_times=st.times,
        step_replicas=st.replicas,
        tokens=pa.tokens,
        replicas=pa.replicas,
        times=grid.times,
        budget_exponents=budget_exponents,
        betas=pa.betas,
        attrs=dict(
            beta=S.beta,
            step_tokens=st.tokens,
            step_replicas=st.replicas,
            step_kernel=step_kernel,
            particle_integrator=S.integrator,
            particle_step=grid.step,
            particle_kernels=",".join(particle_kernels),
            rounding_floor=ROUNDING_FLOOR,
            budget_exponent_range=list(particle_budget.P_RANGE),
            budget_confidence=BUDGET_CONFIDENCE,
            budget_tokens=S.tokens,
        ),
    )
    log.info("%s: done, %.1f s", label, _time.perf_counter() - start)
    netcdf.write_netcdf(ds, output, "convergence", netcdf.provenance(name, experiment, root_seed))
