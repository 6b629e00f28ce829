"""docs/sphere_results.md from a finished `make sphere` run: the paper's setting (d = 3, no symmetry) judged on the
mean field itself.

    python reports/sphere_report.py results --markdown docs/sphere_results.md --images docs/img

Everything in the page is read from the run's outputs (results/<experiment>/): the claims
(``results/claims_summary.md``, the experiment's rows), per β the S² reference's levels, mesh size, field
evaluations and seconds (finite_temperature/beta*.nc), its error estimate and departure times (fit.nc), the
particles' W2 to it at each particle number beside the reference's own error (particle_error.nc), every job's
wall time against the resource model's estimate, the run's wall time, commit and this machine's CPU (run it on the
machine that ran the experiment). The W2 and end-phase figures are copied next to it, and where the particles stand
for the mean field (each replica's departure within one snapshot interval of the reference's) is drawn in
(log n, log β) beside it (``lowtemp.plotting.regimes``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from paper_scale_report import (
    _num,
    _open,
    busy_seconds,
    claims_rows,
    closing_sections,
    copy_figures,
    job_spans,
    page_main,
    page_stamp,
)

from lowtemp.analysis import fitting
from lowtemp.plotting import regimes
from lowtemp.store import harness, netcdf

#: the experiment reported unless ``--experiment`` names another
NAME = "concentration_mean_field"
#: the times at which the particle-error table shows W2 (those beyond the horizon are left out)
TABLE_TIMES = (1.0, 3.0, 6.0, 9.0, 12.0)
FIGURES = ("w2_projection", "end_phase", "time_scale")


def run_versions(exp: Path) -> str:
    """The versions (git describe, '.dirty' where the tree had uncommitted changes) recorded in the provenance of the
    run's files: what made the numbers, whatever the checkout is now."""
    versions = set()
    for path in [exp / "fit.nc", *sorted((exp / "finite_temperature").glob("beta*.nc"))]:
        versions.add(str(netcdf.read_provenance(_open(path)).get("version", "unknown")))
    return ", ".join(sorted(versions))


def reference_table(exp: Path, fit) -> list[str]:
    """Per β: the two levels, the finer mesh's triangles at t = 0 and at the horizon, its field evaluations and
    seconds, the error estimate (over W2 to Π♯ρ0 to departure and to the horizon, over W2(ρ^β_t, ρ^∞_t) early) and
    the departure per replica."""
    head = [
        "β",
        "levels (fine / coarse)",
        "triangles t = 0 → horizon",
        "field evaluations",
        "seconds (fine level)",
        "error / W2 early",
        "error / W2 to departure",
        "error / W2 to horizon",
        "departure per replica",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b in fit.beta.values:
        ft = _open(exp / "finite_temperature" / f"beta{float(b):g}.nc")
        f = fit.sel(beta=b)
        cells = ft["reference_cells"].values
        dep = f["departure_time"].values
        cen = f["departure_censored"].values.astype(bool)
        deps = ", ".join(
            f"> {float(fit.attrs['horizon']):g}" if c else ("none" if np.isnan(d) else f"{d:g}")
            for d, c in zip(dep, cen)
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{float(b):g}",
                    f"{int(ft.attrs['reference_level'])} / {int(ft.attrs['reference_coarse_level'])}",
                    f"{int(cells[0])} → {int(cells[-1])}",
                    str(int(ft.attrs["reference_field_evaluations"])),
                    f"{float(ft.attrs['reference_seconds']):.0f}",
                    _num(f["reference_error_early"]),
                    _num(f["reference_error_to_departure"]),
                    _num(f["reference_error_to_horizon"]),
                    deps,
                ]
            )
            + " |"
        )
    return lines


