"""Benchmark of the finite-temperature field kernels and of W2 (run with `make bench`).

For every (kernel, d, β, N) and token cloud (spread, as ρ0, and clustered, as in the
metastable phase, where the cap kernel's cap holds a whole cluster): nanoseconds per token pair (best of ``--repeats``
calls after a warm-up call, so numba's compilation is not timed; the naive
reference: best of ``--repeats`` after a warm-up, 2 above 8192 tokens), the speed-up
against a naive float64 numpy reference implemented below and run in the same
process, the peak of numpy's allocations during one call (tracemalloc), and the
max relative field error against the float64 reference field. Then the cost of
one W2 snapshot. Prints a table and writes results/bench/bench.nc.

The naive reference is the textbook step: score matrix β (XB) Xᵀ, max shift,
exp, normalise, matmul with V X, tangent projection, in float64. Above 4096
tokens it runs in blocks of 4096 query rows (the N×N matrix would need N²·8
bytes); the work per token pair is the same.

Timings are ratios within one process on a shared machine: read the ratios,
not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import xarray as xr

from lowtemp.dynamics import integrate, kernel_choice, kernels
from lowtemp.model import matrices, measures
from lowtemp.model.projection import two_atom_masses
from lowtemp.model.seeding import generator
from lowtemp.store import netcdf
from lowtemp.store.harness import best_time
from lowtemp.transport import w2 as transport

NAIVE_BLOCK = 4096


def naive_field(X, B, V, beta):
    """Textbook float64 numpy field: full score matrix (per block of 4096 query rows)."""
    F = np.empty_like(X)
    VX = X @ V.T
    for s in range(0, X.shape[1], NAIVE_BLOCK):
        rows = slice(s, s + NAIVE_BLOCK)
        S = beta * np.matmul(X[:, rows] @ B, np.swapaxes(X, -1, -2))
        S = np.exp(S - S.max(axis=-1, keepdims=True))
        S /= S.sum(axis=-1, keepdims=True)
        F[:, rows] = S @ VX
    return F - np.sum(F * X, axis=-1, keepdims=True) * X


def peak_bytes(fn):
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def matrices_for(d):
    rng = generator(1, "bench", "matrices", str(d))
    mu = [1.5, 0.5, 0.25][:d] if d <= 3 else np.linspace(1.5, 0.1, d)
    return matrices.generate_matrices("spectral", d, rng, eigenvalues=mu, sigma_min=0.8, sigma_max=1.25)


CASES = [  # (d, beta, N)
    (3, 10.0, 4096),
    (3, 1000.0, 4096),
    (3, 1000.0, 32768),
    (2, 10000.0, 32768),
]


#: token clouds of the benchmark: spread (ρ0 uniform, the start) and clustered (the metastable phase:
#: two antipodal clusters of angular radius ~0.02, where a cap holds a whole cluster)
CLOUDS = ("spread", "clustered")


def bench_cloud(cloud, n, d):
    """The benchmark's (1, n, d) token cloud of kind ``cloud`` (``CLOUDS``)."""
    rng = generator(1, "bench", "tokens", str(d), str(n), cloud)
    X = measures.uniform(rng, 1, n, d)
    if cloud == "clustered":
        sign = np.where(X[..., :1] >= 0, 1.0, -1.0)
        X = sign * np.eye(d)[0] + 0.02 * rng.standard_normal(X.shape)
        X /= np.linalg.norm(X, axis=-1, keepdims=True)
    return X


def bench_fields(cases, repeats, log):
    rows = []
    for (d, beta, n), cloud in [(case, cloud) for case in cases for cloud in CLOUDS]:
        M = matrices_for(d)
        X = bench_cloud(cloud, n, d)
        reference = naive_field(X, M.B, M.V, beta)  # also the warm-up (first touch of its memory)
        t_naive = best_time(lambda: naive_field(X, M.B, M.V, beta), 2 if n > 8192 else repeats)
        scale = np.max(np.linalg.norm(reference, axis=-1))
        pick = kernel_choice.concrete_kernel(kernel_choice.choose_kernel(n, d), X, M.B, beta)  # `kernel: auto`
        for kernel in kernels.KERNELS:
            call = lambda: kernels.field_with_kernel(X, M.B, M.V, beta, kernel)  # noqa: E731
            F = call()  # warm-up (JIT)
            t = best_time(call, repeats)
            err = float(np.max(np.linalg.norm(F - reference, axis=-1)) / scale)
            row = dict(
                kernel=kernel,
                cloud=cloud,
                dim=d,
                beta=beta,
                tokens=n,
                ns_per_pair=t / n**2 * 1e9,
                speedup=t_naive / t,
                peak_mb=peak_bytes(call) / 2**20,
                rel_error=err,
                naive_ns_per_pair=t_naive / n**2 * 1e9,
                auto_pick=pick,
            )
            rows.append(row)
            log(
                f"{kernel:>6} {cloud:>9} d={d} beta={beta:>7g} N={n:>6}  {row['ns_per_pair']:7.3f} ns/pair  "
                f"x{row['speedup']:6.1f} vs naive ({row['naive_ns_per_pair']:.2f} ns/pair)  "
                f"peak {row['peak_mb']:8.1f} MB  rel.err {err:.1e}  auto: {pick}"
            )
    return rows


