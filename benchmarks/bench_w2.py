"""Benchmark of the certified sparse assignment W2 (lowtemp.assignment) against POT's network simplex.

For every N and cloud pair: seconds per solve of ``assignment.w2_exact`` (best of
``--repeats`` after a warm-up, so numba's compilation is not timed), of ``ot.emd2`` on
the dense N×N matrix (``transport.w2``, once, where memory allows), of
``ot.emd2_lazy`` (cold, and warm-started with the new solver's duals) up to
``--lazy-max`` tokens; the speed-up emd2 / new in the same process; nanoseconds per
pair of the streamed N² certificate; the peak of numpy's allocations during one solve
(tracemalloc: numba's internal buffers are not traced, they are O(N·k)); and the
relative difference of the values against emd2.

Cloud pairs (X = finite β, Y = zero temperature, from the same initial tokens):
  finite-beta  RK4 with the attention field (β = 100, t = 3) vs the exact zero-temperature
               solution at t = 3 (end_phase matrices of the concentration experiment),
  perturbed    Y = zero-temperature cloud at t = 3, X = normalise(Y + 0.03·noise), 1 % of the
               tokens' partners swapped,
  clusters     late times: exact solution at t = 8 (+1e-4 noise) vs t = 20 (clusters at ±u).
  departed     after the departure: the t = 20 clusters at ±E1(A) vs clusters of spread 1e-6 at
               ±E1(V) (30° away), 1 % of the tokens on the other side: the clouds are far apart
               compared with their spacing, so the separation gate sends them to the network simplex.

``--snapshots FINITE ZERO`` runs the same comparison on a pipeline run's own clouds instead
(finite_temperature/beta<β>.nc and zero_temperature.nc, replica 0, every ``--every``-th snapshot).

Timings are ratios within one process on a shared machine: read the ratios, not the
absolute numbers.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import ot
from bench_kernels import peak_bytes  # the same memory measurement as the kernel benchmark (same folder)

from lowtemp import assignment, exact, integrate, io, kernel_choice, kernels, matrices, measures, transport
from lowtemp.seeding import generator


def best_time(fn, repeats):
    best, out = np.inf, None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _normalise(P):
    return P / np.linalg.norm(P, axis=-1, keepdims=True)


def clouds(n, kinds, steps=12, beta=100.0):
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


def snapshot_clouds(finite, zero, every):
    """{"t=<time>": (X, Y)}: replica 0 of a pipeline run at every ``every``-th snapshot."""
    F = io.read_netcdf(finite, "finite_temperature")
    Z = io.read_netcdf(zero, "zero_temperature")
    out = {}
    for k in range(0, F.sizes["time"], every):
        X = F["positions"].values[k, 0]
        Y = Z["positions"].values[k, 0]
        out[f"t={float(F.time[k]):g}"] = (np.ascontiguousarray(X), np.ascontiguousarray(Y))
    return out
    return {k: (np.ascontiguousarray(a), np.ascontiguousarray(b)) for k, (a, b) in out.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 16384, 65536])
    ap.add_argument("--kinds", nargs="+", default=["finite-beta", "perturbed", "clusters", "departed"])
    ap.add_argument("--snapshots", nargs=2, metavar=("FINITE", "ZERO"),
                    help="a pipeline run's finite_temperature/beta<β>.nc and zero_temperature.nc instead")
    ap.add_argument("--every", type=int, default=4, help="with --snapshots: every n-th snapshot (default 4)")
    ap.add_argument("--emd2-max", type=int, default=16384)
    ap.add_argument("--lazy-max", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    log = lambda s: print(s, flush=True)  # noqa: E731
    warm = np.ascontiguousarray(measures.uniform(generator(1, "bench", "w2", "jit"), 1, 64, 3)[0])
    assignment.w2_exact(warm, warm[::-1].copy())  # compile the numba kernels outside the timings
    log(f"{'cloud':>12} {'N':>6} {'new s':>8} {'emd2 s':>8} {'speedup':>8} {'lazy s':>7} {'lazy+warm':>9} "
        f"{'cert ns/pair':>12} {'peak MB':>8} {'rounds':>6} {'fb':>3} {'rel.diff':>9}  W2")
    totals = {"new": 0.0, "emd2": 0.0}
    batches = [snapshot_clouds(*args.snapshots, args.every)] if args.snapshots else \
        (clouds(n, args.kinds) for n in args.sizes)
    for batch in batches:
        for kind, (X, Y) in batch.items():
            n = X.shape[0]
            t_new, res = best_time(lambda: assignment.w2_exact(X, Y), args.repeats if n <= 16384 else 1)
            t_cert, _ = best_time(lambda: assignment.certify(X, Y, res.perm, res.u, res.v, 1e-12), 2)
            peak = peak_bytes(lambda: assignment.w2_exact(X, Y)) / 2**20 if n <= 16384 else np.nan
            t_emd = ref = t_lazy = t_lazy_warm = np.nan
            if n <= args.emd2_max:
                t_emd, ref = best_time(lambda: transport.w2_network_simplex(X, Y), 1)
            if n <= args.lazy_max:
                t_lazy, _ = best_time(lambda: ot.emd2_lazy(X, Y, numItermax=10**9), 1)
                t_lazy_warm, _ = best_time(lambda: ot.emd2_lazy(X, Y, numItermax=10**9,
                                                                potentials_init=(res.u, res.v)), 1)
            rel = abs(res.value**2 - ref**2) / max(ref**2, 1e-9) if np.isfinite(ref) else np.nan  # on W2²
            totals["new"] += t_new
            totals["emd2"] += t_emd
            log(f"{kind:>12} {n:>6} {t_new:8.3f} {t_emd:8.2f} {t_emd / t_new:8.1f} {t_lazy:7.2f} {t_lazy_warm:9.2f} "
                f"{t_cert / n**2 * 1e9:12.3f} {peak:8.1f} {res.rounds:>6} {int(res.fallback):>3} {rel:9.1e}  "
                f"{res.value:.6g}  {res.stats}")
    log(f"all solves: new {totals['new']:.2f} s, emd2 {totals['emd2']:.2f} s, speed-up "
        f"{totals['emd2'] / totals['new']:.2f}")


if __name__ == "__main__":
    main()
