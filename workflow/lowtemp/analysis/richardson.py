"""Richardson's reading of step halving (docs/convergence.md): a scheme of order p gives
X_h(t) = X(t) + C(t) h^p + O(h^{p+1}), hence

    e(h) = max |X_h − X_{h/2}| = |C| h^p (1 − 2^{−p}) + …,    e(h)/e(h/2) → 2^p,

so the observed order is p_obs = log2(e(h)/e(h/2)) from the runs at h, h/2, h/4, and the error of the run at h is
about e(h)·2^p/(2^p − 1). Differences below ``ROUNDING_FLOOR`` are rounding, not truncation: no order is read from
them. Also the replica statistics of a study's curves. Arrays in, numbers out: runs (level, replica, time, token,
dim), curves (…, replica, time).
"""

from __future__ import annotations

import numpy as np

#: differences below this (about 450 machine epsilons on unit vectors) are rounding
ROUNDING_FLOOR = 1e-13


def _max_per_level_and_time(a: np.ndarray) -> np.ndarray:
    """max over every axis of (level, …, time, token, dim) but the level and the time: (level, time)."""
    time_axis = a.ndim - 3
    return np.max(a, axis=tuple(i for i in range(1, a.ndim) if i != time_axis))


def successive_differences(runs: np.ndarray) -> np.ndarray:
    """e(h_k) = max over (replica, token, dim) of |X_{h_k} − X_{h_{k+1}}|, shape (level − 1, time), for runs
    (level, replica, time, token, dim)."""
    runs = np.asarray(runs)
    return _max_per_level_and_time(np.abs(runs[:-1] - runs[1:]))


def errors_against(runs: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """max |X_{h_k} − X_exact| per level and time, shape (level, time)."""
    runs = np.asarray(runs)
    return _max_per_level_and_time(np.abs(runs - np.asarray(reference)[None]))


def observed_order(coarse, fine, floor: float = ROUNDING_FLOOR) -> np.ndarray:
    """p_obs = log2(e(h)/e(h/2)); NaN where either error is at the rounding floor."""
    coarse = np.asarray(coarse, dtype=float)
    fine = np.asarray(fine, dtype=float)
    ok = (coarse > floor) & (fine > floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, np.log2(coarse / fine), np.nan)


def richardson_error(difference, order: float) -> np.ndarray:
    """Error of the run at h from e(h) = |X_h − X_{h/2}|: e(h)·2^p/(2^p − 1)."""
    return np.asarray(difference, dtype=float) * 2.0**order / (2.0**order - 1.0)


def replica_statistics(values: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, standard error (ddof 1), min and max over the replica axis (axis −2 of (…, replica, time))."""
    values = np.asarray(values, dtype=float)
    r = values.shape[-2]
    return {
        "mean": values.mean(axis=-2),
        "sem": values.std(axis=-2, ddof=1) / np.sqrt(r),
        "min": values.min(axis=-2),
        "max": values.max(axis=-2),
    }
