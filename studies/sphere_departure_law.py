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
    have stopped before the fine one), whether each ``stopped`` before it arrived (its run cut short, by
    --max-triangles or where the flow outran it, before it came within the threshold: whether and when it departs
    is unknown, which is not "no metastable phase", even where it had turned away), and the coarse level's shift
    from the fine one's (``fitting.departure_shift``: inf where the two differ in kind)."""
    reference = reference_departure(times, fine, gap, fraction)
    twin = reference_departure(times, coarse, gap, fraction)
    return {
        "departure": float(reference[0][0]),
        "censored": bool(reference[1][0]),
        "stopped": _stopped_before_arriving(fine, reference),
        "departure_coarse": float(twin[0][0]),
        "censored_coarse": bool(twin[1][0]),
        "stopped_coarse": _stopped_before_arriving(coarse, twin),
        "shift": float(fitting.departure_shift(*reference, *twin)[0]),
    }


def _stopped_before_arriving(curve, found) -> bool:
    """Whether a level's ``curve`` (NaN after its last snapshot) stopped before the last snapshot without having
    arrived (``found``: its ``geometric_departure``): whether it would have arrived later, the rule cannot say."""
    departure, censored = float(found[0][0]), bool(found[1][0])
    return bool(np.isnan(departure) and not censored and not np.isfinite(curve[-1]))


def departure_unknown(row, suffix: str, with_shift: bool) -> bool:
    """Whether nothing is known of a β's departure: its level (``suffix``) stopped before it arrived
    (``level_departures``), or, with the coarse level's shift, either level did (the coarse one no longer bounds
    the fine one's error) or the levels differ in kind (an infinite shift: one departed and the other not, one
    still metastable and the other never arrived). Such a departure lies anywhere in (−∞, ∞), which no law test
    can leave out."""
    if with_shift:
        return not np.isfinite(row["shift"]) or row.get("stopped", False) or row.get("stopped_coarse", False)
    return row.get("stopped" + suffix, False)


def level_law(rows, suffix: str, with_shift: bool) -> tuple[list[float], dict, departures.DepartureLaw, str]:
    """(slope bounds, curvature and exponent bounds, the law, its words) over one level's departures (``suffix``:
    '' the fine level, '_coarse' the coarse one), each widened by the coarse level's shift where ``with_shift``."""
    beta = np.array([r["beta"] for r in rows])
    departure = np.array([[r["departure" + suffix]] for r in rows])
    censored = np.array([[r["censored" + suffix]] for r in rows])
    slack = np.array([r["shift"] for r in rows]) if with_shift else np.zeros(len(rows))
    # a β still metastable at its last resolved snapshot departs after it; one whose departure is unknown
    # (``departure_unknown``) lies in (−∞, ∞): censored at −∞
    unknown = np.array([[departure_unknown(r, suffix, with_shift)] for r in rows])
    censored = censored | unknown
    horizon = np.array([[-np.inf if u else r["resolved" + suffix] - s] for r, s, u in zip(rows, slack, unknown[:, 0])])
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
    still metastable there, unknown where one level departed and the other did not or a level stopped before it
    arrived."""
    for level, suffix in LEVELS:
        if row.get("stopped" + suffix, False):
            return f"unknown (the {level} level stopped before it arrived)"
    if not np.isfinite(row["shift"]):
        fine, coarse = (_kind(row, suffix) for _, suffix in LEVELS)
        return f"unknown (the fine level {fine}, the coarse one {coarse})"
    if row["censored"]:
        return f"> {row['resolved'] - row['shift']:g}"
    return f"({row['departure'] - row['interval'] - row['shift']:g}, {row['departure'] + row['shift']:g}]"


def _kind(row, suffix: str) -> str:
    """What one level's curve did at the threshold: departed, still metastable, or never arrived."""
    if row["censored" + suffix]:
        return "still metastable"
    return "never arrived" if np.isnan(row["departure" + suffix]) else "departed"


