"""Would a per-cluster moment expansion of the softmax field pay off? Measured on a finished finite-temperature run.

At late times at large β the tokens sit in a few tight clusters. For a query x with a = β Bᵀx and a cluster C
with centre c (unit mean direction) and tokens x_j = c + δ_j,

    Σ_{j∈C} e^{⟨a, x_j⟩} = e^{⟨a, c⟩} Σ_j e^{⟨a, δ_j⟩} ≈ e^{⟨a, c⟩} Σ_{|α|≤p} a^α m_α,   m_α = Σ_j δ_j^α / α!,

and likewise for the numerator Σ_j e^{⟨a, x_j⟩} x_j (moments Σ_j δ_j^α x_j / α!). The moments cost O(|C|·n_p) once
per field evaluation (n_p = C(p + d, d) monomials of degree ≤ p), each query O(K·n_p) for K clusters, instead of
O(N) per query for the dense kernel. The Taylor remainder of each term is at most e^r r^{p+1}/(p+1)! with
r = |a|·max_j|δ_j|, and the cluster's sum is at least |C| e^{-r}, so the relative error of every cluster's sum (and
hence of Z and of the field, whose scale is ‖V‖) is at most e^{2r} r^{p+1}/(p+1)!. This script:

1. clusters every snapshot of the analysed replicas (``find_clusters``: densest tokens first, each unassigned seed
   takes every unassigned token within chordal distance ``--link`` of it; default 10/β),
2. reports, per snapshot, the clusters holding ≥ 99 % of the tokens, their radius max_j|x_j − c| and rms, the
   expansion parameter r = β|Bᵀc|·radius at the centre, and the smallest order p whose bound is ≤ ``--tolerance``
   (inf if none up to p = 30),
3. on every ``--every``-th snapshot where every cluster has a finite order (for r taken over all queries of the
   snapshot), evaluates the expansion for all tokens and compares it with ``kernels.dense_field`` (float64) on
   the same cloud, timing both in this process,
4. weighs the snapshot intervals by the run's ``field_evaluations``: the fraction of evaluations spent in
   intervals whose two end snapshots allow the expansion with every order ≤ ``--order-cap`` (and at most
   ``--max-clusters`` clusters), and the resulting best-case speed-up of the whole simulation.

    python benchmarks/cluster_expansion.py --finite results/.../beta1000.nc --matrices results/.../matrices.nc \\
        --markdown docs/cluster_expansion.md --replicas 1 --every 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import xarray as xr
from scipy.spatial import cKDTree

from lowtemp.dynamics import kernels
from lowtemp.store import datasets, io

#: the largest expansion order considered at all; beyond it the order is reported as inf
MAX_ORDER = 30
#: neighbours whose distance ranks the tokens by density (the seeds are taken densest first)
DENSITY_NEIGHBOURS = 16


@dataclass(frozen=True)
class Cluster:
    """One cluster of a snapshot: its tokens, unit centre, radius max_j|x_j − c| and rms distance to c."""

    members: np.ndarray
    centre: np.ndarray
    radius: float
    rms: float


@dataclass(frozen=True)
class SnapshotClusters:
    """The clusters of one snapshot with the expansion parameters and orders of each cluster.

    ``r_centre`` is β|Bᵀc|·radius (a query at the cluster's centre: what the table reports); ``r_all`` uses the
    largest |Bᵀx_i| over every token of the snapshot, which bounds the remainder for every query the validation
    evaluates, so the expansion uses ``order_all``.
    """

    clusters: list[Cluster]
    r_centre: np.ndarray
    r_all: np.ndarray
    order_centre: np.ndarray
    order_all: np.ndarray
    seconds: float

    def big(self, share: float = 0.99) -> list[int]:
        """Indices of the largest clusters that together hold at least ``share`` of the tokens."""
        sizes = np.array([len(c.members) for c in self.clusters])
        order = np.argsort(-sizes, kind="stable")
        needed = int(np.searchsorted(np.cumsum(sizes[order]), share * sizes.sum() - 1e-9)) + 1
        return [int(i) for i in order[:needed]]


# ------------------------------------------------------------------ inputs
def load_matrices(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """B and V: through the package's checked reader when it accepts the file, else straight from the NetCDF
    (an older schema version is refused by the reader but its B and V are still the run's matrices)."""
    try:
        m = datasets.load_matrices(path)
        return np.asarray(m.B, dtype=float), np.asarray(m.V, dtype=float)
    except io.NetCDFSchemaError:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            B = ds["B"].transpose("row", "col").values.astype(float)
            V = ds["V"].transpose("row", "col").values.astype(float)
        return B, V


@dataclass(frozen=True)
class Run:
    """What the analysis needs from a finite-temperature simulation file."""

    path: Path
    beta: float
    times: np.ndarray
    positions: np.ndarray  # (replica, time, token, dim)
    field_evaluations: np.ndarray  # (time,): evaluations spent in the interval ending at each snapshot


def load_run(path: Path, replicas: int) -> Run:
    """Positions of the first ``replicas`` replicas, read by dimension name (files differ in dimension order)."""
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        if "beta" in ds.coords or "beta" in ds:
            beta = float(ds["beta"].values)
        else:
            beta = float(json.loads(ds.attrs["provenance"])["beta"])
        pos = ds["positions"].isel(replica=slice(0, replicas)).transpose("replica", "time", "token", "dim")
        return Run(
            path=path,
            beta=beta,
            times=ds["time"].values.astype(float),
            positions=np.ascontiguousarray(pos.values, dtype=float),
            field_evaluations=ds["field_evaluations"].values.astype(np.int64),
        )


# ------------------------------------------------------------------ clusters
def find_clusters(X: np.ndarray, link: float) -> list[Cluster]:
    """Seed clustering: tokens ranked densest first (smallest distance to their 16th neighbour); each seed not yet
    assigned takes every unassigned token within chordal distance ``link``.

    Seeding from the densest tokens puts the seed near a tight cluster's core, so a cluster far smaller than
    ``link`` comes out whole, while an outlier farther than ``link`` from every core becomes its own (exact,
    radius 0) cluster instead of inflating a big cluster's radius, which is what the expansion's error depends on.
    """
    tree = cKDTree(X)
    dist, _ = tree.query(X, k=min(DENSITY_NEIGHBOURS, len(X)))
    order = np.argsort(dist[:, -1], kind="stable")
    label = np.full(len(X), -1, dtype=np.int64)
    groups: list[np.ndarray] = []
    for seed in order:
        if label[seed] >= 0:
            continue
        near = np.asarray(tree.query_ball_point(X[seed], link), dtype=np.int64)
        members = near[label[near] < 0]
        label[members] = len(groups)
        groups.append(members)
    return [cluster_geometry(X, members) for members in groups]


def cluster_geometry(X: np.ndarray, members: np.ndarray) -> Cluster:
    """Centre = normalised mean direction; radius and rms of the distances to it."""
    Y = X[members]
    mean = Y.mean(axis=0)
    centre = mean / np.linalg.norm(mean)
    dist = np.linalg.norm(Y - centre, axis=1)
    return Cluster(members=members, centre=centre, radius=float(dist.max()), rms=float(np.sqrt(np.mean(dist**2))))


def expansion_order(r: float, tolerance: float, max_order: int = MAX_ORDER) -> float:
    """Smallest p with e^{2r} r^{p+1}/(p+1)! ≤ tolerance (remainder over the cluster sum's lower bound), or inf.

    Evaluated in logarithms, since r^{p+1} and (p+1)! overflow long before the ratio does.
    """
    if r == 0.0:
        return 0.0
    log_tol = math.log(tolerance)
    for p in range(max_order + 1):
        if 2.0 * r + (p + 1) * math.log(r) - math.lgamma(p + 2) <= log_tol:
            return float(p)
    return math.inf


def analyse_clusters(X: np.ndarray, B: np.ndarray, beta: float, link: float, tolerance: float) -> SnapshotClusters:
    """Cluster one snapshot and give each cluster its expansion parameters and orders."""
    start = time.perf_counter()
    clusters = find_clusters(X, link)
    seconds = time.perf_counter() - start
    centres = np.array([c.centre for c in clusters])
    radii = np.array([c.radius for c in clusters])
    r_centre = beta * np.linalg.norm(centres @ B, axis=1) * radii  # (Bᵀc)ᵀ = cᵀB
    r_all = beta * float(np.max(np.linalg.norm(X @ B, axis=1))) * radii
    return SnapshotClusters(
        clusters=clusters,
        r_centre=r_centre,
        r_all=r_all,
        order_centre=np.array([expansion_order(r, tolerance) for r in r_centre]),
        order_all=np.array([expansion_order(r, tolerance) for r in r_all]),
        seconds=seconds,
    )


# ------------------------------------------------------------------ the expansion
@dataclass(frozen=True)
class MonomialTable:
    """The exponents α ∈ ℕ^d with |α| ≤ p, graded by degree, each with a parent α − e_k of one degree less (k its
    first non-zero axis) and its weight 1/α!.

    Symmetric moments need C(p + d, d) monomials instead of the Σ d^k entries of full moment tensors, and the
    parent links build every monomial with one vector product from an earlier one (no powers, no gathers).
    """

    exponents: np.ndarray  # (n_p, d)
    parent: np.ndarray  # (n_p,), −1 for α = 0
    axis: np.ndarray  # (n_p,)
    weight: np.ndarray  # (n_p,) 1/α!


@cache
def monomial_table(p: int, d: int) -> MonomialTable:
    """Build (and cache: the same few orders recur at every evaluation) the graded monomial table."""
    exponents = [alpha for k in range(p + 1) for alpha in sorted(compositions(k, d), reverse=True)]
    index = {alpha: i for i, alpha in enumerate(exponents)}
    parent = np.full(len(exponents), -1, dtype=np.int64)
    axis = np.zeros(len(exponents), dtype=np.int64)
    for i, alpha in enumerate(exponents[1:], start=1):
        k = next(j for j, e in enumerate(alpha) if e > 0)
        axis[i] = k
        parent[i] = index[alpha[:k] + (alpha[k] - 1,) + alpha[k + 1 :]]
    exps = np.array(exponents, dtype=np.int64).reshape(len(exponents), d)
    weight = np.array([1.0 / math.prod(math.factorial(e) for e in alpha) for alpha in exponents])
    return MonomialTable(exponents=exps, parent=parent, axis=axis, weight=weight)


def compositions(k: int, d: int) -> list[tuple[int, ...]]:
    """Every α ∈ ℕ^d with |α| = k."""
    if d == 1:
        return [(k,)]
    return [(first, *rest) for first in range(k + 1) for rest in compositions(k - first, d - 1)]


def monomials(Y: np.ndarray, table: MonomialTable) -> np.ndarray:
    """Y^α for every row of Y (n, d) and every α of the table, transposed: shape (n_p, n), each monomial a
    contiguous row built as parent row × one coordinate."""
    YT = np.ascontiguousarray(Y.T)
    out = np.empty((len(table.parent), len(Y)))
    out[0] = 1.0
    for i in range(1, len(out)):
        np.multiply(out[table.parent[i]], YT[table.axis[i]], out=out[i])
    return out


def cluster_block(A: np.ndarray, X: np.ndarray, cluster: Cluster, order: int):
    """One cluster's contribution to every query as (shift, sum, vector): e^{shift}·sum ≈ Σ_{j∈C} e^{⟨a_i, x_j⟩}
    and e^{shift}·vector ≈ Σ_{j∈C} e^{⟨a_i, x_j⟩} x_j.

    A cluster with no more tokens than monomials is summed directly (exact and cheaper). Otherwise δ is scaled by
    the radius ρ and a by ρ (a^α δ^α is unchanged), so every monomial stays O(r^k) and nothing under- or overflows
    however tight the cluster is.
    """
    Y = X[cluster.members]
    table = monomial_table(order, X.shape[1])
    if len(Y) <= len(table.parent):
        scores = A @ Y.T
        shift = scores.max(axis=1)
        w = np.exp(scores - shift[:, None])
        return shift, w.sum(axis=1), w @ Y
    rho = cluster.radius if cluster.radius > 0.0 else 1.0
    D = monomials((Y - cluster.centre) / rho, table)
    moments = (D @ np.column_stack([np.ones(len(Y)), Y])) * table.weight[:, None]  # Σ δ^α/α!, Σ δ^α x_j/α!
    sums = moments.T @ monomials(A * rho, table)  # (1 + d, n)
    return A @ cluster.centre, sums[0], sums[1:].T


def expansion_field(X: np.ndarray, B: np.ndarray, V: np.ndarray, beta: float, snap: SnapshotClusters) -> np.ndarray:
    """The field at every token of X (token, dim) from the cluster expansions, combined with a per-query shift
    (the largest block shift) so that e^{⟨a, c⟩} with |a| ~ β never overflows."""
    A = beta * (X @ B)
    blocks = [cluster_block(A, X, c, int(p)) for c, p in zip(snap.clusters, snap.order_all)]
    top = np.max([b[0] for b in blocks], axis=0)
    Z = np.zeros(len(X))
    num = np.zeros_like(X)
    for shift, s, vec in blocks:
        scale = np.exp(shift - top)
        Z += scale * s
        num += scale[:, None] * vec
    F = (num @ V.T) / Z[:, None]
    return F - np.sum(F * X, axis=1, keepdims=True) * X


def best_time(fn, repeats: int) -> float:
    """Shortest of ``repeats`` timings: on a shared machine the minimum is the least disturbed one."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


# ------------------------------------------------------------------ per snapshot
def usable(snap: SnapshotClusters, order_cap: int, max_clusters: int) -> bool:
    """Whether the expansion is exact to the tolerance for every query with orders ≤ order_cap and few clusters
    (the per-query cost grows with the number of clusters; with thousands it is no cheaper than dense)."""
    return len(snap.clusters) <= max_clusters and bool(np.all(snap.order_all <= order_cap))


def validate(X, B, V, beta, snap: SnapshotClusters, repeats: int) -> dict:
    """Expansion against ``kernels.dense_field`` on the same cloud: the largest field difference (relative to the
    largest dense field and to ‖V‖₂, the field's scale) and both timings, measured back to back."""
    dense = kernels.dense_field(X[None], B, V, beta)[0]
    approx = expansion_field(X, B, V, beta, snap)
    diff = float(np.max(np.linalg.norm(approx - dense, axis=1)))
    scale = float(np.max(np.linalg.norm(dense, axis=1)))
    t_dense = best_time(lambda: kernels.dense_field(X[None], B, V, beta), repeats)
    t_exp = best_time(lambda: expansion_field(X, B, V, beta, snap), repeats)
    return {
        "error_rel": diff / scale if scale > 0 else math.inf,
        "error_norm_V": diff / float(np.linalg.norm(V, 2)),
        "max_field": scale,
        "t_dense": t_dense,
        "t_expansion": t_exp,
        "t_cluster": snap.seconds,
    }


def snapshot_row(t: float, replica: int, snap: SnapshotClusters, check: dict | None) -> dict:
    """One table row: the big clusters' geometry and orders, and the validation if it ran."""
    big = snap.big()
    return {
        "t": t,
        "replica": replica,
        "clusters": len(snap.clusters),
        "big": len(big),
        "sizes": [len(snap.clusters[i].members) for i in big],
        "radius": [snap.clusters[i].radius for i in big],
        "rms": [snap.clusters[i].rms for i in big],
        "r": [float(snap.r_centre[i]) for i in big],
        "p": [float(snap.order_centre[i]) for i in big],
        "p_used": float(np.max(snap.order_all)),
        "check": check,
    }


def analyse_run(run: Run, B, V, args) -> dict:
    """Cluster every snapshot (for the evaluation weighting), validate and time every ``every``-th one."""
    link = args.link if args.link else 10.0 / run.beta
    n_time = len(run.times)
    ok = np.ones(n_time, dtype=bool)
    rows = []
    for replica in range(run.positions.shape[0]):
        for k in range(n_time):
            X = run.positions[replica, k]
            snap = analyse_clusters(X, B, run.beta, link, args.tolerance)
            ok[k] &= usable(snap, args.order_cap, args.max_clusters)
            if k % args.every:
                continue
            finite = len(snap.clusters) <= args.max_clusters and bool(np.all(np.isfinite(snap.order_all)))
            check = validate(X, B, V, run.beta, snap, args.repeats) if finite else None
            rows.append(snapshot_row(float(run.times[k]), replica, snap, check))
            print(format_row(rows[-1]), flush=True)
    return {"run": run, "link": link, "rows": rows, "usable": ok, **evaluation_share(run.field_evaluations, ok)}


def evaluation_share(evaluations: np.ndarray, ok: np.ndarray) -> dict:
    """Field evaluations in intervals (t_{k−1}, t_k] whose both end snapshots allow the expansion, over all.

    Both ends are required because the clusters move during the interval; in the collapsing phase the radii
    shrink monotonically, so the interval lies between two usable clouds.
    """
    interval_ok = np.zeros(len(evaluations), dtype=bool)
    interval_ok[1:] = ok[1:] & ok[:-1]
    total = int(evaluations.sum())
    covered = int(evaluations[interval_ok].sum())
    first = np.flatnonzero(interval_ok)
    return {
        "evaluations": total,
        "covered": covered,
        "first_interval": int(first[0]) if len(first) else None,
        "usable_intervals": len(first),
        "contiguous": bool(len(first) and np.all(interval_ok[first[0] :])),
    }


# ------------------------------------------------------------------ output
def fmt_list(values, spec: str) -> str:
    """A per-cluster list for up to three clusters, else the largest value (the one that limits the expansion)."""
    if len(values) <= 3:
        return " / ".join(format(v, spec) if math.isfinite(v) else "inf" for v in values)
    top = max(values)
    return f"max {format(top, spec) if math.isfinite(top) else 'inf'}"


def format_row(row: dict) -> str:
    """A markdown table row (also printed while the script runs)."""
    check = row["check"]
    if check:
        tail = (
            f"{check['max_field']:.2e} | {check['error_rel']:.1e} | {check['error_norm_V']:.1e} | "
            f"{check['t_dense']:.3f} | "
            f"{check['t_expansion'] / check['t_dense']:.3f} | {check['t_cluster'] / check['t_dense']:.2f}"
        )
    else:
        tail = "not run | | | | | "
    p_used = "inf" if not math.isfinite(row["p_used"]) else f"{row['p_used']:.0f}"
    sizes = " / ".join(str(s) for s in row["sizes"]) if row["big"] <= 3 else f"{row['big']} clusters"
    when = f"{row['t']:g}" + (f" (replica {row['replica']})" if row["replica"] else "")
    return (
        f"| {when} | {row['clusters']} | {row['big']} ({sizes}) | {fmt_list(row['radius'], '.2e')} | "
        f"{fmt_list(row['rms'], '.2e')} | {fmt_list(row['r'], '.3g')} | {fmt_list(row['p'], '.0f')} | {p_used} | "
        f"{tail} |"
    )


TABLE_HEAD = (
    "| t | clusters | clusters with ≥ 99 % (sizes) | radius | rms | r = β·abs(Bᵀc)·radius | p (centre) | p used | "
    "max abs(F) | max error / max abs(F) | max error / ‖V‖₂ | dense (s) | expansion / dense | clustering / dense |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def largest_r(order_cap: int, tolerance: float) -> float:
    """The largest r whose order is ≤ order_cap (bisection; the bound grows with r), to state the cap as a radius."""
    lo, hi = 0.0, 50.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expansion_order(mid, tolerance) <= order_cap else (lo, mid)
    return lo


def speedups(result: dict) -> dict:
    """Fraction f of evaluations the expansion could take; the measured cost ratio ρ (largest over the validated
    usable snapshots) without and with the clustering; the whole-run speed-ups 1/((1 − f) + f·ρ) and 1/(1 − f)."""
    f = result["covered"] / result["evaluations"] if result["evaluations"] else 0.0
    checks = [row["check"] for row in result["rows"] if row["check"] and row["p_used"] <= result["order_cap"]]
    rho = max((c["t_expansion"] / c["t_dense"] for c in checks), default=math.nan)
    rho_cl = max(((c["t_expansion"] + c["t_cluster"]) / c["t_dense"] for c in checks), default=math.nan)
    return {
        "f": f,
        "rho": rho,
        "rho_cluster": rho_cl,
        "speed": 1.0 / ((1.0 - f) + f * rho),
        "speed_cluster": 1.0 / ((1.0 - f) + f * rho_cl),
        "limit": 1.0 / (1.0 - f) if f < 1.0 else math.inf,
    }


def conclusion(result: dict) -> str:
    """The conclusion paragraph, every number from the measurements above it."""
    run = result["run"]
    cap, tol = result["order_cap"], result["tolerance"]
    r_cap = largest_r(cap, tol)
    if result["first_interval"] is None:
        return (
            f"At β = {run.beta:g} no snapshot interval has every cluster expandable with order ≤ {cap} (r ≤ "
            f"{r_cap:.2f}) at tolerance {tol:g}: 0 of {result['evaluations']} field evaluations could use the "
            "expansion, so on this run it saves nothing."
        )
    s = speedups(result)
    t0 = run.times[result["first_interval"] - 1]
    where = (
        f"in every interval from t = {t0:g} on"
        if result["contiguous"]
        else f"in {result['usable_intervals']} intervals, the first starting at t = {t0:g}"
    )
    checks = [row["check"] for row in result["rows"] if row["check"]]
    worst = max(c["error_rel"] for c in checks)
    worst_v = max(c["error_norm_V"] for c in checks)
    return (
        f"At β = {run.beta:g} every cluster is expandable to {tol:g} with order ≤ {cap} (r ≤ {r_cap:.2f}) "
        f"{where}: {result['covered']} of {result['evaluations']} field "
        f"evaluations (f = {100 * s['f']:.1f} %) fall in such intervals. On the {len(checks)} validated "
        f"snapshots the largest field difference from the dense kernel is {worst:.1e} of the largest field "
        f"({worst_v:.1e} of ‖V‖₂). On the usable ones the expansion (moments included) took at most "
        f"ρ = {s['rho']:.3f} of the dense kernel's time, {s['rho_cluster']:.3f} with the clustering redone. If "
        "field evaluations are the run's whole cost and the dense kernel keeps the other evaluations, the "
        f"best-case speed-up of the simulation is 1/((1 − f) + f·ρ) = {s['speed']:.2f}× ({s['speed_cluster']:.2f}× "
        f"with the clustering at every evaluation; at most 1/(1 − f) = {s['limit']:.2f}× for a free expansion)."
    )


def markdown(results: list[dict], args, argv: list[str], wall: float) -> str:
    """The whole document: header, one table and conclusion per run."""
    command = "python benchmarks/cluster_expansion.py " + " ".join(argv)
    parts = [
        "# Per-cluster expansion of the softmax field (generated)",
        "",
        f"Generated by `{command}` at commit {io.checkout_commit(Path(__file__).parent)} on {io.cpu_name()} "
        f"({len(os.sched_getaffinity(0))} cores available, shared with other jobs), {wall / 60:.1f} min of wall "
        "time. Inputs: "
        + ", ".join(f"`{r['run'].path}`" for r in results)
        + f" and `{args.matrices}`. Do not edit: regenerate.",
        "",
        "Method (details in the script's docstring): each snapshot of replica 0 is clustered by seeds taken "
        "densest first (smallest distance to the 16th neighbour), each unassigned seed taking every unassigned "
        "token within chordal distance `link` of it; centre c = normalised mean, radius = max_j abs(x_j − c). "
        "For a query at the centre the expansion parameter is r = β·abs(Bᵀc)·radius and the order p is the "
        "smallest with e^{2r}·r^{p+1}/(p+1)! ≤ "
        f"{args.tolerance:g} (Taylor remainder over the lower bound abs(C)·e^(−r) of the cluster's sum; inf if "
        f"no p ≤ {MAX_ORDER}). 'p used' is the largest order over all clusters with r taken for the largest "
        "abs(Bᵀx_i) of the snapshot, which bounds every query; the expansion (symmetric moments of degree ≤ p, "
        "clusters with fewer tokens than monomials summed directly) is validated against `kernels.dense_field` "
        "(float64; its exponential itself has a relative error below 5e-14) for all tokens wherever every "
        f"cluster has a finite order and there are at most {args.max_clusters} clusters. Errors are the largest "
        "over tokens of abs(F_expansion − F_dense), relative to the largest abs(F_dense) and to ‖V‖₂. Times are "
        f"the best of {args.repeats}, dense and expansion back to back in one process; the expansion is a numpy "
        "prototype, timed with its moments (needed at every evaluation) but without the clustering, which is "
        "timed separately. A snapshot interval counts as usable when "
        f"both its end snapshots have every cluster's order ≤ {args.order_cap} and at most {args.max_clusters} "
        "clusters; the run's `field_evaluations` of those intervals give the share of the run's field "
        "evaluations the expansion could take. The integrator steps all replicas together; with `--replicas 1` "
        "replica 0 stands for them.",
    ]
    for result in results:
        run = result["run"]
        parts += [
            "",
            f"## β = {run.beta:g}: `{run.path.name}`",
            "",
            f"N = {run.positions.shape[2]}, link = {result['link']:.3g}; rows: every {args.every}th of the "
            f"{len(run.times)} snapshots (Δt = {run.times[args.every] - run.times[0]:g}); 'not run': "
            "some cluster has no finite order (or there are too many clusters).",
            "",
            TABLE_HEAD,
            *[format_row(row) for row in result["rows"]],
            "",
            conclusion(result),
        ]
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    """Parse, check the inputs exist, analyse each run, write the markdown."""
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--finite", type=Path, nargs="+", required=True, help="finite-temperature simulation file(s)")
    ap.add_argument("--matrices", type=Path, required=True)
    ap.add_argument("--markdown", type=Path, help="write the report here")
    ap.add_argument("--replicas", type=int, default=1, help="analyse replicas 0 .. R−1")
    ap.add_argument("--every", type=int, default=4, help="validate and time every k-th snapshot")
    ap.add_argument("--link", type=float, default=None, help="chordal seed radius of the clustering (default 10/β)")
    ap.add_argument("--tolerance", type=float, default=1e-14)
    ap.add_argument("--order-cap", type=int, default=12, help="largest order a usable interval may need")
    ap.add_argument("--max-clusters", type=int, default=64, help="most clusters a usable snapshot may have")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    missing = [p for p in [*args.finite, args.matrices] if not p.exists()]
    if missing:
        print("missing input: " + ", ".join(map(str, missing)), file=sys.stderr)
        return 1
    start = time.perf_counter()
    B, V = load_matrices(args.matrices)
    kernels.dense_field(np.eye(3)[None], B, V, 1.0)  # compile once, outside every timing
    results = []
    for path in args.finite:
        run = load_run(path, args.replicas)
        print(f"# {path} (beta = {run.beta:g})\n{TABLE_HEAD}", flush=True)
        result = analyse_run(run, B, V, args)
        result.update(order_cap=args.order_cap, tolerance=args.tolerance)
        print(conclusion(result), flush=True)
        results.append(result)
    if args.markdown:
        args.markdown.write_text(markdown(results, args, argv, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
