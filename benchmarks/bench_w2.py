"""Exact W2 solvers side by side: the certified sparse network simplex (lowtemp.transport.assignment) and POT.

For every N and cloud pair, per solver: seconds per solve (``w2_exact``: best of ``--repeats``
after a warm-up, so numba's compilation is not timed; POT best of ``--repeats`` up to N = 4096,
once above), the peak resident memory of one solve in a fresh process (``--memory``; the
process's peak minus its peak before the solve), and the relative difference of W2² against
``ot.emd2`` on the dense matrix (where it fits, ``--emd2-max``); for ``w2_exact`` also the
nanoseconds per pair of one pricing pass over all N² pairs (the certificate), the pricing passes,
simplex pivots and the certified gap.
Solvers:
  w2_exact        lowtemp.transport.assignment.w2_exact (the pipeline's solver)
  emd2            ot.emd2 on the dense N×N matrix (costs by lowtemp.transport.squared_euclidean_cost)
  emd2_lazy       ot.emd2_lazy, costs on the fly (O(N) memory), cold
  emd2_lazy_warm  ot.emd2_lazy warm-started with w2_exact's optimal duals (the ceiling of any
                  warm start of POT)
  ortools         the independent truth (docs/w2_solver.md, "Independent truth"): OR-tools'
                  linear_sum_assignment (Goldberg-Kennedy cost scaling, no code shared with
                  w2_exact or POT) on the dense integer costs round(S·|x_i − y_j|²), N ≤
                  ``--truth-max``; optional: without ortools the column says "not installed".
                  its plan's W2², summed in float64, lies in [W2², W2² + truth_bound] (W2² the optimum),
                  truth_bound = (1 + 2⁻⁸)/S; against w2_exact's W2² it is flagged (truth_flag = 1,
                  "DISAGREE") beyond truth_bound + w2_exact's gap_bound + 1e-13·W2² (float
                  evaluation of the two sums)

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

from lowtemp.dynamics import integrate, kernel_choice, kernels
from lowtemp.model import exact, matrices, measures
from lowtemp.model.seeding import generator
from lowtemp.store import harness, netcdf
from lowtemp.store.harness import timed
from lowtemp.transport import assignment, pricing
from lowtemp.transport import w2 as transport

SOLVERS = ("w2_exact", "emd2", "emd2_lazy", "emd2_lazy_warm", "ortools")

# OR-tools' LinearSumAssignment scales the costs by N + 1 internally and answers POSSIBLE_OVERFLOW once
# its price bound leaves int64: measured at N = 16…1024, when max cost · N(N+1) exceeds 2^63/3. The
# integer costs are kept to max cost · N(N+1) ≤ 2^61 (3/4 of that), and below 2^44 each, so that the
# float64 product S·c (half an ulp: ≤ 2^-10) is rounded to an integer within 1/2 + 2^-10 of it.
TRUTH_BUDGET = 2.0**61
TRUTH_COST_MAX = 2.0**44
TRUTH_SLACK = 1.0 + 2.0**-8  # truth_bound = TRUTH_SLACK / S ≥ 2·(1/2 + 2^-10) / S
TRUTH_CHUNK = 2**22  # cost entries built per call of add_arcs_with_cost
#: POT's solvers are timed best of --repeats (as w2_exact is) up to this N, once above
POT_REPEAT_MAX = 4096
#: the speed-up over ot.emd2 the snapshot page (--markdown) counts snapshots against
TARGET_SPEEDUP = 10.0


def _ortools():
    """OR-tools' linear_sum_assignment module, or None when ortools is not installed."""
    try:
        from ortools.graph.python import linear_sum_assignment
    except ImportError:
        return None
    return linear_sum_assignment


