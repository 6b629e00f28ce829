"""Compare two results folders number by number (same files, same variables, same values).

Used by the tests that check a run is reproducible: a second run from scratch,
a run resumed after a kill, a run on SLURM and a run in the container must all
give the NetCDF values of a plain local run. Provenance is compared too, except
for the keys listed in ``VOLATILE_PROVENANCE``: which code wrote the file (version,
commit, dirty tree, how the version was found; ``store.version``), so runs at two
commits, or in a container without ``.git``, compare equal when their values and
config slices are. Provenance holds no host names or clocks.

Command line: ``python -m lowtemp.store.compare RESULTS_A RESULTS_B [--rtol R]``
prints every difference and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from . import version
from .netcdf import ENGINE

#: provenance keys that say which code wrote a file, not what it holds (``store.version.CodeVersion``)
VOLATILE_PROVENANCE: frozenset[str] = frozenset(version.PROVENANCE_KEYS)


def netcdf_files(root: Path) -> list[Path]:
    """Every finished NetCDF file under ``root`` (relative paths, sorted); temporaries excluded."""
    root = Path(root)
    return sorted(p.relative_to(root) for p in root.rglob("*.nc") if ".tmp-" not in p.name)


def _provenance(ds: xr.Dataset) -> dict:
    prov = json.loads(ds.attrs.get("provenance", "{}"))
    return {k: v for k, v in prov.items() if k not in VOLATILE_PROVENANCE}


def _values_equal(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
        return False
    if a.dtype.kind in "fc":
        if rtol == 0.0:
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.allclose(a, b, rtol=rtol, atol=0.0, equal_nan=True))
    return bool(np.array_equal(a, b))


def compare_datasets(a: xr.Dataset, b: xr.Dataset, rtol: float = 0.0) -> list[str]:
    """Differences between two datasets: variables, coordinates, values, schema, kind, provenance."""
    problems = []
    names_a, names_b = set(a.variables), set(b.variables)
    if names_a != names_b:
        problems.append(
            f"variables differ: only in first {sorted(names_a - names_b)}, only in second {sorted(names_b - names_a)}"
        )
    for name in sorted(names_a & names_b):
        va, vb = a[name], b[name]
        if va.dims != vb.dims:
            problems.append(f"{name}: dims {va.dims} != {vb.dims}")
        elif not _values_equal(va.values, vb.values, rtol):
            if va.values.shape == vb.values.shape and va.values.dtype.kind in "fc":
                diff = np.nanmax(np.abs(va.values.astype(float) - vb.values.astype(float)))
                problems.append(f"{name}: values differ (max |difference| {diff:.3e})")
            else:
                problems.append(f"{name}: values differ")
    for key in ("lowtemp_schema", "lowtemp_kind"):
        if a.attrs.get(key) != b.attrs.get(key):
            problems.append(f"attribute {key}: {a.attrs.get(key)!r} != {b.attrs.get(key)!r}")
    if _provenance(a) != _provenance(b):
        problems.append("provenance differs")
    return problems


def compare_results(first: Path, second: Path, rtol: float = 0.0) -> list[str]:
    """Differences between two results folders, one line each; empty when they agree.

    ``rtol = 0`` (the default) asks for bit-for-bit equal values.
    """
    first, second = Path(first), Path(second)
    files_a, files_b = netcdf_files(first), netcdf_files(second)
    problems = []
    if not files_a:
        problems.append(f"{first}: no NetCDF files")
    if set(files_a) != set(files_b):
        problems.append(
            f"file sets differ: only in {first}: {sorted(map(str, set(files_a) - set(files_b)))}; "
            f"only in {second}: {sorted(map(str, set(files_b) - set(files_a)))}"
        )
    for rel in sorted(set(files_a) & set(files_b)):
        try:
            with xr.open_dataset(first / rel, engine=ENGINE) as a, xr.open_dataset(second / rel, engine=ENGINE) as b:
                problems += [f"{rel}: {p}" for p in compare_datasets(a.load(), b.load(), rtol)]
        except (OSError, ValueError) as exc:  # truncated, corrupted or not NetCDF: a difference to report
            problems.append(f"{rel}: unreadable in one of the folders ({type(exc).__name__}: {exc})")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command line ``python -m lowtemp.store.compare FIRST SECOND [--rtol R]``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument(
        "--rtol", type=float, default=0.0, help="relative tolerance on floating-point values (default 0: bit for bit)"
    )
    args = parser.parse_args(argv)
    problems = compare_results(args.first, args.second, args.rtol)
    n = len(netcdf_files(args.first))
    if problems:
        print(f"{len(problems)} difference(s) between {args.first} and {args.second}:")
        for line in problems:
            print("  " + line)
        return 1
    print(
        f"{n} NetCDF files identical between {args.first} and {args.second}"
        + (f" (rtol {args.rtol:g})" if args.rtol else " (bit for bit)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
