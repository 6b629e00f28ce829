"""What each NetCDF of the pipeline holds: variables, dimensions, attributes.

One builder per file, fed with computed arrays (no numerics here), and the
readers of the stored inputs. ``lowtemp.store.netcdf`` writes and reads them (schema
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
===========================  ==========================================  ==============================================

The files of the studies and the verdicts (convergence.nc, fit.nc, claims.nc) are laid out by
``lowtemp.store.analyses``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..dynamics import integrate
from ..model import matrices
from . import netcdf

#: a trajectory and a curve in the package's one layout (``layout.ORDER``)
TRAJECTORY = ("replica", "time", "token", "dim")
CURVE = ("replica", "time")


# ------------------------------------------------------------------ matrices.nc
def matrices_dataset(M: matrices.AttentionMatrices) -> xr.Dataset:
    """matrices.nc: K, Q, V, B, A, the spectrum of A, E1, γ, σ(B), the rate bounds, V's eigenspaces."""
    sq = ("row", "col")
    ds = xr.Dataset(
        {
            "K": (sq, M.K, netcdf.attrs("key matrix K")),
            "Q": (sq, M.Q, netcdf.attrs("query matrix Q")),
            "V": (sq, M.V, netcdf.attrs("value matrix V")),
            "B": (sq, M.B, netcdf.attrs("B = Q^T K")),
            "A": (sq, M.A, netcdf.attrs("A = V B^T (symmetrised)")),
            "mu": (("eigen",), M.mu, netcdf.attrs("eigenvalues of A, descending")),
            "E1": (("dim", "e1"), M.E1, netcdf.attrs("orthonormal basis of E1, the leading eigenspace of A")),
            "E1_V_real": (
                ("dim", "e1_v_real"),
                M.E1_V_real,
                netcdf.attrs("orthonormal basis of the leading eigenspace of V (largest real part)"),
            ),
            "E1_V_modulus": (
                ("dim", "e1_v_modulus"),
                M.E1_V_modulus,
                netcdf.attrs("orthonormal basis of the leading eigenspace of V (largest modulus)"),
            ),
            "V_eigenvalues_real": (("eigen",), M.V_eigenvalues.real, netcdf.attrs("real part of V's eigenvalues")),
            "V_eigenvalues_imag": (("eigen",), M.V_eigenvalues.imag, netcdf.attrs("imaginary part of V's eigenvalues")),
            "gamma": ((), M.gamma, netcdf.attrs("spectral gap mu1 - mu2 of A")),
            "sigma_min": ((), M.sigma_min, netcdf.attrs("smallest singular value of B")),
            "sigma_max": ((), M.sigma_max, netcdf.attrs("largest singular value of B")),
            "rate_lower": ((), M.rate_bounds[0], netcdf.attrs("gamma / sigma_max(B)", "1/time")),
            "rate_upper": ((), M.rate_bounds[1], netcdf.attrs("gamma / sigma_min(B)", "1/time")),
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
    ds = netcdf.read_netcdf(path, "matrices")
    return matrices.check_assumption_1(ds["K"].values, ds["Q"].values, ds["V"].values)


# ------------------------------------------------------------------ initial_tokens.nc
def initial_tokens_dataset(X0: np.ndarray, moment: np.ndarray) -> xr.Dataset:
    """initial_tokens.nc: the tokens (replica, token, dim) and the Assumption 2 moment per replica."""
    return xr.Dataset(
        {
            "tokens": (("replica", "token", "dim"), X0, netcdf.attrs("initial token positions x_i(0) on the sphere")),
            "assumption_2_moment": (
                ("replica",),
                moment,
                netcdf.attrs("empirical moment mean_i |P1 x_i|^(-1/2) (Assumption 2)"),
            ),
        },
        coords={"replica": np.arange(X0.shape[0])},
    )


def load_initial_tokens(path) -> np.ndarray:
    """The initial tokens (replica, token, dim) from initial_tokens.nc."""
    return netcdf.read_netcdf(path, "initial_tokens")["tokens"].values


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
            "positions": (TRAJECTORY, positions, netcdf.attrs(description)),
            "norm_drift": (
                CURVE,
                record.drift,
                netcdf.attrs(
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
                netcdf.attrs(f"evaluations of the velocity field {per_interval}, rejected trial steps included"),
            ),
            "accepted_steps": (("time",), record.accepted, netcdf.attrs(f"integrator steps taken {per_interval}")),
            "rejected_steps": (
                ("time",),
                record.rejected,
                netcdf.attrs(f"trial steps rejected by the error control {per_interval} (0 for a fixed step)"),
            ),
        },
        coords={
            "time": ("time", grid.times, netcdf.attrs("time t (depth of the infinite-depth transformer)", "1")),
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
        netcdf.attrs("median over tokens of the effective sample size 1/sum_j w_ij^2"),
    )
    ds["ess_p05"] = (
        CURVE,
        np.percentile(ess, 5, axis=-1),
        netcdf.attrs("5th percentile over tokens of the effective sample size"),
    )
    ds = ds.assign_coords(beta=((), beta, netcdf.attrs("inverse temperature beta")))
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
    ds["ess_median"] = (CURVE, nan, netcdf.attrs("effective sample size: none for the mean field (NaN)"))
    ds["ess_p05"] = (CURVE, nan.copy(), netcdf.attrs("effective sample size: none for the mean field (NaN)"))
    for key, value in REFERENCE_VARIABLES.items():
        ds[key] = (
            CURVE,
            {"reference_error": error, "reference_dist_leading_A": coarse_dist_A}[key].reshape(nr, nt),
            value,
        )
    ds["reference_cells"] = (
        ("time",),
        np.asarray(cells).astype(np.int64),
        netcdf.attrs("cells (triangles on S²) of the finer reference"),
    )
    if fold_w2 is not None:
        ds["reference_fold_w2"] = (
            ("time",),
            np.asarray(fold_w2, dtype=float),
            netcdf.attrs(
                "bound on the W2 the S² mesh's folds have cost by this time (fold repairs so far, and mass left "
                "inside out), the larger of the two levels', included in reference_error; 0 where the mesh never "
                "folded"
            ),
        )
    ds = ds.assign_coords(beta=((), beta, netcdf.attrs("inverse temperature beta")))
    ds.attrs.update(model="mean_field", kernel="mean_field", **{f"reference_{k}": v for k, v in reference.items()})
    del ds.attrs["step"]
    return ds


#: what a mean-field experiment's simulation file adds (replica, time), carried to distances.nc
REFERENCE_VARIABLES = {
    "reference_error": netcdf.attrs(
        "root mean square distance between the push-forwards of the same tokens by the mean-field reference and "
        "by its coarser solution (twice the cell width on the circle, one icosphere level down on S²): an upper "
        "bound of W2 between the two, the error estimate of the finer one (on S², plus the bound on what the mesh's "
        "folds cost, reference_fold_w2)"
    ),
    "reference_dist_leading_A": netcdf.attrs(
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
        netcdf.attrs("exact time-changed solution e^{s(t)A}x0/|e^{s(t)A}x0|"),
    )
    ds["max_error_vs_exact"] = (("time",), error, netcdf.attrs("max |x_integrated - x_exact| over all tokens"))
    return ds


# ------------------------------------------------------------------ distances
#: attributes of the distance curves (their ``_zero_temperature`` versions add ", zero temperature")
DISTANCE_ATTRS = {
    "w2_projection": netcdf.attrs("W2(rho^beta_t, Pi_# rho0), chordal cost"),
    "w2_zero_temperature": netcdf.attrs(
        "W2(rho^beta_t, rho^inf_t), chordal cost, exact (certified sparse network "
        "simplex); NaN at snapshots skipped by distances.exact_every"
    ),
    "w2_zero_temperature_sq_bound": netcdf.attrs(
        "certified bound on |w2_zero_temperature^2 - W2^2_opt| (duality gap and rounding, absolute); NaN where "
        "w2_zero_temperature is"
    ),
    "coupling_zero_temperature": netcdf.attrs(
        "sqrt(mean_i |x_i^beta(t) - x_i^inf(t)|^2), synchronous-coupling upper bound on w2_zero_temperature"
    ),
    "w2_zero_to_projection": netcdf.attrs("W2(rho^inf_t, Pi_# rho0), chordal cost"),
    "dist_leading_A": netcdf.attrs("distance to measures on E1(A) ∩ S: sqrt(mean(2 - 2|P1 x|))"),
    "dist_leading_V": netcdf.attrs("distance to measures on V's leading eigenspace (largest real part) ∩ S"),
    "dist_leading_V_modulus": netcdf.attrs("distance to measures on V's leading eigenspace (largest modulus) ∩ S"),
    "tokens_across": netcdf.attrs(
        "tokens on the other side of E1(A)'s orthogonal complement from their initial token (dim E1 = 1; NaN "
        "otherwise)",
        "1",
    ),
    "w2sq_moving_low": netcdf.attrs(
        "lower confidence bound on W2^2(mu, Pi_# rho0) of the measure mu the tokens sample, were it to send the "
        "mass of `moved` tokens net across E1(A)'s orthogonal complement: the (1 - fit.confidence)/2 quantile over "
        "tokens resampled with replacement (dim E1 = 1; NaN otherwise)"
    ),
    "tokens_across_net": netcdf.attrs(
        "|tokens on u's side now - initially|: those the plan to Pi_# rho0's two atoms sends to the farther one "
        "(dim E1 = 1; NaN otherwise)",
        "1",
    ),
}
#: suffix of the eigenspace distances of the zero-temperature run in distances.nc
ZERO_SUFFIX = "_zero_temperature"


def distances_beta_dataset(curves: dict[str, np.ndarray], finite: xr.Dataset) -> xr.Dataset:
    """distances/beta<β>.nc: the (replica, time) ``curves`` named in ``DISTANCE_ATTRS`` (a third axis, ``moved``,
    where a curve has one: j = 0, 1, … net tokens sent) and the ESS of the finite-temperature file ``finite``
    (whose replica, time and beta coordinates it takes)."""
    ds = xr.Dataset(
        {k: ((*CURVE, "moved")[: np.ndim(v)], v, DISTANCE_ATTRS[k]) for k, v in curves.items()},
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
            netcdf.attrs(DISTANCE_ATTRS[key.replace(ZERO_SUFFIX, "")]["long_name"] + ", zero temperature"),
        )
    for key, attrs in {**DISTANCE_ATTRS, **REFERENCE_VARIABLES}.items():
        if key in ds:
            ds[key].attrs = attrs
    ds["beta"].attrs = netcdf.attrs("inverse temperature beta")
    ds["time"].attrs = netcdf.attrs("time t", "1")
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
    "w2_projection": (
        ("tokens", "replica", "time"),
        "W2(rho_t, Pi#rho0) of the particle run of n tokens: W2 between its cloud at t and the projections onto "
        "E1(A) ∩ S of its own n initial tokens (as distances.nc's w2_projection for the reference), at every snapshot",
        "1",
    ),
    "dist_leading_A": (
        ("tokens", "replica", "time"),
        "distance of the particle run of n tokens to measures on E1(A) ∩ S, sqrt(mean_i (2 - 2|P1 x_i|)) (as "
        "distances.nc's dist_leading_A for the reference): its departure against the reference's, at every snapshot",
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
            name: (dims, np.asarray(values[name], dtype=float), netcdf.attrs(long_name, units))
            for name, (dims, long_name, units) in PARTICLE_ERROR_VARIABLES.items()
        },
        coords={
            "tokens": (
                "tokens",
                np.asarray(tokens, dtype=np.int64),
                netcdf.attrs("number of tokens n of a particle run: the first n initial tokens of every replica"),
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
    ds["beta"].attrs = netcdf.attrs("inverse temperature beta")
    return ds
