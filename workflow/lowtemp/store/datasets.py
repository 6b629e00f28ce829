"""What each NetCDF of the pipeline holds: variables, dimensions, attributes.

One builder per file, fed with computed arrays (no numerics here), and the
readers of the stored inputs. ``lowtemp.store.io`` writes and reads them (schema
version, kind, provenance, atomic writes); README.md's table "What appears in
``results/``" describes them for a reader of the files.

===========================  ==========================================  ==============================================
file                         builder                                     written by (``lowtemp.stages.…``)
===========================  ==========================================  ==============================================
matrices.nc                  ``matrices_dataset``                        ``matrices.stage_matrices``
initial_tokens.nc            ``initial_tokens_dataset``                  ``initial_tokens.stage_initial_tokens``
finite_temperature/*.nc      ``finite_temperature_dataset``              ``simulate.stage_finite_temperature``
                             ``mean_field_dataset``                      ``simulate.stage_mean_field``
zero_temperature.nc          ``zero_temperature_dataset``                ``simulate.stage_zero_temperature``
distances/beta*.nc           ``distances_beta_dataset``                  ``distances.stage_distances_beta``
distances.nc                 ``distances_dataset``                       ``distances.stage_distances``
particle_error/beta*.nc      ``particle_error_beta_dataset``             ``distances.stage_particle_error_beta``
particle_error.nc            ``particle_error_dataset``                  ``distances.stage_particle_error``
convergence.nc               ``convergence_dataset``                     ``convergence.stage_convergence``
fit.nc                       ``fit_dataset``                             ``fit.stage_fit``
===========================  ==========================================  ==============================================

fit.nc's numbers come from ``lowtemp.analysis.estimates``; claims.nc is laid out by
``lowtemp.analysis.claims.claims_dataset``, next to the checks that fill it.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..dynamics import integrate
from ..model import matrices
from . import io

#: a trajectory and a curve in the package's one layout (``layout.ORDER``)
TRAJECTORY = ("replica", "time", "token", "dim")
CURVE = ("replica", "time")


# ------------------------------------------------------------------ matrices.nc
def matrices_dataset(M: matrices.AttentionMatrices) -> xr.Dataset:
    """matrices.nc: K, Q, V, B, A, the spectrum of A, E1, γ, σ(B), the rate bounds, V's eigenspaces."""
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
            "E1_V_real": (
                ("dim", "e1_v_real"),
                M.E1_V_real,
                io.attrs("orthonormal basis of the leading eigenspace of V (largest real part)"),
            ),
            "E1_V_modulus": (
                ("dim", "e1_v_modulus"),
                M.E1_V_modulus,
                io.attrs("orthonormal basis of the leading eigenspace of V (largest modulus)"),
            ),
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
    ds.attrs["V_leading_differs"] = int(
        M.E1_V_real.shape != M.E1_V_modulus.shape
        or not np.allclose(M.E1_V_real @ M.E1_V_real.T, M.E1_V_modulus @ M.E1_V_modulus.T)
    )
    return ds


def load_matrices(path) -> matrices.AttentionMatrices:
    """Matrices from matrices.nc, re-checked against Assumption 1."""
    ds = io.read_netcdf(path, "matrices")
    return matrices.check_assumption_1(ds["K"].values, ds["Q"].values, ds["V"].values)


# ------------------------------------------------------------------ initial_tokens.nc
def initial_tokens_dataset(X0: np.ndarray, moment: np.ndarray) -> xr.Dataset:
    """initial_tokens.nc: the tokens (replica, token, dim) and the Assumption 2 moment per replica."""
    return xr.Dataset(
        {
            "tokens": (("replica", "token", "dim"), X0, io.attrs("initial token positions x_i(0) on the sphere")),
            "assumption_2_moment": (
                ("replica",),
                moment,
                io.attrs("empirical moment mean_i |P1 x_i|^(-1/2) (Assumption 2)"),
            ),
        },
        coords={"replica": np.arange(X0.shape[0])},
    )


def load_initial_tokens(path) -> np.ndarray:
    """The initial tokens (replica, token, dim) from initial_tokens.nc."""
    return io.read_netcdf(path, "initial_tokens")["tokens"].values


def load_inputs(matrices_path, tokens_path) -> tuple[matrices.AttentionMatrices, np.ndarray]:
    """The stored inputs every stage after ``initial_tokens`` starts from: the checked matrices and the tokens."""
    return load_matrices(matrices_path), load_initial_tokens(tokens_path)


