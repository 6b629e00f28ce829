"""Checkpoints of long simulations, so that a killed job resumes where it stopped.

A checkpoint is a NetCDF file (kind ``checkpoint``) beside the results, holding
the snapshots computed so far and a *fingerprint* of everything the remaining
steps depend on: the initial positions, B, V, β, the integrator, the time grid,
the field kernel and the package version. It is written atomically (temporary
name + rename, ``io.write_netcdf``) at most every ``every_seconds`` seconds of
wall time, at snapshot boundaries; ``every_seconds = 0`` writes one at every
snapshot. The integrator's state is the positions alone (no random numbers are
drawn after the initial sample), so a run resumed from snapshot k is bit for bit
the uninterrupted run. Besides the positions a checkpoint holds the per-snapshot
norm drift recorded so far (``integrate.simulate``'s error indicator, an output
of the stage that cannot be recomputed from the positions), so the resumed
run's drift is bit for bit that of the uninterrupted run as well; a checkpoint
without it (written by an older version) is ignored like a stale one.

A checkpoint whose fingerprint differs (config, inputs or code changed since) is
ignored with a warning and overwritten; an unreadable one (killed mid-write
cannot happen with the rename, but a full disk can) likewise. After the stage's
output is written the checkpoint is deleted.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import xarray as xr

from . import __version__, io

log = logging.getLogger("lowtemp")

KIND = "checkpoint"


def fingerprint(*arrays: np.ndarray, **values) -> str:
    """SHA-256 over the bytes of ``arrays`` (with shape and dtype) and the sorted ``values``."""
    h = hashlib.sha256()
    h.update(f"lowtemp {__version__} schema {io.SCHEMA_VERSION}".encode())
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    for key in sorted(values):
        h.update(f"|{key}={values[key]!r}".encode())
    return h.hexdigest()


class SimulationCheckpoint:
    """Load, write and discard the checkpoint of one simulation (see the module docstring).

    Use ``resume = ckpt.load(X0.shape)`` and pass ``on_snapshot=ckpt`` to
    ``integrate.simulate`` (with ``return_drift=True`` to get the drift back);
    call ``ckpt.discard()`` once the output is written.
    """

    def __init__(self, path: str | Path, fingerprint: str, times: np.ndarray, every_seconds: float = 300.0,
                 clock=time.monotonic):
        if not every_seconds >= 0:
            raise ValueError(f"checkpoint interval must be >= 0 seconds, got {every_seconds}")
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.every_seconds = float(every_seconds)
        self.times = np.asarray(times, dtype=float)
        self.clock = clock
        self._last = clock()
        self.writes = 0

    def load(self, shape: tuple[int, ...]) -> tuple[int, np.ndarray, np.ndarray] | None:
        """``(k, positions of snapshots 0..k, their norm drift)`` from a matching checkpoint, or None
        to start from t = 0."""
        if not self.path.exists():
            return None
        n_times = self.times.size
        try:
            ds = io.read_netcdf(self.path, KIND)
        except (io.NetCDFSchemaError, OSError) as exc:
            log.warning("checkpoint %s is unreadable (%s); starting from t = 0", self.path, exc)
            return None
        if ds.attrs.get("fingerprint") != self.fingerprint:
            log.warning("checkpoint %s belongs to other inputs, config or code; starting from t = 0", self.path)
            return None
        done = ds["positions"].values
        k = done.shape[0] - 1
        if done.shape[1:] != tuple(shape) or not 0 <= k < n_times:
            log.warning("checkpoint %s has shape %s, expected (<=%d, %s); starting from t = 0", self.path,
                        done.shape, n_times, tuple(shape))
            return None
        if "norm_drift" not in ds or ds["norm_drift"].shape != done.shape[:2]:
            log.warning("checkpoint %s has no norm drift of shape %s (an older version wrote it); starting "
                        "from t = 0", self.path, done.shape[:2])
            return None
        log.info("resuming from checkpoint %s at snapshot %d of %d (t = %g)", self.path, k, n_times - 1,
                 float(ds["time"].values[-1]))
        return k, done, ds["norm_drift"].values

    def save(self, k: int, out: np.ndarray, drift: np.ndarray) -> None:
        """Write the positions and norm drift (time, replica) of snapshots 0..k atomically."""
        ds = xr.Dataset({"positions": (("time", "replica", "token", "dim"), out[: k + 1]),
                         "norm_drift": (("time", "replica"), drift[: k + 1])},
                        coords={"time": self.times[: k + 1]})
        ds.attrs["fingerprint"] = self.fingerprint
        io.write_netcdf(ds, self.path, KIND, {"fingerprint": self.fingerprint, "snapshot": int(k)})
        self.writes += 1
        self._last = self.clock()

    def __call__(self, k: int, out: np.ndarray, drift: np.ndarray) -> None:
        """Snapshot hook for ``integrate.simulate``: save if the interval has passed (never after the last)."""
        if k == out.shape[0] - 1:
            return  # the stage writes the output next; a checkpoint of the complete run would be redundant
        if self.clock() - self._last >= self.every_seconds:
            self.save(k, out, drift)

    def discard(self) -> None:
        """Remove the checkpoint (after the output is written) and its folder if empty."""
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass
