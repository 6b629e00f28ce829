"""Which law in β the d = 3 mean field's departure follows, at the rule's threshold and at others beside it.

The departure study (``sphere_departure.py``) finds each β's departure on two mesh levels by the pipeline's rule
(``analysis.fitting.geometric_departure``: the distance to E1(A) rises through half the distance between E1(A) and
V's leading eigenspace) and reads the law in β from the ranges those departures are known to
(``analysis.departures``). Where a curve lingers near the threshold (a partial departure: part of the way towards
V's eigenspace, then a plateau) the time it crosses is ill-conditioned: a small error moves it by many time units,
and the levels disagree. So the page reads the law at every fraction q of that distance in ``THRESHOLD_FRACTIONS``
as well (``threshold_sweep``): a law that holds at the rule's q = 1/2 only is a property of the threshold, not of
the mean field. Derivation of the law test: docs/claims.md; what a partial departure does: docs/sphere_mean_field.md.
"""

from __future__ import annotations

import numpy as np

from lowtemp.analysis import departures, fitting

#: the fractions of the way from E1(A) to V's leading eigenspace at which the page reads the law beside the rule's
#: 1/2: every 0.05 over the middle half of the way, symmetric about the rule's own
THRESHOLD_FRACTIONS = tuple(round(0.25 + 0.05 * k, 2) for k in range(11))

#: the page's two mesh levels and the suffix of their departures in a row
LEVELS = (("fine", ""), ("coarse", "_coarse"))


