"""The S² reference's resolution rule and settings (``sphere_levels``): the levels it picks per β against the
solver's own resolution check on the actual icosphere, its refusals, and the reference's pruning depth against the
default depth on a clustered state, with a depth shallow enough to fail the same bound."""

from __future__ import annotations

import numpy as np
import pytest

from lowtemp.dynamics import sphere_levels, sphere_meanfield, sphere_mesh, sphere_softmax

# the `concentration` experiment's matrices (rounded), as in test_sphere_meanfield.py
B = np.array([[0.9237, -0.0859, 0.2192], [-0.1410, 0.7233, -0.1998], [0.4826, -0.2931, 1.3637]])
V = np.array([[0.6497, -0.0120, -0.1638], [-0.0120, 0.8092, 0.0595], [-0.1638, 0.0595, 1.1411]])


def passes_check_resolution(level: int, beta: float) -> bool:
    """The solver's own check (``check_resolution``) on the icosphere of ``level`` with the reference's remeshing
    target edge and pruning depth."""
    mesh = sphere_meanfield.initial_mesh("uniform", {}, level)
    try:
        sphere_meanfield.check_resolution(
            mesh,
            B,
            beta,
            sphere_levels.DEFAULT_VARIATION,
            sphere_levels.REFERENCE_DEPTH,
            sphere_levels.reference_edge(level),
        )
    except sphere_mesh.MeshTooCoarse:
        return False
    return True


@pytest.mark.parametrize("beta", [10.0, 31.6, 100.0, 316.0, 1000.0])
def test_levels_are_the_coarsest_the_solver_accepts(beta):
    coarse, fine = sphere_levels.reference_levels(B, beta)
    assert fine == coarse + 1
    assert passes_check_resolution(coarse, beta) and passes_check_resolution(fine, beta)
    if coarse > sphere_levels.REFERENCE_LEVELS[0]:
        assert not passes_check_resolution(coarse - 1, beta)  # one level coarser is refused by the solver itself


def test_level_resolves_agrees_with_the_solver_check():
    for level in range(2, 6):
        for beta in (5.0, 30.0, 100.0, 300.0, 1000.0, 3000.0):
            assert sphere_levels.level_resolves(level, B, beta) == passes_check_resolution(level, beta), (level, beta)


def test_reference_levels_refusals():
    assert sphere_levels.reference_levels(B, 100.0, 5) == (4, 5)
    with pytest.raises(sphere_mesh.MeshTooCoarse, match=r"beta = 1000 the error estimate's level 3 .* too coarse"):
        sphere_levels.reference_levels(B, 1000.0, 4)
    with pytest.raises(sphere_mesh.MeshTooCoarse, match=r"no icosphere level up to 6 resolves beta = 1e\+06"):
        sphere_levels.reference_levels(B, 1e6)
    for level in (2, 7):
        with pytest.raises(ValueError, match="level must lie in 3 … 6"):
            sphere_levels.reference_levels(B, 10.0, level)


def test_reference_settings():
    settings = sphere_meanfield.reference_settings(3, 5000)
    assert settings.depth == sphere_levels.REFERENCE_DEPTH
    assert settings.rtol == sphere_levels.REFERENCE_RTOL and settings.max_triangles == 5000
    points, triangles = sphere_mesh.icosphere(3)
    assert settings.edge == pytest.approx(1.5 * sphere_mesh.edge_lengths(points, triangles).max(), rel=1e-12)


@pytest.mark.parametrize(("beta", "level"), [(10.0, 3), (100.0, 4)])
def test_reference_depth_moves_the_field_by_less_than_its_tolerance(beta, level):
    """Two vMF clusters of concentration 40 on ±E1(A) (the metastable state): at the reference's depth the velocity
    and divergence stay within 1e-7 and 1e-6 of the default depth's, far below the solve's rtol; a depth of 6 (a
    skipped triangle up to e^{-6} of the bound) moves them by more, so the bound can fail."""
    A = V @ B.T
    axis = np.linalg.eigh(0.5 * (A + A.T))[1][:, -1]
    mesh = sphere_meanfield.initial_mesh("vmf_mixture", {"kappas": [40.0, 40.0], "means": [axis, -axis]}, level)
    q = mesh.points

    def field(depth):
        sm = sphere_softmax.softmax(mesh, B, beta, q, depth=depth)
        return sphere_softmax.velocity_divergence(q, sm, B, V, beta)

    v0, d0 = field(sphere_levels.DEFAULT_DEPTH)
    v, d = field(sphere_levels.REFERENCE_DEPTH)
    assert np.abs(v - v0).max() < 1e-7 and np.abs(d - d0).max() < 1e-6
    v, d = field(6.0)
    assert np.abs(v - v0).max() > 1e-7 or np.abs(d - d0).max() > 1e-6
