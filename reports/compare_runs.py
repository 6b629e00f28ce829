"""Compare two finished default runs that differ in their integrator (e.g. ``rk4`` before, ``dopri5`` after).

    python reports/compare_runs.py BEFORE AFTER [--markdown FILE]

BEFORE and AFTER are checkouts whose ``results/`` hold a finished ``make reproduce``.
Reported: the job times (wall and CPU, from Snakemake's benchmark files), the field
evaluations of every simulation (recorded by the integrator; a run without the record
is a fixed-step RK4 run: 4 per step) and their ratio weighted by the work of one
evaluation (N² token pairs at finite temperature, N at zero), the largest position
difference, every fit.nc value with an interval as |after − before| over the before
interval's half width, the largest relative change of every other fit.nc number, and
the claim statuses.
"""

from __future__ import annotations

import argparse
import glob
import os

import numpy as np
import pandas as pd
import xarray as xr

from lowtemp.store import harness


def _open(path):
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()


def job_times(root):
    rows = {}
    for f in glob.glob(f"{root}/results/*/benchmarks/*.tsv"):
        d = pd.read_csv(f, sep="\t")
        rows[(f.split("/")[-3], os.path.basename(f)[:-4])] = (float(d["s"].iloc[0]), float(d["cpu_time"].iloc[0]))
    return rows


def evaluations(ds) -> float:
    if "field_evaluations" in ds:
        return float(ds["field_evaluations"].sum())
    interval = float(ds["time"].values[1] - ds["time"].values[0])
    return 4.0 * (ds.sizes["time"] - 1) * round(interval / float(ds.attrs["step"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)
    base, after = args.before.rstrip("/"), args.after.rstrip("/")
    # the folders are named by their role, never by their path: a page must not carry a machine's paths
    made = harness.stamp(f"python {harness.script(__file__)} BEFORE AFTER", None)
    out = ["# Default run: before against after", "", made, ""]
    jb, ja = job_times(base), job_times(after)
    sim = lambda k: k[1].startswith(("finite_temperature", "zero_temperature"))  # noqa: E731
    for what, pred in (("all jobs", lambda k: True), ("simulation jobs", sim)):
        b = [sum(v[i] for k, v in jb.items() if pred(k)) for i in (0, 1)]
        a = [sum(v[i] for k, v in ja.items() if pred(k)) for i in (0, 1)]
        out.append(
            f"* {what}: wall {b[0]:.0f} s → {a[0]:.0f} s, CPU {b[1]:.0f} s → {a[1]:.0f} s (CPU ratio {a[1] / b[1]:.2f})"
        )
    out += ["", "| simulation | evaluations before | after | ratio | max \\|Δposition\\| |", "|---|---|---|---|---|"]
    work_b = work_a = 0.0
    files = sorted(
        glob.glob(f"{after}/results/*/finite_temperature/*.nc") + glob.glob(f"{after}/results/*/zero_temperature.nc")
    )
    for f in files:
        rel = f[len(after) + len("/results/") :]
        a, b = _open(f), _open(f"{base}/results/{rel}")
        ea, eb = evaluations(a), evaluations(b)
        n = a.sizes["token"] * a.sizes["replica"]
        weight = n * n if "finite" in rel else n
        work_b, work_a = work_b + eb * weight, work_a + ea * weight
        # aligned by dimension name: a run written before the layout change stores (time, replica, token, dim)
        diff = float(np.abs(a["positions"] - b["positions"].transpose(*a["positions"].dims)).max())
        out.append(f"| {rel} | {eb:.0f} | {ea:.0f} | {ea / eb:.3f} | {diff:.2e} |")
    out += ["", f"Evaluations weighted by their work: ratio {work_a / work_b:.3f} ({work_b / work_a:.2f}× fewer).", ""]
    for f in sorted(glob.glob(f"{after}/results/*/fit.nc")):
        rel = f[len(after) + len("/results/") :]
        a, b = _open(f), _open(f"{base}/results/{rel}")
        judged, relative = [], []
        for v in a.data_vars:
            if a[v].dtype.kind != "f" or v.endswith("_interval"):
                continue
            va, vb = a[v].astype(float), b[v].astype(float)
            nan_moved = int(np.sum(np.isnan(va.values) != np.isnan(vb.values)))
            if v + "_interval" in b:
                iv = b[v + "_interval"]
                half = np.abs(iv.isel(bound=1) - iv.isel(bound=0)) / 2
                extra = [d for d in va.dims if d not in half.dims]
                if extra:  # per-replica values with one interval over them: their means
                    va, vb = va.mean(extra), vb.mean(extra)
                with np.errstate(invalid="ignore", divide="ignore"):
                    r = (np.abs(va - vb) / half).values
                judged.append((v, float(np.nanmax(r)) if np.isfinite(r).any() else np.nan, nan_moved))
            else:
                d = np.abs(va.values - vb.values)
                with np.errstate(invalid="ignore", divide="ignore"):
                    r = d / np.maximum(np.abs(vb.values), 1e-12)
                relative.append((v, float(np.nanmax(r)) if np.isfinite(r).any() else np.nan, nan_moved))

        def fmt(rows):
            return ", ".join(
                f"`{v}` {r:.3g}" + (f" (NaN at {m} other places)" if m else "")
                for v, r, m in sorted(rows, key=lambda x: -np.nan_to_num(x[1], nan=-1))[:5]
            )

        out.append(
            f"* {rel}: largest change over the interval's half width: {fmt(judged)}; largest relative change "
            f"of the other numbers: {fmt(relative)}"
        )
    out.append("")
    for f in sorted(glob.glob(f"{after}/results/*/claims.nc")):
        rel = f[len(after) + len("/results/") :]
        a, b = _open(f), _open(f"{base}/results/{rel}")
        changed = int(np.sum(a["status"].values != b["status"].values))
        out.append(f"* {rel}: {a['status'].size} claim statuses, {changed} changed")
    text = "\n".join(out) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
