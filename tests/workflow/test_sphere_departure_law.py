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
    # still metastable at 30 on the fine level while the coarse one departed: nothing known of that departure
    unknown = law_rows((4.25, 6.5, np.nan), shifts=(0.0, 0.25, np.inf), censored=(False, False, True))
    text = "\n".join(law.departure_law_lines(unknown))
    assert "β = 100: unknown (one level departed, the other not)" in text and "**undecided**" in text
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


def power_law_curves(floor=0.02, plateau=None, floor_at=None) -> tuple[dict, list[dict]]:
    """Mean-field curves of the distance to E1(A) at BETAS, every 0.25 to t = 60: down from 1 to ``floor`` by t = 2,
    there to τ_β = 2.03·√β, then up in a straight line to the gap over 0.3·τ_β. Each threshold q·gap is crossed at
    τ_β·(1 + 0.3·(q·gap − floor)/(gap − floor)): a power of β, exponent 1/2, whatever q. ``plateau`` (t, height):
    the largest β's rise stops at that height for t time units (a partial departure); ``floor_at`` (β, floor): that
    β comes no closer to E1(A) than its floor. The coarse level is the fine one a quarter later. Returns the npz's
    curves and the rows the study keeps for the law."""
    times = np.linspace(0.0, 60.0, 241)
    curves, rows = {}, []
    for b in BETAS:
        tau, low = 2.03 * np.sqrt(b), floor_at[1] if floor_at and floor_at[0] == b else floor
        knots, values = [0.0, 2.0, tau, 1.3 * tau, 80.0], [1.0, low, low, GAP, GAP]
        if plateau and b == BETAS[-1]:
            height = plateau[1]
            at = tau + 0.3 * tau * (height - low) / (GAP - low)
            knots, values = (
                knots[:3] + [at, at + plateau[0], 1.3 * tau + plateau[0], 80.0],
                values[:3] + [height] * 2 + [GAP] * 2,
            )
        tag = f"beta{b:g}"
        curves[f"times_{tag}"] = times
        curves[f"mesh_fine_{tag}"] = np.interp(times, knots, values)
        curves[f"mesh_coarse_{tag}"] = np.interp(times - 0.25, knots, values)
        rows.append({"beta": b, "interval": 0.25, "resolved": 60.0, "resolved_coarse": 60.0})
    return curves, rows


def crossing(beta: float, q: float, floor=0.02) -> float:
    """Where the curve of ``power_law_curves`` at β rises through q·gap."""
    tau = 2.03 * np.sqrt(beta)
    return tau * (1 + 0.3 * (q * GAP - floor) / (GAP - floor))


def test_the_law_is_read_at_every_threshold_and_a_partial_departure_makes_it_depend_on_it():
    """Departures on a power of β at every threshold: each level's departure at every q is the first snapshot past
    the closed-form crossing (its coarse twin one snapshot later), and the law reads a power of β with p = 1/2 in
    its interval at every q: 'the same law at every threshold'. The violations: the largest β lingering at 0.52 of
    the gap for 15 time units moves every crossing above it 15 later, the law there is no longer a power, and the
    summary must say the law depends on the threshold; β = 10 held at 0.3 of the gap has no metastable phase below
    it, and the summary must name the q where it drops out."""
    curves, rows = power_law_curves()
    sweep = law.threshold_sweep(rows, curves, GAP)
    assert [s["fraction"] for s in sweep] == list(law.THRESHOLD_FRACTIONS) and 0.5 in law.THRESHOLD_FRACTIONS
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
    text = "\n".join(law.threshold_lines(sweep, GAP))
    assert "a power of β at q = 0.25, 0.3, 0.35" in text and "**the same law at every threshold**" in text
    assert "No metastable phase" not in text
    assert (
        f"| 0.5 | 0.250 | {sweep[5]['rows'][0]['departure']:g} / {sweep[5]['rows'][0]['departure_coarse']:g} |" in text
    )

    curves, rows = power_law_curves(plateau=(15.0, 0.52 * GAP))
    sweep = law.threshold_sweep(rows, curves, GAP)
    for s in sweep:
        late = s["rows"][-1]["departure"] - crossing(BETAS[-1], s["fraction"])
        assert (14.75 < late <= 15.25) if s["fraction"] > 0.52 else (0 < late <= 0.25)
        assert (s["laws"]["fine"][0] is law.departures.DepartureLaw.POWER) == (s["fraction"] < 0.52)
    text = "\n".join(law.threshold_lines(sweep, GAP))
    assert "**a law that depends on the threshold**" in text and "neither log β nor a power of β at q = 0.55" in text

    curves, rows = power_law_curves(floor_at=(10.0, 0.3 * GAP))
    text = "\n".join(law.threshold_lines(law.threshold_sweep(rows, curves, GAP), GAP))
    assert "No metastable phase on the fine level (so no departure in the law): β = 10 at q = 0.25, 0.3." in text
    assert "| 0.3 | 0.150 | — / — |" in text