def reference_departure(times, fine, gap: float, fraction: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """``geometric_departure`` of a mesh level's curve on the snapshots it reached, the threshold at ``fraction``
    of ``gap``."""
    reached = np.isfinite(fine)
    return fitting.geometric_departure(times[reached], fine[None, reached], gap, fraction)


def level_departures(times, fine, coarse, gap: float, fraction: float = 0.5) -> dict:
    """Both levels' departures at ``fraction`` of ``gap`` (each on the snapshots it reached: the coarse level may
    have stopped before the fine one) and the coarse level's shift from the fine one's
    (``fitting.departure_shift``: inf where one departed and the other did not)."""
    reference = reference_departure(times, fine, gap, fraction)
    twin = reference_departure(times, coarse, gap, fraction)
    return {
        "departure": float(reference[0][0]),
        "censored": bool(reference[1][0]),
        "departure_coarse": float(twin[0][0]),
        "censored_coarse": bool(twin[1][0]),
        "shift": float(fitting.departure_shift(*reference, *twin)[0]),
    }


def level_law(rows, suffix: str, with_shift: bool) -> tuple[list[float], dict, departures.DepartureLaw, str]:
    """(slope bounds, curvature and exponent bounds, the law, its words) over one level's departures (``suffix``:
    '' the fine level, '_coarse' the coarse one), each widened by the coarse level's shift where ``with_shift``."""
    beta = np.array([r["beta"] for r in rows])
    departure = np.array([[r["departure" + suffix]] for r in rows])
    censored = np.array([[r["censored" + suffix]] for r in rows])
    slack = np.array([r["shift"] for r in rows]) if with_shift else np.zeros(len(rows))
    # a β still metastable at its last resolved snapshot departs after it, unless its coarse twin departed (an
    # infinite shift): then its departure is not known at all
    horizon = np.array([[r["resolved" + suffix] - s] for r, s in zip(rows, slack)])
    args = (beta, departure, censored, horizon, rows[0]["interval"], slack)
    slope = [float(v[0]) for v in departures.departure_slope_bounds(*args)]
    bounds = {k: [float(v[0]) for v in b] for k, b in departures.departure_law_bounds(*args).items()}
    law = departures.departure_law(bounds["linear"], bounds["log"])
    words = law.words
    if law is departures.DepartureLaw.NEITHER:
        words += ": " + departures.neither_law_words(bounds["linear"][0], bounds["log"][0])
    return slope, bounds, law, words


def departure_range(row) -> str:
    """Where the mean field's departure lies: (t_k − Δt − s, t_k + s], beyond the last resolved snapshot where it is
    still metastable there, unknown where one level departed and the other did not."""
    if not np.isfinite(row["shift"]):
        return "unknown (one level departed, the other not)"
    if row["censored"]:
        return f"> {row['resolved'] - row['shift']:g}"
    return f"({row['departure'] - row['interval'] - row['shift']:g}, {row['departure'] + row['shift']:g}]"


def departure_law_lines(rows) -> list[str]:
    """The page's lines on which law in β the mean field's departure times follow: each known to (t_k − Δt − s,
    t_k + s] (t_k the snapshot the rule finds it at, Δt the snapshot interval, s the coarse level's shift from it),
    one still metastable beyond its last resolved snapshot; the bounds are those of ``metastable_log_beta``'s
    functionals over these ranges (``departures.departure_slope_bounds``, ``departure_law_bounds``) and the law is
    ``departures.departure_law``'s. One curve per β, no replicas: the bounds are the functionals' ranges, not
    confidence intervals, and hold as far as the coarse level's shift bounds the reference's error."""
    known = [r for r in rows if r["censored"] or np.isfinite(r["departure"])]
    ranges = ", ".join(f"β = {r['beta']:g}: {departure_range(r)}" for r in known)
    if len(known) < 3:
        return [
            "## Which law in β the departure follows",
            "",
            f"The mean field's departure per β: {ranges or 'none'}. Fewer than three β with a known departure: no law.",
        ]
    slope, bounds, _, words = level_law(rows, "", with_shift=True)
    alone = [f"{level} level **{level_law(rows, suffix, with_shift=False)[3]}**" for level, suffix in LEVELS]
    interval = "[{:.3g}, {:.3g}]".format
    return [
        "## Which law in β the departure follows",
        "",
        f"The mean field's departure per β, from the snapshot the rule finds it at, the snapshot interval before it "
        f"and the coarse level's shift on both sides: {ranges or 'none'}. Over these ranges (one curve per β, no "
        "replicas: ranges of least-squares functionals, not confidence intervals; they hold as far as the coarse "
        "level's shift bounds the reference's error) the slope of τ against log β lies in "
        f"{interval(*slope)} (`metastable_log_beta` asks that it be positive), the quadratic coefficient in log β "
        f"of τ in {interval(*bounds['linear'])} (0 for τ = a + s·log β), that of log τ in "
        f"{interval(*bounds['log'])} (0 for τ = c·β^p), the exponent of β in {interval(*bounds['power'])}. "
        f"Law in β (three β or more with a known departure): **{words}**. Each level alone, its departures known "
        f"to their snapshot interval (no shift; what the law would read were that level exact): {', '.join(alone)}.",
    ]


def threshold_sweep(rows, curves: dict, gap: float, fractions=THRESHOLD_FRACTIONS) -> list[dict]:
    """Per fraction q of ``gap`` in ``fractions``: ``{"fraction": q, "rows": each β's row with its departures at q
    (``level_departures``), "laws": {"ranges" | "fine" | "coarse": (law, bounds)}}``, the law over the ranges (the
    coarse level's shift included) and from each level alone, as ``departure_law_lines`` reads them at q = 1/2."""
    sweep = []
    for q in fractions:
        at_q = []
        for r in rows:
            tag = f"beta{r['beta']:g}"
            at_q.append({**r, **level_departures(curves[f"times_{tag}"], curves[f"mesh_fine_{tag}"],
                                                 curves[f"mesh_coarse_{tag}"], gap, q)})  # fmt: skip
        laws = {"ranges": level_law(at_q, "", with_shift=True)}
        laws.update({level: level_law(at_q, suffix, with_shift=False) for level, suffix in LEVELS})
        sweep.append({"fraction": q, "rows": at_q, "laws": {k: (v[2], v[1]) for k, v in laws.items()}})
    return sweep


def law_cell(law: departures.DepartureLaw, bounds: dict) -> str:
    """A law in a table cell: the exponent's interval for a power of β, the curvature of log τ's otherwise."""
    interval = "[{:.3g}, {:.3g}]".format
    if law is departures.DepartureLaw.POWER:
        return f"a power, p ∈ {interval(*bounds['power'])}"
    if law is departures.DepartureLaw.NEITHER:
        how = departures.neither_law_words(bounds["linear"][0], bounds["log"][0]).split(",")[0]
        return f"neither ({how}), k_log ∈ {interval(*bounds['log'])}"
    if law is departures.DepartureLaw.NOT_EVALUABLE:
        return "fewer than three β"
    return f"{law.words}, k_log ∈ {interval(*bounds['log'])}"


def _departure_cell(row, suffix: str) -> str:
    """One level's departure at one threshold: its snapshot, '> T' still metastable at its last resolved snapshot
    T, '—' where the curve never came within the threshold of E1(A) (no metastable phase at that threshold)."""
    if row["censored" + suffix]:
        return f"> {row['resolved' + suffix]:g}"
    departure = row["departure" + suffix]
    return "—" if np.isnan(departure) else f"{departure:g}"


def threshold_lines(sweep: list[dict], gap: float) -> list[str]:
    """The page's section on how the law depends on the threshold: one table row per fraction q (each β's
    departure on both levels, the law over the ranges and from each level alone), then which q each law over the
    ranges was read at and which β have no metastable phase at which q."""
    betas = [r["beta"] for r in sweep[0]["rows"]]
    lines = [
        "## How the law depends on the rule's threshold",
        "",
        "Where a curve lingers near the threshold, its crossing time is ill-conditioned (a partial departure: "
        "docs/sphere_mean_field.md). The same rule and law test at every fraction q of the distance between E1(A) "
        f"and V's leading eigenspace ({gap:.3f}) from {sweep[0]['fraction']:g} to {sweep[-1]['fraction']:g}: "
        "arrival below q times it, departure above it. Per β the departure on the fine / coarse level ('—': the "
        "curve never came that close to E1(A), no metastable phase at that q; '> T': still metastable at its last "
        "resolved snapshot T); the law over the ranges as above (the coarse level's shift included) and from each "
        "level alone (p: the exponent of β; k_log: the quadratic coefficient of log τ in log β, 0 for a power).",
        "",
        "| q | threshold | " + " | ".join(f"β = {b:g}" for b in betas) + " | law over the ranges | fine level alone "
        "| coarse level alone |",
        "|---" * (5 + len(betas)) + "|",
    ]
    for s in sweep:
        cells = [f"{s['fraction']:g}", f"{s['fraction'] * gap:.3f}"]
        cells += [f"{_departure_cell(r, '')} / {_departure_cell(r, '_coarse')}" for r in s["rows"]]
        cells += [law_cell(*s["laws"][k]) for k in ("ranges", "fine", "coarse")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", threshold_summary(sweep)]


def threshold_summary(sweep: list[dict]) -> str:
    """Which law over the ranges each q reads, whether that is one law at every q, and the β with no metastable
    phase at some q (they drop out of the law there)."""
    by_law: dict[str, list[str]] = {}
    for s in sweep:
        by_law.setdefault(s["laws"]["ranges"][0].words, []).append(f"{s['fraction']:g}")
    read = "; ".join(f"{words} at q = {', '.join(qs)}" for words, qs in by_law.items())
    verdict = "the same law at every threshold" if len(by_law) == 1 else "a law that depends on the threshold"
    dropped = []
    for k, b in enumerate(r["beta"] for r in sweep[0]["rows"]):
        qs = [f"{s['fraction']:g}" for s in sweep if _never_arrived(s["rows"][k])]
        if qs:
            dropped.append(f"β = {b:g} at q = {', '.join(qs)}")
    absent = ""
    if dropped:
        absent = f" No metastable phase on the fine level (so no departure in the law): {'; '.join(dropped)}."
    return f"Over the ranges: {read}: **{verdict}**.{absent}"


def _never_arrived(row) -> bool:
    """Whether the fine level's curve never came within the threshold of E1(A)."""
    return not row["censored"] and np.isnan(row["departure"])
