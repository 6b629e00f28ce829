"""NetCDF reading and writing: the one module that owns names, attributes and provenance.

Every file carries ``lowtemp_schema`` (the schema version, checked on read),
``lowtemp_kind`` (which stage wrote it) and ``provenance`` (one JSON string:
package version, experiment, its config slice, root seed). Writes go to a
temporary name in the destination folder and are renamed when complete, so a
killed job never leaves a file that looks complete. Engine: h5netcdf.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from . import __version__

SCHEMA_VERSION = 1
ENGINE = "h5netcdf"


class NetCDFSchemaError(ValueError):
    """A NetCDF input is unreadable, of the wrong kind, or from another schema version."""


def provenance(experiment: str, config: dict, root_seed: int, **extra) -> dict:
    """The provenance record stored in every file (JSON-serialisable)."""
    return {"package": "lowtemp", "version": __version__, "schema": SCHEMA_VERSION,
            "experiment": experiment, "root_seed": int(root_seed), "config": config, **extra}


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


def write_netcdf(ds: xr.Dataset, path: str | os.PathLike, kind: str, provenance: dict) -> Path:
    """Write ``ds`` atomically (temporary file + rename) with schema, kind and provenance."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds = ds.copy()
    ds.attrs = _clean_attrs({**ds.attrs, "lowtemp_schema": SCHEMA_VERSION, "lowtemp_kind": kind,
                             "provenance": json.dumps(provenance, sort_keys=True, default=float)})
    for name in list(ds.variables):
        ds[name].attrs = _clean_attrs(ds[name].attrs)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        ds.to_netcdf(tmp, engine=ENGINE, invalid_netcdf=False)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_netcdf(path: str | os.PathLike, kind: str | None = None) -> xr.Dataset:
    """Load a dataset fully into memory, checking the schema version and the kind."""
    path = Path(path)
    try:
        with xr.open_dataset(path, engine=ENGINE) as ds:
            ds = ds.load()
    except FileNotFoundError:
        raise
    except Exception as exc:  # truncated or not HDF5 at all
        raise NetCDFSchemaError(f"{path}: cannot be read as NetCDF ({type(exc).__name__}: {exc})") from exc
    version = ds.attrs.get("lowtemp_schema")
    if isinstance(version, np.generic):
        version = version.item()
    if version != SCHEMA_VERSION:
        raise NetCDFSchemaError(
            f"{path}: schema version {version!r}, expected {SCHEMA_VERSION}; rerun the stage that writes it")
    if kind is not None and ds.attrs.get("lowtemp_kind") != kind:
        raise NetCDFSchemaError(f"{path}: holds {ds.attrs.get('lowtemp_kind')!r}, expected {kind!r}")
    return ds


def read_provenance(ds: xr.Dataset) -> dict:
    return json.loads(ds.attrs["provenance"])


def attrs(long_name: str, units: str = "1", **more) -> dict:
    """CF-style variable attributes."""
    return {"long_name": long_name, "units": units, **more}
