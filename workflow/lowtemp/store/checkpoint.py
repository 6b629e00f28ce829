"""Checkpoints of long simulations, so that a killed job resumes where it stopped.

A checkpoint is a NetCDF file (kind ``checkpoint``) beside the results, holding
the snapshots computed so far and a *fingerprint* of everything the remaining
steps depend on: the initial positions, B, V, β, the integrator, the time grid,
the field kernel and the package version. It is written atomically (temporary
name + rename, ``netcdf.write_netcdf``) at most every ``every_seconds`` seconds of
wall time, at snapshot boundaries; ``every_seconds = 0`` writes one at every
snapshot. The integrator's state is the positions and, for an adaptive
integrator, the step its controller proposes there (no random numbers are drawn
after the initial sample), so a run resumed from snapshot k is bit for bit the
uninterrupted run. A checkpoint holds the positions and the integrator's record
of snapshots 0..k (``integrate.StepRecord``: norm drift, field evaluations,
accepted and rejected steps, proposed step; outputs of the stage that cannot be
recomputed from the positions), so the resumed run's record is bit for bit that
of the uninterrupted run as well; a checkpoint without it (written by an older
version) is ignored like a stale one.

A checkpoint whose fingerprint differs (config, inputs or code changed since) is
ignored with a warning and overwritten; an unreadable one (killed mid-write
cannot happen with the rename, but a full disk can) likewise. After the stage's
output is written the checkpoint is deleted.

``MeshCheckpoint`` does the same for one solve of the S² mean field
(``sphere_meanfield.solve``): the solver's ``Resumable`` state at its latest stop (the mesh after that stop's
remeshing, the tracers, the time, the step its Runge–Kutta pair carries, the counts) and what the caller recorded
per snapshot up to it, written at every stop; the solve resumed from it is the unstopped one bit for bit.

``SolveCheckpoint`` does the same for a loop of expensive independent solves
(the exact W2 of every replica and snapshot of one β): named float arrays filled
slot by slot and a mask of the slots done, written after every solve, so a
killed job loses at most the solve it was in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path

import numpy as np
import xarray as xr

from ..dynamics import integrate
from ..dynamics.sphere_march import Resumable
from ..dynamics.sphere_mesh import SphereMesh
from . import datasets, netcdf, version

log = logging.getLogger("lowtemp")

KIND = "checkpoint"


def fingerprint(*arrays: np.ndarray, **values) -> str:
    """SHA-256 over the bytes of ``arrays`` (with shape and dtype) and the sorted ``values``, after the declared
    release and the schema (not the commit: a commit or an edit in the tree keeps a running job's checkpoints)."""
    h = hashlib.sha256()
    h.update(f"lowtemp {version.distribution_version()} schema {netcdf.SCHEMA_VERSION}".encode())
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    for key in sorted(values):
        h.update(f"|{key}={values[key]!r}".encode())
    return h.hexdigest()


class _Checkpoint:
    """A checkpoint file tied to a fingerprint: read it back if it matches, remove it when done."""

    def __init__(self, path: str | Path, fingerprint: str):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.writes = 0

    def _read(self) -> xr.Dataset | None:
        """The stored dataset if it exists, is readable and carries this fingerprint, else None (logged)."""
        if not self.path.exists():
            return None
        try:
            ds = netcdf.read_netcdf(self.path, KIND)
        except (netcdf.NetCDFSchemaError, OSError) as exc:
            log.warning("checkpoint %s is unreadable (%s); starting from the beginning", self.path, exc)
            return None
        if ds.attrs.get("fingerprint") != self.fingerprint:
            log.warning("checkpoint %s belongs to other inputs, config or code; starting from the beginning", self.path)
            return None
        return ds

    def _write(self, ds: xr.Dataset, **attrs) -> None:
        ds.attrs["fingerprint"] = self.fingerprint
        netcdf.write_netcdf(ds, self.path, KIND, {"fingerprint": self.fingerprint, **attrs})
        self.writes += 1

    def discard(self) -> None:
        """Remove the checkpoint (after the output is written) and its folder if empty."""
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass


def discard(ckpt: _Checkpoint | None) -> None:
    """Remove a stage's checkpoint once its output is written (nothing without one)."""
    if ckpt is not None:
        ckpt.discard()


class SimulationCheckpoint(_Checkpoint):
    """Load, write and discard the checkpoint of one simulation (see the module docstring).

    Use ``resume = ckpt.load(X0.shape)`` and pass ``on_snapshot=ckpt`` to
    ``integrate.simulate`` (with ``return_record=True`` to get the record back);
    call ``ckpt.discard()`` once the output is written.
    """

    def __init__(
        self, path: str | Path, fingerprint: str, times: np.ndarray, every_seconds: float = 300.0, clock=time.monotonic
    ):
        if not every_seconds >= 0:
            raise ValueError(f"checkpoint interval must be >= 0 seconds, got {every_seconds}")
        super().__init__(path, fingerprint)
        self.every_seconds = float(every_seconds)
        self.times = np.asarray(times, dtype=float)
        self.clock = clock
        self._last = clock()

    def load(self, shape: tuple[int, ...]) -> integrate.Resume | None:
        """``(k, positions of snapshots 0..k, their integrate.StepRecord)`` from a matching checkpoint, or
        None to start from t = 0."""
        ds = self._read()
        if ds is None:
            return None
        n_times = self.times.size
        done = ds["positions"].values
        k = done.shape[-3] - 1 if done.ndim >= 3 else -1
        if done.shape != integrate.trajectory_shape(shape, k + 1) or not 0 <= k < n_times:
            log.warning(
                "checkpoint %s has shape %s, expected %s with at most %d snapshots; starting from t = 0",
                self.path,
                done.shape,
                integrate.trajectory_shape(shape, k + 1),
                n_times,
            )
            return None
        shapes = {"norm_drift": done.shape[:-2]} | {f"record_{f}": (k + 1,) for f in integrate.FIELDS[1:]}
        if any(v not in ds or ds[v].shape != s for v, s in shapes.items()):
            log.warning(
                "checkpoint %s has no integrator record %s (an older version wrote it); starting from t = 0",
                self.path,
                shapes,
            )
            return None
        log.info(
            "resuming from checkpoint %s at snapshot %d of %d (t = %g)",
            self.path,
            k,
            n_times - 1,
            float(ds["time"].values[-1]),
        )
        record = integrate.StepRecord(
            ds["norm_drift"].values, *(ds[f"record_{f}"].values for f in integrate.FIELDS[1:])
        )
        return k, done, record

    def save(self, k: int, out: np.ndarray, record: integrate.StepRecord) -> None:
        """Write the positions and the integrator's record of snapshots 0..k atomically."""
        done = record.truncated(k)
        ds = xr.Dataset(
            {
                "positions": (datasets.TRAJECTORY, out[..., : k + 1, :, :]),
                "norm_drift": (datasets.CURVE, done.drift),
            }
            | {f"record_{f}": (("time",), getattr(done, f)) for f in integrate.FIELDS[1:]},
            coords={"time": self.times[: k + 1]},
        )
        self._write(ds, snapshot=int(k))
        self._last = self.clock()

    def __call__(self, k: int, out: np.ndarray, record: integrate.StepRecord) -> None:
        """Snapshot hook for ``integrate.simulate``: save if the interval has passed (never after the last)."""
        if k == out.shape[-3] - 1:
            return  # the stage writes the output next; a checkpoint of the complete run would be redundant
        if self.clock() - self._last >= self.every_seconds:
            self.save(k, out, record)


class MeshCheckpoint(_Checkpoint):
    """The checkpoint of one S² mean-field solve (see the module docstring): the solver's ``Resumable`` state, the
    caller's named per-snapshot ``curves`` up to it and its ``info`` (numbers and strings).

    ``state, curves, info = ckpt.load()`` (None, {}, {} to start afresh); pass ``checkpoint=`` a callable that calls
    ``ckpt.save(state, curves, info)`` and ``resume=state`` to ``sphere_meanfield.solve``.
    """

    def load(self) -> tuple[Resumable | None, dict[str, np.ndarray], dict]:
        ds = self._read()
        if ds is None:
            return None, {}, {}
        try:
            triangles = ds["triangles"].values.astype(np.int64)
            mesh = SphereMesh(ds["points"].values, ds["log_density"].values, triangles, ds["log_mass"].values)
            step = float(ds["step"].values)
            state = Resumable(float(ds["t"].values), None if np.isnan(step) else step, mesh, ds["tracers"].values,
                              int(ds["recorded"].values), json.loads(ds.attrs["counts"]))  # fmt: skip
            curves = {k.removeprefix("curve_"): ds[k].values for k in ds.data_vars if k.startswith("curve_")}
            info = json.loads(ds.attrs["info"])
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("checkpoint %s holds no solver state (%s); starting from the beginning", self.path, exc)
            return None, {}, {}
        log.info("resuming from checkpoint %s at t = %g", self.path, state.t)
        return state, curves, info

    def save(self, state: Resumable, curves: dict[str, np.ndarray], info: dict) -> None:
        """Write the state, the curves (one value per snapshot recorded) and the info atomically."""
        mesh = state.mesh
        ds = xr.Dataset(
            {
                "points": (("vertex", "xyz"), mesh.points),
                "log_density": (("vertex",), mesh.log_density),
                "triangles": (("triangle", "corner"), mesh.triangles),
                "log_mass": (("triangle",), mesh.log_mass),
                "tracers": (("tracer", "xyz"), state.tracers),
                "t": ((), state.t),
                "step": ((), np.nan if state.step is None else state.step),
                "recorded": ((), state.recorded),
            }
            | {f"curve_{k}": (("snapshot",), np.asarray(v, dtype=float)) for k, v in curves.items()}
        )
        ds.attrs.update(counts=json.dumps(state.counts), info=json.dumps(info))
        self._write(ds, t=state.t)


def mesh_checkpoint(path: str | Path | None, B, V, beta: float, times, mesh0: SphereMesh, tracers0, settings):
    """The checkpoint of one S² mean-field solve at ``path`` (None: no checkpoint). Its fingerprint covers B, V, β,
    the times, the initial mesh and tracers and the settings but ``max_triangles`` (which decides only where a solve
    stops, not its numbers: a run stopped there goes on under a larger limit), so a checkpoint of another problem is
    never resumed."""
    if path is None:
        return None
    unlimited = repr(dataclasses.replace(settings, max_triangles=None))
    arrays = (mesh0.points, mesh0.log_density, mesh0.triangles, mesh0.log_mass, np.asarray(tracers0, dtype=float))
    fp = fingerprint(np.asarray(B), np.asarray(V), np.asarray(times, dtype=float), *arrays, beta=float(beta),
                     settings=unlimited)  # fmt: skip
    return MeshCheckpoint(path, fp)


class SolveCheckpoint(_Checkpoint):
    """The checkpoint of a loop of independent solves: float arrays of one ``shape`` named ``names``,
    filled slot by slot, and the mask ``done`` of the slots computed (see the module docstring).

    ``values, done = ckpt.load()`` gives the stored slots (NaN and False elsewhere, all of them when
    there is no matching checkpoint); ``ckpt.save(values, done)`` after every solve; ``discard()``
    once the output is written.
    """

    def __init__(self, path: str | Path, fingerprint: str, names: tuple[str, ...], shape: tuple[int, ...]):
        super().__init__(path, fingerprint)
        self.names = tuple(names)
        self.shape = tuple(int(s) for s in shape)

    def _dims(self) -> tuple[str, ...]:
        return tuple(f"axis{a}" for a in range(len(self.shape)))

    def load(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The stored values and done mask, or NaN arrays and an all-False mask to start afresh."""
        values = {name: np.full(self.shape, np.nan) for name in self.names}
        done = np.zeros(self.shape, dtype=bool)
        ds = self._read()
        if ds is None:
            return values, done
        if (
            "done" not in ds
            or ds["done"].shape != self.shape
            or any(name not in ds or ds[name].shape != self.shape for name in self.names)
        ):
            log.warning(
                "checkpoint %s holds other arrays than %s of shape %s; starting from the beginning",
                self.path,
                self.names,
                self.shape,
            )
            return values, done
        done = ds["done"].values.astype(bool)
        for name in self.names:
            values[name] = np.where(done, ds[name].values, np.nan)
        log.info("resuming from checkpoint %s: %d of %d solves done", self.path, int(done.sum()), done.size)
        return values, done

    def save(self, values: dict[str, np.ndarray], done: np.ndarray) -> None:
        """Write the values and the done mask atomically."""
        dims = self._dims()
        ds = xr.Dataset(
            {name: (dims, np.asarray(values[name], dtype=float)) for name in self.names}
            | {"done": (dims, np.asarray(done, dtype=np.int8))}
        )
        self._write(ds, solves=int(np.sum(done)))


def simulation_checkpoint(
    path: str | Path | None,
    field,
    X0: np.ndarray,
    grid: integrate.TimeGrid,
    method: str,
    tolerance: float | None,
    every_seconds: float,
) -> SimulationCheckpoint | None:
    """The checkpoint of one simulation at ``path`` (None: no checkpoint), handed to
    ``integrate.simulate_resumable``.

    Its fingerprint covers X0, the field (its ``identity()``: matrices, β, kernel; ``kernels.AttentionField``,
    ``fields.ZeroTemperatureField``), the integrator and its ``tolerance`` and the time grid, so a checkpoint of
    another problem is never resumed. Call ``discard()`` once the output is written.
    """
    if path is None:
        return None
    arrays, settings = field.identity()
    fp = fingerprint(
        X0,
        *arrays,
        method=method,
        horizon=grid.horizon,
        snapshots=grid.snapshots,
        step=grid.step,
        tolerance=tolerance,
        **settings,
    )
    return SimulationCheckpoint(path, fp, grid.times, every_seconds)
