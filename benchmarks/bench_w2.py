"""Exact W2 solvers side by side: the certified sparse network simplex (lowtemp.assignment) and POT.

For every N and cloud pair, per solver: seconds per solve (``w2_exact``: best of ``--repeats``
after a warm-up, so numba's compilation is not timed; POT once), the peak resident memory of
one solve in a fresh process (``--memory``; the process's peak minus its peak before the
solve), and the relative difference of W2² against ``ot.emd2`` on the dense matrix (where it
fits, ``--emd2-max``); for ``w2_exact`` also the nanoseconds per pair of one pricing pass over
all N² pairs (the certificate), the pricing passes, simplex pivots and the certified gap.
Solvers:
  w2_exact        lowtemp.assignment.w2_exact (the pipeline's solver)
  emd2            ot.emd2 on the dense N×N matrix (transport.w2_network_simplex)
  emd2_lazy       ot.emd2_lazy, costs on the fly (O(N) memory), cold
  emd2_lazy_warm  ot.emd2_lazy warm-started with w2_exact's optimal duals (the ceiling of any
                  warm start of POT)

Cloud pairs (X = finite β, Y = zero temperature, from the same initial tokens):
  finite-beta  RK4 with the attention field (β = 100, t = 3) vs the exact zero-temperature
               solution at t = 3 (end_phase matrices of the concentration experiment),
  perturbed    Y = zero-temperature cloud at t = 3, X = normalise(Y + 0.03·noise), 1 % of the
               tokens' partners swapped,
  clusters     late times: exact solution at t = 8 (+1e-4 noise) vs t = 20 (clusters at ±u),
  departed     after the departure: the t = 20 clusters at ±E1(A) vs clusters of spread 1e-6 at
               ±E1(V) (30° away), 1 % of the tokens on the other side.

``--snapshots FINITE ZERO`` runs the comparison on a pipeline run's own clouds instead
(finite_temperature/beta<β>.nc and zero_temperature.nc, replica 0, every ``--every``-th
snapshot), and also times ``w2_exact`` warm-started from the previous snapshot's result.

Writes results/bench/w2.nc (``--out``). Timings are ratios within one process on a shared
machine: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ot
import xarray as xr

from lowtemp import assignment, exact, integrate, io, kernel_choice, kernels, matrices, measures, transport
from lowtemp.seeding import generator

SOLVERS = ("w2_exact", "emd2", "emd2_lazy", "emd2_lazy_warm")


def best_time(fn, repeats):
    best, out = np.inf, None
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _normalise(P):
    return P / np.linalg.norm(P, axis=-1, keepdims=True)


def clouds(n, kinds, steps=12, beta=100.0):
    """{kind: (X, Y)} for the synthetic cloud pairs of the module docstring."""
    M = matrices.generate_matrices("end_phase", 3, generator(1, "bench", "w2", "matrices"),
                                   eigenvalues=[1.5, 0.6, 0.5], eigenvalues_V=[1.2, 0.8, 0.6], angle_V=30)
    X0 = measures.uniform(generator(1, "bench", "w2", "tokens", str(n)), 1, n, 3)
    Z = exact.exact_zero_temperature(X0, M.A, M.B, np.array([0.0, 3.0, 8.0, 20.0]))[:, 0]
    rng = np.random.default_rng(n)
    out = {}
    if "finite-beta" in kinds:
        kernel = kernel_choice.choose_kernel(beta, n, 3, M.sigma_min)
        X = X0.copy()
        for _ in range(steps):
            X = integrate.rk4_step(lambda P: kernels.attention_field(P, M.B, M.V, beta, kernel), X, 3.0 / steps)
        out["finite-beta"] = (X[0], Z[1])
    if "perturbed" in kinds:
        X = _normalise(Z[1] + 0.03 * rng.standard_normal((n, 3)))
        swap = rng.choice(n, n // 100, replace=False)
        X[swap] = X[np.roll(swap, 1)]
        out["perturbed"] = (X, Z[1])
    if "clusters" in kinds:
        out["clusters"] = (_normalise(Z[2] + 1e-4 * rng.standard_normal((n, 3))), Z[3])
    if "departed" in kinds:
        w = np.linalg.eigh((M.V + M.V.T) / 2)[1][:, -1]
        side = np.sign(Z[3] @ M.E1[:, 0])
        flip = rng.choice(n, n // 100, replace=False)
        side[flip] *= -1
        out["departed"] = (_normalise(side[:, None] * w + 1e-6 * rng.standard_normal((n, 3))), Z[3])
    return {k: (np.ascontiguousarray(a), np.ascontiguousarray(b)) for k, (a, b) in out.items()}


def snapshot_clouds(finite, zero, every):
    """{"t=<time>": (X, Y)}: replica 0 of a pipeline run at every ``every``-th snapshot."""
    F = io.read_netcdf(finite, "finite_temperature")
    Z = io.read_netcdf(zero, "zero_temperature")
    return {f"t={float(F.time[k]):g}": (np.ascontiguousarray(F["positions"].values[k, 0]),
                                        np.ascontiguousarray(Z["positions"].values[k, 0]))
            for k in range(0, F.sizes["time"], every)}


def run_solver(name, X, Y, duals=None):
    """W2 by one solver; returns (value, extra) where extra is w2_exact's result."""
    n = X.shape[0]
    a = np.full(n, 1.0 / n)
    if name == "w2_exact":
        res = assignment.w2_exact(X, Y)
        return res.value, res
    if name == "emd2":
        return transport.w2_network_simplex(X, Y), None
    kw = {} if name == "emd2_lazy" else dict(potentials_init=duals)
    cost = ot.emd2_lazy(X, Y, a, a, numItermax=10**9, return_matrix=False, **kw)
    return float(np.sqrt(max(float(cost), 0.0))), None


