"""The general S² mean-field solver: refusals before any work, mass and tracers, and its answers against independent
references: converged particles at β = 10 (a quasi-uniform lattice, the package's dense kernel) and the
axisymmetric one-dimensional solver at β = 100 (docs/sphere_mean_field.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lowtemp.dynamics import sphere_meanfield, sphere_mesh

# the `concentration` experiment's matrices (rounded): A = VBᵀ symmetric part with eigenvalues ≈ 1.5, 0.6, 0.5
B = np.array([[0.9237, -0.0859, 0.2192], [-0.1410, 0.7233, -0.1998], [0.4826, -0.2931, 1.3637]])
V = np.array([[0.6497, -0.0120, -0.1638], [-0.0120, 0.8092, 0.0595], [-0.1638, 0.0595, 1.1411]])


def leading_axis() -> np.ndarray:
    A = V @ B.T
    w, U = np.linalg.eigh(0.5 * (A + A.T))
    return U[:, -1]


def fibonacci_lattice(n: int) -> np.ndarray:
    """n quasi-uniform points on S² (the spiral lattice): quadrature error ~1/n on smooth integrands."""
    i = np.arange(n) + 0.5
    z = 1.0 - 2.0 * i / n
    phi = math.pi * (1.0 + 5**0.5) * i
    r = np.sqrt(1.0 - z * z)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def distance_to_axis(X: np.ndarray, u: np.ndarray) -> float:
    p = np.abs(X.reshape(-1, 3) @ u)
    return float(np.sqrt(np.mean(2.0 * (1.0 - p * p) / (1.0 + p))))


UNIFORM = sphere_meanfield.initial_mesh("uniform", {}, 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"B": np.diag([1.0, 1.0, 1e-12])}, ValueError, "B is not invertible"),
        ({"B": np.ones((2, 2))}, ValueError, "B must be a finite 3×3"),
        ({"V": np.full((3, 3), np.nan)}, ValueError, "V must be a finite 3×3"),
        ({"beta": -1.0}, ValueError, "beta must be finite and > 0"),
        ({"times": [0.0, 2.0, 1.0]}, ValueError, "non-decreasing"),
        ({"times": []}, ValueError, "non-empty"),
        ({"beta": 1e4}, sphere_mesh.MeshTooCoarse, r"beta = 10000 the kernel is .* raise the mesh level"),
        ({"tracers0": np.ones((4, 2))}, ValueError, "tracers must be finite"),
        ({"settings": sphere_meanfield.SphereSettings(remesh_every=0.0)}, ValueError, "remesh_every"),
    ],
)
def test_bad_input_is_refused_before_any_work(kwargs, error, message):
    """Every bad input names its problem before a single field evaluation (progress is never called)."""
    calls = []
    args = {"B": B, "V": V, "beta": 10.0, "times": [0.0, 0.1], "mesh0": UNIFORM, **kwargs}
    with pytest.raises(error, match=message):
        sphere_meanfield.solve(progress=lambda t, info: calls.append(t), **args)
    assert calls == []


@pytest.mark.parametrize(
    ("measure", "params", "message"),
    [
        ("atoms", {"points": [[1, 0, 0]]}, "no positive smooth density"),
        ("cap", {"center": [1, 0, 0], "angle": 30}, "no positive smooth density"),
        ("vmf_mixture", {"kappas": [2.0], "means": [[0.0, 0.0, 0.0]]}, "finite non-zero vector"),
    ],
)
def test_measures_without_a_positive_density_are_refused(measure, params, message):
    with pytest.raises(ValueError, match=message):
        sphere_meanfield.initial_mesh(measure, params, 2)


def test_flipped_mesh_is_refused():
    broken = UNIFORM.copy()
    broken.triangles[3] = broken.triangles[3, [1, 0, 2]]
    with pytest.raises(ValueError, match="counter-clockwise"):
        sphere_meanfield.solve(B, V, 10.0, [0.0, 0.1], broken)


def test_vmf_initial_density_is_normalised():
    """The vMF mixture put on the mesh holds mass 1 and its mean is the mixture's closed-form mean."""
    params = {"kappas": [2.0, 5.0], "means": [[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]], "weights": [0.3, 0.7]}
    mesh = sphere_meanfield.initial_mesh("vmf_mixture", params, 4)
    sol = sphere_meanfield.SphereMeanFieldSolution(10.0, np.zeros(1), [mesh], None)
    assert sol.integrate(0, lambda y: np.ones(y.shape[:-1])) == pytest.approx(1.0, abs=1e-12)

    def langevin(k):
        return 1 / math.tanh(k) - 1 / k

    expected = 0.3 * langevin(2.0) * np.array([1.0, 0, 0]) + 0.7 * langevin(5.0) * np.array([0, 0.6, 0.8])
    mean = np.array([sol.integrate(0, lambda y, i=i: y[..., i]) for i in range(3)])
    assert np.abs(mean - expected).max() < 1e-6
