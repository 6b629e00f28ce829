"""NetCDF reading and writing: schema version, kind, provenance and atomic writes of every file
(what each file holds is laid out by ``lowtemp.store.datasets``).

Every file carries ``lowtemp_schema`` (the schema version, checked on read),
``lowtemp_kind`` (which stage wrote it) and ``provenance`` (one JSON string:
the code's version, commit and whether its tree was dirty (``store.version``), experiment, its config
slice, root seed) and ``lowtemp_checksum`` (SHA-256 of the content as read back: every variable's name, dims,
dtype and bytes, every attribute; checked on read, so a flipped byte in the data or the attributes is named, not
read as good). Writes go to a temporary name in the destination folder and are renamed when complete, so a
killed job never leaves a file that looks complete. Engine: h5netcdf.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import h5py  # h5netcdf's own backend: the checksum is added to a written file in place
import numpy as np
import xarray as xr

from ..model import layout
from . import version

#: 2: trajectories are stored (replica, time, token, dim), every file in ``layout.ORDER``; 3: every file carries
#: ``lowtemp_checksum``
SCHEMA_VERSION = 3
ENGINE = "h5netcdf"
#: the global attribute holding the content checksum (``content_checksum``)
CHECKSUM_ATTR = "lowtemp_checksum"

#: fault injection for the test suite only: seconds to wait between a complete
#: temporary file and its rename, so a test can kill a job in the middle of a write
FAULT_PAUSE_ENV = "LOWTEMP_FAULT_WRITE_PAUSE"


class NetCDFSchemaError(ValueError):
    """A NetCDF input is unreadable, of the wrong kind, or from another schema version."""


def provenance(experiment: str, config: dict, root_seed: int, **extra) -> dict:
    """The provenance record stored in every file (JSON-serialisable): the code (``version``, ``commit``,
    ``dirty``, ``version_source``: ``store.version``), the schema, the experiment, its config slice, the seed."""
    return {
        "package": "lowtemp",
        **version.code_version().as_provenance(),
        "schema": SCHEMA_VERSION,
        "experiment": experiment,
        "root_seed": int(root_seed),
        "config": config,
        **extra,
    }


def _clean_attr(value):
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=float)
    return value


def _clean_attrs(attrs: dict) -> dict:
    return {k: _clean_attr(v) for k, v in attrs.items()}


def _temporary_name(path: Path, pid: int | str) -> Path:
    return path.with_name(f".{path.stem}.tmp-{pid}{path.suffix}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; rename it onto ``path`` only once the block completes.

    A process killed inside the block leaves ``path`` as it was (absent or the old
    complete file), never half written. Temporaries left by killed writers of the
    same target are removed first; the new file is fsynced before the rename.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(_temporary_name(path, "*").name):
        stale.unlink(missing_ok=True)
    tmp = _temporary_name(path, os.getpid())
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        pause = float(os.environ.get(FAULT_PAUSE_ENV, "0") or 0)
        if pause > 0:
            time.sleep(pause)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_netcdf(ds: xr.Dataset, path: str | os.PathLike, kind: str, provenance: dict) -> Path:
    """Write ``ds`` atomically (``atomic_path``) with schema, kind and provenance; LayoutError (before anything
    is written) if its dimensions are out of the package's one order (``layout.ORDER``)."""
    path = Path(path)
    layout.require_canonical(ds, kind)
    ds = ds.copy()
    ds.attrs = _clean_attrs(
        {
            **ds.attrs,
            "lowtemp_schema": SCHEMA_VERSION,
            "lowtemp_kind": kind,
            "provenance": json.dumps(provenance, sort_keys=True, default=float),
        }
    )
    for name in list(ds.variables):
        ds[name].attrs = _clean_attrs(ds[name].attrs)
    check_free_space(path, ds.nbytes)
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine=ENGINE, invalid_netcdf=False)
        _stamp_checksum(tmp)
    return path


#: room a NetCDF file needs beyond its arrays' bytes (HDF5 headers, attributes, the provenance)
FILE_OVERHEAD_BYTES = 4 << 20


def check_free_space(path: Path, nbytes: int) -> None:
    """OSError (ENOSPC) naming the file, what it needs and what is free, when the disk that will hold ``path`` has
    less room than its arrays plus ``FILE_OVERHEAD_BYTES``: HDF5 ends a write that runs out of room with a crash,
    not an error, and leaves its temporary behind, so the room is checked before anything is written."""
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    need = int(nbytes) + FILE_OVERHEAD_BYTES
    free = shutil.disk_usage(folder).free
    if free < need:
        raise OSError(
            errno.ENOSPC,
            f"{path}: not enough disk space to write it: it needs about {need / 2**20:.1f} MiB, the disk holding "
            f"{folder} has {free / 2**20:.1f} MiB free",
        )