# ------------------------------------------------------------------ simulations
def _positions_dataset(
    positions,
    grid: integrate.TimeGrid,
    description: str,
    record: integrate.StepRecord,
    method: str,
    tolerance: float | None,
) -> xr.Dataset:
    """The simulation outputs shared by both temperatures: positions and the integrator's record."""
    per_interval = "over the steps from the previous snapshot to this one (0 at t = 0)"
    ds = xr.Dataset(
        {
            "positions": (TRAJECTORY, positions, io.attrs(description)),
            "norm_drift": (
                CURVE,
                record.drift,
                io.attrs(
                    "largest | |x| - 1 | of any token after an accepted integrator step and before "
                    f"its renormalisation, {per_interval}: a lower bound on those steps' local error, "
                    "O(h^5) per step for rk4, O(h^2) for euler; a step above "
                    f"{integrate.DRIFT_TOLERANCE:g} stops a fixed-step run and is rejected by an "
                    "adaptive one"
                ),
            ),
            "field_evaluations": (
                ("time",),
                record.evaluations,
                io.attrs(f"evaluations of the velocity field {per_interval}, rejected trial steps included"),
            ),
            "accepted_steps": (("time",), record.accepted, io.attrs(f"integrator steps taken {per_interval}")),
            "rejected_steps": (
                ("time",),
                record.rejected,
                io.attrs(f"trial steps rejected by the error control {per_interval} (0 for a fixed step)"),
            ),
        },
        coords={
            "time": ("time", grid.times, io.attrs("time t (depth of the infinite-depth transformer)", "1")),
            "replica": np.arange(positions.shape[0]),
        },
    )
    ds.attrs.update(integrator=method, step=grid.step)
    if tolerance is not None:
        ds.attrs["tolerance"] = float(tolerance)
    return ds


def finite_temperature_dataset(
    positions, record, ess, grid: integrate.TimeGrid, beta: float, method: str, tolerance: float | None, kernel: str
) -> xr.Dataset:
    """finite_temperature/beta<β>.nc: positions, the integrator's record, and the median and 5th
    percentile over tokens of the effective sample size ``ess`` (replica, time, token)."""
    ds = _positions_dataset(positions, grid, "token positions at finite temperature", record, method, tolerance)
    ds["ess_median"] = (
        CURVE,
        np.median(ess, axis=-1),
        io.attrs("median over tokens of the effective sample size 1/sum_j w_ij^2"),
    )
    ds["ess_p05"] = (
        CURVE,
        np.percentile(ess, 5, axis=-1),
        io.attrs("5th percentile over tokens of the effective sample size"),
    )
    ds = ds.assign_coords(beta=((), beta, io.attrs("inverse temperature beta")))
    ds.attrs.update(kernel=kernel)
    return ds


def mean_field_dataset(
    positions,
    error,
    coarse_dist_A,
    cells,
    grid: integrate.TimeGrid,
    beta: float,
    reference: dict,
    fold_w2=None,
) -> xr.Dataset:
    """finite_temperature/beta<β>.nc of a mean-field experiment: the reference's push-forward of the initial
    tokens (replica, time, token, dim) in place of particle positions, with the reference's error estimate
    (replica, time), the coarser reference's distance to E1(A), the finer reference's size per snapshot
    (``cells``: cells on the circle or the axisymmetric sphere, triangles on S²), and no ESS (NaN: no finite
    sample). ``reference`` holds what the file says about the solver (attributes ``reference_<key>``: its geometry,
    resolution and field evaluations); ``fold_w2`` (time,), on S² only, the bound on the W2 the mesh's folds have
    cost (``sphere_meanfield.fold_w2``, the larger of the two levels')."""
    nr, nt = positions.shape[:2]
    record = integrate.StepRecord(
        np.zeros((nr, nt)),
        np.zeros(nt, dtype=np.int64),
        np.zeros(nt, dtype=np.int64),
        np.zeros(nt, dtype=np.int64),
        np.zeros(nt),
    )
    ds = _positions_dataset(
        positions, grid, "the mean-field reference's push-forward of the initial tokens", record, "mean_field", None
    )
    for key in ("norm_drift", "field_evaluations", "accepted_steps", "rejected_steps"):
        ds = ds.drop_vars(key)
    nan = np.full((nr, nt), np.nan)
    ds["ess_median"] = (CURVE, nan, io.attrs("effective sample size: none for the mean field (NaN)"))
    ds["ess_p05"] = (CURVE, nan.copy(), io.attrs("effective sample size: none for the mean field (NaN)"))
    for key, value in REFERENCE_VARIABLES.items():
        ds[key] = (
            CURVE,
            {"reference_error": error, "reference_dist_leading_A": coarse_dist_A}[key].reshape(nr, nt),
            value,
        )
    ds["reference_cells"] = (
        ("time",),
        np.asarray(cells).astype(np.int64),
        io.attrs("cells (triangles on S²) of the finer reference"),
    )
    if fold_w2 is not None:
        ds["reference_fold_w2"] = (
            ("time",),
            np.asarray(fold_w2, dtype=float),
            io.attrs(
                "bound on the W2 the S² mesh's folds have cost by this time (fold repairs so far, and mass left "
                "inside out), the larger of the two levels', included in reference_error; 0 where the mesh never "
                "folded"
            ),
        )
    ds = ds.assign_coords(beta=((), beta, io.attrs("inverse temperature beta")))
    ds.attrs.update(model="mean_field", kernel="mean_field", **{f"reference_{k}": v for k, v in reference.items()})
    del ds.attrs["step"]
    return ds


