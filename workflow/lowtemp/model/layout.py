"""The one array layout: every array the package stores or computes on has its dimensions in ``ORDER``.

Outer to inner: what a claim or a fit is about (claim, β, regime, pair of β), the study's levels (integrator,
step, particle number N, budget exponent), then the independent sample (replica), then time (inside it, a curve
over the tokens sent across, ``moved``), then the tokens and their coordinates (a matrix is (row, col), a basis
(dim, e1)), last the bounds of an interval. So a curve is (replica, time), a β's curves are (beta, replica, time),
a cloud is (replica, token, dim) and a trajectory (replica, time, token, dim): the integrator inserts the time
axis before the tokens (``dynamics.integrate.trajectory_shape``); statistics over replicas reduce axis −2 of a
curve, and ``[..., -1]`` is the last time.

``store.netcdf.write_netcdf`` refuses a dataset out of this order (``require_canonical``), so every output
file is in it and no reader transposes. The exceptions are files that are not outputs of the pipeline
(``OWN_AXES_KINDS``): a checkpoint of a loop of solves (``store.checkpoint.SolveCheckpoint``), whose generic axes
only its writer reads back, and a benchmark's table.
"""

from __future__ import annotations

import xarray as xr

#: every dimension of every output, outer to inner (the module docstring says why)
ORDER = (
    "claim",
    "beta",
    "regime",
    "pair",
    "integrator",
    "coarse_step",
    "step",
    "tokens",
    "budget_exponent",
    "replica",
    "step_replica",
    "check_time",
    "time",
    "moved",
    "token",
    "row",
    "col",
    "dim",
    "eigen",
    "e1",
    "e1_v_real",
    "e1_v_modulus",
    "bound",
)
#: file kinds with axes of their own, not the pipeline's outputs: a writer's checkpoint (read back by it alone) and
#: a benchmark's table (rows of cases)
OWN_AXES_KINDS = ("checkpoint", "bench")


class LayoutError(ValueError):
    """A dimension that ``ORDER`` does not place."""


def ordered_dims(dims) -> tuple[str, ...]:
    """``dims`` sorted into ``ORDER``; LayoutError names any dimension it does not place."""
    unknown = sorted(set(dims) - set(ORDER))
    if unknown:
        raise LayoutError(f"dimensions {unknown} have no place in lowtemp.model.layout.ORDER; add them there")
    return tuple(d for d in ORDER if d in dims)


def require_canonical(data: xr.Dataset, kind: str) -> None:
    """LayoutError naming the first variable of ``data`` whose dimensions are not in ``ORDER`` (nothing for
    ``OWN_AXES_KINDS``)."""
    if kind in OWN_AXES_KINDS:
        return
    for name, v in data.variables.items():
        if tuple(v.dims) != ordered_dims(v.dims):
            raise LayoutError(
                f"{kind}: variable {name!r} has dimensions {tuple(v.dims)}, the package's layout is "
                f"{ordered_dims(v.dims)} (lowtemp.model.layout.ORDER)"
            )
