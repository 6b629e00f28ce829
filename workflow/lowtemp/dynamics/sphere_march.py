"""Where a solve of the S² mean field stands, and the state it hands out to be resumed from.

``sphere_meanfield.solve`` keeps its progress in a ``March``: the mesh and the tracers now, the step its Runge–Kutta
pair carries from one stop to the next, the counts, and the snapshots recorded. At a stop it can hand out a
``Resumable`` (``checkpoint``): the integrator restarts at every stop from the step carried, so a solve resumed from
one goes on exactly as it would have gone on unstopped; a study that runs for hours writes them to disk
(``store.checkpoint.MeshCheckpoint``) and loses nothing when it is killed, whether by a crash or to be continued
later (docs/sphere_mean_field.md, "Limits").
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field

import numpy as np

from .sphere_mesh import SphereMesh


@dataclass
class Resumable:
    """A solve's state at a stop, from which ``solve(..., resume=...)`` goes on as it would have gone on unstopped,
    bit for bit (the integrator restarts at every stop from the step carried): the mesh after that stop's remeshing,
    the tracers (token, 3), the time, the step carried, the counts (field evaluations, steps, halvings, remeshings,
    the fold repairs' W2), and how many snapshots of ``times`` were recorded up to it; ``new``: (time, mesh,
    tracers) of each snapshot recorded since the previous state was handed out (what a checkpoint adds); ``final``:
    the state where the solve ended (its last time, a limit or a failure), which resumes nothing."""

    t: float
    step: float | None
    mesh: SphereMesh
    tracers: np.ndarray
    recorded: int
    counts: dict
    new: list = field(default_factory=list)
    final: bool = False
    stopped: str = ""  # why a final state ended before the last time ('' where it did not)


@dataclass
class March:
    """Where a solve stands: the mesh and the tracers (token, 3) at time ``t``, DOP853's step carried across stops,
    the counts, and what the snapshots so far recorded (a mesh, the tracers and the diagnostics each)."""

    mesh: SphereMesh
    tracers: np.ndarray
    start: float  # perf_counter() when the solve began
    t: float = 0.0
    step: float | None = None
    nfev: list = field(default_factory=lambda: [0])  # the right-hand side counts its calls in nfev[0]
    steps: int = 0
    stopped: str = ""  # why the solve ended before the last time ("" where it reached it)
    halvings: int = 0  # stretches between stops halved because the flow stretched a triangle too far for β
    remeshings: int = 0
    repaired_w2: float = 0.0  # the W2 bound of every fold repair so far (``sphere_folds``)
    meshes: list = field(default_factory=list)
    paths: list = field(default_factory=list)
    diagnostics: list = field(default_factory=list)
    at: list = field(default_factory=list)  # the time of each snapshot recorded
    first: int = 0  # the snapshots of ``times`` recorded before this call (those before a resumed state)
    handed: int = 0  # the snapshots of ``meshes`` already handed to the checkpoint callback

    @property
    def reached(self) -> int:
        """The snapshots of ``times`` recorded so far, before a resumed state and since."""
        return self.first + len(self.meshes)

    #: the counts a ``Resumable`` carries
    COUNTS = ("steps", "halvings", "remeshings", "repaired_w2")

    def resumable(self, final: bool = False) -> Resumable:
        """The state now, with the snapshots recorded since the last call (``final``: where the solve ended)."""
        new = list(zip(self.at[self.handed :], self.meshes[self.handed :], self.paths[self.handed :]))
        self.handed = len(self.meshes)
        counts = {"nfev": self.nfev[0], **{k: getattr(self, k) for k in self.COUNTS}}
        return Resumable(self.t, self.step, self.mesh.copy(), self.tracers.copy(), self.first + self.handed,
                         counts, new, final, self.stopped if final else "")  # fmt: skip

    @classmethod
    def resumed(cls, state: Resumable) -> March:
        """The march of a solve that goes on from ``state``."""
        march = cls(state.mesh.copy(), state.tracers.copy(), start=_time.perf_counter(), t=state.t, step=state.step)
        march.nfev[0] = state.counts["nfev"]
        for key in cls.COUNTS:
            setattr(march, key, state.counts[key])
        march.first = state.recorded
        return march


def resumed(state: Resumable, times: np.ndarray, tracers: np.ndarray) -> March:
    """The march that goes on from ``state``; ValueError where it does not fit ``times`` and the tracers given, or
    is where a solve ended."""
    if state.final:
        raise ValueError(f"S² mean field: the state at t = {state.t:g} is where its solve ended; it resumes nothing")
    if not 0 <= state.t < times[-1] or not 0 <= state.recorded < times.size:
        raise ValueError(
            f"S² mean field: a state at t = {state.t:g} does not resume times {times[0]:g} … {times[-1]:g}"
        )
    if state.recorded != int(np.sum(times <= state.t)):
        raise ValueError(f"S² mean field: the state recorded {state.recorded} snapshots, times has "
                         f"{int(np.sum(times <= state.t))} up to t = {state.t:g}")  # fmt: skip
    if state.tracers.shape != tracers.shape:
        raise ValueError(f"S² mean field: the state carries tracers {state.tracers.shape}, given {tracers.shape}")
    _check_arrays(state.mesh)
    return March.resumed(state)


def _check_arrays(mesh: SphereMesh) -> None:
    """ValueError unless the mesh's arrays fit together and are finite: what a state must hold to be resumed. Not
    ``SphereMesh.check``: a solve goes on from meshes with inverted triangles (folds it has not repaired), and so
    must the solve resumed from one."""
    n, m = mesh.points.shape[0], mesh.triangles.shape[0]
    shapes = (mesh.points.shape, mesh.log_density.shape, mesh.triangles.shape, mesh.log_mass.shape)
    if shapes != ((n, 3), (n,), (m, 3), (m,)) or (m and not 0 <= mesh.triangles.min() <= mesh.triangles.max() < n):
        raise ValueError(f"S² mean field: a state's mesh arrays do not fit together ({shapes})")
    if not all(np.all(np.isfinite(a)) for a in (mesh.points, mesh.log_density, mesh.log_mass)):
        raise ValueError("S² mean field: a state's mesh holds non-finite values")