#: what a mean-field experiment's simulation file adds (replica, time), carried to distances.nc
REFERENCE_VARIABLES = {
    "reference_error": io.attrs(
        "root mean square distance between the push-forwards of the same tokens by the mean-field reference and "
        "by its coarser solution (twice the cell width on the circle, one icosphere level down on S²): an upper "
        "bound of W2 between the two, the error estimate of the finer one (on S², plus the bound on what the mesh's "
        "folds cost, reference_fold_w2)"
    ),
    "reference_dist_leading_A": io.attrs(
        "dist_leading_A of the coarser mean-field reference (twice the cell width, or one icosphere level down): "
        "its departure, compared "
        "with the finer one's, is the departure time's resolution"
    ),
}


def zero_temperature_dataset(
    positions, record, reference, error, grid: integrate.TimeGrid, method: str, tolerance: float | None
) -> xr.Dataset:
    """zero_temperature.nc: integrated positions, the integrator's record, the exact solution and the
    largest deviation."""
    ds = _positions_dataset(
        positions, grid, "token positions at zero temperature (Eq. 3, integrated)", record, method, tolerance
    )
    ds["positions_exact"] = (
        TRAJECTORY,
        reference,
        io.attrs("exact time-changed solution e^{s(t)A}x0/|e^{s(t)A}x0|"),
    )
    ds["max_error_vs_exact"] = (("time",), error, io.attrs("max |x_integrated - x_exact| over all tokens"))
    return ds


# ------------------------------------------------------------------ distances
#: attributes of the distance curves (their ``_zero_temperature`` versions add ", zero temperature")
DISTANCE_ATTRS = {
    "w2_projection": io.attrs("W2(rho^beta_t, Pi_# rho0), chordal cost"),
    "w2_zero_temperature": io.attrs(
        "W2(rho^beta_t, rho^inf_t), chordal cost, exact (certified sparse network "
        "simplex); NaN at snapshots skipped by distances.exact_every"
    ),
    "w2_zero_temperature_sq_bound": io.attrs(
        "certified bound on |w2_zero_temperature^2 - W2^2_opt| (duality gap and rounding, absolute); NaN where "
        "w2_zero_temperature is"
    ),
    "coupling_zero_temperature": io.attrs(
        "sqrt(mean_i |x_i^beta(t) - x_i^inf(t)|^2), synchronous-coupling upper bound on w2_zero_temperature"
    ),
    "w2_zero_to_projection": io.attrs("W2(rho^inf_t, Pi_# rho0), chordal cost"),
    "dist_leading_A": io.attrs("distance to measures on E1(A) ∩ S: sqrt(mean(2 - 2|P1 x|))"),
    "dist_leading_V": io.attrs("distance to measures on V's leading eigenspace (largest real part) ∩ S"),
    "dist_leading_V_modulus": io.attrs("distance to measures on V's leading eigenspace (largest modulus) ∩ S"),
}
#: suffix of the eigenspace distances of the zero-temperature run in distances.nc
ZERO_SUFFIX = "_zero_temperature"


def distances_beta_dataset(curves: dict[str, np.ndarray], finite: xr.Dataset) -> xr.Dataset:
    """distances/beta<β>.nc: the (replica, time) ``curves`` named in ``DISTANCE_ATTRS`` and the ESS of
    the finite-temperature file ``finite`` (whose replica, time and beta coordinates it takes)."""
    ds = xr.Dataset(
        {k: (CURVE, v, DISTANCE_ATTRS[k]) for k, v in curves.items()},
        coords={"time": finite["time"], "replica": finite["replica"], "beta": finite["beta"]},
    )
    for key in ("ess_median", "ess_p05", *REFERENCE_VARIABLES):  # the ESS, or a mean-field experiment's error
        if key in finite:
            ds[key] = finite[key]
    return ds


def distances_dataset(
    parts: list[xr.Dataset], w2_zero_to_projection: np.ndarray, zero_eigenspace: dict[str, np.ndarray]
) -> xr.Dataset:
    """distances.nc: the per-β ``parts`` stacked along ``beta`` (sorted), W2(ρ^∞_t, Π♯ρ0) and the
    zero-temperature eigenspace distances (names ending in ``ZERO_SUFFIX``), all float64."""
    ds = xr.concat(parts, dim="beta").sortby("beta")
    ds = ds.drop_attrs()
    ds["w2_zero_to_projection"] = (CURVE, w2_zero_to_projection, DISTANCE_ATTRS["w2_zero_to_projection"])
    for key, val in zero_eigenspace.items():
        ds[key] = (
            CURVE,
            val,
            io.attrs(DISTANCE_ATTRS[key.replace(ZERO_SUFFIX, "")]["long_name"] + ", zero temperature"),
        )
    for key, attrs in {**DISTANCE_ATTRS, **REFERENCE_VARIABLES}.items():
        if key in ds:
            ds[key].attrs = attrs
    ds["beta"].attrs = io.attrs("inverse temperature beta")
    ds["time"].attrs = io.attrs("time t", "1")
    for v in ds.data_vars:
        ds[v] = ds[v].astype("float64")
    return ds


