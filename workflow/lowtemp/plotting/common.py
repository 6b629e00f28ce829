"""What every figure shares: the palette of the β, the replica band, the width of panel titles."""

from __future__ import annotations

import seaborn as sns

#: characters per line of a panel title in the multi-panel figures (they sit side by side)
TITLE_WIDTH = 60


def palette(n):
    """n colours for n values of β (viridis, in increasing order)."""
    return sns.color_palette("viridis", n_colors=max(n, 1))


def band(ax, t, values, color, label, dashed=False):
    """Mean over replicas (axis 0) with a min–max band."""
    ax.fill_between(t, values.min(axis=0), values.max(axis=0), color=color, alpha=0.2, lw=0)
    ax.plot(t, values.mean(axis=0), color=color, lw=1.6, ls="--" if dashed else "-", label=label)
