"""The figures of one experiment, drawn from its NetCDF outputs (matrices, distances, fit, trajectories), never
recomputing physics, and the report's caption of each, written from the constants the figures draw with.

Every curve is the mean over replicas with a band spanning the replicas
(min to max). Curves of a β whose median effective sample size drops below the
experiment's ``ess_threshold`` are drawn dashed and marked "ESS<thr" in the
legend: there the particle system does not stand for the mean field.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..analysis import claims, fitting  # noqa: E402
from ..config import experiment as experiment_config  # noqa: E402
from .common import band, palette  # noqa: E402

#: the axis of every distance to an eigenspace: the root mean square over tokens of the chordal distance to E ∩ S
DISTANCE_LABEL = "sqrt(mean(2 − 2|P x|))"
#: the departure time's axis, in the words of ``fitting.geometric_departure`` (its caption spells the rule out)
DEPARTURE_LABEL = "departure time\n(farther than half the way from E1(A) to E1(V))"
#: the y axes of the one-panel figures (the figures and their captions both read them)
W2_PROJECTION_LABEL = r"$W_2(\rho^\beta_t, \Pi_\sharp\rho_0)$"
COLLAPSE_LABEL = r"$W_2(\rho^\beta_t, \rho^\infty_t)\,/\,\sqrt{\log(\beta+1)/\beta}$"


def _low_ess(dist, beta, threshold):
    return bool(dist["ess_median"].sel(beta=beta).median("replica").min() < threshold)


def _beta_label(dist, beta, threshold):
    return f"β = {beta:g}" + (f" (ESS<{threshold:g})" if _low_ess(dist, beta, threshold) else "")


def _bound_constants(fit):
    """a, C1, b, c of the drawn bound: calibrated on the smallest resolved β and on β = ∞ (``claims.fitted_bound``)."""
    return claims.fitted_bound(fit)


def _has_bound(fit) -> bool:
    return bool(np.all(np.isfinite(_bound_constants(fit))))


def crossover_time(fit, beta):
    """Time at which the two terms of the fitted bound are equal (∝ log β): the regime boundary."""
    a, C1, b, c = _bound_constants(fit)
    return (np.log(b) - np.log(a) - np.log(fitting.temperature_scale(beta))) / (C1 + c)


#: how the particle runs beside a mean-field reference are drawn (``_draw_particle_runs``)
PARTICLE_RUNS = (
    "the same distance for the particle system of the largest particle number N run from the first N of the same "
    "initial tokens is drawn thin and dash-dotted in its β's colour (mean over replicas)"
)


def _draw_particle_runs(ax, particles, colors, betas):
    """The particle runs beside a mean-field reference (particle_error.nc): per β, W2(ρ^N_t, Π♯ρ0) of the largest
    N, mean over replicas, thin and dash-dotted in the β's colour."""
    if "w2_projection" not in particles:
        raise ValueError(
            "particle_error.nc holds no w2_projection (written by an older version of the particle-error stage): "
            "delete the experiment's particle_error files and rerun"
        )
    n = int(particles.tokens.values.max())
    for color, beta in zip(colors, betas):
        if beta in particles.beta.values:
            w = particles["w2_projection"].sel(beta=beta, tokens=n).values
            ax.plot(particles.time.values, w.mean(axis=0), color=color, lw=0.9, ls="-.")
    ax.plot([], [], color="gray", lw=0.9, ls="-.", label=f"particles, N = {n}, beside the mean field")