# ------------------------------------------------------------------ particle_error/beta*.nc, particle_error.nc
#: the particle runs against a mean-field reference: dimensions in one β's file, long name and units (the numbers:
#: ``lowtemp.stages.distances.stage_particle_error_beta``); particle_error.nc stacks them along ``beta``
PARTICLE_ERROR_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "particle_error": (
        ("tokens", "replica", "time"),
        "W2 between the particle cloud of the first n initial tokens at t and the mean-field reference's "
        "push-forward of the same n tokens at t, chordal cost, exact (certified sparse network simplex); NaN at "
        "snapshots skipped by distances.exact_every",
        "1",
    ),
    "particle_error_sq_bound": (
        ("tokens", "replica", "time"),
        "certified bound on |particle_error^2 - W2^2_opt| (duality gap and rounding, absolute); NaN where "
        "particle_error is",
        "1",
    ),
    "particle_coupling": (
        ("tokens", "replica", "time"),
        "sqrt(mean_i |x_i(t) - y_i(t)|^2) between every particle and the reference's push-forward of its own "
        "initial token: an upper bound on particle_error, at every snapshot",
        "1",
    ),
    "ess_median": (
        ("tokens", "replica", "time"),
        "median over tokens of the particle system's effective sample size 1/sum_j w_ij^2 of the softmax (a "
        "diagnostic; the error itself is particle_error)",
        "1",
    ),
    "reference_error": (
        ("replica", "time"),
        "the mean-field reference's error estimate (finite_temperature/beta<beta>.nc, over all its tokens): "
        "particle_error differs from W2 to the exact mean field's push-forward by at most the reference's own "
        "W2 error, which this bounds where the cells converge",
        "1",
    ),
}


#: the particle runs' settings, attributes of both files: integrator, its step, and per particle number the kernel
#: and the tolerance (null for a fixed step)
PARTICLE_RUN_ATTRS = ("integrator", "step", "kernels", "tolerances")


def particle_error_beta_dataset(values: dict, tokens, finite: xr.Dataset, attrs: dict) -> xr.Dataset:
    """particle_error/beta<β>.nc: one array per name of ``PARTICLE_ERROR_VARIABLES`` (the particle runs' curves
    (tokens, replica, time), a row per particle number of ``tokens``; the reference's ``reference_error``
    (replica, time)), on the replica, time and beta coordinates of the reference's finite-temperature file
    ``finite``; ``attrs`` the runs' settings (``PARTICLE_RUN_ATTRS``). A missing or unknown name raises
    ValueError."""
    if set(values) != set(PARTICLE_ERROR_VARIABLES):
        raise ValueError(
            f"particle_error: no value for {sorted(set(PARTICLE_ERROR_VARIABLES) - set(values))}, "
            f"no layout for {sorted(set(values) - set(PARTICLE_ERROR_VARIABLES))}"
        )
    ds = xr.Dataset(
        {
            name: (dims, np.asarray(values[name], dtype=float), io.attrs(long_name, units))
            for name, (dims, long_name, units) in PARTICLE_ERROR_VARIABLES.items()
        },
        coords={
            "tokens": (
                "tokens",
                np.asarray(tokens, dtype=np.int64),
                io.attrs("number of tokens n of a particle run: the first n initial tokens of every replica"),
            ),
            "replica": finite["replica"],
            "time": finite["time"],
            "beta": finite["beta"],
        },
    )
    ds.attrs.update({key: attrs[key] for key in PARTICLE_RUN_ATTRS})
    return ds


def particle_error_dataset(parts: list[xr.Dataset]) -> xr.Dataset:
    """particle_error.nc: the per-β ``parts`` (``particle_error_beta_dataset``) stacked along ``beta`` (sorted),
    with the runs' settings of the first (every β runs the same particle numbers with the same settings)."""
    ds = xr.concat(parts, dim="beta").sortby("beta")
    ds.attrs = {key: parts[0].attrs[key] for key in PARTICLE_RUN_ATTRS}
    ds["beta"].attrs = io.attrs("inverse temperature beta")
    return ds