def departure_law_lines(rows) -> list[str]:
    """The page's lines on which law in β the mean field's departure times follow: each known to (t_k − Δt − s,
    t_k + s] (t_k the snapshot the rule finds it at, Δt the snapshot interval, s the coarse level's shift from it),
    one still metastable beyond its last resolved snapshot; the bounds are those of ``metastable_log_beta``'s
    functionals over these ranges (``departures.departure_slope_bounds``, ``departure_law_bounds``) and the law is
    ``departures.departure_law``'s. One curve per β, no replicas: the bounds are the functionals' ranges, not
    confidence intervals, and hold as far as the coarse level's shift bounds the reference's error."""
    unknown = [departure_unknown(r, "", True) for r in rows]
    listed = [r for r, u in zip(rows, unknown) if u or r["censored"] or np.isfinite(r["departure"])]
    ranges = ", ".join(f"β = {r['beta']:g}: {departure_range(r)}" for r in listed)
    if len(listed) - sum(unknown) < 3:
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


def threshold_sweep(rows, curves: dict, gap: float, fractions=THRESHOLD_FRACTIONS, curve: str = "mesh") -> list[dict]:
    """Per fraction q of ``gap`` in ``fractions``: ``{"fraction": q, "rows": each β's row with its departures at q
    (``level_departures``), "laws": {"ranges" | "fine" | "coarse": (law, bounds, the slope's as "slope")}}``, the
    law over the ranges (the coarse level's shift included) and from each level alone, as ``departure_law_lines``
    reads them at q = 1/2. The levels' curves are ``curves[f"{curve}_fine_beta{β:g}"]`` and ``…_coarse_…``."""
    sweep = []
    for q in fractions:
        at_q = []
        for r in rows:
            tag = f"beta{r['beta']:g}"
            at_q.append({**r, **level_departures(curves[f"times_{tag}"], curves[f"{curve}_fine_{tag}"],
                                                 curves[f"{curve}_coarse_{tag}"], gap, q)})  # fmt: skip
        laws = {"ranges": level_law(at_q, "", with_shift=True)}
        laws.update({level: level_law(at_q, suffix, with_shift=False) for level, suffix in LEVELS})
        sweep.append(
            {"fraction": q, "rows": at_q, "laws": {k: (v[2], {**v[1], "slope": v[0]}) for k, v in laws.items()}}
        )
    return sweep


def law_cell(law: departures.DepartureLaw, bounds: dict) -> str:
    """A law in a table cell: the exponent's interval for a power of β, the slope's for log β, the curvature of
    log τ's otherwise."""
    interval = "[{:.3g}, {:.3g}]".format
    if law is departures.DepartureLaw.POWER:
        return f"a power, p ∈ {interval(*bounds['power'])}"
    if law is departures.DepartureLaw.LOG:
        return f"log β, slope ∈ {interval(*bounds['slope'])}"
    if law is departures.DepartureLaw.NEITHER:
        return f"neither ({_neither_kind(bounds)}), k_log ∈ {interval(*bounds['log'])}"
    if law is departures.DepartureLaw.NOT_EVALUABLE:
        return "not evaluable (fewer than three β)"
    return f"{law.words}, k_log ∈ {interval(*bounds['log'])}"


def _neither_kind(bounds: dict) -> str:
    """How departures that follow neither law grow (``departures.neither_law_words``, its first clause)."""
    return departures.neither_law_words(bounds["linear"][0], bounds["log"][0]).split(",")[0]


def _law_name(law: departures.DepartureLaw, bounds: dict) -> str:
    """A law as the summary names it: neither with how the departures grow."""
    return f"{law.words} ({_neither_kind(bounds)})" if law is departures.DepartureLaw.NEITHER else law.words


