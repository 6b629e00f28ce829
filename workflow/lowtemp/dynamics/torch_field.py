"""The finite-temperature field on an accelerator (kernel ``torch``): PyTorch in float64.

The same computation as the dense kernel (``lowtemp.dynamics.kernels.dense_field``) and the
numpy reference (``lowtemp.dynamics.fields.attention_field``): per block of query rows the
scores β x_iᵀ B x_j, shifted by their row maximum, exponentiated, normalised, applied to
V x_j, then the tangent projection; in float64 throughout (the pipeline's accuracy
contract: equal to the dense kernel to 1e-12 relative, ``tests/dynamics/test_torch_field.py``).
It runs on the first CUDA device when there is one, else on the CPU. Each evaluation
moves the R·N·d positions to the device and the field back (the N² work stays there).

PyTorch is optional (the ``gpu`` extra of pyproject.toml); without it this module
still imports, and asking for the kernel raises an error that says how to install it.
Why PyTorch rather than JAX or KeOps: docs/kernels.md.
"""

from __future__ import annotations

import numpy as np

try:
    import torch
except ImportError:  # the optional `gpu` extra is not installed
    torch = None

#: scores held at once on the device: R·block·N float64 ≤ this many (1 GiB)
BLOCK_SCORES = 2**27


def available() -> bool:
    """Whether PyTorch is installed."""
    return torch is not None


def device() -> str:
    """``cuda`` when PyTorch sees a CUDA device, else ``cpu``."""
    _require()
    return "cuda" if torch.cuda.is_available() else "cpu"


def _require() -> None:
    if torch is None:
        raise ModuleNotFoundError(
            "kernel 'torch' needs PyTorch, which is not installed: `.venv/bin/pip install torch` (or the `gpu` "
            "extra: `pip install -e .[gpu]`), or choose another kernel (dense, cap, numpy, auto)"
        )


def torch_field(X, B, V, beta, with_ess: bool = False, on: str | None = None):
    """P⊥(x_i) Σ_j softmax_j(β x_iᵀBx_j) V x_j for X (replica, token, dim), and with ``with_ess`` the
    effective sample size 1/Σ_j w_ij² (replica, token); numpy arrays in and out, float64 on ``on``
    (default ``device()``)."""
    _require()
    dev = torch.device(on or device())
    Xt = torch.as_tensor(np.asarray(X, dtype=float), dtype=torch.float64, device=dev)
    Bt = torch.as_tensor(np.asarray(B, dtype=float), dtype=torch.float64, device=dev)
    Vt = torch.as_tensor(np.asarray(V, dtype=float), dtype=torch.float64, device=dev)
    r, n, _ = Xt.shape
    XB = (Xt @ Bt).mul_(float(beta))  # row i: β x_iᵀ B (β multiplies N·d numbers here, not the N² scores)
    VX = Xt @ Vt.T  # row j: (V x_j)ᵀ
    keys = Xt.transpose(-1, -2)
    F = torch.empty_like(Xt)
    ess = torch.empty((r, n), dtype=torch.float64, device=dev)
    block = max(1, min(n, BLOCK_SCORES // max(1, r * n)))
    for start in range(0, n, block):
        rows = slice(start, min(start + block, n))
        W = XB[:, rows] @ keys
        W.sub_(W.amax(dim=-1, keepdim=True))
        W.exp_()
        Z = W.sum(dim=-1)
        F[:, rows] = (W @ VX) / Z.unsqueeze(-1)
        if with_ess:
            ess[:, rows] = Z * Z / (W * W).sum(dim=-1)
    F = F - (F * Xt).sum(dim=-1, keepdim=True) * Xt
    field = F.cpu().numpy()
    return (field, ess.cpu().numpy()) if with_ess else field