# ------------------------------------------------------------------ convergence.nc
#: convergence.nc's variables: dimensions, long name and units (the numbers: ``lowtemp.stages.convergence``)
CONVERGENCE_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "position_difference": (
        ("integrator", "coarse_step", "check_time"),
        "Richardson difference max |X_h - X_h/2| over replicas, tokens, dims, finite temperature",
        "1",
    ),
    "position_order": (
        ("integrator", "check_time"),
        "observed order log2(e(h)/e(h/2)), finite temperature; NaN at the rounding floor",
        "1",
    ),
    "position_error_estimate": (
        ("integrator", "check_time"),
        "Richardson estimate of the position error of the run at the coarsest step: e(h) 2^p/(2^p - 1), p nominal",
        "1",
    ),
    "w2_projection_steps": (
        ("integrator", "step", "step_replica", "check_time"),
        "W2(rho^beta_t, Pi_# rho0) of the run at each step, chordal cost",
        "1",
    ),
    "w2_difference": (("integrator", "coarse_step", "check_time"), "max over replicas of |W2_h - W2_h/2|", "1"),
    "w2_order": (
        ("integrator", "check_time"),
        "observed order of W2(rho^beta_t, Pi_# rho0): log2 of the ratio of successive differences",
        "1",
    ),
    "zero_position_difference": (
        ("integrator", "coarse_step", "check_time"),
        "Richardson difference max |X_h - X_h/2|, zero temperature (Eq. 3)",
        "1",
    ),
    "zero_position_order": (("integrator", "check_time"), "observed order (Richardson), zero temperature", "1"),
    "zero_error_vs_exact": (
        ("integrator", "step", "check_time"),
        "max |X_h - X_exact| against the exact time-changed solution, zero temperature",
        "1",
    ),
    "zero_order_vs_exact": (
        ("integrator", "coarse_step", "check_time"),
        "observed order log2(E(h)/E(h/2)) against the exact solution",
        "1",
    ),
    "nominal_order": (("integrator",), "order of the scheme", "1"),
    "tolerance": (
        ("integrator", "step"),
        "local error tolerance of an adaptive integrator's run at this level (tau / 2^((q+1) k), which halves"
        " its steps k times); NaN for the fixed steps",
        "1",
    ),
    "field_evaluations": (("integrator", "step"), "field evaluations of the finite-temperature run at this level", "1"),
    "zero_field_evaluations": (
        ("integrator", "step"),
        "field evaluations of the zero-temperature run at this level",
        "1",
    ),
    "w2_projection_particles": (
        ("beta", "tokens", "replica", "time"),
        "W2(rho^beta_t, Pi_# rho0) for N tokens, fresh initial tokens per N (the experiment's own run where "
        "reused_run is 1), chordal cost",
        "1",
    ),
    "ess_particles": (
        ("beta", "tokens", "replica", "time"),
        "median over tokens of the effective sample size 1/sum_j w_ij^2 of the softmax, per N",
        "1",
    ),
    "reused_run": (
        ("beta", "tokens"),
        "1: this N is the experiment's own finite-temperature run at the study's beta (its stored tokens and "
        "positions, the first replicas), not a fresh one",
        "1",
    ),
    "w2_mean": (("beta", "tokens", "time"), "mean over replicas of W2(rho^beta_t, Pi_# rho0)", "1"),
    "w2_sem": (("beta", "tokens", "time"), "standard error over replicas (ddof 1)", "1"),
    "w2_min": (("beta", "tokens", "time"), "minimum over replicas", "1"),
    "w2_max": (("beta", "tokens", "time"), "maximum over replicas", "1"),
    "dist_leading_A_particles": (
        ("beta", "tokens", "replica", "time"),
        "distance to measures on E1(A) ∩ S, sqrt(mean(2 - 2|P1 x|)), per N",
        "1",
    ),
    "departure_particles": (
        ("beta", "tokens", "replica"),
        "departure time per N: where the distance to E1(A) rises through end_phase_gap/2, interpolated "
        "between snapshots (NaN: never arrived, or censored)",
        "1",
    ),
    "departure_censored_particles": (("beta", "tokens", "replica"), "1: still metastable at the horizon", "1"),
    "w2_remaining_bound": (
        ("beta", "time"),
        "95% upper bound of |E W2_N - W2_inf| at the experiment's N under E W2_N = W2_inf + a N^-p, p in "
        "budget_exponent_range (inf: no p in the range fits)",
        "1",
    ),
    "w2_budget_exponent": (
        ("beta", "time"),
        "the exponent p that gave the bound",
        "1",
    ),
    "w2_remaining_bound_per_exponent": (
        ("beta", "budget_exponent", "time"),
        "the bound for each exponent p of the grid (NaN: not kept: rejected, and no kept neighbour); "
        "w2_remaining_bound is the largest",
        "1",
    ),
    "w2_at_tokens": (
        ("beta", "time"),
        "mean W2(rho^beta_t, Pi_# rho0) over replicas at the particle number nearest the experiment's N",
        "1",
    ),
    "w2_budget_ratio": (("beta",), "largest w2_remaining_bound / w2_at_tokens for 0 < t <= budget_window_end", "1"),
    "budget_window_end": (
        ("beta",),
        "the earliest departure of any N and replica (the horizon if none): the W2 budget's last time",
        "1",
    ),
    "departure_slope_per_doubling": (
        ("beta", "bound"),
        "95% confidence interval of the slope of the departure time against log2 N (censoring accounted for; "
        "NaN: too few departures)",
        "1",
    ),
    "departure_slope_bound": (
        ("beta",),
        "95% upper bound of |departure slope per doubling of N| (inf: arrival at the metastable phase depends"
        " on N or the draw, or too few departures to measure; NaN: no run arrived)",
        "1",
    ),
}


