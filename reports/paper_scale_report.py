"""docs/paper_scale_results.md from a finished paper-scale run: what `make paper-scale-report` writes.

    python reports/paper_scale_report.py results --markdown docs/paper_scale_results.md --images docs/img

Everything in the page is read from the run's outputs: the claims (``results/claims_summary.md``, the rows of
the ``paper_scale`` experiment), the particle-number study (``convergence.nc``: W2 per N, departure times,
the budget), the fit's per-β resolution (``fit.nc``), every job's wall time and memory against the resource
model's estimate (``reports/estimate_cost.py --measured``, from Snakemake's ``benchmarks/*.tsv``), the wall
time of the whole run (first to last timestamp of the job logs), the commit of the repository the results
folder sits in and this machine's CPU (``lscpu``: run it on the machine that ran the experiment). The W2 and
convergence figures are copied next to it. The files are read by name with xarray, so a run written by an
earlier schema version is reported as it is.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import xarray as xr

from lowtemp.store import harness, netcdf

#: the experiment reported unless ``--experiment`` names another
NAME = "paper_scale"
#: the times at which the particle-number table shows W2 (those beyond the horizon are left out)
TABLE_TIMES = (1.0, 5.0, 8.0, 10.0, 12.0, 15.0, 20.0)
#: a job log line starts with a timestamp "YYYY-MM-DD HH:MM:SS,mmm"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ ")
FIGURES = ("w2_projection", "collapse", "convergence")


def _open(path: Path) -> xr.Dataset:
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def job_spans(logs: Path) -> list[tuple[datetime, datetime]]:
    """(first, last) timestamp of every job log of the experiment that has one."""
    spans = []
    for path in sorted(logs.glob("*.log")):
        stamps = [
            datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            for m in map(STAMP.match, path.read_text(errors="replace").splitlines())
            if m
        ]
        if stamps:
            spans.append((min(stamps), max(stamps)))
    if not spans:
        raise SystemExit(f"{logs}: no timestamped log lines; is this a finished run?")
    return spans


def run_span(logs: Path) -> tuple[datetime, datetime]:
    """The first and the last timestamp of the experiment's job logs: the run's wall-clock span."""
    spans = job_spans(logs)
    return min(a for a, _ in spans), max(b for _, b in spans)


def busy_seconds(spans: list[tuple[datetime, datetime]]) -> float:
    """Seconds during which at least one job ran: the length of the union of the jobs' spans (a rule rerun later,
    after a change to its code, adds its own span and not the wait before it; jobs run side by side count once)."""
    total, reach = 0.0, None
    for a, b in sorted(spans):
        if reach is None or a > reach:
            total += (b - a).total_seconds()
            reach = b
        elif b > reach:
            total += (b - reach).total_seconds()
            reach = b
    return total


def claims_rows(summary: Path, name: str) -> list[str]:
    """The experiment's table of results/claims_summary.md (the section headed by its name)."""
    lines = summary.read_text().splitlines()
    try:
        start = lines.index(f"## {name}")
    except ValueError:
        raise SystemExit(f"{summary}: no section for the experiment {name!r}") from None
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            table.append(line)
    if len(table) < 3:
        raise SystemExit(f"{summary}: the section {name!r} holds no claims table")
    return table


def _num(x: float, fmt: str = ".3g") -> str:
    """``x`` formatted; "inf" for an unbounded value, "–" for none."""
    x = float(x)
    return "–" if np.isnan(x) else ("inf" if np.isinf(x) else format(x, fmt))


def by_beta(conv: xr.Dataset) -> list[xr.Dataset]:
    """convergence.nc's particle-number study at each of its β (a file of one study β has no beta dimension)."""
    if "beta" not in conv.dims:
        conv = conv.expand_dims(beta=[float(conv.attrs["beta"])])
    return [conv.isel(beta=j) for j in range(conv.sizes["beta"])]


