"""The figure of an experiment's convergence studies (convergence.nc): step halving, the particle-number study and
the softmax's effective sample size."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import textwrap  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .common import TITLE_WIDTH, palette  # noqa: E402

#: colour and label of each integrator in the convergence figure
INTEGRATOR_STYLE = {"rk4": ("C0", "RK4"), "euler": ("C3", "Euler"), "dopri5": ("C2", "DOPRI5"), "bs3": ("C1", "BS3")}


def plot_convergence(conv, experiment):
    """Top left: step halving and tolerance at the step study's β, errors against the step (max over the check
    times; an adaptive integrator's level k at h/2^k) with the schemes' slopes.
    Then one column per β of the particle-number study: on top W2(ρ^β_t, Π♯ρ0) against t per N, mean ± 2 sem over
    replicas, with the remaining N error's bound (``lowtemp.stages.convergence``); below, the median effective
    sample size of the softmax against t per N (smallest over replicas), with the experiment's ``ess_threshold``."""
    studies = conv if "beta" in conv.dims else conv.expand_dims(beta=[float(conv.attrs["beta"])])  # one study β, old
    columns = studies.sizes["beta"]
    fig, axes = plt.subplots(2, 1 + columns, figsize=(5.5 * (1 + columns), 8.4), squeeze=False)
    _step_panel(axes[0, 0], conv)  # the step study's variables have no β dimension
    axes[1, 0].axis("off")
    for j in range(columns):
        _particle_panel(axes[0, 1 + j], studies.isel(beta=j))
        _ess_panel(axes[1, 1 + j], studies.isel(beta=j), float(experiment["ess_threshold"]))
    fig.tight_layout()
    return fig


def _step_panel(ax, conv):
    """The step-halving study (``plot_convergence``)."""
    beta = float(conv.attrs["beta"])
    steps, coarse = conv["step"].values, conv["coarse_step"].values
    floor = float(conv.attrs["rounding_floor"])
    for method in conv["integrator"].values:
        c = conv.sel(integrator=method)
        color, name = INTEGRATOR_STYLE[str(method)]
        orders = "/".join(f"{p:.2f}" for p in c["position_order"].values)
        ax.loglog(
            coarse,
            c["position_difference"].max("check_time").values,
            "o-",
            color=color,
            label=f"{name}, β = {beta:g}: max|X_h − X_h/2| (orders {orders})",
        )
        ax.loglog(
            coarse,
            c["w2_difference"].max("check_time").values,
            "^:",
            color=color,
            ms=5,
            label=f"{name}, β = {beta:g}: |W2_h − W2_h/2|",
        )
        ax.loglog(
            steps,
            c["zero_error_vs_exact"].max("check_time").values,
            "s--",
            color=color,
            ms=5,
            mfc="none",
            label=f"{name}, β = ∞: max|X_h − X_exact|",
        )
    for anchor in conv["integrator"].values:  # reference slopes, a little below the exact errors
        p = int(conv["nominal_order"].sel(integrator=anchor))
        y0 = 0.3 * float(conv["zero_error_vs_exact"].sel(integrator=anchor).max("check_time").values[0])
        ax.loglog(steps, y0 * (steps / steps[0]) ** p, color="gray", lw=0.8, alpha=0.8)
        ax.annotate(
            f"slope {p}",
            (steps[-1], y0 * (steps[-1] / steps[0]) ** p),
            fontsize=7,
            color="gray",
            xytext=(0, -9),
            textcoords="offset points",
        )
    ax.axhline(floor, color="gray", ls=":", lw=0.8)
    ax.set_xlabel("step h")
    ax.set_ylabel("difference (max over replicas, tokens, check times)")
    ax.set_title(
        textwrap.fill(
            "Step halving (h, h/2, h/4; adaptive: τ/2^((q+1)k)), "
            f"t ∈ {{{', '.join(f'{t:g}' for t in conv['check_time'].values)}}}; "
            f"{conv.attrs['step_tokens']} tokens",
            TITLE_WIDTH,
        ),
        fontsize=9,
    )
    ax.legend(fontsize=6, loc="lower right")


def _particle_panel(bx, conv):
    """W2 per N at one β of the particle-number study, with the budget's bound (``plot_convergence``)."""
    beta = float(conv["beta"])
    t = conv["time"].values
    tokens = conv["tokens"].values
    n_budget = int(conv.attrs["budget_tokens"])
    for color, n in zip(palette(tokens.size), tokens):
        m, s = conv["w2_mean"].sel(tokens=n).values, conv["w2_sem"].sel(tokens=n).values
        bx.fill_between(t, np.maximum(m - 2 * s, 1e-6), m + 2 * s, color=color, alpha=0.25, lw=0)
        bx.plot(t, m, color=color, lw=1.6 if n == n_budget else 1.1, label=f"N = {n}")
    remaining = conv["w2_remaining_bound"].values
    bx.plot(
        t,
        np.where(np.isfinite(remaining), remaining, np.nan),
        color="black",
        ls="--",
        lw=1.0,
        label=f"remaining N error at N = {n_budget} (95% bound)",
    )
    bx.axvline(float(conv["budget_window_end"]), color="gray", ls=":", lw=0.8)
    bx.set_yscale("log")
    bx.set_xlabel("time t")
    bx.set_ylabel(r"$W_2(\rho^\beta_t, \Pi_\sharp\rho_0)$, mean ± 2 sem")
    slope = conv["departure_slope_per_doubling"].values
    verdict = (
        f"remaining error ≤ {float(conv['w2_budget_ratio']):.2g}·W2 before departure; departure "
        f"{slope[0]:+.2g}…{slope[1]:+.2g} per doubling"
    )
    title = f"Particle number, β = {beta:g}, {conv.sizes['replica']} replicas: {verdict}"
    bx.set_title(textwrap.fill(title, TITLE_WIDTH), fontsize=8)  # panels sit side by side: wrap, never overlap
    bx.legend(fontsize=7)


def _ess_panel(cx, conv, threshold):
    """The median ESS per N at one β of the particle-number study (``plot_convergence``)."""
    beta = float(conv["beta"])
    t = conv["time"].values
    tokens = conv["tokens"].values
    for color, n in zip(palette(tokens.size), tokens):
        ess = conv["ess_particles"].sel(tokens=n).min("replica").values
        reused = bool(conv["reused_run"].sel(tokens=n)) if "reused_run" in conv else False
        cx.plot(
            t,
            ess,
            color=color,
            lw=1.1,
            label=f"N = {n}: min {np.min(ess):.3g}" + (" (the experiment's run)" if reused else ""),
        )
    cx.axhline(threshold, color="gray", ls="--", lw=0.8)
    cx.annotate(
        f"ess_threshold {threshold:g}",
        (t[0], threshold),
        fontsize=7,
        color="gray",
        xytext=(2, 3),
        textcoords="offset points",
    )
    cx.set_yscale("log")
    cx.set_xlabel("time t")
    cx.set_ylabel("median effective sample size (smallest replica)")
    cx.set_title(f"Softmax resolution per N, β = {beta:g}", fontsize=9)
    cx.legend(fontsize=7)
