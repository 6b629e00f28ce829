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


def passes_check_resolution(level: int, beta: float, variation: float | None = None) -> bool:
    """The solver's own check (``check_resolution``) on the icosphere of ``level`` with the reference's remeshing
    target edge and pruning depth, at ``variation`` (default: the reference's at that level and β)."""
    mesh = sphere_meanfield.initial_mesh("uniform", {}, level)
    variation = sphere_levels.reference_variation(level, B, beta) if variation is None else variation
    try:
        sphere_meanfield.check_resolution(
            mesh, B, beta, variation, sphere_levels.REFERENCE_DEPTH, sphere_levels.reference_edge(level)
        )
    except sphere_mesh.MeshTooCoarse:
        return False
    return True


def kernel_fine(level: int, beta: float) -> bool:
    """Whether ``level``'s triangles need at most KERNEL_SUBDIVISION pieces per edge at the default variation (the
    solver's check with its limit scaled down to that many pieces)."""
    scale = sphere_levels.KERNEL_SUBDIVISION / sphere_levels.MAX_SUBDIVISION
    return passes_check_resolution(level, beta, sphere_levels.DEFAULT_VARIATION * scale)


def test_as_fine_as_the_kernel_agrees_with_the_solver_check():
    for level in range(2, 6):
        for beta in (5.0, 30.0, 100.0, 300.0, 1000.0, 3000.0):
            assert sphere_levels.as_fine_as_the_kernel(level, B, beta) == kernel_fine(level, beta), (level, beta)


@pytest.mark.parametrize(
    ("beta", "levels"), [(10.0, (2, 3)), (31.6, (2, 3)), (100.0, (3, 4)), (316.0, (4, 5)), (1000.0, (5, 6))]
)
def test_default_levels_are_the_coarsest_as_fine_as_the_kernel(beta, levels):
    """The default pair (config/README.md lists it): the coarse level the coarsest whose triangles need at most
    KERNEL_SUBDIVISION pieces per edge; both accepted by the solver, and one level coarser not as fine as the
    kernel."""
    coarse, fine = sphere_levels.reference_levels(B, beta)
    assert (coarse, fine) == levels
    assert kernel_fine(coarse, beta) and kernel_fine(fine, beta)
    assert passes_check_resolution(coarse, beta) and passes_check_resolution(fine, beta)
    if coarse > sphere_levels.REFERENCE_LEVELS[0]:
        assert not kernel_fine(coarse - 1, beta)


def test_level_resolves_agrees_with_the_solver_check():
    for level in range(2, 6):
        for beta in (5.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0):
            assert sphere_levels.level_resolves(level, B, beta) == passes_check_resolution(level, beta), (level, beta)


def test_reference_variation_is_finer_below_the_kernel():
    """The default variation on a level as fine as the kernel, COARSE_VARIATION on a coarser one (level 3 at β = 1000
    needs 76 pieces per edge at the default variation, level 5 13)."""
    assert sphere_levels.reference_variation(5, B, 1000.0) == sphere_levels.DEFAULT_VARIATION
    assert sphere_levels.reference_variation(3, B, 1000.0) == sphere_levels.COARSE_VARIATION
    assert sphere_levels.reference_variation(2, B, 10.0) == sphere_levels.DEFAULT_VARIATION


def test_reference_levels_refusals():
    assert sphere_levels.reference_levels(B, 100.0, 5) == (4, 5)
    # coarser than the kernel, within the softmax: level 3 at β = 1000 (the default would be 5/6)
    assert sphere_levels.reference_levels(B, 1000.0, 4) == (3, 4)
    with pytest.raises(sphere_mesh.MeshTooCoarse, match=r"beta = 10000 the error estimate's level 3 .* too coarse"):
        sphere_levels.reference_levels(B, 10000.0, 4)
    with pytest.raises(sphere_mesh.MeshTooCoarse, match=r"no icosphere level up to 6 resolves beta = 1e\+06"):
        sphere_levels.reference_levels(B, 1e6)
    for level in (2, 7):
        with pytest.raises(ValueError, match="level must lie in 3 … 6"):
            sphere_levels.reference_levels(B, 10.0, level)


def test_a_level_per_beta():
    """``mean_field.level`` as a list: each β takes its own entry; a list of another length than betas is refused."""
    betas = [10, 31.6, 1000]
    assert [sphere_levels.reference_levels(B, b, [3, 3, 4], betas) for b in betas] == [(2, 3), (2, 3), (3, 4)]
    for bad in ([3, 4], [3, 3, 4, 4]):
        with pytest.raises(ValueError, match="one level per beta"):
            sphere_levels.reference_levels(B, 10.0, bad, betas)


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