def convergence_dataset(
    values: dict,
    *,
    methods,
    steps,
    check_times,
    step_replicas: int,
    tokens,
    replicas: int,
    times,
    budget_exponents,
    betas,
    attrs: dict,
) -> xr.Dataset:
    """convergence.nc: the step-halving and tolerance study (dimensions integrator, step or coarse_step,
    check_time; an adaptive integrator's level k is the tolerance that halves its step k times) and the
    particle-number study (beta, tokens, replica, time: one study per β of ``betas``, its budget's values per β
    too); ``values`` holds one array per name of
    ``CONVERGENCE_VARIABLES`` (see ``lowtemp.stages.convergence`` for each quantity; a missing or unknown name
    raises ValueError), ``attrs`` the run's settings (β, sizes, kernels, rounding floor, the budget's exponent
    range and confidence)."""
    if set(values) != set(CONVERGENCE_VARIABLES):
        raise ValueError(
            f"convergence.nc: no value for {sorted(set(CONVERGENCE_VARIABLES) - set(values))}, "
            f"no layout for {sorted(set(values) - set(CONVERGENCE_VARIABLES))}"
        )
    steps = np.asarray(steps)
    data = {
        name: (dims, values[name], io.attrs(long_name, units))
        for name, (dims, long_name, units) in CONVERGENCE_VARIABLES.items()
    }
    ds = xr.Dataset(
        data,
        coords={
            "integrator": methods,
            "step": (
                "step",
                steps,
                io.attrs(
                    "time step h (adaptive integrators: h/2^k stands for their level k, whose first trial step is h)",
                    "1",
                ),
            ),
            "coarse_step": ("coarse_step", steps[:-1], io.attrs("coarser step h of a pair (h, h/2)", "1")),
            "check_time": ("check_time", np.asarray(check_times), io.attrs("fixed time of the step study", "1")),
            "step_replica": np.arange(step_replicas),
            "beta": ("beta", np.asarray(betas, dtype=float), io.attrs("inverse temperature of the particle study")),
            "tokens": ("tokens", np.asarray(tokens), io.attrs("number of tokens N")),
            "bound": ["lower", "upper"],
            "replica": np.arange(replicas),
            "time": ("time", times, io.attrs("time t", "1")),
            "budget_exponent": (
                "budget_exponent",
                budget_exponents,
                io.attrs("exponent p of the budget's model E W2_N = W2_inf + a N^-p", "1"),
            ),
        },
    )
    ds.attrs.update(attrs)
    return ds


