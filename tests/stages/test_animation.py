"""The animation of the tokens (rule animation, ``lowtemp.stages.figures.stage_animation``, ``figures/tokens.gif``),
checked with PIL on small synthetic trajectories written with the package's own dataset builders: the number of
frames (every snapshot, or ``experiment.ANIMATION_MAX_FRAMES`` evenly spaced ones), the size in pixels, and that the
panels change from frame to frame when the tokens move and stay pixel for pixel the same when they do not (an input
that must fail the 'moves' check), on S¹ and on S². Then the stage's refusal of tokens it cannot draw."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageSequence

from lowtemp.config import experiment as experiment_config
from lowtemp.config import params, registry
from lowtemp.dynamics import integrate
from lowtemp.plotting import animation
from lowtemp.stages import figures
from lowtemp.store import datasets, netcdf

TOKENS, REPLICAS = 40, 2


def trajectory(dim: int, snapshots: int, moving: bool, seed: int = 0) -> np.ndarray:
    """(replica, time, token, dim) on the unit sphere: random tokens rotated about the last axis by an angle that
    grows with time (``moving``), or the same tokens at every snapshot."""
    rng = np.random.default_rng(seed)
    X0 = rng.standard_normal((REPLICAS, TOKENS, dim))
    X0 /= np.linalg.norm(X0, axis=-1, keepdims=True)
    out = np.empty((REPLICAS, snapshots + 1, TOKENS, dim))
    for k in range(snapshots + 1):
        a = 0.3 * k if moving else 0.0
        R = np.eye(dim)
        R[:2, :2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
        out[:, k] = X0 @ R.T
    return out


def write_run(folder, dim: int, betas, snapshots: int, moving: bool):
    """finite_temperature/beta<β>.nc for each β and zero_temperature.nc, as the simulations write them."""
    grid = integrate.TimeGrid(horizon=float(snapshots) / 4, snapshots=snapshots, dt=0.25)
    nt = snapshots + 1
    record = integrate.StepRecord(
        np.zeros((REPLICAS, nt)), np.zeros(nt, np.int64), np.zeros(nt, np.int64), np.zeros(nt, np.int64), np.zeros(nt)
    )
    prov = netcdf.provenance("synthetic", {}, 0)
    finite = []
    for i, beta in enumerate(betas):
        X = trajectory(dim, snapshots, moving, seed=i)
        ds = datasets.finite_temperature_dataset(
            X, record, np.ones((REPLICAS, nt, TOKENS)), grid, float(beta), "rk4", None, "dense"
        )
        finite.append(
            netcdf.write_netcdf(ds, folder / "finite_temperature" / f"beta{beta:g}.nc", "finite_temperature", prov)
        )
    X = trajectory(dim, snapshots, moving, seed=99)
    zero = datasets.zero_temperature_dataset(X, record, X, np.zeros(nt), grid, "rk4", None)
    return netcdf.write_netcdf(zero, folder / "zero_temperature.nc", "zero_temperature", prov), finite


def render(tmp_path, dim, betas=(5, 50), snapshots=10, moving=True) -> Image.Image:
    zero, finite = write_run(tmp_path, dim, betas, snapshots, moving)
    gif = tmp_path / "figures" / "tokens.gif"
    figures.stage_animation("synthetic", {}, zero_path=zero, finite_paths=finite, gif=gif)
    return Image.open(gif)


def frames_rgb(img: Image.Image) -> list[np.ndarray]:
    return [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(img)]


def panels_change(frames: list[np.ndarray]) -> list[bool]:
    """For each pair of consecutive frames, whether a pixel below the time strip (in the panels) differs."""
    strip = experiment_config.ANIMATION_TITLE_PX
    return [bool(np.any(a[strip:] != b[strip:])) for a, b in zip(frames, frames[1:])]


@pytest.mark.parametrize("dim", [2, 3])
def test_one_frame_per_snapshot_of_the_stated_size(tmp_path, dim):
    img = render(tmp_path, dim, betas=(5, 50), snapshots=10)
    assert img.format == "GIF"
    assert img.n_frames == 11
    # three panels (two β and zero temperature) in one row of 200 px squares, under a 32 px strip
    assert img.size == experiment_config.animation_size(3) == (600, 232)


def test_frames_are_capped_evenly_spaced(tmp_path):
    img = render(tmp_path, 3, betas=(1, 10, 100, 1000), snapshots=150)
    assert img.n_frames == experiment_config.ANIMATION_MAX_FRAMES == 60
    assert img.size == (600, 432)  # five panels: two rows of three
    frames = experiment_config.animation_frames(151)
    assert frames[0] == 0 and frames[-1] == 150 and np.all(np.diff(frames) >= 2) and np.ptp(np.diff(frames)) <= 1


@pytest.mark.parametrize("dim", [2, 3])
def test_panels_move_with_the_tokens_and_stand_still_without_them(tmp_path, dim):
    """Rotating tokens: every frame's panels differ from the previous one's. Tokens that never move (the input the
    'moves' check must fail on): the panels are the same pixels in every frame, only the time strip changes."""
    moving = frames_rgb(render(tmp_path / "moving", dim, moving=True))
    assert all(panels_change(moving))
    still = frames_rgb(render(tmp_path / "still", dim, moving=False))
    assert len(still) == 11
    assert not any(panels_change(still))
    strip = experiment_config.ANIMATION_TITLE_PX
    assert all(np.any(a[:strip] != b[:strip]) for a, b in zip(still, still[1:]))  # the time is written there


def test_the_front_of_the_sphere_is_darker_than_its_back():
    """The orthographic view: the view direction is a unit vector orthogonal to the projection plane."""
    w, e1, e2 = animation.view_basis(animation.ANIMATION_VIEW)
    np.testing.assert_allclose(np.array([w, e1, e2]) @ np.array([w, e1, e2]).T, np.eye(3), atol=1e-12)
    assert e2[2] > 0


def test_tokens_beyond_s2_are_refused(tmp_path):
    with pytest.raises(ValueError, match="S¹ or S²"):
        render(tmp_path, 4)


def test_registry_entry_reads_no_key_and_joins_the_default_target_on_s1_and_s2():
    spec = registry.stage("animation")
    assert spec.keys == () and spec.plotting and not spec.default_target
    assert params.stage_slice({"dim": 3, "tokens": 64}, "animation") == {}
    assert [spec.enabled_by({"dim": d}) for d in (2, 3, 4)] == [True, True, False]
    assert "animation" in registry.target_stages({"dim": 2, "model": "particles", "tokens": 8})