def truth_scale(X, Y):
    """S for the integer costs round(S·c_ij): the largest that OR-tools takes at this N without overflow
    (TRUTH_BUDGET) and that keeps each S·c_ij below TRUTH_COST_MAX. The largest cost is bounded without
    computing a cost twice: |x − y|² ≤ min((max|x| + max|y|)², Σ_d max(x_d − y_d)²), 4 on the sphere."""
    n = X.shape[0]
    span = np.maximum(X.max(0) - Y.min(0), Y.max(0) - X.min(0))
    radii = np.sqrt(np.max(np.sum(X**2, 1))) + np.sqrt(np.max(np.sum(Y**2, 1)))
    cmax = max(min(float(np.sum(span**2)), float(radii**2) * (1 + 1e-12)), 1e-300)
    return min(TRUTH_BUDGET / (n * (n + 1.0)), TRUTH_COST_MAX) / cmax


def w2_ortools(X, Y):
    """Exact W2 of the integer-rounded assignment problem by OR-tools (dense, N² arcs, about 36 bytes each).

    Returns (W2 of OR-tools' plan with its cost summed in float64, truth_bound, S). With
    c̃_ij = round(S·c_ij), |c̃_ij − S·c_ij| ≤ 1/2 + 2^-10 =: δ, and π̃ optimal for c̃, π* for c:
    S·W2²(π̃) ≤ (1/N) Σ c̃_iπ̃(i) + δ ≤ (1/N) Σ c̃_iπ*(i) + δ ≤ S·W2²(π*) + 2δ, so
    0 ≤ W2²(π̃) − W2² ≤ 2δ/S ≤ (1 + 2⁻⁸)/S = truth_bound (and the integer optimum over N·S is within
    δ/S of W2²). Raises RuntimeError unless OR-tools reports OPTIMAL."""
    lsa = _ortools()
    if lsa is None:
        raise RuntimeError("ortools is not installed")
    X = np.ascontiguousarray(X, dtype=float)
    Y = np.ascontiguousarray(Y, dtype=float)
    n = X.shape[0]
    S = truth_scale(X, Y)
    solver = lsa.SimpleLinearSumAssignment()
    cols = np.arange(n, dtype=np.int32)
    rows = max(1, TRUTH_CHUNK // n)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        C = ((X[r0:r1, None, :] - Y[None, :, :]) ** 2).sum(-1)
        solver.add_arcs_with_cost(
            np.repeat(np.arange(r0, r1, dtype=np.int32), n),
            np.tile(cols, r1 - r0),
            np.rint(C * S).astype(np.int64).ravel(),
        )
    status = solver.solve()
    if status != solver.OPTIMAL:
        raise RuntimeError(f"OR-tools linear_sum_assignment: {status}")
    perm = np.fromiter((solver.right_mate(i) for i in range(n)), dtype=np.int64, count=n)
    if not np.array_equal(np.sort(perm), np.arange(n)):
        raise RuntimeError("OR-tools returned no permutation")
    w2sq = float(np.sum((X - Y[perm]) ** 2) / n)
    return float(np.sqrt(max(w2sq, 0.0))), TRUTH_SLACK / S, S


def truth_check(value, gap_bound, truth_value, truth_bound):
    """(|W2²_truth − W2²_w2_exact|, the tolerance, flag): both are costs of assignments, w2_exact's within
    gap_bound of the optimum and the truth's within truth_bound, so they differ by at most
    max(gap_bound, truth_bound) ≤ their sum; 1e-13·W2² covers the float evaluation of the two sums.
    flag = 1 when they differ by more."""
    a, b = value**2, truth_value**2
    diff = abs(a - b)
    tol = truth_bound + gap_bound + 1e-13 * max(a, b)
    return diff, tol, int(not diff <= tol)


def _normalise(P):
    return P / np.linalg.norm(P, axis=-1, keepdims=True)


def clouds(n, kinds, steps=12, beta=100.0):
    """{kind: (X, Y)} for the synthetic cloud pairs of the module docstring."""
    M = matrices.generate_matrices(
        "end_phase",
        3,
        generator(1, "bench", "w2", "matrices"),
        eigenvalues=[1.5, 0.6, 0.5],
        eigenvalues_V=[1.2, 0.8, 0.6],
        angle_V=30,
    )
    X0 = measures.uniform(generator(1, "bench", "w2", "tokens", str(n)), 1, n, 3)
    Z = exact.exact_zero_temperature(X0, M.A, M.B, np.array([0.0, 3.0, 8.0, 20.0]))[0]
    rng = np.random.default_rng(n)
    out = {}
    if "finite-beta" in kinds:
        kernel = kernel_choice.choose_kernel(n, 3)
        X = X0.copy()
        for _ in range(steps):
            X = integrate.rk4_step(lambda P: kernels.field_with_kernel(P, M.B, M.V, beta, kernel), X, 3.0 / steps)
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
    F = netcdf.read_netcdf(finite, "finite_temperature")
    Z = netcdf.read_netcdf(zero, "zero_temperature")
    return {
        f"t={float(F.time[k]):g}": (
            np.ascontiguousarray(F["positions"].values[0, k]),
            np.ascontiguousarray(Z["positions"].values[0, k]),
        )
        for k in range(0, F.sizes["time"], every)
    }


def run_solver(name, X, Y, duals=None):
    """W2 by one solver; returns (value, extra) where extra is w2_exact's result."""
    n = X.shape[0]
    a = np.full(n, 1.0 / n)
    if name == "w2_exact":
        res = assignment.w2_exact(X, Y)
        return res.value, res
    if name == "emd2":
        # the bare baseline: ot.emd2 on the dense cost matrix (built by differences), without the certificate that
        # transport.w2_network_simplex adds to it, so the speed-up is measured against POT's own solve
        cost = ot.emd2(a, a, transport.squared_euclidean_cost(X, Y), numItermax=10**9)
        return float(np.sqrt(max(float(cost), 0.0))), None
    if name == "ortools":
        return w2_ortools(X, Y)[0], None
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
    code = (
        f"import sys, numpy as np; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_w2 as b; "
        f"d = np.load({str(path)!r}); X, Y = d['X'], d['Y']; "
        f"b.run_solver('w2_exact', X[:600].copy(), Y[:600].copy()) if {solver!r} == 'w2_exact' else None; "
        f"b.reset_peak_rss(); base = b.peak_rss_mb(); b.run_solver({solver!r}, X, Y); print(b.peak_rss_mb() - base)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return float(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else np.nan


def compare(case, X, Y, args, log, warm=None):
    """One row of the table (a dict per solver) for the cloud pair (X, Y)."""
    n = X.shape[0]
    repeats = args.repeats if n <= 16384 else 1
    t_new, res = timed(lambda: assignment.w2_exact(X, Y), repeats)
    t_pricing, _ = timed(lambda: pricing._price_all_pairs(X, Y, res.perm, res.v, 0.0), 1)
    rows = {
        "w2_exact": dict(
            seconds=t_new,
            value=res.value,
            rounds=res.rounds,
            pivots=res.stats["pivots"],
            fallback=int(res.fallback),
            certified=int(res.certified),
            gap=res.gap_bound / max(res.value**2, 1e-300),
            pricing_ns=t_pricing / n**2 * 1e9,
        )
    }
    if warm is not None:
        t_warm, res_warm = timed(lambda: assignment.w2_exact(X, Y, warm=warm), repeats)
        rows["w2_exact"].update(warm_seconds=t_warm, warm_pivots=res_warm.stats["pivots"])
    limits = {"emd2": args.emd2_max, "emd2_lazy": args.lazy_max, "emd2_lazy_warm": args.lazy_max}
    for solver, limit in limits.items():
        if n <= limit:
            # the same best-of as w2_exact where a solve takes seconds; once above (a minute or more each)
            t, (value, _) = timed(
                lambda: run_solver(solver, X, Y, (res.u, res.v)), repeats if n <= POT_REPEAT_MAX else 1
            )
            rows[solver] = dict(seconds=t, value=value)
    truth = (
        "not installed"
        if _ortools() is None
        else f"skipped (N > --truth-max {args.truth_max})"
        if n > args.truth_max
        else None
    )
    if truth is None:
        try:
            t, (value, bound, scale) = timed(lambda: w2_ortools(X, Y), 1)
        except (RuntimeError, MemoryError) as err:  # POSSIBLE_OVERFLOW, say: the row is left out, the log says why
            truth = f"failed: {err}"
        else:
            diff, tol, flag = truth_check(res.value, res.gap_bound, value, bound)
            rows["ortools"] = dict(
                seconds=t,
                value=value,
                truth_bound=bound,
                truth_scale=scale,
                truth_diff=diff,
                truth_tol=tol,
                truth_flag=flag,
            )
    if args.memory:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "clouds.npz"
            np.savez(path, X=X, Y=Y)
            for solver in rows:
                if solver != "emd2_lazy_warm":
                    rows[solver]["peak_mb"] = child_memory(solver, path)
    ref = rows.get("emd2", {}).get("value", np.nan)
    for r in rows.values():
        r["rel_diff"] = abs(r["value"] ** 2 - ref**2) / max(ref**2, 1e-300) if np.isfinite(ref) else np.nan
        r.setdefault("peak_mb", np.nan)
    new = rows["w2_exact"]
    speed = {s: rows[s]["seconds"] / new["seconds"] for s in rows if s != "w2_exact"}
    log(
        f"{case:>12} {n:>6} | w2_exact {new['seconds']:8.3f} s {new['peak_mb']:8.1f} MB  "
        f"pricing {new['pricing_ns']:5.2f} "
        f"ns/pair  passes {new['rounds']:>2}  pivots {new['pivots']:>8}  fb {new['fallback']}  gap/W2² {new['gap']:.1e}"
        + (f"  warm {new['warm_seconds']:.3f} s" if warm is not None else "")
        + "".join(
            f" | {s} {rows[s]['seconds']:8.2f} s {rows[s]['peak_mb']:8.1f} MB (x{speed[s]:.1f}) "
            f"rel {rows[s]['rel_diff']:.1e}"
            for s in rows
            if s != "w2_exact"
        )
        + (
            f" | ortools {truth}"
            if truth
            else f" vs w2_exact {rows['ortools']['truth_diff']:.1e} "
            + ("> " if rows["ortools"]["truth_flag"] else "<= ")
            + f"{rows['ortools']['truth_tol']:.1e} "
            + ("DISAGREE" if rows["ortools"]["truth_flag"] else "ok")
        )
        + f" | W2 {new['value']:.8g}  new vs emd2 {new['rel_diff']:.1e}"
    )
    return rows, res


def job_share(results: str) -> str:
    """The share of a finished run's job time (Snakemake's benchmark files, results/<experiment>/benchmarks/*.tsv,
    wall seconds ``s``) spent in the distances_beta jobs, whose cost is the exact W2(ρ^β_t, ρ^∞_t) solves."""
    seconds = {}
    for tsv in sorted(Path(results).glob("*/benchmarks/*.tsv")):
        rows = tsv.read_text().splitlines()
        if len(rows) > 1 and rows[0].split("\t")[0] == "s":
            seconds[f"{tsv.parent.parent.name}/{tsv.stem}"] = sum(float(r.split("\t")[0]) for r in rows[1:])
    if not seconds:
        return f"W2 share of job time: no finished run under {results}/ (make reproduce first)"
    w2 = sum(v for k, v in seconds.items() if k.split("/")[1].startswith("distances_beta"))
    total = sum(seconds.values())
    return (
        f"W2 share of job time ({results}/, {len(seconds)} jobs): distances_beta {w2:.0f} s of {total:.0f} s "
        f"= {100 * w2 / total:.0f} %"
    )


def _every(args, run: int) -> int:
    return args.every[run] if len(args.every) > 1 else args.every[0]


def snapshot_page(records, args) -> str:
    """Markdown: per snapshot of each --snapshots run, w2_exact against ot.emd2 (same process, one after the
    other), and the smallest speed-up of each run against TARGET_SPEEDUP."""
    lines = [
        "# Exact W2 on the default run's snapshots: w2_exact against ot.emd2",
        "",
        harness.stamp(f"python {harness.script(__file__)} --snapshots …", "w2-snapshots"),
        "",
        f"Measured on {time.strftime('%Y-%m-%d')}. Each row: one snapshot pair "
        "(replica 0, every n-th snapshot, n given per run below), `w2_exact` the best of "
        f"{args.repeats} cold solves after a warm-up, `ot.emd2` on the dense cost matrix (building it "
        f"included) the best of {args.repeats} up to N = {POT_REPEAT_MAX} and once above, in the same process one "
        "after the other; `w2_exact` prices on all the process's cores, `ot.emd2` runs on one (its default). "
        "Speed-up = emd2 seconds / w2_exact seconds; "
        "|ΔW2²| between the two solvers' values (and relative to W2²). Read the ratios; absolute times depend on "
        "the machine and its load.",
        "",
    ]
    runs = {}
    for r in records:
        runs.setdefault(r["run"], {}).setdefault(r["case"], {})[r["solver"]] = r
    for run, (finite, zero) in enumerate(args.snapshots):
        cases = runs.get(run, {})
        n = int(next(iter(cases.values()))["w2_exact"]["tokens"]) if cases else 0
        lines += [
            f"## N = {n}",
            "",
            f"Clouds: `{finite}` against `{zero}`, every {_every(args, run)}-th snapshot.",
            "",
        ]
        lines += [
            "| snapshot | W2 | w2_exact (s) | passes | pivots | ot.emd2 (s) | speed-up | \\|ΔW2²\\| against emd2 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        speeds = []
        for case, rows in cases.items():
            new, emd = rows["w2_exact"], rows.get("emd2")
            speed = emd["seconds"] / new["seconds"] if emd else np.nan
            speeds.append(speed)
            diff = abs(new["value"] ** 2 - emd["value"] ** 2) if emd else np.nan
            lines.append(
                f"| {case} | {new['value']:.6g} | {new['seconds']:.3f} | {new['rounds']:.0f} | {new['pivots']:.0f} | "
                + (
                    f"{emd['seconds']:.2f} | {speed:.1f}× | {diff:.1e}"
                    + (f" ({diff / new['value'] ** 2:.1e} of W2²) |" if new["value"] > 0 else " |")
                    if emd
                    else "not run | | |"
                )
            )
        measured = [s for s in speeds if np.isfinite(s)]
        if measured:
            below = sum(s < TARGET_SPEEDUP for s in measured)
            total_new = sum(rows["w2_exact"]["seconds"] for rows in cases.values() if "emd2" in rows)
            total_emd = sum(rows["emd2"]["seconds"] for rows in cases.values() if "emd2" in rows)
            lines += [
                "",
                f"Smallest speed-up {min(measured):.1f}×, over all {len(measured)} snapshots "
                f"{total_emd / total_new:.1f}× ({total_new:.1f} s against {total_emd:.1f} s); "
                f"{below} of {len(measured)} below {TARGET_SPEEDUP:g}×.",
                "",
            ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 16384, 65536])
    ap.add_argument("--kinds", nargs="+", default=["finite-beta", "perturbed", "clusters", "departed"])
    ap.add_argument(
        "--snapshots",
        nargs=2,
        action="append",
        metavar=("FINITE", "ZERO"),
        help="a pipeline run's finite_temperature/beta<β>.nc and zero_temperature.nc instead (repeatable)",
    )
    ap.add_argument(
        "--markdown",
        metavar="PATH",
        help="with --snapshots: write the per-snapshot table against ot.emd2 to this Markdown page",
    )
    ap.add_argument(
        "--every",
        type=int,
        nargs="+",
        default=[4],
        help="with --snapshots: every n-th snapshot (default 4); one value, or one per --snapshots",
    )
    ap.add_argument("--emd2-max", type=int, default=16384, help="largest N for ot.emd2 (dense N×N matrix)")
    ap.add_argument("--lazy-max", type=int, default=4096, help="largest N for ot.emd2_lazy")
    ap.add_argument(
        "--truth-max",
        type=int,
        default=8192,
        help="largest N for the independent truth (ortools, dense: ~36 bytes a pair, 2.3 GB at 8192)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory", action="store_true", help="peak memory of each solve in a fresh process")
    ap.add_argument(
        "--job-share",
        metavar="RESULTS",
        default=None,
        help="also report the exact-W2 jobs' share of the job time of a run under RESULTS",
    )
    ap.add_argument("--out", default="results/bench/w2.nc")
    args = ap.parse_args(argv)
    log = lambda s: print(s, flush=True)  # noqa: E731
    if args.job_share is not None:
        log(job_share(args.job_share))
    for n in (64, 600):  # compile the numba kernels of every path outside the timings
        P = np.ascontiguousarray(measures.uniform(generator(1, "bench", "w2", "jit", str(n)), 1, n, 3)[0])
        assignment.w2_exact(P, P[::-1].copy(), guide=True)
        assignment.w2_exact(P, P[::-1].copy(), guide=False)
    records, totals, previous = [], {}, None
    if args.markdown and not args.snapshots:
        raise SystemExit("--markdown needs --snapshots")
    if len(args.every) not in (1, len(args.snapshots or [None])) or min(args.every) < 1:
        raise SystemExit(f"--every takes one value ≥ 1 or one per --snapshots, got {args.every}")
    batches = (
        [(None, snapshot_clouds(*pair, _every(args, k))) for k, pair in enumerate(args.snapshots)]
        if args.snapshots
        else ((n, clouds(n, args.kinds)) for n in args.sizes)
    )
    for run, (_, batch) in enumerate(batches):
        previous = None  # a warm start only from the same run's previous snapshot
        for case, (X, Y) in batch.items():
            rows, previous = compare(case, X, Y, args, log, warm=previous if args.snapshots else None)
            for solver, r in rows.items():
                totals[solver] = totals.get(solver, 0.0) + r["seconds"]
                records.append(
                    dict(
                        case=case,
                        run=run,
                        tokens=X.shape[0],
                        solver=solver,
                        **{
                            k: float(r.get(k, np.nan))
                            for k in (
                                "seconds",
                                "peak_mb",
                                "rel_diff",
                                "value",
                                "pricing_ns",
                                "rounds",
                                "pivots",
                                "gap",
                                "warm_seconds",
                                "truth_bound",
                                "truth_scale",
                                "truth_diff",
                                "truth_tol",
                                "truth_flag",
                            )
                        },
                    )
                )
    both = [r["case"] + str(r["tokens"]) for r in records if r["solver"] == "emd2"]
    t_new = sum(r["seconds"] for r in records if r["solver"] == "w2_exact" and r["case"] + str(r["tokens"]) in both)
    t_emd = sum(r["seconds"] for r in records if r["solver"] == "emd2")
    if t_emd > 0:
        log(f"all solves with emd2: w2_exact {t_new:.2f} s, emd2 {t_emd:.2f} s, speed-up {t_emd / t_new:.2f}")
    truth = [r for r in records if r["solver"] == "ortools"]
    if truth:
        bad = [f"{r['case']} N={r['tokens']}" for r in truth if r["truth_flag"]]
        log(
            f"independent truth (ortools): {len(truth) - len(bad)} of {len(truth)} solves agree with w2_exact "
            f"within the rounding bound + gap_bound" + (f"; DISAGREE: {', '.join(bad)}" if bad else "")
        )
    elif _ortools() is None:
        log("independent truth (ortools): not installed (pip install ortools, or .[truth])")
    if args.snapshots:
        warm = sum(r["warm_seconds"] for r in records if r["solver"] == "w2_exact" and np.isfinite(r["warm_seconds"]))
        log(f"w2_exact warm-started from the previous snapshot: {warm:.2f} s against {totals['w2_exact']:.2f} s cold")
    if args.markdown:
        Path(args.markdown).write_text(snapshot_page(records, args))
        log(f"wrote {args.markdown}")
    ds = xr.Dataset({k: (("row",), np.array([r[k] for r in records])) for k in records[0]})
    ds.attrs["settings"] = json.dumps(vars(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    netcdf.write_netcdf(ds, out, "bench", {"benchmark": "w2", **{k: str(v) for k, v in vars(args).items()}})
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