def large_cap_step(n):
    """One RK4 step with the cap kernel at N = n, d = 3, β = 1000; returns (seconds, peak RSS in MiB).

    Run in a fresh process (``--large-step N``) so the peak memory is that of the step alone.
    """
    M = matrices_for(3)
    X = measures.uniform(generator(1, "bench", "large"), 1, n, 3)
    field = lambda Y: kernels.cap_field(Y, M.B, M.V, 1000.0)  # noqa: E731
    field(X[:, :4096])  # compile outside the timing
    t = time.perf_counter()
    integrate.rk4_step(field, X, 0.05)
    t = time.perf_counter() - t
    return t, peak_resident_mb()


def peak_resident_mb():
    """This process's peak resident memory (VmHWM; ru_maxrss would carry the forking parent's peak)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_large_cap(n, log):
    proc = subprocess.run(
        [sys.executable, __file__, "--large-step", str(n)], capture_output=True, text=True, check=True
    )
    t, rss_mb = json.loads(proc.stdout.strip().splitlines()[-1])
    log(
        f"   cap d=3 beta=1000 N={n}: one RK4 step (4 field evaluations) {t:.2f} s; "
        f"peak RSS of that process {rss_mb:.0f} MB"
    )
    return t, rss_mb


def bench_w2(sizes, log, exact_max):
    rows = []
    rng = generator(1, "bench", "w2")
    u = np.array([0.0, 0.0, 1.0])
    for n in sizes:
        X = measures.uniform(rng, 1, n, 3)[0]
        Y = measures.uniform(rng, 1, n, 3)[0]
        masses = two_atom_masses(Y, u)
        t_atoms = best_time(lambda: transport.w2_two_atoms(X, u, masses), 3)
        t_exact = np.nan
        if n <= exact_max:
            t_exact = best_time(lambda: transport.w2_network_simplex(X, Y), 1)
        rows.append(dict(tokens=n, two_atom_s=t_atoms, exact_s=t_exact))
        log(
            f"   W2 N={n:>6}: two-atom closed form {t_atoms * 1e3:8.2f} ms; exact N×N (POT) "
            f"{t_exact:8.2f} s per snapshot"
        )
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench/bench.nc")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes only (smoke test)")
    ap.add_argument("--large-step", type=int, help=argparse.SUPPRESS)  # internal: one step in this process
    args = ap.parse_args(argv)
    if args.large_step:
        print(json.dumps(large_cap_step(args.large_step)))
        return
    log = lambda s: print(s, flush=True)  # noqa: E731
    cases = [(3, 10.0, 1024), (3, 1000.0, 2048)] if args.quick else CASES
    log("kernel benchmark: ns per token pair, speed-up against the naive float64 numpy step (same process)")
    rows = bench_fields(cases, args.repeats, log)
    large_n = 8192 if args.quick else 100_000
    t_large, rss = bench_large_cap(large_n, log)
    w2_rows = bench_w2([512, 2048] if args.quick else [2048, 16384], log, exact_max=2048 if args.quick else 16384)
    case = np.arange(len(rows))
    ds = xr.Dataset(
        {
            key: (("case",), np.array([r[key] for r in rows]), netcdf.attrs(key.replace("_", " "), unit))
            for key, unit in [
                ("ns_per_pair", "ns"),
                ("speedup", "1"),
                ("peak_mb", "MiB"),
                ("rel_error", "1"),
                ("naive_ns_per_pair", "ns"),
                ("dim", "1"),
                ("beta", "1"),
                ("tokens", "1"),
            ]
        },
        coords={
            "case": case,
            "kernel": ("case", [r["kernel"] for r in rows]),
            "cloud": ("case", [r["cloud"] for r in rows]),
        },
    )
    ds["auto_pick"] = (
        ("case",),
        np.array([r["auto_pick"] for r in rows], dtype=object),
        netcdf.attrs("the kernel `kernel: auto` runs on this cloud (kernel_choice.choose_for_cloud)"),
    )
    ds["w2_two_atom_seconds"] = (
        ("w2_tokens",),
        np.array([r["two_atom_s"] for r in w2_rows]),
        netcdf.attrs("W2 to two atoms, closed form, per snapshot", "s"),
    )
    ds["w2_exact_seconds"] = (
        ("w2_tokens",),
        np.array([r["exact_s"] for r in w2_rows]),
        netcdf.attrs("W2 between two clouds, POT network simplex, per snapshot", "s"),
    )
    ds = ds.assign_coords(w2_tokens=[r["tokens"] for r in w2_rows])
    ds["large_cap_step_seconds"] = ((), t_large, netcdf.attrs(f"cap kernel, one RK4 step, N = {large_n}", "s"))
    ds["large_cap_peak_rss_mb"] = (
        (),
        rss,
        netcdf.attrs("peak resident memory of the process that made that step", "MiB"),
    )
    out = netcdf.write_netcdf(ds, args.out, "bench", netcdf.provenance("bench", {"quick": args.quick}, 1))
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