def particle_sections(conv: xr.Dataset, fit: xr.Dataset) -> list[str]:
    """Per β of the particle-number study: its table and its budget."""
    out = []
    for study in by_beta(conv):
        out += [f"### β = {float(study['beta']):g}", "", *particle_table(study), "", *budget_lines(study, fit), ""]
    return out[:-1]


def particle_table(conv: xr.Dataset) -> list[str]:
    """Per N: W2(ρ^β_t, Π♯ρ0) mean ± standard error over replicas at TABLE_TIMES, the departure times per replica,
    the smallest median ESS, and whether the run is the experiment's own."""
    times = [t for t in TABLE_TIMES if t <= float(conv.time[-1]) + 1e-9]
    head = ["N", *[f"W2 at t = {t:g}" for t in times], "departure per replica", "smallest median ESS", "run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, n in enumerate(conv.tokens.values):
        w2 = [
            f"{_num(conv['w2_mean'].sel(tokens=n, time=t, method='nearest'), '.4f')} ± "
            f"{_num(conv['w2_sem'].sel(tokens=n, time=t, method='nearest'), '.1e')}"
            for t in times
        ]
        dep = conv["departure_particles"].sel(tokens=n).values
        cen = conv["departure_censored_particles"].sel(tokens=n).values.astype(bool)
        deps = ", ".join("> horizon" if c else _num(d, ".2f") for d, c in zip(dep, cen))
        ess = float(np.nanmin(conv["ess_particles"].sel(tokens=n).values))
        own = "the experiment's" if conv["reused_run"].values[i] else "fresh"
        lines.append("| " + " | ".join([str(int(n)), *w2, deps, _num(ess, ".2f"), own]) + " |")
    return lines


def budget_lines(conv: xr.Dataset, fit: xr.Dataset) -> list[str]:
    """The particle-number budget at the experiment's N at one β of the study (``conv`` selected at it) and what
    the fit made of it there."""
    lo, hi = (float(v) for v in conv["departure_slope_per_doubling"].values)
    out = [
        f"- W2 budget at N = {int(conv.tokens.values[-1])}: the 95 % upper bound of the remaining N error is "
        f"{_num(float(conv['w2_budget_ratio']))} × W2 at its largest over 0 < t ≤ "
        f"{_num(float(conv['budget_window_end']), '.2f')} (the earliest departure of any N and replica).",
        f"- Departure time per doubling of N: 95 % interval [{_num(lo)}, {_num(hi)}].",
    ]
    for b in fit.beta.values:
        f = fit.sel(beta=b)
        if not bool(f["particle_budget_measured"]) or not np.isclose(float(b), float(conv["beta"])):
            continue
        out.append(
            f"- β = {float(b):g}: W2 budget {'met' if bool(f['particle_budget_w2_resolved']) else 'not met'} "
            f"(ratio {_num(float(f['particle_budget_w2_ratio']))}), departure budget "
            f"{'met' if bool(f['particle_budget_departure_resolved']) else 'not met'}; the W2 budget's own power "
            f"law projects it met at N ≈ {_num(float(f['particle_budget_tokens_needed']), '.3g')}."
        )
    return out


def cost_table(config: list[Path], results: Path) -> list[str]:
    """The resource model's estimate of every job beside what it took (``estimate_cost.py --measured``)."""
    script = Path(__file__).with_name("estimate_cost.py")
    out = _run([sys.executable, str(script), *map(str, config), "--measured", str(results)])
    return ["    " + line for line in out.splitlines()]


def copy_figures(exp: Path, figures, images: Path, markdown: Path, prefix: str) -> list[str]:
    """Copy the experiment's figures/<figure>.png that exist into ``images`` as <prefix>_<figure>.png; their Markdown
    image lines, relative to the page ``markdown``."""
    images.mkdir(parents=True, exist_ok=True)
    shown = []
    for fig in figures:
        src = exp / "figures" / f"{fig}.png"
        if src.is_file():
            dst = images / f"{prefix}_{fig}.png"
            shutil.copyfile(src, dst)
            shown.append(f"![{fig}]({dst.relative_to(markdown.parent).as_posix()})")
    return shown


def closing_sections(shown: list[str], config: list[Path], results: Path) -> list[str]:
    """A results page's last sections: its figures, and every job's cost against the resource model's estimate."""
    return [
        "## Figures",
        "",
        *shown,
        "",
        "## Cost: the resource model's estimate against each job",
        "",
        *cost_table(config, results),
        "",
    ]


def page_stamp(script: str, target: str, results: Path, config: list[Path], name: str, default: str) -> str:
    """A results page's stamp (``harness.stamp``): the command of ``script`` (its ``__file__``) on ``results``
    with ``config`` (and ``--experiment`` where ``name`` is not ``default``), and the make target."""
    argv = [str(results), "--config", *map(str, config)] + (["--experiment", name] if name != default else [])
    return harness.stamp(harness.command(script, argv), target)


def page_main(argv, description: str, report_fn, config: Path, markdown: Path, name: str) -> int:
    """The command line of a results page: ``results`` folder, ``--config``, ``--markdown``, ``--images``,
    ``--experiment``; writes the page ``report_fn`` returns."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("results", type=Path, help="the finished run's results folder")
    ap.add_argument("--config", type=Path, nargs="+", default=[config], help="the run's config files")
    ap.add_argument("--markdown", type=Path, default=markdown)
    ap.add_argument("--images", type=Path, default=Path("docs/img"))
    ap.add_argument("--experiment", default=name, help=f"the experiment to report (default {name})")
    args = ap.parse_args(argv)
    text = report_fn(args.results, args.config, args.images, args.markdown, args.experiment)
    args.markdown.write_text(text)
    print(f"wrote {args.markdown}")
    return 0


def report(results: Path, config: list[Path], images: Path, markdown: Path, name: str = NAME) -> str:
    """The page's markdown; copies the figures into ``images`` (named paper_scale_<figure>.png)."""
    exp = results / name
    if not (exp / "convergence.nc").is_file() or not (exp / "fit.nc").is_file():
        raise SystemExit(f"{exp}: no convergence.nc or fit.nc; run the experiment with its studies first")
    conv, fit = _open(exp / "convergence.nc"), _open(exp / "fit.nc")
    start, end = run_span(exp / "logs")
    stamp = page_stamp(__file__, "paper-scale-report", results, config, name, NAME)  # before the figures land
    shown = copy_figures(exp, FIGURES, images, markdown, "paper_scale")
    betas = ", ".join(f"{float(b):g}" for b in fit.beta.values)
    lines = [
        "# The paper-scale run: results",
        "",
        stamp,
        "",
        "From the outputs of `make paper-scale-beta1000` (or `make paper-scale`). What the run is and why it is sized",
        "so: docs/paper_scale.md.",
        "",
        f"- Commit of the run: {netcdf.checkout_commit(results)} (the checkout holding the results folder); CPU: "
        f"{harness.machine()} (run the report on the machine that ran the experiment).",
        f"- β = {betas}; N = {int(conv.tokens.values[-1])} tokens × {fit.sizes['replica']} replicas; "
        f"particle-number study at β = {', '.join(f'{float(s.beta):g}' for s in by_beta(conv))} over N = "
        f"{', '.join(str(int(n)) for n in conv.tokens.values)}.",
        f"- Wall time: {busy_seconds(job_spans(exp / 'logs')) / 3600:.2f} h while jobs ran (the union of the job "
        f"logs' spans, {start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC).",
        "",
        "## Claims",
        "",
        *claims_rows(results / "claims_summary.md", name),
        "",
        "## Particle-number study",
        "",
        *particle_sections(conv, fit),
        "",
        *closing_sections(shown, config, results),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    return page_main(
        argv,
        __doc__.splitlines()[0],
        report,
        Path("config/paper_scale.yaml"),
        Path("docs/paper_scale_results.md"),
        NAME,
    )


if __name__ == "__main__":
    sys.exit(main())