def _canonical_attr(key: str, value) -> bytes:
    return f"{key}={np.asarray(value).tolist()!r};".encode()


def content_checksum(ds: xr.Dataset) -> str:
    """SHA-256 of a dataset as read from a file: its global attributes (all but the checksum's own), then every
    variable in name order with its role (coordinate or data), dimensions, dtype, shape, values (raw bytes;
    strings length-prefixed) and attributes."""
    h = hashlib.sha256()
    for key in sorted(k for k in ds.attrs if k != CHECKSUM_ATTR):
        h.update(_canonical_attr(key, ds.attrs[key]))
    for name in sorted(map(str, ds.variables)):
        var = ds.variables[name]
        values = np.asarray(var.values)
        role = "coordinate" if name in ds.coords else "data"  # an edited `coordinates` attribute moves variables
        h.update(f"|{name}|{role}|{var.dims}|{values.dtype.str}|{values.shape}|".encode())
        if values.dtype.kind in "OSU":
            for item in values.ravel().tolist():  # length-prefixed: no two lists of strings read the same
                text = str(item).encode()
                h.update(f"{len(text)}:".encode() + text)
        else:
            h.update(np.ascontiguousarray(values).tobytes())
        for key in sorted(var.attrs):
            h.update(_canonical_attr(key, var.attrs[key]))
    return h.hexdigest()


def _load(path: Path) -> xr.Dataset:
    with xr.open_dataset(path, engine=ENGINE) as ds:
        return ds.load()


def _stamp_checksum(path: Path) -> None:
    """Add ``lowtemp_checksum`` to a complete file, computed from what a reader will read back (so types that a
    round trip changes cannot make a good file fail its check)."""
    checksum = content_checksum(_load(path))
    with h5py.File(path, "a") as fh:
        fh.attrs[CHECKSUM_ATTR] = checksum


def read_netcdf(path: str | os.PathLike, kind: str | None = None) -> xr.Dataset:
    """Load a dataset fully into memory, checking the schema version, the kind and the content checksum."""
    path = Path(path)
    try:
        ds = _load(path)
    except FileNotFoundError:
        raise
    except Exception as exc:  # truncated or not HDF5 at all
        raise NetCDFSchemaError(f"{path}: cannot be read as NetCDF ({type(exc).__name__}: {exc})") from exc
    version = ds.attrs.get("lowtemp_schema")
    if isinstance(version, np.generic):
        version = version.item()
    if version != SCHEMA_VERSION:
        raise NetCDFSchemaError(
            f"{path}: schema version {version!r}, expected {SCHEMA_VERSION}; rerun the stage that writes it"
        )
    if kind is not None and ds.attrs.get("lowtemp_kind") != kind:
        raise NetCDFSchemaError(f"{path}: holds {ds.attrs.get('lowtemp_kind')!r}, expected {kind!r}")
    stored = ds.attrs.get(CHECKSUM_ATTR)
    if stored != content_checksum(ds):
        raise NetCDFSchemaError(
            f"{path}: its content does not match its checksum (stored {stored!r}): the file was changed or damaged "
            "after it was written; delete it and rerun the stage that writes it"
        )
    return ds


def cpu_name() -> str:
    """This machine's CPU model (``lscpu``), for benchmarks and generated reports: a time means little without
    the machine it was measured on (provenance holds no host facts, so two runs compare equal anywhere)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or "unknown CPU"


#: a script's options that name where its outputs go, left out of the command a stamp names
OUTPUT_OPTIONS = ("--markdown", "--out", "--figure", "--checkpoints")


def report_command(script: str, argv: list[str]) -> str:
    """``python <script> <args>`` for a generated page's stamp, without the output paths (``--markdown``, ``--out``,
    ``--figure``, ``--checkpoints``: they change no number, and a page names no machine's path)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in OUTPUT_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in OUTPUT_OPTIONS)):
            kept.append(arg)
    return " ".join(["python", script, *(shlex.quote(a) for a in kept)])


def checkout_commit(folder: str | os.PathLike) -> str:
    """The short commit of the git checkout holding ``folder``, '+changes' when its tracked files differ from
    it, or a sentence saying there is none (for generated reports)."""
    try:
        run = dict(capture_output=True, text=True, timeout=10, check=True, cwd=folder)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], **run).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not in a git checkout)"
    return head + ("+changes" if dirty else "")


def read_provenance(ds: xr.Dataset) -> dict:
    """The provenance record of a dataset read with ``read_netcdf`` (see ``provenance``)."""
    return json.loads(ds.attrs["provenance"])


def attrs(long_name: str, units: str = "1", **more) -> dict:
    """CF-style variable attributes."""
    return {"long_name": long_name, "units": units, **more}