# ------------------------------------------------------------------ fit.nc
#: fit.nc's variables: dimensions, long name and units. In a long name, {level} stands for the intervals'
#: coverage, {t_early} for the early time and {confidence} for the confidence in percent. The numbers come
#: from ``lowtemp.analysis.estimates.fit_experiment``; this table is their one layout.
FIT_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "c_regime": (("regime", "replica"), "decay rate of W2(rho^inf_t, Pi_# rho0) fitted in each regime", "1/time"),
    "c_regime_mean": (("regime",), "decay rate per regime, mean over replicas (NaN: no window)", "1/time"),
    "c_regime_interval": (("regime", "bound"), "decay rate per regime, {level}", "1/time"),
    "c_regime_window": (("regime", "bound"), "time window of the decay fit per regime", "1"),
    "rate_predicted": (("regime", "bound"), "predicted decay rate per regime (low, high; equal when sharp)", "1/time"),
    "rate_prediction_note": (("regime",), "the formula of the predicted rate", "1"),
    "regime_boundary": (
        (),
        "time t* at which the N tokens pass from the early (mean-field) to the late (finite-N) regime",
        "1",
    ),
    "regime_band": (("bound",), "transition band around t*, left out of both rate fits", "1"),
    "transient_end": (
        (),
        "time before which the bulk's nonlinear transient, not a channel, sets the decay "
        "(rates.transient_end); left out of both rate fits",
        "1",
    ),
    "rate_lower": ((), "gamma / sigma_max(B)", "1/time"),
    "rate_upper": ((), "gamma / sigma_min(B)", "1/time"),
    "C1": (
        ("replica",),
        "growth rate C1 of W2(rho^beta_t, rho^inf_t)/sqrt(log(beta+1)/beta), shared over beta",
        "1/time",
    ),
    "C1_mean": ((), "C1, mean over replicas", "1/time"),
    "C1_interval": (("bound",), "C1, {level}", "1/time"),
    "C1_per_beta": (("beta", "replica"), "growth rate fitted for each beta alone", "1/time"),
    "log_a": (("beta", "replica"), "intercept log a per beta of the C1 fit", "1"),
    "C1_window": (("beta", "bound"), "time window of the C1 fit per beta", "1"),
    "calibration_beta": (
        ("beta",),
        "beta used to calibrate the bound: the smallest resolved beta with a growth window; the bound is "
        "tested on the resolved beta above them",
        "1",
    ),
    "bound_C1": ((), "C1 of the bound, fitted on the calibration beta", "1/time"),
    "bound_c": ((), "c of the bound: the slower of the two regime rates", "1/time"),
    "bound_b": ((), "b: smallest value with b e^{-ct} above W2(rho^inf_t, Pi_# rho0) (beta = inf)", "1"),
    "bound_a": (
        (),
        "a: smallest value with a sqrt(log(beta+1)/beta) e^{C1 t} + b e^{-ct} above W2(rho^beta_t, Pi_# rho0)"
        " on the calibration data up to departure",
        "1",
    ),
    "early_error": (
        ("beta", "replica"),
        "W2(rho^beta_t, rho^inf_t) at the early time t = {t_early} (NaN: no exact snapshot within early_time/2)",
        "1",
    ),
    "temperature_beta_used": (
        ("beta",),
        "beta resolved over [0, early time] (median ESS >= ess_threshold), not departed by then, with a "
        "positive exact W2: the exponent's beta",
        "1",
    ),
    "temperature_pair_interval": (("pair", "bound"), "exponent of beta between consecutive used beta, {level}", "1"),
    "temperature_pair_bound_exponent": (
        ("pair",),
        "local exponent of sqrt(log(beta+1)/beta) between the same beta",
        "1",
    ),
    "temperature_exponent": (("replica",), "exponent of beta of early_error over the used beta", "1"),
    "temperature_exponent_interval": (("bound",), "exponent of beta, {level}", "1"),
    "temperature_bound_exponent": ((), "local exponent of sqrt(log(beta+1)/beta) over the used beta", "1"),
    "departure_time": (
        ("beta", "replica"),
        "first time after the metastable phase at which the tokens are farther than end_phase_gap/2 from "
        "E1(A); NaN: never arrived or censored",
        "1",
    ),
    "departure_censored": (
        ("beta", "replica"),
        "still in the metastable phase at the horizon (departure beyond it)",
        "1",
    ),
    "metastable_beta_used": (
        ("beta",),
        "beta whose departure time is resolved: the departure slope per doubling of N within the budget where"
        " measured, else median ESS >= ess_threshold up to departure",
        "1",
    ),
    "metastable_slope": (
        ("replica", "bound"),
        "bounds on the slope of departure time against log beta per replica (departures known to a snapshot "
        "step, censored ones beyond the horizon; +-inf: unbounded)",
        "1",
    ),
    "metastable_slope_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of the slope's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_curvature_linear": (
        ("replica", "bound"),
        "bounds per replica on k_lin, the quadratic coefficient of the least-squares fit of the departure time "
        "against (log beta, log^2 beta) over metastable_beta_used (0 for a log-beta law; NaN: fewer than 3 beta; "
        "bounds as for metastable_slope)",
        "1",
    ),
    "departure_curvature_linear_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of k_lin's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_curvature_log": (
        ("replica", "bound"),
        "bounds per replica on k_log, the same quadratic coefficient for log(departure time) (0 for a power law "
        "c beta^p; a departure range reaching down to time 0 leaves no lower bound on its log)",
        "1",
    ),
    "departure_curvature_log_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of k_log's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_power": (
        ("replica", "bound"),
        "bounds per replica on p, the least-squares slope of log(departure time) against log beta (the exponent "
        "of beta if the departure time is a power of beta)",
        "1",
    ),
    "departure_power_interval": (
        ("bound",),
        "one-sided {confidence}% Student-t lower bound of p's lower bounds and upper bound of its upper bounds",
        "1",
    ),
    "departure_law": (
        (),
        "law of the departure time in beta (lowtemp.analysis.fitting.DepartureLaw): 2 a power of beta (k_lin's "
        "interval above 0, k_log's contains 0), 1 log beta (k_log's interval below 0, k_lin's contains 0), 0 neither "
        "log beta nor a power of beta (both intervals exclude 0 otherwise), -1 undecided (any other case), -2 not "
        "evaluable (fewer than 3 beta used, or fewer than 2 replicas with a curvature)",
        "1",
    ),
    "judged_until": (
        ("beta", "replica"),
        "last time of the metastable phase judged against the bound (departure; horizon if censored or no end"
        " phase; NaN: never arrived, not judged)",
        "1",
    ),
    "ess_min_early": (("beta",), "smallest median ESS over [0, early time]", "1"),
    "particle_budget_measured": (
        ("beta",),
        "the particle-number budget was measured at this beta (convergence.nc): it decides, the ESS is a diagnostic",
        "1",
    ),
    "particle_budget_w2_ratio": (
        ("beta",),
        "95% upper bound of the remaining N error of W2(rho^beta_t, Pi_# rho0) over W2, largest before the "
        "earliest departure (NaN: not measured)",
        "1",
    ),
    "particle_budget_departure_slope": (
        ("beta",),
        "95% upper bound of |d departure time / d log2 N| (NaN: not measured or no departure)",
        "1",
    ),
    "particle_budget_departure_slope_interval": (
        ("beta", "bound"),
        "95% interval of d departure time / d log2 N (NaN: not measured or too few departures)",
        "1",
    ),
    "particle_budget_w2_resolved": (
        ("beta",),
        "the W2 budget was measured here and met (particle_budget_w2_ratio <= particle_error_fraction)",
        "1",
    ),
    "particle_budget_departure_resolved": (
        ("beta",),
        "the departure budget was measured here and met (slope bound <= particle_error_fraction of a snapshot"
        " interval, or no departure to judge)",
        "1",
    ),
    "particle_budget_tokens_needed": (
        ("beta",),
        "the N at which the W2 budget's bound would reach particle_error_fraction of W2, projected with its "
        "own power law (the slowest exponent that fits; inf: no exponent fits; NaN: not measured)",
        "1",
    ),
    "resolved_early": (
        ("beta",),
        "resolved over [0, early time]: the W2 budget where measured, else median ESS >= ess_threshold",
        "1",
    ),
    "resolved_to_departure": (
        ("beta",),
        "resolved up to the last departure: the W2 budget where measured, else median ESS",
        "1",
    ),
    "resolved_to_horizon": (
        ("beta",),
        "resolved over the whole run: the W2 budget where measured, else median ESS",
        "1",
    ),
    "ess_min_to_departure": (("beta",), "smallest median ESS up to the last departure", "1"),
    "ess_min_to_horizon": (("beta",), "smallest median ESS over the whole run", "1"),
}
#: the mean-field reference's own error, in the fit.nc of a ``model: mean_field`` experiment
FIT_REFERENCE_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "reference_error_early": (
        ("beta",),
        "mean-field reference: its error bound over W2(rho^beta_t, rho^inf_t) at the early time, largest over"
        " replicas (temperature_scaling: resolved at most fit.particle_error_fraction)",
        "1",
    ),
    "reference_error_to_departure": (
        ("beta",),
        "mean-field reference: its error bound over W2(rho^beta_t, Pi_# rho0), largest up to departure "
        "(bound_above_data, conjecture_1)",
        "1",
    ),
    "reference_error_to_horizon": (
        ("beta",),
        "mean-field reference: its error bound over W2(rho^beta_t, Pi_# rho0), largest over the run",
        "1",
    ),
    "reference_departure_shift": (
        ("beta",),
        "mean-field reference: largest |departure time - that of its coarser solution (twice the cell width, or one "
        "icosphere level down)| over replicas (metastable_log_beta uses a beta where it is at most one snapshot "
        "interval, and widens that beta's departure range by it)",
        "1",
    ),
}