def reset_peak_rss():
    """Reset the process's peak resident set (Linux: 5 > /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb():
    """The process's peak resident set since the last reset (VmHWM), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_memory(solver, path):
    """In a fresh process: the peak resident memory of one solve of the clouds stored at ``path`` above the
    memory in use before it (interpreter, libraries, clouds; MiB)."""
    code = (f"import sys, numpy as np; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_w2 as b; "
            f"d = np.load({str(path)!r}); X, Y = d['X'], d['Y']; "
            f"b.run_solver('w2_exact', X[:600].copy(), Y[:600].copy()) if {solver!r} == 'w2_exact' else None; "
            f"b.reset_peak_rss(); base = b.peak_rss_mb(); b.run_solver({solver!r}, X, Y); print(b.peak_rss_mb() - base)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return float(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else np.nan


def compare(case, X, Y, args, log, warm=None):
    """One row of the table (a dict per solver) for the cloud pair (X, Y)."""
    n = X.shape[0]
    repeats = args.repeats if n <= 16384 else 1
    t_new, res = best_time(lambda: assignment.w2_exact(X, Y), repeats)
    pricing, _ = best_time(lambda: assignment._price_all_pairs(X, Y, res.perm, res.v, 0.0), 1)
    rows = {"w2_exact": dict(seconds=t_new, value=res.value, rounds=res.rounds, pivots=res.stats["pivots"],
                             fallback=int(res.fallback), certified=int(res.certified),
                             gap=res.gap_bound / max(res.value**2, 1e-300), pricing_ns=pricing / n**2 * 1e9)}
    if warm is not None:
        t_warm, res_warm = best_time(lambda: assignment.w2_exact(X, Y, warm=warm), repeats)
        rows["w2_exact"].update(warm_seconds=t_warm, warm_pivots=res_warm.stats["pivots"])
    limits = {"emd2": args.emd2_max, "emd2_lazy": args.lazy_max, "emd2_lazy_warm": args.lazy_max}
    for solver, limit in limits.items():
        if n <= limit:
            t, (value, _) = best_time(lambda: run_solver(solver, X, Y, (res.u, res.v)), 1)
            rows[solver] = dict(seconds=t, value=value)
    if args.memory:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "clouds.npz"
            np.savez(path, X=X, Y=Y)
            for solver in rows:
                if solver != "emd2_lazy_warm":
                    rows[solver]["peak_mb"] = child_memory(solver, path)
    ref = rows.get("emd2", {}).get("value", np.nan)
    for r in rows.values():
        r["rel_diff"] = abs(r["value"]**2 - ref**2) / max(ref**2, 1e-300) if np.isfinite(ref) else np.nan
        r.setdefault("peak_mb", np.nan)
    new = rows["w2_exact"]
    speed = {s: rows[s]["seconds"] / new["seconds"] for s in rows if s != "w2_exact"}
    log(f"{case:>12} {n:>6} | w2_exact {new['seconds']:8.3f} s {new['peak_mb']:8.1f} MB  pricing {new['pricing_ns']:5.2f} "
        f"ns/pair  passes {new['rounds']:>2}  pivots {new['pivots']:>8}  fb {new['fallback']}  gap/W2² {new['gap']:.1e}"
        + (f"  warm {new['warm_seconds']:.3f} s" if warm is not None else "")
        + "".join(f" | {s} {rows[s]['seconds']:8.2f} s {rows[s]['peak_mb']:8.1f} MB (x{speed[s]:.1f}) "
                  f"rel {rows[s]['rel_diff']:.1e}" for s in rows if s != "w2_exact")
        + f" | W2 {new['value']:.8g}  new vs emd2 {new['rel_diff']:.1e}")
    return rows, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 16384, 65536])
    ap.add_argument("--kinds", nargs="+", default=["finite-beta", "perturbed", "clusters", "departed"])
    ap.add_argument("--snapshots", nargs=2, metavar=("FINITE", "ZERO"),
                    help="a pipeline run's finite_temperature/beta<β>.nc and zero_temperature.nc instead")
    ap.add_argument("--every", type=int, default=4, help="with --snapshots: every n-th snapshot (default 4)")
    ap.add_argument("--emd2-max", type=int, default=16384, help="largest N for ot.emd2 (dense N×N matrix)")
    ap.add_argument("--lazy-max", type=int, default=4096, help="largest N for ot.emd2_lazy")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory", action="store_true", help="peak memory of each solve in a fresh process")
    ap.add_argument("--out", default="results/bench/w2.nc")
    args = ap.parse_args(argv)
    log = lambda s: print(s, flush=True)  # noqa: E731
    for n in (64, 600):  # compile the numba kernels of every path outside the timings
        P = np.ascontiguousarray(measures.uniform(generator(1, "bench", "w2", "jit", str(n)), 1, n, 3)[0])
        assignment.w2_exact(P, P[::-1].copy(), guide=True)
        assignment.w2_exact(P, P[::-1].copy(), guide=False)
    records, totals, previous = [], {}, None
    batches = [(None, snapshot_clouds(*args.snapshots, args.every))] if args.snapshots else \
        ((n, clouds(n, args.kinds)) for n in args.sizes)
    for _, batch in batches:
        for case, (X, Y) in batch.items():
            rows, previous = compare(case, X, Y, args, log, warm=previous if args.snapshots else None)
            for solver, r in rows.items():
                totals[solver] = totals.get(solver, 0.0) + r["seconds"]
                records.append(dict(case=case, tokens=X.shape[0], solver=solver, **{
                    k: float(r.get(k, np.nan)) for k in ("seconds", "peak_mb", "rel_diff", "value", "pricing_ns",
                                                         "rounds", "pivots", "gap", "warm_seconds")}))
    both = [r["case"] + str(r["tokens"]) for r in records if r["solver"] == "emd2"]
    t_new = sum(r["seconds"] for r in records if r["solver"] == "w2_exact" and r["case"] + str(r["tokens"]) in both)
    t_emd = sum(r["seconds"] for r in records if r["solver"] == "emd2")
    if t_emd > 0:
        log(f"all solves with emd2: w2_exact {t_new:.2f} s, emd2 {t_emd:.2f} s, speed-up {t_emd / t_new:.2f}")
    if args.snapshots:
        warm = sum(r["warm_seconds"] for r in records if r["solver"] == "w2_exact" and np.isfinite(r["warm_seconds"]))
        log(f"w2_exact warm-started from the previous snapshot: {warm:.2f} s against {totals['w2_exact']:.2f} s cold")
    ds = xr.Dataset({k: (("row",), np.array([r[k] for r in records])) for k in records[0]})
    ds.attrs["settings"] = json.dumps(vars(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    io.write_netcdf(ds, out, "bench", {"benchmark": "w2", **{k: str(v) for k, v in vars(args).items()}})
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
