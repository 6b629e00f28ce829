"""studies/sphere_departure_law.py: which law in β the d = 3 mean field's departures follow, at the departure rule's
threshold and at every other fraction of the way between the eigenspaces."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import script_module

law = script_module("studies/sphere_departure_law.py")


def law_rows(departures, interval=0.25, shifts=(0.0, 0.25, 0.25), censored=(False, False, False), resolved=30.0):
    """One row per β = 10, 31.6, 100 as the study keeps them for the law."""
    return [
        {"beta": b, "departure": d, "censored": c, "resolved": resolved, "interval": interval, "shift": s,
         "departure_coarse": d + s if np.isfinite(s) else np.nan, "censored_coarse": c and np.isfinite(s),
         "resolved_coarse": resolved}
        for b, d, s, c in zip((10.0, 31.6, 100.0), departures, shifts, censored)
    ]  # fmt: skip


def test_the_departure_law_is_read_from_the_mean_fields_departure_ranges():
    """Departures 4.25, 6.5, 13.5 (known to a 0.25 snapshot and the coarse level's shift) grow faster than any power
    of β over β = 10 … 100: both curvatures in log β are positive over every time in the ranges. Departures on a
    line in log β (4.25, 6.5, 8.75, known to 0.05) read log β. The last still metastable at t = 9 leaves both
    curvatures unbounded above and reads undecided, never a law; still metastable at t = 30 it is faster than any
    power whatever its departure."""
    text = "\n".join(law.departure_law_lines(law_rows((4.25, 6.5, 13.5))))
    assert "β = 31.6: (6, 6.75]" in text
    assert "**neither log β nor a power of β: log τ convex in log β" in text
    on_a_line = law_rows((4.25, 6.5, 8.75), interval=0.05, shifts=(0.0, 0.0, 0.0))
    assert "**log β**" in "\n".join(law.departure_law_lines(on_a_line))
    # a censored β has a shift of 0 (both levels still metastable) or inf (below)
    censored = law_rows((4.25, 6.5, np.nan), shifts=(0.0, 0.25, 0.0), censored=(False, False, True), resolved=9.0)
    text = "\n".join(law.departure_law_lines(censored))
    assert "β = 100: > 9" in text and "**undecided**" in text
    late = law_rows((4.25, 6.5, np.nan), shifts=(0.0, 0.25, 0.0), censored=(False, False, True))
    assert "**neither log β nor a power of β: log τ convex" in "\n".join(law.departure_law_lines(late))
    # still metastable at 30 on the fine level while the coarse one never arrived: nothing known of that
    # departure, so two β are known, too few for a law
    unknown = law_rows((4.25, 6.5, np.nan), shifts=(0.0, 0.25, np.inf), censored=(False, False, True))
    text = "\n".join(law.departure_law_lines(unknown))
    assert "β = 100: unknown (the fine level still metastable, the coarse one never arrived)" in text
    assert "Fewer than three β with a known departure: no law." in text
    two = "\n".join(law.departure_law_lines(law_rows((4.25, 6.5, np.nan))))
    assert "Fewer than three β with a known departure: no law." in two and "nan" not in two.split(":", 1)[1]


def test_each_level_alone_reads_its_own_law_where_the_shift_lets_a_power_in():
    """The page's four β as measured: fine departures 4.25, 6.5, 13.5, 29.25, coarse 4.25, 6.25, 13.75, 35.25. The
    coarse shift of 6 at β = 316 stretches its range down to 23, where log τ's curvature reaches −0.0017: the law
    over the ranges reads a power of β. Each level alone, known to its snapshot, has log τ convex (curvature
    [0.0527, 0.0767] fine, [0.0921, 0.116] coarse, by brute force over the corners): neither, which the page must
    show beside it; were the shift applied to the fine level alone (the violation), it would read a power again."""
    fine, coarse = (4.25, 6.5, 13.5, 29.25), (4.25, 6.25, 13.75, 35.25)
    rows = [
        {"beta": b, "departure": f, "censored": False, "resolved": 40.0, "interval": 0.25, "shift": abs(f - c),
         "departure_coarse": c, "censored_coarse": False, "resolved_coarse": 40.0}
        for b, f, c in zip((10.0, 31.6, 100.0, 316.0), fine, coarse)
    ]  # fmt: skip
    text = "\n".join(law.departure_law_lines(rows))
    assert "β = 316: (23, 35.25]" in text and "**a power of β**. Each level alone" in text
    assert "fine level **neither log β nor a power of β: log τ convex" in text
    assert "coarse level **neither log β nor a power of β: log τ convex" in text
    assert law.level_law(rows, "", with_shift=False)[1]["log"] == pytest.approx([0.0527, 0.0767], abs=1e-4)
    assert law.level_law(rows, "_coarse", with_shift=False)[1]["log"] == pytest.approx([0.0921, 0.1161], abs=1e-4)
    assert law.level_law(rows, "", with_shift=True)[3] == "a power of β"  # the shift applied to the fine level alone


GAP = 0.5
BETAS = (10.0, 31.6, 100.0, 316.0)
EVERY_Q = "0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75"


def power_law_curves(floor=0.02, plateau=None, floor_at=None, stop=None) -> tuple[dict, list[dict]]:
    """Mean-field curves of the distance to E1(A) at BETAS, every 0.25 to t = 60: down from 1 to ``floor`` by t = 2,
    there to τ_β = 2.03·√β, then up in a straight line to the gap over 0.3·τ_β. Each threshold q·gap is crossed at
    τ_β·(1 + 0.3·(q·gap − floor)/(gap − floor)): a power of β, exponent 1/2, whatever q. ``plateau`` (t, height):
    the largest β's rise stops at that height for t time units (a partial departure); ``floor_at`` (β, floor, level
    or None for both): that β comes no closer to E1(A) than its floor; ``stop`` (β, level, t): that level's run
    stops at t (NaN after). The coarse level is the fine one a quarter later. Returns the npz's curves and the rows
    the study keeps for the law (each level's last resolved snapshot as ``sphere_departure.beta_row`` finds it)."""
    times = np.linspace(0.0, 60.0, 241)
    curves, rows = {}, []
    for b in BETAS:
        tag, tau = f"beta{b:g}", 2.03 * np.sqrt(b)
        for level, lag in (("fine", 0.0), ("coarse", 0.25)):
            low = floor_at[1] if floor_at and floor_at[0] == b and floor_at[2] in (None, level) else floor
            knots, values = [0.0, 2.0, tau, 1.3 * tau, 80.0], [1.0, low, low, GAP, GAP]
            if plateau and b == BETAS[-1]:
                at = tau + 0.3 * tau * (plateau[1] - low) / (GAP - low)
                knots = [*knots[:3], at, at + plateau[0], 1.3 * tau + plateau[0], 80.0]
                values = [*values[:3], plateau[1], plateau[1], GAP, GAP]
            curve = np.interp(times - lag, knots, values)
            if stop and stop[:2] == (b, level):
                curve[times > stop[2]] = np.nan
            curves[f"mesh_{level}_{tag}"] = curve
        curves[f"times_{tag}"] = times
        last = {level: float(times[np.isfinite(curves[f"mesh_{level}_{tag}"])][-1]) for level in ("fine", "coarse")}
        rows.append({"beta": b, "interval": 0.25, "resolved": last["fine"], "resolved_coarse": last["coarse"]})
    return curves, rows


def crossing(beta: float, q: float, floor=0.02) -> float:
    """Where the curve of ``power_law_curves`` at β rises through q·gap."""
    tau = 2.03 * np.sqrt(beta)
    return tau * (1 + 0.3 * (q * GAP - floor) / (GAP - floor))


def sweep_text(**kw) -> tuple[list[dict], str]:
    curves, rows = power_law_curves(**kw)
    sweep = law.threshold_sweep(rows, curves, GAP)
    return sweep, "\n".join(law.threshold_lines(sweep, GAP))


def test_the_law_is_read_at_every_threshold_and_a_partial_departure_makes_it_depend_on_it():
    """Departures on a power of β at every threshold: each level's departure at every q is the first snapshot past
    the closed-form crossing (its coarse twin one snapshot later), and the law reads a power of β with p = 1/2 in
    its interval at every q: 'the same law wherever one is read'. The violations: the largest β lingering at 0.52
    of the gap for 25 time units is still metastable at t = 60 above that (on the coarse level, stopped at 55, at
    55), the law there is no longer a power, and the summary must say the law depends on the threshold."""
    assert law.THRESHOLD_FRACTIONS == (0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75)
    sweep, text = sweep_text()
    for s in sweep:
        for b, r in zip(BETAS, s["rows"]):
            t_c = crossing(b, s["fraction"])
            assert t_c < r["departure"] <= t_c + 0.25 + 1e-9 and not r["censored"]
            assert r["departure_coarse"] == r["departure"] + 0.25 and r["shift"] == 0.25
        for kind in ("ranges", "fine", "coarse"):
            found, bounds = s["laws"][kind]
            assert found is law.departures.DepartureLaw.POWER, (s["fraction"], kind, bounds)
            if kind != "coarse":  # the coarse departures lie a snapshot late: their range need not hold 1/2
                assert bounds["power"][0] <= 0.5 <= bounds["power"][1]
    summary = f"Over the ranges: a power of β at q = {EVERY_Q} (over β = 10, 31.6, 100, 316). **The same law"
    assert summary in text and "No metastable phase" not in text
    assert f"with the threshold at the fractions q = {EVERY_Q} of the distance" in text and "eigenspace (0.500)" in text
    r = sweep[5]["rows"][0]
    assert f"| 0.5 | 0.250 | {r['departure']:g} / {r['departure_coarse']:g} |" in text

    sweep, text = sweep_text(plateau=(25.0, 0.52 * GAP), stop=(316.0, "coarse", 55.0))
    for s in sweep:
        last = s["rows"][-1]
        if s["fraction"] > 0.52:
            assert last["censored"] and last["censored_coarse"]
            assert f"| {s['fraction']:g} | {s['fraction'] * GAP:.3f} |" in text
        else:
            assert 0 < last["departure"] - crossing(BETAS[-1], s["fraction"]) <= 0.25
        assert (s["laws"]["fine"][0] is law.departures.DepartureLaw.POWER) == (s["fraction"] < 0.52)
    row = next(line for line in text.splitlines() if line.startswith("| 0.6 |"))
    assert row.split(" | ")[5] == "> 60 / > 55"
    assert "**A law that depends on the threshold**" in text
    assert "a power of β at q = 0.25, 0.3, 0.35, 0.4, 0.45, 0.5 (over β = 10, 31.6, 100, 316)" in text


def test_a_beta_without_a_metastable_phase_drops_out_and_one_cut_short_is_unknown():
    """β = 10 held at 0.3 of the gap on both levels has no metastable phase below it: '—', it drops out of the law,
    and the summary names the q where it does and reads the law over the other three. Held there on the fine level
    only, while the coarse one arrives and departs, the levels differ in kind: its departure is unknown and the law
    over the ranges undecided, not a power read without it. A fine level stopped at t = 1.5 while still falling
    towards E1(A) is no evidence that it never arrives: 'stopped at 1.5', unknown, never in 'no metastable phase'."""
    sweep, text = sweep_text(floor_at=(10.0, 0.3 * GAP, None))
    assert "No metastable phase on either level (so no departure in the law): β = 10 at q = 0.25, 0.3." in text
    assert "| 0.3 | 0.150 | — / — |" in text
    assert "a power of β at q = 0.25, 0.3 (over β = 31.6, 100, 316); a power of β at q = 0.35" in text
    assert "**A law that depends" not in text  # one law where read: the exponents meet

    sweep, text = sweep_text(floor_at=(10.0, 0.3 * GAP, "fine"))
    low = sweep[0]  # q = 0.25: fine never arrives, coarse arrives and departs
    assert np.isnan(low["rows"][0]["departure"]) and np.isfinite(low["rows"][0]["departure_coarse"])
    assert low["laws"]["ranges"][0] is law.departures.DepartureLaw.UNDECIDED
    assert low["laws"]["fine"][0] is law.departures.DepartureLaw.POWER  # the fine level alone drops β = 10
    assert "undecided at q = 0.25, 0.3" in text
    assert "No metastable phase" not in text  # '—' on one level only: unknown, not dropped

    # a run cut short before it arrived, even after it turned away from E1(A), cannot say it never would have:
    # 'stopped at T', its departure unknown, also where its twin never arrived (no infinite shift); on the coarse
    # level, which then bounds the fine one's error no longer, too
    sweep, text = sweep_text(floor_at=(10.0, 0.3 * GAP, None), stop=(10.0, "fine", 30.0))
    assert "| 0.25 | 0.125 | stopped at 30 / — |" in text and "No metastable phase" not in text
    assert (
        sweep[0]["rows"][0]["shift"] == 0.0 and sweep[0]["laws"]["ranges"][0] is law.departures.DepartureLaw.UNDECIDED
    )
    sweep, text = sweep_text(floor_at=(10.0, 0.3 * GAP, None), stop=(10.0, "coarse", 30.0))
    assert "| 0.25 | 0.125 | — / stopped at 30 |" in text and "No metastable phase" not in text
    assert sweep[0]["laws"]["ranges"][0] is law.departures.DepartureLaw.UNDECIDED
    assert sweep[0]["laws"]["fine"][0] is law.departures.DepartureLaw.POWER  # the fine level alone drops it
    assert "β = 10: unknown (the coarse level stopped before it arrived)" in "\n".join(
        law.departure_law_lines(sweep[0]["rows"])
    )

    sweep, text = sweep_text(stop=(10.0, "fine", 1.5))
    assert "| 0.5 | 0.250 | stopped at 1.5 / " in text and "No metastable phase" not in text
    for s in sweep:  # at t = 1.5 the fine curve is at 0.265: above that threshold it had arrived (censored)
        first, arrived = s["rows"][0], s["fraction"] * GAP > 1.0 - 0.98 * 0.75
        assert first["stopped"] is not arrived and first["censored"] is arrived and not first["stopped_coarse"]
        assert s["laws"]["ranges"][0] is law.departures.DepartureLaw.UNDECIDED
        assert arrived or s["laws"]["fine"][0] is law.departures.DepartureLaw.UNDECIDED
        assert s["laws"]["coarse"][0] is law.departures.DepartureLaw.POWER
    assert "**No law read at any threshold**" in text
    assert "β = 10: unknown (the fine level stopped before it arrived)" in "\n".join(
        law.departure_law_lines(sweep[5]["rows"])
    )


def test_the_page_reads_each_threshold_as_a_brute_force_over_its_npz_does():
    """The page's own npz files (β = 10, 31.6, 100, 316): at every q where every β's departure is known on both
    levels, the sweep's intervals of p and k_log, over the ranges and from each level alone, equal those of a
    brute force (the rule re-implemented, every corner of the ranges fitted with numpy.polyfit), and the table puts
    each in its column; the summary reads the law over the ranges (a power of β at q = 0.5 where each level alone
    reads neither)."""
    study = script_module("studies/sphere_departure.py")
    npz = ["docs/data/sphere_departure.npz", "docs/data/sphere_departure_beta316.npz"]
    curves, settings = {}, None
    for path in npz:
        more, settings = study.recorded(str(law_root() / path))
        curves.update(more)
    M = study.experiment.build_matrices(settings["experiment"], settings["block"], settings["root_seed"])
    gap, tolerance = study.end_phase_geometry(M, settings["block"])
    rows = [study.beta_row(b, curves, (gap, tolerance), []) for b in BETAS]
    sweep = law.threshold_sweep(rows, curves, gap)
    compared = []
    for s in sweep:
        q = s["fraction"]
        deps = {lv: [first_crossing(curves, b, lv, q * gap) for b in BETAS] for lv in ("fine", "coarse")}
        arrived = [f != "never" or c != "never" for f, c in zip(deps["fine"], deps["coarse"])]
        kept = {lv: [d for d, a in zip(deps[lv], arrived) if a] for lv in deps}
        if len(kept["fine"]) < 3 or any(isinstance(d, str) for lv in kept for d in kept[lv]):
            continue  # fewer than three β, or one still metastable (or never arriving) on one level only
        shift = [abs(f - c) for f, c in zip(kept["fine"], kept["coarse"])]
        none = [0.0] * len(shift)
        for kind, base, slack in (("ranges", "fine", shift), ("fine", "fine", none), ("coarse", "coarse", none)):
            ranges = [(d - 0.25 - e, d + e) for d, e in zip(kept[base], slack)]
            p, k_log = corner_bounds(np.array(BETAS)[arrived], ranges)
            bounds = s["laws"][kind][1]
            assert bounds["power"] == pytest.approx(p, rel=1e-9, abs=1e-12), (q, kind)
            assert bounds["log"] == pytest.approx(k_log, rel=1e-9, abs=1e-12), (q, kind)
        compared.append(q)
    assert compared == [0.35, 0.4, 0.45, 0.5]  # β = 316 still metastable on a level above 0.5
    text = "\n".join(law.threshold_lines(sweep, gap))
    row = next(line for line in text.splitlines() if line.startswith("| 0.5 |"))
    assert row.endswith(
        "| a power, p ∈ [0.497, 0.639] | neither (log τ convex in log β), k_log ∈ [0.0527, 0.0767] "
        "| neither (log τ convex in log β), k_log ∈ [0.0921, 0.116] |"
    )
    assert "a power of β at q = 0.5 (over β = 10, 31.6, 100, 316)" in text


def law_root():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]