def fit_dataset(values: dict, coords: dict, attrs: dict) -> xr.Dataset:
    """fit.nc from the estimators' ``values`` (one per name of ``FIT_VARIABLES``, and of
    ``FIT_REFERENCE_VARIABLES`` for a mean-field experiment), its coordinates and attributes (``confidence``
    and ``early_time`` fill the long names); a missing or unknown name raises ValueError."""
    layout = {**FIT_VARIABLES, **(FIT_REFERENCE_VARIABLES if "reference_error_early" in values else {})}
    if set(values) != set(layout):
        raise ValueError(
            f"fit.nc: no value for {sorted(set(layout) - set(values))}, "
            f"no layout for {sorted(set(values) - set(layout))}"
        )
    conf = float(attrs["confidence"])
    fills = {
        "{level}": f"{100 * conf:g}% Student-t interval over replicas of the mean",
        "{t_early}": f"{attrs['early_time']:g}",
        "{confidence}": f"{100 * conf:g}",
    }
    data = {}
    for name, (dims, long_name, units) in layout.items():
        for key, text in fills.items():
            long_name = long_name.replace(key, text)
        data[name] = (dims, values[name], io.attrs(long_name, units))
    out = xr.Dataset(data, coords=coords)
    out.attrs.update(attrs)
    return out
