"""The contract every field kernel passes (``numpy``, ``dense``, ``cap``, ``auto``, and ``torch`` where PyTorch is
installed), checked against a plain double loop over the tokens (``conftest.naive_attention_field``):

* the field equals the loop's to the kernel's stated relative accuracy (``CONTRACT_RTOL``: 1e-12, the cap
  kernel's truncation 1e-9), on spread, clustered and near-duplicate clouds, d = 2 and 3, β from 1e-2 to 1e4;
* it is tangent to the sphere at every token (P⊥(x) applied);
* its ESS, 1/Σ_j w_ij², equals the loop's to 1e-9 and lies in [1, N];
* two calls give the same bits, and the input is not modified.

``contract_violations`` says which clause a kernel breaks; a single-precision kernel and one without the
tangent projection are the inputs that must fail it.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from conftest import naive_attention_field, naive_ess, random_unit
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.dynamics import kernel_choice, kernels

#: relative accuracy each kernel promises against the exact softmax (max-norm, relative to the field's largest)
CONTRACT_RTOL = {"numpy": 1e-12, "dense": 1e-12, "cap": 1e-9, "auto": 1e-9, "torch": 1e-12}
#: the ESS against the loop's
ESS_RTOL = 1e-9

HAS_TORCH = importlib.util.find_spec("torch") is not None
ALL_KERNELS = [*kernel_choice.KERNELS, "auto", *kernel_choice.OPTIONAL_KERNELS]


def _cloud(rng, kind: str, R: int, N: int, d: int) -> np.ndarray:
    if kind == "spread":
        return random_unit(rng, R, N, d)
    if kind == "clustered":  # one cluster of angular radius 1e-4 … 1e-1
        X = random_unit(rng, R, 1, d) + 10.0 ** rng.uniform(-4, -1) * rng.standard_normal((R, N, d))
    else:  # near-duplicates: a few points copied with noise 1e-12 … 1e-6
        base = random_unit(rng, R, 3, d)
        X = base[:, rng.integers(0, 3, size=N)] + 10.0 ** rng.uniform(-12, -6) * rng.standard_normal((R, N, d))
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def contract_violations(field_fn, ess_fn, X, B, V, beta, rtol) -> list[str]:
    """The clauses of the contract that ``field_fn(X, B, V, beta)`` and ``ess_fn(X, B, V, beta)`` break."""
    out = []
    before = X.copy()
    field = field_fn(X, B, V, beta)
    ref = naive_attention_field(X, B, V, beta)
    scale = np.max(np.abs(ref))
    if field.shape != X.shape or not np.all(np.isfinite(field)):
        return [f"shape {field.shape} or non-finite values"]
    err = np.max(np.abs(field - ref)) / scale
    if not err <= rtol:
        out.append(f"field: relative error {err:.3g} > {rtol:g}")
    radial = np.max(np.abs(np.sum(field * X, axis=-1))) / scale
    if not radial <= 1e-12:
        out.append(f"not tangent: |<x, v>| up to {radial:.3g} of the field")
    ess, ess_ref = ess_fn(X, B, V, beta), naive_ess(X, B, beta)
    ess_err = np.max(np.abs(ess - ess_ref) / ess_ref)
    if not ess_err <= ESS_RTOL:
        out.append(f"ESS: relative error {ess_err:.3g} > {ESS_RTOL:g}")
    if np.any(ess < 1 - 1e-12) or np.any(ess > X.shape[1] * (1 + 1e-12)):
        out.append("ESS outside [1, N]")
    if not np.array_equal(field_fn(X, B, V, beta), field):
        out.append("two calls differ")
    if not np.array_equal(X, before):
        out.append("the input was modified")
    return out


def _kernel_functions(kernel):
    if kernel == "torch" and not HAS_TORCH and not os.environ.get("LOWTEMP_REQUIRE_TORCH"):
        pytest.skip("PyTorch (the optional gpu extra) is not installed")  # make test-torch requires it
    return (
        lambda X, B, V, b: kernels.field_with_kernel(X, B, V, b, kernel),
        lambda X, B, V, b: kernels.ess_with_kernel(X, B, V, b, kernel),
    )


@pytest.mark.parametrize("kernel", ALL_KERNELS)
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["spread", "clustered", "duplicates"]),
    R=st.integers(1, 2),
    N=st.integers(2, 120),
    d=st.sampled_from([2, 3]),
    log_beta=st.floats(-2.0, 4.0),
)
def test_every_kernel_keeps_the_contract(kernel, seed, kind, R, N, d, log_beta):
    rng = np.random.default_rng(seed)
    X = _cloud(rng, kind, R, N, d)
    B = np.linalg.qr(rng.standard_normal((d, d)))[0] @ np.diag(rng.uniform(0.5, 2.0, d))
    V = rng.standard_normal((d, d))
    field_fn, ess_fn = _kernel_functions(kernel)
    assert contract_violations(field_fn, ess_fn, X, B, V, 10.0**log_beta, CONTRACT_RTOL[kernel]) == []


def test_every_kernel_has_a_stated_accuracy():
    assert set(CONTRACT_RTOL) == set(ALL_KERNELS)


def _problem(seed=3, N=60, d=3, beta=50.0):
    rng = np.random.default_rng(seed)
    return random_unit(rng, 2, N, d), np.diag([1.5, 0.8, 1.1]), rng.standard_normal((d, d)), beta


def test_a_single_precision_kernel_breaks_the_contract():
    X, B, V, beta = _problem()

    def single(X, B, V, b):
        return kernels.field_with_kernel(
            X.astype(np.float32), B.astype(np.float32), V.astype(np.float32), b, "numpy"
        ).astype(np.float64)

    found = contract_violations(
        single,
        lambda X, B, V, b: kernels.ess_with_kernel(X, B, V, b, "dense"),
        X,
        B,
        V,
        beta,
        CONTRACT_RTOL["dense"],
    )
    assert any(v.startswith("field: relative error") for v in found), found


def test_a_kernel_without_the_tangent_projection_breaks_the_contract():
    X, B, V, beta = _problem()

    def ambient(X, B, V, b):  # Σ_j w_ij V x_j without P⊥(x_i)
        s = b * np.einsum("rid,de,rje->rij", X, B, X)
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        w /= w.sum(axis=-1, keepdims=True)
        return np.einsum("rij,rje->rie", w, X @ V.T)

    found = contract_violations(
        ambient, lambda X, B, V, b: kernels.ess_with_kernel(X, B, V, b, "dense"), X, B, V, beta, 1e-12
    )
    assert any(v.startswith("not tangent") for v in found), found
