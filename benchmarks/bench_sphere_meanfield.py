"""Cost of one field evaluation of the general S² mean-field solver (``lowtemp.dynamics.sphere_softmax``), run by
`make bench`.

On the `concentration` experiment's matrices (config/config.yaml) and its initial measure on icospheres of
increasing level, every vertex is a query (what one evaluation of the solver's right-hand side asks). For each
(level, β) where the mesh resolves the kernel: seconds per evaluation (best of ``--repeats``), quadrature nodes per
query, the share of (query, triangle) pairs the bounds let through, and, in the same process, the package's dense
particle kernel on as many tokens as the mesh has vertices: the ratio says what one evaluation costs against one
particle step of the same size (the particle cloud needs N ≈ 10⁷–10⁸ at β ≥ 100 to stand for the mean field,
docs/convergence.md, the mesh does not).

Read the ratios, not the absolute times: the machine may be shared.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from lowtemp.config import experiment, validation
from lowtemp.dynamics import kernels, sphere_meanfield, sphere_mesh, sphere_softmax
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
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)

    cfg = validation.load_config_file(args.config)
    exp = cfg["experiments"][args.experiment]
    M = experiment.build_matrices(args.experiment, exp, cfg["root_seed"])
    measure = dict(exp["initial_measure"])
    name = measure.pop("name")
    lines = [
        "# Cost of one field evaluation of the S² mean-field solver (`make bench`)",
        "",
        f"{args.experiment}'s matrices and initial measure ({name}); every vertex a query; {io.cpu_name()}, "
        f"{numba.get_num_threads()} numba threads, commit {io.checkout_commit('.')}, "
        f"`python benchmarks/bench_sphere_meanfield.py --levels {' '.join(map(str, args.levels))} "
        f"--betas {' '.join(f'{b:g}' for b in args.betas)}`. Best of {args.repeats} after a warm-up.",
        "",
        "| level | triangles | queries | β | kernel width (rad) | s per evaluation | nodes per query | "
        "pairs kept | dense particle kernel, same N (s) | mesh ÷ particles |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for level in args.levels:
        mesh = sphere_meanfield.initial_mesh(name, measure, level)
        queries = mesh.points
        X = queries[None]
        for beta in args.betas:
            width = sphere_meanfield.kernel_width(M.B, beta)
            try:
                sphere_meanfield.check_resolution(
                    mesh, M.B, beta, sphere_softmax.DEFAULT_VARIATION, sphere_softmax.DEFAULT_DEPTH
                )
            except sphere_mesh.MeshTooCoarse:
                lines.append(f"| {level} | {mesh.triangles.shape[0]} | {queries.shape[0]} | {beta:g} | "
                             f"{width:.3f} | too coarse | | | | |")  # fmt: skip
                print(lines[-1], flush=True)
                continue
            result = {}

            def evaluation():
                result["sm"] = sphere_softmax.softmax(mesh, M.B, beta, queries)

            seconds = best_time(evaluation, args.repeats)
            dense = best_time(lambda: kernels.dense_field(X, M.B, M.V, beta), args.repeats)
            sm = result["sm"]
            kept = float(sm.kept.sum()) / (queries.shape[0] * mesh.triangles.shape[0])
            lines.append(
                f"| {level} | {mesh.triangles.shape[0]} | {queries.shape[0]} | {beta:g} | {width:.3f} | "
                f"{seconds:.3g} | {sm.nodes.mean():.0f} | {kept:.3f} | {dense:.3g} | {seconds / dense:.1f} |"
            )
            print(lines[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