def plot_w2_projection(data, experiment):
    """W2(ρ^β_t, Π♯ρ0) against t for every β and at zero temperature, with the calibrated bound."""
    dist, fit = data["distances"], data["fit"]
    t = dist.time.values
    thr = experiment["ess_threshold"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    colors = palette(dist.beta.size)
    a, C1, b, c = _bound_constants(fit)
    for color, beta in zip(colors, dist.beta.values):
        band(
            ax,
            t,
            dist["w2_projection"].sel(beta=beta).values,
            color,
            _beta_label(dist, beta, thr),
            dashed=_low_ess(dist, beta, thr),
        )
        if _has_bound(fit):
            ax.plot(t, fitting.bound_curve(t, beta, a, C1, b, c), color=color, lw=0.9, ls=":")
    band(ax, t, dist["w2_zero_to_projection"].values, "black", "zero temperature (β = ∞)")
    if "particles" in data:
        _draw_particle_runs(ax, data["particles"], colors, dist.beta.values)
    cal = ", ".join(f"{v:g}" for v in fit.beta.values[fit["calibration_beta"].values.astype(bool)])
    ax.plot(
        [],
        [],
        color="gray",
        ls=":",
        label=f"bound calibrated on β = {cal}: C1 = {C1:.2f}, c = {c:.2f}"
        if _has_bound(fit)
        else "no bound drawn: it could not be calibrated (see logs/fit.log)",
    )
    ax.set_yscale("log")
    ax.set_ylim(max(1e-4, float(dist["w2_zero_to_projection"].min()) / 2), 3)
    ax.set_xlabel("time t")
    ax.set_ylabel(W2_PROJECTION_LABEL)
    ax.set_title("Concentration onto Π♯ρ0 and departure (Theorem 1)")
    ax.legend(fontsize=7, loc="lower left")
    return fig


def plot_collapse(data, experiment):
    """W2(ρ^β_t, ρ^∞_t) divided by sqrt(log(β+1)/β) against t: the curves of all β collapse early on."""
    dist, fit = data["distances"], data["fit"]
    t = dist.time.values
    thr = experiment["ess_threshold"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    colors = palette(dist.beta.size)
    for i, (color, beta) in enumerate(zip(colors, dist.beta.values)):
        scaled = dist["w2_zero_temperature"].sel(beta=beta).values / fitting.temperature_scale(beta)
        shown = (t > 0) & np.all(np.isfinite(scaled), axis=0)  # exact W2 solved at these snapshots
        band(ax, t[shown], scaled[:, shown], color, _beta_label(dist, beta, thr), dashed=_low_ess(dist, beta, thr))
        lo, hi = fit["C1_window"].values[i]
        if np.isfinite(lo):
            tt = np.linspace(lo, hi, 20)
            log_a = float(np.mean(fit["log_a"].values[i]))
            ax.plot(tt, np.exp(log_a + float(fit["C1_mean"]) * tt), color=color, lw=3, alpha=0.5)
    C1, (lo, hi) = float(fit["C1_mean"]), fit["C1_interval"].values
    ax.plot(
        [],
        [],
        color="gray",
        lw=3,
        alpha=0.5,
        label=(
            f"fit a·e^(C1 t), C1 = {C1:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) else "")
            if np.isfinite(C1)
            else "no growth window: C1 not fitted"
        ),
    )
    ax.set_yscale("log")
    ax.set_xlabel("time t")
    ax.set_ylabel(COLLAPSE_LABEL)
    ax.set_title("Finite-temperature error, scaled (data collapse)")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def plot_end_phase(data, experiment):
    """Distances to E1(A) and to V's leading eigenspace(s) against t, one panel per eigenspace, every β and
    β = ∞ in each, with the crossover times of the bound (Conjecture 1)."""
    dist, fit, mats = data["distances"], data["fit"], data["matrices"]
    t = dist.time.values
    thr = experiment["ess_threshold"]
    show_modulus = bool(mats.attrs.get("V_leading_differs", 0))
    panels = [
        ("dist_leading_A", "distance to E1(A) ∩ S"),
        ("dist_leading_V", "distance to V's leading eigenspace (Re λ max) ∩ S"),
    ]
    if show_modulus:
        panels.append(("dist_leading_V_modulus", "distance to V's leading eigenspace (|λ| max) ∩ S"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.2), sharey=True)
    colors = palette(dist.beta.size)
    for ax, (var, title) in zip(axes, panels):
        for color, beta in zip(colors, dist.beta.values):
            band(
                ax,
                t,
                dist[var].sel(beta=beta).values,
                color,
                _beta_label(dist, beta, thr),
                dashed=_low_ess(dist, beta, thr),
            )
            tc = crossover_time(fit, beta)
            if 0 < tc < t[-1]:
                ax.axvline(tc, color=color, lw=0.8, ls=":")
        band(ax, t, dist[f"{var}_zero_temperature"].values, "black", "zero temperature")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("time t")
    axes[0].set_ylabel(DISTANCE_LABEL)
    axes[0].plot([], [], color="gray", ls=":", label="t*(β): bound terms cross (∝ log β)")
    axes[0].legend(fontsize=7)
    fig.suptitle("End phase (Conjecture 1): from E1(A) to the leading eigenspace of V")
    fig.tight_layout()
    return fig


def _draw_slope(ax, x, floor, ok, fit):
    """The departure slope the claim reports, through the centroid of the β ``ok`` (log β ``x``, departures
    ``floor``): the middle of its bounds where two-sided, its lower bound where a censored β leaves it unbounded
    above (the claim's interval in the legend), none without a lower bound."""
    bounds = fit["metastable_slope"].values
    lo, hi = fit["metastable_slope_interval"].values
    if ok.sum() >= 2 and np.isfinite(lo):
        s_line = float(np.mean(bounds)) if np.all(np.isfinite(bounds)) else float(lo)
        xx = np.linspace(x[ok].min(), x[ok].max(), 20)
        ax.plot(
            xx,
            np.mean(floor[ok]) + s_line * (xx - np.mean(x[ok])),
            "--",
            color="C3",
            label=f"slope over the judged β: bounds [{lo:.2f}, {hi:.2f}]"
            + ("" if np.isfinite(hi) else " (drawn: the lower bound, censored β at the horizon)"),
        )
    else:
        ax.plot(
            [],
            [],
            "--",
            color="C3",
            label="no slope: fewer than two judged β departed, or censoring leaves it unbounded below",
        )


def plot_time_scale(data, experiment):
    """The departure time from E1(A) against log β, with its fitted slope (the metastable time scale)."""
    fit = data["fit"]
    beta = fit.beta.values
    x = np.log(beta)
    dep = fit["departure_time"].values
    censored = fit["departure_censored"].values.astype(bool)
    horizon = float(data["distances"].time.values[-1])
    fig, ax = plt.subplots(figsize=(5.6, 4.2))
    for r in range(dep.shape[1]):
        ax.scatter(x, dep[:, r], color="gray", s=12, alpha=0.6, label="replicas" if r == 0 else None)
    cx, cr = np.nonzero(censored)
    ax.scatter(
        x[cx],
        np.full(cx.size, horizon),
        marker="^",
        color="C1",
        s=18,
        label="censored: still metastable at the horizon" if cx.size else None,
    )
    mean = fitting.mean_of_finite(dep)
    used = fit["metastable_beta_used"].values.astype(bool)
    ax.plot(x, mean, "-", color="C0", lw=0.8)
    ax.plot(x[used], mean[used], "o", color="C0", label="mean over replicas that departed (judged)")
    ax.plot(
        x[~used],
        mean[~used],
        "o",
        mfc="none",
        color="C0",
        label="under-resolved β (not judged)" if (~used).any() else None,
    )
    # the slope's bounds per replica (snapshot step, censoring) drawn through the judged β only, a censored
    # departure at its lower bound, the horizon (where the slope's lower bound comes from)
    floor = fitting.mean_of_finite(np.where(censored, horizon, dep))
    _draw_slope(ax, x, floor, used & np.isfinite(floor), fit)
    ax.set_xlabel("log β")
    ax.set_ylabel(DEPARTURE_LABEL)
    ax.set_title("Metastable time scale against log β")
    # below the axes: inside, it covered the points of the smallest β (the departures rise to the right)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return fig


def plot_snapshots(data, experiment):
    """Tokens (replica 0) at the experiment's snapshot times, on S² (3-D axes) or on S¹ (the unit circle): zero
    temperature, the smallest and the largest β, with ±E1(A) and ±the leading eigenvector of V."""
    mats = data["matrices"]
    zero = data["zero"]
    finite = sorted(data["finite"], key=lambda ds: float(ds.beta))
    rows = [("zero temperature", zero)] + [(f"β = {float(ds.beta):g}", ds) for ds in (finite[0], finite[-1])]
    if len(finite) == 1:
        rows = rows[:2]
    times = experiment_config.snapshot_times(experiment)
    dim = int(zero.sizes["dim"])
    fig = plt.figure(figsize=(3.2 * len(times), 3.0 * len(rows)))
    u = mats["E1"].values[:, 0]
    v = mats["E1_V_real"].values[:, 0]
    circle = np.linspace(0, 2 * np.pi, 200)
    for i, (label, ds) in enumerate(rows):
        for j, tsel in enumerate(times):
            where = (len(rows), len(times), i * len(times) + j + 1)
            ax = fig.add_subplot(*where, projection="3d") if dim == 3 else fig.add_subplot(*where)
            X = ds["positions"].sel(time=tsel, method="nearest").isel(replica=0).values
            if dim == 2:
                ax.plot(np.cos(circle), np.sin(circle), color="0.8", lw=0.8)
            ax.scatter(*X.T, s=2, alpha=0.6, color="C0")
            for vec, col, name in ((u, "C3", "±E1(A)"), (v, "C2", "±E1(V)")):
                ax.scatter(*np.stack([vec, -vec]).T, s=60, color=col, marker="*", label=name)
            ax.set_xlim(-1.1, 1.1), ax.set_ylim(-1.1, 1.1)
            ax.set_xticks([]), ax.set_yticks([])
            if dim == 3:
                ax.set_zlim(-1, 1)
                ax.set_box_aspect((1, 1, 1))
                ax.set_zticks([])
            else:
                ax.set_aspect("equal")
            t_actual = float(ds.time.sel(time=tsel, method="nearest"))
            ax.set_title(f"{label}, t = {t_actual:g}", fontsize=8)
            if i == 0 and j == 0:
                ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(f"Tokens on the {'sphere' if dim == 3 else 'circle'} (replica 0)")
    fig.tight_layout()
    return fig


#: the (β, t) phase picture's panels: the distances.nc variable and the eigenspace it measures (Conjecture 1)
PHASE_PANELS = (("dist_leading_A", "E1(A)"), ("dist_leading_V", "E1(V), the leading eigenspace of V (Re λ max)"))


def phase_grid(dist, var):
    """(β per row, time, values (row, time)): ``var`` averaged over replicas, one row per β in increasing order and
    β = ∞ (zero temperature, ``var``_zero_temperature) last; NaN where the file has none."""
    finite = dist[var].sortby("beta").transpose("beta", "replica", "time")
    rows = np.vstack([finite.values.mean(axis=1), dist[f"{var}_zero_temperature"].values.mean(axis=0)[None]])
    return np.append(finite.beta.values, np.inf), dist.time.values, rows


def _edges(centres):
    """Cell edges around increasing centres: midpoints, the ends half a step out."""
    centres = np.asarray(centres, dtype=float)
    if centres.size == 1:
        return centres + np.array([-0.5, 0.5])
    mid = 0.5 * (centres[1:] + centres[:-1])
    return np.concatenate([[2 * centres[0] - mid[0]], mid, [2 * centres[-1] - mid[-1]]])


def plot_phase(data, experiment):
    """The (β, t) phase picture: the distances to E1(A) and to V's leading eigenspace as colour over (β, t), one
    row per β and β = ∞ on top, with every replica's departure time from fit.nc (Conjecture 1's end phase is where
    the left panel turns bright and the right one dark)."""
    dist, fit = data["distances"], data["fit"]
    thr = experiment["ess_threshold"]
    grids = [phase_grid(dist, var) for var, _ in PHASE_PANELS]
    top = max(float(np.nanmax(g[2])) if np.isfinite(g[2]).any() else 0.0 for g in grids) or 1.0
    fig, axes = plt.subplots(1, len(PHASE_PANELS), figsize=(5.2 * len(PHASE_PANELS), 0.9 + 0.45 * len(grids[0][0]) + 2))
    labels = [_beta_label(dist, b, thr) for b in grids[0][0][:-1]] + ["β = ∞ (zero temperature)"]
    departure = fit["departure_time"].transpose("beta", "replica")
    censored = fit["departure_censored"].transpose("beta", "replica")
    horizon = float(dist.time.values[-1])
    for ax, (_, space), (betas, t, values) in zip(axes, PHASE_PANELS, grids):
        rows = np.arange(betas.size)
        mesh = ax.pcolormesh(_edges(t), _edges(rows), np.ma.masked_invalid(values), cmap="magma", vmin=0.0, vmax=top)
        for row, beta in enumerate(betas[:-1]):
            dep = departure.sel(beta=beta).values
            cens = censored.sel(beta=beta).values.astype(bool)
            departed = np.isfinite(dep) & ~cens
            ax.plot(dep[departed], np.full(departed.sum(), row), "o", mfc="none", mec="cyan", ms=5)
            ax.plot(np.full(cens.sum(), horizon), np.full(cens.sum(), row), ">", color="cyan", ms=5)
        ax.set_yticks(rows, labels if ax is axes[0] else [""] * rows.size, fontsize=7)
        ax.set_xlabel("time t")
        ax.set_title(f"distance to {space}", fontsize=9)
        fig.colorbar(mesh, ax=ax, label=DISTANCE_LABEL, shrink=0.9)
    axes[0].plot([], [], "o", mfc="none", mec="cyan", label="departure (per replica)")
    axes[0].plot([], [], ">", color="cyan", label="still metastable at the horizon")
    axes[0].legend(fontsize=7, loc="lower left", framealpha=0.8)
    fig.suptitle("The (β, t) phase picture: metastable near E1(A), then the end phase")
    fig.tight_layout()
    return fig


#: the drawing function of each figure named in ``lowtemp.config.plan.FIGURES`` (the one list of names;
#: a test checks that the two agree)
FIGURES = {
    "w2_projection": plot_w2_projection,
    "collapse": plot_collapse,
    "end_phase": plot_end_phase,
    "time_scale": plot_time_scale,
    "snapshots": plot_snapshots,
    "phase": plot_phase,
}


# ------------------------------------------------------------------ the report's captions
#: how the departure time is defined (``fitting.geometric_departure``), as the captions say it
DEPARTURE_RULE = (
    "the first time after the tokens came closer to E1(A) than half the distance between E1(A) and V's leading "
    "eigenspace (the metastable phase) that they are farther than that again; a replica still closer at the "
    "horizon is censored there"
)
#: "mean over replicas, band from min to max": how every curve is drawn (``common.band``)
BANDS = "mean over replicas, band from min to max over replicas"
#: where the particles do not stand for the mean field (``_low_ess``)
#: ``_beta_label``'s mark
LOW_ESS_MARK = "ESS<threshold"
LOW_ESS = (
    f"dashed (and marked {LOW_ESS_MARK} in the legend): the median effective sample size of the softmax falls below "
    "the experiment's ess_threshold, where N, not β, sets the curve"
)


def _latex(label: str) -> str:
    """A matplotlib axis label as plain text for a caption (mathtext's $ and backslashes dropped)."""
    for old, new in (
        (r"\,", " "),
        (r"\rho", "ρ"),
        (r"\beta", "β"),
        (r"\Pi", "Π"),
        (r"\sharp", "♯"),
        (r"\infty", "∞"),
        (r"\sqrt", "sqrt"),
        (r"\log", "log"),
        ("$", ""),
        ("{", "("),
        ("}", ")"),
    ):
        label = label.replace(old, new)
    return label.replace("W_2", "W2").replace("_♯", "♯").replace("_0", "0")


def captions() -> dict[str, str]:
    """The report's caption of every figure in ``FIGURES``, written from the constants the figures draw with."""
    return {
        "w2_projection": (
            f"Theorem 1: {_latex(W2_PROJECTION_LABEL)} against time t on a log scale, one curve per β ({BANDS}), "
            "with zero temperature (β = ∞, black) and, dotted, the bound a·sqrt(log(β+1)/β)·e^(C1 t) + b·e^(−c t) "
            "calibrated on the β named in the legend (or the legend says why none is drawn). Curves are "
            f"{LOW_ESS}. For a mean-field experiment the curves are the reference's, and where it runs particles "
            f"beside it (mean_field.particles) {PARTICLE_RUNS}."
        ),
        "collapse": (
            f"Data collapse of the finite-temperature error: {_latex(COLLAPSE_LABEL)} against time t, one curve per "
            f"β ({BANDS}); thick segments: the window and line of the C1 fit (one slope, an intercept per β). If "
            "the theorem's rate is sharp the curves coincide; a smooth initial density may show a faster rate in β. "
            f"Curves are {LOW_ESS}."
        ),
        "end_phase": (
            f"End phase (Conjecture 1): {DISTANCE_LABEL}, the root-mean-square chordal distance of the tokens to the "
            "great sphere of E1(A) (left) and of V's leading eigenspace (right; a third panel for the "
            f"largest-modulus eigenspace where it differs), against time t, per β ({BANDS}) and at zero temperature "
            "(black). Dotted verticals: the time at which the two terms of the calibrated bound cross, which grows "
            f"like log β. Curves are {LOW_ESS}."
        ),
        "time_scale": (
            f"Metastable time scale: the departure time, {DEPARTURE_RULE}, against log β, per replica (grey) and "
            "its mean over the replicas that departed (filled: judged by metastable_log_beta, open: an "
            "under-resolved β), censored replicas at the horizon (triangles), and the slope's bounds over the "
            "judged β (dashed). The checks of the paper's statements are in claims.nc and logs/claims.log."
        ),
        "snapshots": (
            "Token positions of replica 0 on the sphere S² (a 3-D view) or on the circle S¹ at the experiment's "
            "snapshot times (figures.snapshot_times): zero temperature, the smallest and the largest β. Red stars: "
            "±E1(A); green stars: ±the leading eigenvector of V."
        ),
        "phase": (
            f"The (β, t) phase picture: {DISTANCE_LABEL}, the distance of the tokens to the great sphere of E1(A) "
            "(left) and of V's leading eigenspace (right), as colour on one scale, mean over replicas, one row per "
            "β and zero temperature (β = ∞) on top. Circles: each replica's departure time, "
            f"{DEPARTURE_RULE} (triangles at the horizon). Metastability is the dark band along E1(A) that lasts "
            "longer as β grows; the end phase of Conjecture 1 is where the left panel turns bright and the right "
            f"one dark. A row marked {LOW_ESS_MARK}: the median effective sample size of the softmax falls below the "
            "experiment's ess_threshold there, where N, not β, sets the picture."
        ),
    }


#: the first line of workflow/report/figure.rst, which ``caption_template`` writes (`make captions`)
CAPTION_HEADER = "{# Generated by `make captions` from lowtemp.plotting.figures.captions(); do not edit by hand. #}"


def caption_template() -> str:
    """workflow/report/figure.rst: one Jinja branch per figure, its text ``captions()``'s."""
    lines = [CAPTION_HEADER]
    for k, (figure, text) in enumerate(captions().items()):
        lines += [f'{{% {"if" if k == 0 else "elif"} snakemake.wildcards.figure == "{figure}" %}}', text]
    return "\n".join([*lines, "{% endif %}", ""])
