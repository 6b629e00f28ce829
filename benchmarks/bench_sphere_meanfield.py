"""Cost of one field evaluation of the general S² mean-field solver (``lowtemp.dynamics.sphere_softmax``), run by
`make bench`.

On the `concentration` experiment's matrices (config/config.yaml) and its initial measure on icospheres of
increasing level, and on a clustered state (two vMF clusters on ±E1(A), as late in the metastable phase), every
vertex is a query (what one evaluation of the solver's right-hand side asks). For each (state, level, β) where the
mesh resolves the kernel: seconds per evaluation (best of ``--repeats``) with the queries grouped and ungrouped,
quadrature nodes per query, the shares of (query, triangle) pairs bounded and kept, and, in the same process, the
package's dense
particle kernel on as many tokens as the mesh has vertices: the ratio says what one evaluation costs against one
particle step of the same size (the particle cloud needs N ≈ 10⁷–10⁸ at β ≥ 100 to stand for the mean field,
docs/convergence.md, the mesh does not).

Then on meshes the flow itself made (``--flows``: icosphere level and time; the solver's reference settings at
β = 10), where the vertices crowd into the contracted clusters: one evaluation with and without query aggregation
(``sphere_aggregate``: crowded queries expanded about their group's centre, checked at one member per group), the
groups, the share of queries expanded, and the largest miss of the velocity and divergence against the exact pass.

Read the ratios, not the absolute times: the machine may be shared.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numba
import numpy as np

from lowtemp.config import experiment, validation
from lowtemp.dynamics import (
    kernels,
    sphere_aggregate,
    sphere_levels,
    sphere_meanfield,
    sphere_mesh,
    sphere_softmax,
)
from lowtemp.store import io


def best_time(fn, repeats: int) -> float:
    """Shortest wall time of ``repeats`` calls of fn (after one warm-up call)."""
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return float(best)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--experiment", default="concentration")
    ap.add_argument("--levels", type=int, nargs="+", default=[3, 4, 5])
    ap.add_argument("--betas", type=float, nargs="+", default=[10.0, 100.0, 1000.0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--flows", nargs="+", default=["2:12", "3:6"], help="level:time of each flowed mesh (β = 10)")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)

    cfg = validation.load_config_file(args.config)
    exp = cfg["experiments"][args.experiment]
    M = experiment.build_matrices(args.experiment, exp, cfg["root_seed"])
    measure = dict(exp["initial_measure"])
    name = measure.pop("name")
    depth = sphere_levels.REFERENCE_DEPTH
    A = M.V @ M.B.T
    axis = np.linalg.eigh(0.5 * (A + A.T))[1][:, -1]
    # the metastable state: two vMF clusters of concentration 40 on ±E1(A), the tail hundreds of e-folds down
    states = {name: (name, measure), "clustered": ("vmf_mixture", {"kappas": [40.0, 40.0], "means": [axis, -axis]})}
    lines = [
        "# Cost of one field evaluation of the S² mean-field solver (`make bench`)",
        "",
        f"{args.experiment}'s matrices and initial measure ({name}); every vertex a query; {io.cpu_name()}, "
        f"{numba.get_num_threads()} numba threads, commit {io.checkout_commit('.')}, "
        f"`python benchmarks/bench_sphere_meanfield.py --levels {' '.join(map(str, args.levels))} "
        f"--betas {' '.join(f'{b:g}' for b in args.betas)}`. Best of {args.repeats} after a warm-up.",
        "",
        f"Pruning depth {depth:g} (the pipeline's reference). Every query bounds its group's candidate triangles",
        "(queries grouped by their kernel centres, `sphere_softmax.query_groups`); `ungrouped` is every query",
        "bounding every triangle itself (the pass before groups), the same answer bit for bit.",
        "",
        "| state | level | triangles | queries | β | kernel width (rad) | s per evaluation | ungrouped (s) | "
        "speed-up | nodes per query | pairs bounded | pairs kept | dense particle kernel, same N (s) | "
        "mesh ÷ particles |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for (state, (law, params)), level in itertools.product(states.items(), args.levels):
        mesh = sphere_meanfield.initial_mesh(law, params, level)
        queries = mesh.points
        X = queries[None]
        for beta in args.betas:
            width = sphere_meanfield.kernel_width(M.B, beta)
            try:
                sphere_meanfield.check_resolution(mesh, M.B, beta, sphere_softmax.DEFAULT_VARIATION, depth)
                sphere_softmax.softmax(mesh, M.B, beta, queries, depth=depth)  # the screening test is not a proof
            except sphere_mesh.MeshTooCoarse:
                lines.append(f"| {state} | {level} | {mesh.triangles.shape[0]} | {queries.shape[0]} | {beta:g} | "
                             f"{width:.3f} | too coarse | | | | | | | |")  # fmt: skip
                print(lines[-1], flush=True)
                continue
            result = {}

            def evaluation(grouped=True):
                result[grouped] = sphere_softmax.softmax(mesh, M.B, beta, queries, depth=depth, grouped=grouped)

            seconds = best_time(evaluation, args.repeats)
            plain = best_time(lambda: evaluation(False), args.repeats)
            dense = best_time(lambda: kernels.dense_field(X, M.B, M.V, beta), args.repeats)
            sm = result[True]
            pairs = queries.shape[0] * mesh.triangles.shape[0]
            kept, bounded = float(sm.kept.sum()) / pairs, float(sm.bounded.sum()) / pairs
            lines.append(
                f"| {state} | {level} | {mesh.triangles.shape[0]} | {queries.shape[0]} | {beta:g} | {width:.3f} | "
                f"{seconds:.3g} | {plain:.3g} | {plain / seconds:.2f} | {sm.nodes.mean():.0f} | {bounded:.3f} | "
                f"{kept:.3f} | {dense:.3g} | {seconds / dense:.1f} |"
            )
            print(lines[-1], flush=True)
    lines += flowed_states(M, [tuple(f.split(":")) for f in args.flows], args.repeats)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


def flowed_states(M, flows, repeats: int, beta: float = 10.0) -> list[str]:
    """The aggregation's table: each (level, time) flowed at ``beta`` by the solver, then one evaluation at every
    vertex with and without aggregation."""
    lines = [
        "",
        f"## Query aggregation on meshes the flow made (β = {beta:g})",
        "",
        "Each mesh: the uniform icosphere of the level moved by the solver (reference settings) to the time given;",
        "every vertex a query. `exact`: every query integrates its kept triangles; `aggregated`: crowded queries",
        "expanded about their group's centre where the group's check point allows it (`sphere_aggregate`). The misses",
        "are the largest over all vertices against the exact pass.",
        "",
        "| level | t | triangles | queries | exact (s) | aggregated (s) | speed-up | groups | share expanded | "
        "groups refused | largest velocity miss | largest divergence miss |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for level, horizon in flows:
        level, horizon = int(level), float(horizon)
        settings = sphere_meanfield.reference_settings(level, None)
        mesh0 = sphere_meanfield.initial_mesh("uniform", {}, level)
        mesh = sphere_meanfield.solve(M.B, M.V, beta, [0.0, horizon], mesh0, None, settings).meshes[-1]
        q = mesh.points
        depth, variation = settings.depth, settings.variation
        out = {}

        def exact():
            sm = sphere_softmax.softmax(mesh, M.B, beta, q, variation, depth)
            out["exact"] = sphere_softmax.velocity_divergence(q, sm, M.B, M.V, beta)

        def aggregated():
            out["aggregated"] = sphere_aggregate.aggregated_field(mesh, M.B, M.V, beta, q, variation, depth)

        plain, fast = best_time(exact, repeats), best_time(aggregated, repeats)
        (v0, d0), (v1, d1, counts) = out["exact"], out["aggregated"]
        lines.append(
            f"| {level} | {horizon:g} | {mesh.triangles.shape[0]} | {q.shape[0]} | {plain:.3g} | {fast:.3g} | "
            f"{plain / fast:.2f} | {counts['groups']} | {counts['expanded'] / q.shape[0]:.2f} | {counts['refused']} | "
            f"{np.linalg.norm(v1 - v0, axis=1).max():.1e} | {np.abs(d1 - d0).max():.1e} |"
        )
        print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    main()