def particle_table(pe) -> list[str]:
    """Per β and particle number n: W2 between the particles and the reference (mean over replicas) at TABLE_TIMES,
    and the reference's own error estimate there."""
    times = [t for t in TABLE_TIMES if t <= float(pe.time[-1]) + 1e-9]
    head = ["β", "n", *[f"t = {t:g}" for t in times]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b in pe.beta.values:
        rows = [(str(int(n)), pe["particle_error"].sel(beta=b, tokens=n)) for n in pe.tokens.values]
        rows.append(("reference's error", pe["reference_error"].sel(beta=b)))
        for label, values in rows:
            cells = [_num(float(np.nanmean(values.sel(time=t, method="nearest").values)), ".3g") for t in times]
            lines.append("| " + " | ".join([f"{float(b):g}", label, *cells]) + " |")
    return lines


def particle_departures(fit, pe) -> tuple[list[str], np.ndarray]:
    """Per β and particle number n: each replica's departure (from its distance to E1(A), the pipeline's rule) and
    whether it lies within one snapshot interval of the reference's (``fitting.departure_shift``); the table's lines
    and the verdicts (beta, tokens): 1 where every replica does, else 0."""
    t = pe.time.values
    interval = float(t[1] - t[0])
    gap = float(fit.attrs["end_phase_gap"])
    tokens = [int(n) for n in pe.tokens.values]
    head = ["β", "reference", *[f"n = {n}" for n in tokens]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    stands = np.zeros((pe.sizes["beta"], len(tokens)))
    for i, b in enumerate(pe.beta.values):
        ref = fit.sel(beta=b)
        ref_dep, ref_cen = ref["departure_time"].values, ref["departure_censored"].values.astype(bool)
        cells = [_departures(ref_dep, ref_cen, t[-1])]
        for j, n in enumerate(tokens):
            dep, cen = fitting.geometric_departure(t, pe["dist_leading_A"].sel(beta=b, tokens=n).values, gap)
            shift = fitting.departure_shift(dep, cen, ref_dep, ref_cen)
            stands[i, j] = float(np.all(shift <= interval * (1 + 1e-9)))
            cells.append(_departures(dep, cen, t[-1]) + (" (with it)" if stands[i, j] else " (elsewhere)"))
        lines.append("| " + " | ".join([f"{float(b):g}", *cells]) + " |")
    return lines, stands


def _departures(dep, cen, horizon) -> str:
    """Departures per replica as text: a time, '> horizon' (censored) or 'none' (never reached E1(A))."""
    return ", ".join(f"> {horizon:g}" if c else ("none" if np.isnan(d) else f"{d:g}") for d, c in zip(dep, cen))


def regime_figure(pe, stands, images: Path, markdown: Path) -> str:
    """The (log n, log β) picture of ``stands``, labelled with the largest particle error; its image line."""
    error = pe["particle_error"].max(dim=("replica", "time"), skipna=True).transpose("beta", "tokens").values
    fig = regimes.plot_particle_regime(pe.beta.values, pe.tokens.values, stands, error, 3)
    path = images / "sphere_particle_regime.png"
    fig.savefig(path, dpi=130)
    return f"![particle_regime]({path.relative_to(markdown.parent).as_posix()})"


def report(results: Path, config: list[Path], images: Path, markdown: Path, name: str = NAME) -> str:
    exp = results / name
    for needed in ("fit.nc", "particle_error.nc"):
        if not (exp / needed).is_file():
            raise SystemExit(f"{exp}: no {needed}; run `make sphere` first")
    fit, pe = _open(exp / "fit.nc"), _open(exp / "particle_error.nc")
    busy = busy_seconds(job_spans(exp / "logs"))
    stamp = page_stamp(__file__, "sphere", results, config, name, NAME)  # before the figures change the checkout
    shown = copy_figures(exp, FIGURES, images, markdown, "sphere")
    regime, stands = particle_departures(fit, pe)
    shown.append(regime_figure(pe, stands, images, markdown))
    lines = [
        "# The paper's setting on the mean field itself: d = 3 without symmetry (generated)",
        "",
        stamp,
        "",
        "From the outputs of the run of config/sphere.yaml that `make sphere` makes first. The solver and its checks:",
        "docs/sphere_mean_field.md; how each claim is decided: docs/claims.md.",
        "",
        f"- Code of the run: {run_versions(exp)} (from the files' provenance); CPU: {harness.machine()} (run the "
        "report on the machine that ran the experiment).",
        f"- Wall time: {busy / 60:.1f} min while jobs ran (the union of the job logs' spans: a rule rerun later "
        "adds its own span, not the wait before it).",
        f"- β = {', '.join(f'{float(b):g}' for b in fit.beta.values)}; {fit.sizes['replica']} replicas of "
        f"{int(fit.attrs['tokens'])} tokens carried as tracers; particles at n = "
        f"{', '.join(str(int(n)) for n in pe.tokens.values)} from the first n of them.",
        "",
        "## Claims",
        "",
        *claims_rows(results / "claims_summary.md", name),
        "",
        "## The reference per β",
        "",
        "The finer level is the reference; the root mean square distance between the two levels' tracers is its",
        "error estimate, given over the W2 each claim judges: the bound and the temperature scaling count a β where",
        f"it is at most {_num(float(fit.attrs.get('particle_error_fraction', np.nan)))} of that W2.",
        "`metastable_log_beta` counts a β where the coarser level departs within one snapshot interval of the",
        "reference, and widens that β's departure range by the shift. A root mean square over tokens is decided by",
        "its largest terms: one token that ends in the other cluster at one level weighs 2/sqrt(tokens).",
        "Departure: the first time after the metastable phase that the distance to E1(A) exceeds half the gap to",
        f"V's leading eigenspace ({_num(0.5 * float(fit.attrs['end_phase_gap']))}).",
        "",
        *reference_table(exp, fit),
        "",
        "## Particles against the reference",
        "",
        "W2 between the particle system from the first n tokens and the reference's push-forward of the same tokens",
        "(mean over replicas), beside the reference's own error estimate:",
        "",
        *particle_table(pe),
        "",
        "Where the particles stand for the mean field: each replica's departure by the same rule, 'with it' where",
        "every replica departs within one snapshot interval of the reference's departure of that replica's tokens (or",
        "both are still metastable at the horizon, or neither reaches E1(A)), 'elsewhere' otherwise (figure",
        "sphere_particle_regime below). The reference's departure is that of its push-forward of all the replica's",
        "tokens, the particles' that of their first n (the same ρ0):",
        "",
        *regime,
        "",
        *closing_sections(shown, config, results),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    return page_main(
        argv, __doc__.split("\n\n")[0], report, Path("config/sphere.yaml"), Path("docs/sphere_results.md"), NAME
    )


if __name__ == "__main__":
    raise SystemExit(main())
