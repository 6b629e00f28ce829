"""The animation of the tokens (a GIF): replica 0 at the stored snapshots, one panel per β and one at zero
temperature, on S¹ the circle and on S² an orthographic view."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.animation import PillowWriter  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from PIL import Image  # noqa: E402

from ..config import experiment as experiment_config  # noqa: E402
from ..config import plan  # noqa: E402
from ..store import netcdf  # noqa: E402

#: frames per second of the animation
ANIMATION_FPS = 10
#: the direction the S² panels are seen from (orthographic projection; normalised where used): tokens on the
#: hemisphere facing it are drawn dark, those behind the sphere faint
ANIMATION_VIEW = (1.0, -0.8, 0.6)
#: pixels of the figure per inch (the GIF's size is ``experiment.animation_size``, independent of it)
_ANIMATION_DPI = 100
_FRONT, _BACK = "#1b2a5e", "#9db4d8"


def _animation_palette() -> Image.Image:
    """The animation's one palette: 64 shades from white to each colour it draws (the front and back points, the
    outlines, the text), so that antialiased edges keep their look."""
    colors = [_FRONT, _BACK, "0.6", "black"]
    shade = np.linspace(0.0, 1.0, 64)[:, None]
    ramps = [(1 - shade) * 255 + shade * 255 * np.array(to_rgb(c))[None, :] for c in colors]
    image = Image.new("P", (1, 1))
    image.putpalette(np.round(np.concatenate(ramps)).astype(np.uint8).ravel().tolist())
    return image


class _OnePaletteWriter(PillowWriter):
    """matplotlib's PillowWriter with every frame mapped, without dithering, onto one palette
    (``_animation_palette``): Pillow would otherwise choose each GIF frame's 256 colours from that frame alone, so
    pixels that do not change (the tokens that do not move) could change colour from frame to frame."""

    def setup(self, fig, outfile, dpi=None):
        """PillowWriter's set-up, and the palette."""
        super().setup(fig, outfile, dpi=dpi)
        self._palette = _animation_palette()

    def grab_frame(self, **savefig_kwargs):
        """Grab the figure as PillowWriter does, then map the frame onto the shared palette."""
        super().grab_frame(**savefig_kwargs)
        self._frames[-1] = self._frames[-1].convert("RGB").quantize(palette=self._palette, dither=Image.Dither.NONE)


def view_basis(view):
    """The unit view direction w and an orthonormal basis (e1, e2) of the plane it looks at (e2 towards +z)."""
    w = np.asarray(view, dtype=float)
    w = w / np.linalg.norm(w)
    e1 = np.cross([0.0, 0.0, 1.0], w)
    e1 = e1 / np.linalg.norm(e1)
    return w, e1, np.cross(w, e1)


def animation_panels(zero, finite):
    """(label, positions (time, token, dim) of replica 0, times) of every panel: each β ascending, then zero
    temperature (β = ∞). At most ``experiment.ANIMATION_MAX_TOKENS`` tokens (the first) are kept."""
    keep = experiment_config.ANIMATION_MAX_TOKENS
    panels = []
    for ds in sorted(finite, key=lambda d: float(d.beta)):
        mean_field = ds.attrs.get("model") == "mean_field"
        label = f"β = {float(ds.beta):g}" + (" (mean field)" if mean_field else "")
        panels.append((label, ds["positions"].isel(replica=0, token=slice(0, keep)).values, ds.time.values))
    panels.append(
        ("zero temperature (β = ∞)", zero["positions"].isel(replica=0, token=slice(0, keep)).values, zero.time.values)
    )
    dims = {p.shape[-1] for _, p, _ in panels}
    if len(dims) != 1 or dims.pop() not in plan.ANIMATED_DIMS:
        raise ValueError(
            f"the animation draws tokens on S¹ or S² (dim in {plan.ANIMATED_DIMS}), got positions of "
            f"dim {sorted({p.shape[-1] for _, p, _ in panels})}"
        )
    return panels


def _draw_panel(fig, rect, label, dim):
    """One panel's axes (the unit circle, or the sphere's outline) and the artists a frame updates."""
    ax = fig.add_axes(rect)
    ax.set_aspect("equal")
    ax.set_xlim(-1.1, 1.1), ax.set_ylim(-1.1, 1.1)
    ax.set_axis_off()
    ax.set_title(label, fontsize=8, pad=2)
    angle = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(angle), np.sin(angle), color="0.6", lw=0.8)
    if dim == 2:
        return (ax.scatter([], [], s=4, color=_FRONT, linewidths=0),)
    back = ax.scatter([], [], s=3, color=_BACK, alpha=0.5, linewidths=0)
    front = ax.scatter([], [], s=4, color=_FRONT, linewidths=0)
    return back, front


def _update_panel(artists, X, basis):
    """Move a panel's points to the tokens ``X`` (token, dim): on the circle as they are, on S² projected."""
    if X.shape[-1] == 2:
        artists[0].set_offsets(X)
        return
    w, e1, e2 = basis
    xy = np.stack([X @ e1, X @ e2], axis=-1)
    front = X @ w >= 0
    artists[0].set_offsets(xy[~front].reshape(-1, 2))
    artists[1].set_offsets(xy[front].reshape(-1, 2))


def write_animation(panels, path, *, experiment_name=""):
    """The GIF of ``panels`` (``animation_panels``) at ``path``: one frame per snapshot of
    ``experiment.animation_frames`` (the times of the first panel; every panel shows its nearest snapshot),
    panels in ``experiment.animation_grid``, of size ``experiment.animation_size``, the time in the strip on top."""
    times = panels[0][2]
    frames = experiment_config.animation_frames(times.size)
    rows, columns = experiment_config.animation_grid(len(panels))
    width, height = experiment_config.animation_size(len(panels))
    cell, strip = experiment_config.ANIMATION_PANEL_PX, experiment_config.ANIMATION_TITLE_PX
    fig = plt.figure(figsize=(width / _ANIMATION_DPI, height / _ANIMATION_DPI), dpi=_ANIMATION_DPI)
    basis = view_basis(ANIMATION_VIEW)
    drawn = []
    for k, (label, X, t) in enumerate(panels):
        row, col = divmod(k, columns)
        left, top = col * cell, strip + row * cell  # pixels from the top left
        pad, label_px = 6, 16
        rect = [(left + pad) / width, 1 - (top + cell - pad) / height, (cell - 2 * pad) / width]
        rect.append((cell - 2 * pad - label_px) / height)
        artists = _draw_panel(fig, rect, label, X.shape[-1])
        index = np.abs(t[None, :] - times[frames][:, None]).argmin(axis=1)  # each frame's nearest snapshot
        drawn.append((artists, X, index))
    sphere = "S²" if panels[0][1].shape[-1] == 3 else "S¹"
    title = fig.text(0.5, 1 - strip / 2 / height, "", ha="center", va="center", fontsize=9)
    writer = _OnePaletteWriter(fps=ANIMATION_FPS)
    with netcdf.atomic_path(path) as tmp:
        with writer.saving(fig, tmp, dpi=_ANIMATION_DPI):
            for j, snapshot in enumerate(frames):
                for artists, X, index in drawn:
                    _update_panel(artists, X[index[j]], basis)
                name = f"{experiment_name}, " if experiment_name else ""
                title.set_text(
                    f"t = {times[snapshot]:.2f}   ({name}{sphere}, replica 0, snapshot {snapshot}/{times.size - 1})"
                )
                writer.grab_frame()
    plt.close(fig)