def first_crossing(curves, beta, level, threshold):
    """The rule written out on the snapshots a level reached: the first snapshot above ``threshold`` after the
    first below it; 'never' where none is below, 'stays' where none after is above."""
    t, d = curves[f"times_beta{beta:g}"], curves[f"mesh_{level}_beta{beta:g}"]
    below = [k for k in range(t.size) if d[k] < threshold]
    if not below:
        return "never"
    above = [k for k in range(below[0], t.size) if d[k] > threshold]
    return float(t[above[0]]) if above else "stays"


def corner_bounds(betas, ranges):
    """(p, k_log) intervals over every corner of ``ranges``: the slope and the quadratic coefficient of the
    least-squares fits of log τ against log β (both are linear in log τ, so a corner holds each extreme)."""
    x = np.log(betas)
    p, k = [], []
    for corner in np.array(np.meshgrid(*ranges)).reshape(len(ranges), -1).T:
        y = np.log(corner)
        p.append(np.polyfit(x, y, 1)[0])
        k.append(np.polyfit(x, y, 2)[0])
    return [min(p), max(p)], [min(k), max(k)]


def test_one_law_at_every_threshold_needs_one_exponent_for_a_power():
    """The verdict over thresholds: a power of β at every q whose exponent intervals share a point is one law; the
    same name with intervals that move apart with q (0.33–0.45 at one q, 0.46–0.55 at another) is not; q that read
    no law (undecided, not evaluable) have no say; none read at all says so."""
    power, undecided = law.departures.DepartureLaw.POWER, law.departures.DepartureLaw.UNDECIDED

    def sweep(*laws):
        return [{"fraction": 0.25 + 0.05 * k, "laws": {"ranges": v}} for k, v in enumerate(laws)]

    meets = sweep((power, {"power": [0.4, 0.5]}), (power, {"power": [0.45, 0.6]}), (undecided, {}))
    assert law.threshold_verdict(meets) == "the same law wherever one is read"
    apart = sweep((power, {"power": [0.33, 0.45]}), (power, {"power": [0.46, 0.55]}))
    assert (
        law.threshold_verdict(apart) == "a power of β wherever one is read, with no exponent common to every threshold"
    )
    assert law.threshold_verdict(sweep((undecided, {}))) == "no law read at any threshold"
    neither, log = law.departures.DepartureLaw.NEITHER, law.departures.DepartureLaw.LOG
    convex, between = {"linear": [0.1, 0.2], "log": [0.01, 0.02]}, {"linear": [0.1, 0.2], "log": [-0.02, -0.01]}
    mixed = sweep((power, {"power": [0.4, 0.5]}), (neither, convex))
    assert law.threshold_verdict(mixed) == "a law that depends on the threshold"
    assert (
        law.threshold_verdict(sweep((neither, convex), (neither, dict(convex)))) == "the same law wherever one is read"
    )
    assert law.threshold_verdict(sweep((neither, convex), (neither, between))) == "a law that depends on the threshold"
    slopes = sweep((log, {"slope": [2.78, 3.3]}), (log, {"slope": [3.78, 4.3]}))
    assert law.threshold_verdict(slopes) == "log β wherever one is read, with no slope common to every threshold"
    assert law.law_cell(log, {"slope": [2.78, 3.3]}) == "log β, slope ∈ [2.78, 3.3]"
