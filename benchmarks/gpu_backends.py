"""Which array library runs the float64 field fastest on a GPU: the kernel ``torch`` against the same in JAX.

On a machine with a CUDA device, PyTorch and JAX::

    python benchmarks/gpu_backends.py --clouds docs/data/gpu_paper_scale/beta1000/replica0.npz --out DIR

times one field evaluation (best of ``--repeats`` after a warm-up call; JAX's compilation untimed) of
``lowtemp.dynamics.torch_field`` and of ``jax_field`` below (the same blocked computation, compiled by XLA, which
may fuse the shift, the exponential and the row sums) on the initial cloud and the later snapshots of a GPU
paper-scale run (``gpu_paper_scale.py run`` writes the npz), five of its times, each as R = 4 copies of that
snapshot (the run's size), at the paper-scale experiment's matrices and β; and each one's largest relative difference
from the dense kernel. Writes ``DIR/backends.json``; ``--markdown`` renders it.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np

from lowtemp.config import validation
from lowtemp.dynamics import kernels, torch_field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from estimate_cost import SCHEMA, merged  # noqa: E402
from gpu_paper_scale import best_seconds  # noqa: E402

#: query rows per block of the JAX field (scores held at once: R·block·N)
JAX_BLOCK = 2048


def make_jax_field():
    """The field in JAX float64, jit-compiled per shape: P⊥(x_i) Σ_j softmax_j(β x_iᵀBx_j) V x_j."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    @partial(jax.jit, static_argnames=("block",))
    def field(X, B, V, beta, block):
        r, n, d = X.shape
        XB = beta * (X @ B)
        VX = X @ V.T

        def rows(q):  # q: (r, block, d) of β x_iᵀ B
            S = jnp.einsum("rid,rjd->rij", q, X)
            W = jnp.exp(S - S.max(axis=-1, keepdims=True))
            return jnp.einsum("rij,rjd->rid", W, VX) / W.sum(axis=-1)[..., None]

        blocks = XB.reshape(r, n // block, block, d).transpose(1, 0, 2, 3)
        F = jax.lax.map(rows, blocks).transpose(1, 0, 2, 3).reshape(r, n, d)
        return F - jnp.sum(F * X, axis=-1, keepdims=True) * X

    def call(X, B, V, beta, block=JAX_BLOCK):
        n = X.shape[1]
        block = max(b for b in range(1, min(block, n) + 1) if n % b == 0)  # blocks must tile the rows
        return np.asarray(field(jnp.asarray(X), jnp.asarray(B), jnp.asarray(V), float(beta), block))

    return call, jax.__version__, str(jax.devices()[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clouds", required=True, help="an npz with times and positions (time, token, dim)")
    ap.add_argument("--config", nargs="+", default=["config/paper_scale.yaml"])
    ap.add_argument("--beta", type=float, default=1000.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="unknown", help="the commit of the checkout (a device copy has no .git)")
    args = ap.parse_args(argv)
    config = {}
    for path in args.config:
        config = merged(config, validation.load_config_file(path))
    name = next(iter(config["experiments"]))
    M = validation.validate_config(config, SCHEMA, results=str(Path(args.out) / "results"))[name]
    data = np.load(args.clouds)
    jax_field, jax_version, jax_device = make_jax_field()
    import torch

    def torch_blocks(X, factor):
        """The torch field with blocks ``factor`` times larger than the kernel's."""
        default = torch_field.BLOCK_SCORES
        torch_field.BLOCK_SCORES = default * factor
        try:
            return torch_field.torch_field(X, M.B, M.V, args.beta)
        finally:
            torch_field.BLOCK_SCORES = default

    rows = []
    for k in np.unique(np.linspace(0, len(data["times"]) - 1, 5).astype(int)):
        X = np.ascontiguousarray(np.repeat(data["positions"][k][None], 4, axis=0))
        dense = kernels.attention_field(X, M.B, M.V, args.beta, "dense")
        row = {"time": float(data["times"][k]), "pairs": int(X.shape[0] * X.shape[1] ** 2)}
        for label, fn in (
            ("torch", lambda X=X: torch_field.torch_field(X, M.B, M.V, args.beta)),
            ("torch_blocks4x", lambda X=X: torch_blocks(X, 4)),
            ("jax", lambda X=X: jax_field(X, M.B, M.V, args.beta)),
            ("jax_block8192", lambda X=X: jax_field(X, M.B, M.V, args.beta, 8192)),
        ):
            F = fn()
            row[label] = {
                "seconds": best_seconds(fn, args.repeats),
                "relative_to_dense": float(np.max(np.abs(F - dense)) / np.max(np.abs(dense))),
            }
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "commit": args.commit,
        "blocks": {"torch": f"{torch_field.BLOCK_SCORES} scores", "jax": JAX_BLOCK, "jax_block8192": 8192},
        "torch": torch.__version__,
        "jax": jax_version,
        "device": jax_device,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "beta": args.beta,
        "rows": rows,
    }
    (out / "backends.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
