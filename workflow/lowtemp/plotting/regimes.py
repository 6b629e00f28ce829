"""Where particles stand for the mean field: the (log N, log β) picture of measured runs.

At each measured (N, β) the particle system of N tokens either departs from the metastable phase within one
snapshot interval of the mean field's departure on every replica (it *stands for* the mean field there) or not.
The measured boundary is, per β, the geometric midpoint between the largest N that did not and the smallest N from
which every larger one did. Beside it, the scaling at which softmax attention over n keys on S^(d−1) turns
selective, β ≍ n^{2/(d−1)} (arXiv:2605.08505): a line of that slope, anchored at the measured boundary's lowest β
(only its slope is the scaling's: the constant is not known).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

#: what the numbers beside the points are, unless the caller says otherwise
ERROR_LABEL = "largest W2 between particles and mean field"


def measured_boundary(tokens, stands) -> np.ndarray:
    """Per β (rows of ``stands`` (beta, tokens), ``tokens`` increasing): the geometric midpoint between the largest
    N that does not stand for the mean field and the smallest from which every larger N does; NaN where every N
    stands (the boundary lies below the measured N: no point is known), inf where the largest does not (it lies
    beyond them)."""
    tokens = np.asarray(tokens, dtype=float)
    out = np.full(len(stands), np.inf)
    for i, row in enumerate(np.asarray(stands, dtype=bool)):
        if not row[-1]:
            continue
        failing = np.flatnonzero(~row)
        out[i] = np.nan if failing.size == 0 else float(np.sqrt(tokens[failing[-1]] * tokens[failing[-1] + 1]))
    return out


def boundary_slope(beta, boundary) -> float:
    """Least-squares slope of log β against log N along the measured boundary (the β where it lies between two
    measured N); NaN with fewer than two such β. The selectivity scaling's is 2/(d−1)."""
    beta, boundary = np.asarray(beta, dtype=float), np.asarray(boundary, dtype=float)
    finite = np.isfinite(boundary)
    if np.count_nonzero(finite) < 2 or np.ptp(np.log(boundary[finite])) == 0:
        return float("nan")
    return float(np.polyfit(np.log(boundary[finite]), np.log(beta[finite]), 1)[0])


def selectivity_line(beta, boundary, dim: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(N, β) of the line β ∝ N^{2/(d−1)} through the measured boundary at its lowest β where it lies between two
    measured N (finite), over the measured β; None where no β has one."""
    beta, boundary = np.asarray(beta, dtype=float), np.asarray(boundary, dtype=float)
    finite = np.flatnonzero(np.isfinite(boundary))
    if finite.size == 0:
        return None
    k = finite[np.argmin(beta[finite])]
    slope = 2.0 / (dim - 1)
    betas = np.geomspace(beta.min(), beta.max(), 50)
    return boundary[k] * (betas / beta[k]) ** (1.0 / slope), betas


def plot_particle_regime(
    beta, tokens, stands, error, dim: int, title: str = "", error_label: str = ERROR_LABEL, horizon=None
):
    """The picture: a filled circle where N particles stand for the mean field at β (``stands`` (beta, tokens): 1),
    a cross where they do not (0; NaN: not measured, left out), each labelled with ``error`` (beta, tokens), by
    default the largest W2 between the particles and the mean field's push-forward of the same tokens (what the
    numbers are: ``error_label``); the measured boundary (over the β measured at every N) and the selectivity
    scaling. ``horizon`` (beta,): where finite, the reference is still metastable at that time, so its circles
    (drawn open) say only that the particles stayed with it, and its boundary is a lower bound (an open diamond
    with an arrow, left out of the line and of the scaling's anchor)."""
    beta, tokens = np.asarray(beta, dtype=float), np.asarray(tokens, dtype=float)
    stands = np.asarray(stands, dtype=float)
    fails = stands == 0
    measured = ~np.any(np.isnan(stands), axis=1)
    horizon = np.full(beta.size, np.nan) if horizon is None else np.asarray(horizon, dtype=float)
    beta, error, stands, fails, still = (
        beta[measured],
        np.asarray(error, dtype=float)[measured],
        stands[measured] == 1,
        fails[measured],
        np.isfinite(horizon[measured]),
    )
    fig, ax = plt.subplots(figsize=(8.6, 4.6))
    N, B = np.meshgrid(tokens, beta)
    departed = stands & ~still[:, None]
    ax.plot(N[departed], B[departed], "o", color="tab:green", ms=9, label="departs with the mean field (every replica)")
    stayed = stands & still[:, None]
    if np.any(stayed):
        ax.plot(N[stayed], B[stayed], "o", mfc="none", color="tab:green", ms=9, mew=1.5,
                label="metastable with the mean field to the horizon")  # fmt: skip
    ax.plot(N[fails], B[fails], "x", color="tab:red", ms=9, mew=2, label="departs elsewhere, or not at all")
    for (i, j), err in np.ndenumerate(np.asarray(error, dtype=float)):
        if np.isfinite(err):
            ax.annotate(f"{err:.2g}", (tokens[j], beta[i]), textcoords="offset points", xytext=(7, 5), fontsize=7)
    boundary = measured_boundary(tokens, stands)
    lower = np.isfinite(boundary) & still
    if np.any(lower):
        ax.plot(boundary[lower], beta[lower], "D", mfc="none", color="k", ms=6,
                label="boundary, a lower bound (the mean field still metastable at the horizon)")  # fmt: skip
        for b, edge in zip(beta[lower], boundary[lower]):
            ax.annotate("", (edge * 1.6, b), (edge * 1.1, b), arrowprops={"arrowstyle": "->", "color": "k"})
    firm = np.where(lower, np.nan, boundary)  # a lower bound is neither on the line nor an anchor
    shown = np.isfinite(firm)
    ax.plot(firm[shown], beta[shown], "kD-", lw=1.5, ms=4, label="measured boundary (midpoint between N)")
    outside = ~np.isfinite(boundary)
    for b, edge in zip(beta[outside], boundary[outside]):  # beyond the largest N (inf) or below the smallest (NaN)
        start, end = (tokens[-1] * 1.3, tokens[-1] * 2.2) if np.isinf(edge) else (tokens[0] / 1.3, tokens[0] / 2.2)
        ax.annotate("", (end, b), (start, b), arrowprops={"arrowstyle": "->", "color": "k"})
    line = selectivity_line(beta, firm, dim)
    if line is not None:
        ax.plot(*line, "k:", lw=1.5, label=f"β ∝ N^{2 / (dim - 1):g} (selectivity onset, anchored at the lowest β)")
    ax.plot([], [], " ", label=f"numbers: {error_label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # the measured N and β as the ticks (a log axis over less than a decade labels its minor ticks, overlapping)
    ax.set_xticks(tokens, [f"{n:g}" for n in tokens])
    ax.set_yticks(beta, [f"{b:g}" for b in beta])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(tokens[0] / 3, tokens[-1] * 3)
    if beta.size:
        ax.set_ylim(beta.min() / 1.6, beta.max() * 1.6)
    ax.set_xlabel("tokens N")
    ax.set_ylabel("inverse temperature β")
    ax.set_title(title or f"Where N particles stand for the mean field (d = {dim})", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), framealpha=0.85)
    fig.tight_layout()
    return fig