def departure_cell(row, suffix: str) -> str:
    """One level's departure at one threshold: its snapshot, '> T' still metastable at its last resolved snapshot
    T, 'stopped at T' where its run stopped at T before it came within the threshold of E1(A), '—' where the curve
    never did (no metastable phase at that threshold)."""
    if row.get("stopped" + suffix, False):
        return f"stopped at {row['resolved' + suffix]:g}"
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
        "docs/sphere_mean_field.md). The same rule and law test with the threshold at the fractions q = "
        f"{', '.join(format(s_['fraction'], 'g') for s_ in sweep)} of the distance between E1(A) and V's leading "
        f"eigenspace ({gap:.3f}): arrival below q times it, departure above it. Per β the departure on the fine / "
        "coarse level ('—': the curve never came that close to E1(A), no metastable phase at that q: a β with '—' "
        "on both levels drops out of the law, on one level only its departure is unknown; '> T': still metastable "
        "at its last resolved snapshot T; 'stopped at T': its run stopped at T before it came that close, and "
        "whether it would have the rule cannot say); the law over the ranges as above (the coarse level's shift "
        "included) and from each level alone (p: the exponent of β; slope: that of τ against log β; k_log: the "
        "quadratic coefficient of log τ in log β, 0 for a power; undecided with k_log ∈ [-inf, inf]: a β whose "
        "departure is unknown at that q, its levels differing in kind (one departed and the other not, or one "
        "still metastable and the other never arrived) or a level stopped before it arrived).",
        "",
        "| q | threshold | " + " | ".join(f"β = {b:g}" for b in betas) + " | law over the ranges | fine level alone "
        "| coarse level alone |",
        "|---" * (5 + len(betas)) + "|",
    ]
    for s in sweep:
        cells = [f"{s['fraction']:g}", f"{s['fraction'] * gap:.3f}"]
        cells += [f"{departure_cell(r, '')} / {departure_cell(r, '_coarse')}" for r in s["rows"]]
        cells += [law_cell(*s["laws"][k]) for k in ("ranges", "fine", "coarse")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", threshold_summary(sweep)]


#: the laws a q can read; any other outcome (undecided, not evaluable) reads none there
READ = (departures.DepartureLaw.POWER, departures.DepartureLaw.LOG, departures.DepartureLaw.NEITHER)


def threshold_summary(sweep: list[dict]) -> str:
    """Which law over the ranges each q reads, over which β (a β without a metastable phase at q drops out), and
    whether the q that read a law all read one (``threshold_verdict``); the q that read none; the β with no
    metastable phase at some q."""
    by_law: dict[tuple[str, str], list[str]] = {}
    unread: dict[str, list[str]] = {}
    for s in sweep:
        (law, bounds), q = s["laws"]["ranges"], f"{s['fraction']:g}"
        if law in READ:
            over = ", ".join(f"{r['beta']:g}" for r in s["rows"] if not _drops_out(r))
            by_law.setdefault((_law_name(law, bounds), over), []).append(q)
        else:
            unread.setdefault(law.words, []).append(q)
    read = "; ".join(f"{words} at q = {', '.join(qs)} (over β = {over})" for (words, over), qs in by_law.items())
    none = "; ".join(f"{words} at q = {', '.join(qs)}" for words, qs in unread.items())
    verdict = threshold_verdict(sweep)
    dropped = []
    for k, b in enumerate(r["beta"] for r in sweep[0]["rows"]):
        qs = [f"{s['fraction']:g}" for s in sweep if _drops_out(s["rows"][k])]
        if qs:
            dropped.append(f"β = {b:g} at q = {', '.join(qs)}")
    absent = ""
    if dropped:
        absent = f" No metastable phase on either level (so no departure in the law): {'; '.join(dropped)}."
    parts = [f"Over the ranges: {read or 'no law at any q'}"] + ([f"no law read: {none}"] if none else [])
    return f"{'; '.join(parts)}. **{verdict[0].upper() + verdict[1:]}**.{absent}"


def threshold_verdict(sweep: list[dict]) -> str:
    """Whether the law over the ranges is a property of the mean field or of where the threshold sits: 'no law read
    at any threshold'; 'the same law wherever one is read' (one law at every q that read one, neither log β nor a
    power growing the same way (``_law_name``), and for a power of β one exponent inside every q's interval, for
    log β one slope); '… with no exponent (slope) common to every threshold' where those intervals do not meet;
    otherwise 'a law that depends on the threshold'."""
    laws = [s["laws"]["ranges"] for s in sweep if s["laws"]["ranges"][0] in READ]
    if not laws:
        return "no law read at any threshold"
    if len({_law_name(*law) for law in laws}) > 1:
        return "a law that depends on the threshold"
    law = laws[0][0]
    common = {departures.DepartureLaw.POWER: ("power", "exponent"), departures.DepartureLaw.LOG: ("slope", "slope")}
    if law in common:
        key, what = common[law]
        if max(b[key][0] for _, b in laws) > min(b[key][1] for _, b in laws):
            return f"{law.words} wherever one is read, with no {what} common to every threshold"
    return "the same law wherever one is read"


def _drops_out(row) -> bool:
    """Whether a β drops out of the law over the ranges: neither level came within the threshold of E1(A) (a
    departure known to be unknown, ``departure_unknown``, stays in and makes the law undecided)."""
    return not departure_unknown(row, "", True) and _kind(row, "") == "never arrived"
