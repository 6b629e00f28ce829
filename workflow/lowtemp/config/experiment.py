"""What one experiment's config decides, computed in one place.

``experiment`` is one entry of the validated config's ``experiments`` mapping
(schema defaults applied), or the slice of it a stage reads
(``params.STAGE_KEYS``). Every stage, the config check (``lowtemp.config.validation``),
the resource estimates (``lowtemp.config.resources``) and the figures ask this module,
so a job and its estimate cannot disagree on the time grid, the kernel, the
snapshots with an exact W2 or the figures drawn.

Cheap (no arrays beyond d×d) and free of numba, POT and plotting libraries.
"""

from __future__ import annotations

import numpy as np

from ..dynamics import integrate
from ..dynamics.kernel_choice import choose_kernel
from ..model import matrices, measures
from ..model.seeding import generator

#: at most this many frames: evenly spaced snapshots, the first and the last included
ANIMATION_MAX_FRAMES = 60
#: at most this many tokens of replica 0 drawn per panel: the first ones (the tokens are exchangeable)
ANIMATION_MAX_TOKENS = 2048
#: pixels of one square panel, of the strip above the panels that holds the time, and panels per row at most
ANIMATION_PANEL_PX = 200
ANIMATION_TITLE_PX = 32
ANIMATION_MAX_COLUMNS = 4


def animation_frames(times: int) -> np.ndarray:
    """Indices of the snapshots drawn as the animation's frames, of ``times`` stored ones: all of them, or
    ``ANIMATION_MAX_FRAMES`` evenly spaced ones with the first and the last."""
    if times < 1:
        raise ValueError(f"an animation needs at least one snapshot, got {times}")
    return np.round(np.linspace(0, times - 1, min(times, ANIMATION_MAX_FRAMES))).astype(np.int64)


def animation_grid(panels: int) -> tuple[int, int]:
    """(rows, columns) of the animation's panels: as few rows as ``ANIMATION_MAX_COLUMNS`` allows, balanced."""
    if panels < 1:
        raise ValueError(f"an animation needs at least one panel, got {panels}")
    rows = -(-panels // ANIMATION_MAX_COLUMNS)
    return rows, -(-panels // rows)


def animation_size(panels: int) -> tuple[int, int]:
    """(width, height) of the animation in pixels: ``ANIMATION_PANEL_PX`` per panel, the time strip on top."""
    rows, columns = animation_grid(panels)
    return columns * ANIMATION_PANEL_PX, rows * ANIMATION_PANEL_PX + ANIMATION_TITLE_PX


def time_grid(experiment: dict, horizon: float | None = None) -> integrate.TimeGrid:
    """The simulations' grid: snapshot times and the uniform step (``time.horizon``, ``snapshots``, ``dt``); with
    ``horizon`` (a study's own), the same snapshot interval and dt up to it, rounded to a whole number of snapshots
    (at least one), so curves run to different horizons share their snapshot times. ValueError unless ``horizon``
    is finite and positive."""
    t = experiment["time"]
    grid = integrate.TimeGrid(horizon=float(t["horizon"]), snapshots=int(t["snapshots"]), dt=float(t["dt"]))
    if horizon is None:
        return grid
    if not (np.isfinite(horizon) and horizon > 0):
        raise ValueError(f"a horizon must be finite and positive, got {horizon}")
    interval = grid.horizon / grid.snapshots
    snapshots = max(1, int(round(horizon / interval)))
    return integrate.TimeGrid(snapshots * interval, snapshots, grid.dt)


def integration_tolerance(experiment: dict, n_tokens: int | None = None) -> float | None:
    """The local error tolerance of an adaptive integrator (``integrate.ADAPTIVE``): ``time.tolerance``,
    else ``integrate.default_tolerance`` of the run's N (``n_tokens``, default ``tokens``); None for
    the fixed-step integrators."""
    if experiment["integrator"] not in integrate.ADAPTIVE:
        return None
    given = experiment["time"].get("tolerance")
    n = int(experiment["tokens"] if n_tokens is None else n_tokens)
    return float(given) if given is not None else integrate.default_tolerance(n)


def snapshot_times(experiment: dict) -> list[float]:
    """The three times of the sphere snapshots (default 0, horizon/3, horizon)."""
    horizon = float(experiment["time"]["horizon"])
    return list(experiment["figures"].get("snapshot_times") or [0.0, horizon / 3, horizon])


def exact_w2_snapshots(experiment: dict, n_times: int) -> np.ndarray:
    """Snapshots at which the exact N×N W2(ρ^β_t, ρ^∞_t) is solved: every ``distances.exact_every``-th and the last."""
    every = int(experiment["distances"]["exact_every"])
    mask = np.arange(n_times) % every == 0
    mask[-1] = True
    return mask


def field_kernel(experiment: dict, n_tokens: int | None = None) -> str:
    """The kernel of the finite-temperature field for a run of ``n_tokens`` tokens (default ``tokens``): the
    config's ``kernel``, or for ``auto`` the automatic rule (``kernel_choice.choose_kernel``: ``auto`` itself, a
    choice per field evaluation, at N ≥ 16384 in d = 2, 3; ``dense`` below; ``numpy`` in other dimensions): β and
    the matrices do not enter it, the cloud does, at run time."""
    kernel = experiment["kernel"]
    if kernel == "auto":
        n = int(experiment["tokens"] if n_tokens is None else n_tokens)
        return choose_kernel(n, int(experiment["dim"]))
    return kernel


def stream_name(name: str, experiment: dict) -> str:
    """The name whose random streams the experiment draws from (``streams``; default its own): two experiments
    with the same streams, matrices block and initial measure share K, Q, V and, at equal replicas and tokens,
    their initial tokens."""
    return str(experiment.get("streams") or name)


def build_matrices(name: str, experiment: dict, root_seed: int) -> matrices.AttentionMatrices:
    """Generate the experiment's K, Q, V (stream ``(streams, "matrices")``) and check Assumption 1."""
    params = dict(experiment["matrices"])
    family = params.pop("family")
    rng = generator(root_seed, stream_name(name, experiment), "matrices")
    return matrices.generate_matrices(family, int(experiment["dim"]), rng, **params)


def measure_of(experiment: dict) -> tuple[str, dict]:
    """ρ0 as the config gives it: its name and a copy of its other keys (its parameters)."""
    params = dict(experiment["initial_measure"])
    return params.pop("name"), params


def initial_measure(name: str, experiment: dict, root_seed: int) -> tuple[str, dict]:
    """The experiment's ρ0 (name, parameters) with anything random fixed as the pipeline fixed it.

    A ``vmf_mixture`` without ``means`` draws them first from the ``initial_tokens``
    stream (``measures.vmf_mixture``); they are drawn the same way here and passed
    explicitly, so every N samples the same ρ0.
    """
    measure, params = measure_of(experiment)
    params.pop("positive_density", None)
    if measure == "vmf_mixture" and params.get("means") is None:
        rng = generator(root_seed, stream_name(name, experiment), "initial_tokens")
        params["means"] = measures.uniform(rng, 1, len(params["kappas"]), int(experiment["dim"]))[0]
    return measure, params
