"""The paper-scale simulation with the field on a GPU (kernel ``torch``), timed against the CPU kernels.

Two commands. On a machine with a CUDA device and PyTorch::

    python studies/gpu_paper_scale.py run config/paper_scale.yaml --beta 1000 --out DIR

builds the experiment's matrices and initial tokens exactly as the pipeline does (same stages, same root seed),
runs the pipeline's own ``finite_temperature`` stage at one β with ``kernel: torch`` (float64 on the device) and
writes, into DIR: ``summary.json`` (the machine, the versions, the integrator's record, the wall time of the stage,
the effective sample sizes, and per cloud the time of one field evaluation with ``torch`` on the device and with
the CPU kernels ``dense`` and ``cap`` on that machine's cores, best of ``--repeats`` after a warm-up call, with
the largest relative difference between the torch and the dense field) and ``replica0.npz`` (replica 0's
positions at the run's exact-W2 snapshots, to compare with a CPU run of the same config). The clouds are the
initial tokens (spread) and the run's own snapshots at ``--times`` (clustered after the departure).
``summary.json`` is rewritten after each part, so a run cut short keeps what it measured.

Here, once the CPU run of the same config has finished (``make paper-scale`` or ``make paper-scale-beta1000``)::

    python studies/gpu_paper_scale.py report DIR [DIR ...] --results results --markdown docs/gpu_paper_scale.md

writes the page: the time per field evaluation and per step on the GPU against the CPU kernels (on the GPU
machine's cores and, for the whole job, on the machine of the CPU run), and whether the two runs are the same
dynamics: compared only where both runs have the same β, integrator, tolerance, snapshot times and cloud at t = 0
(bit for bit; ``comparable``), then per exact snapshot W2 between the GPU run's replica 0 and the CPU run's
replica 0, beside W2 between two CPU replicas (the sampling scale) and each run's W2 to the zero-temperature
measure. Without the npz or the CPU run that section says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

from lowtemp.config import experiment as experiment_config
from lowtemp.config import schema, validation
from lowtemp.dynamics import integrate, kernels, torch_field
from lowtemp.stages import initial_tokens, matrices, simulate
from lowtemp.store import datasets, harness, netcdf
from lowtemp.store.harness import SCHEMA, merged

#: the CPU kernels timed beside the torch field: (kernel, numba threads; None = all the machine's cores)
CPU_KERNELS = (("dense", None), ("dense", 2), ("cap", None))


def _tokens_digest(X0: np.ndarray) -> str:
    """sha256 of the initial tokens' float64 bytes: equal digests, equal inputs."""
    return hashlib.sha256(np.ascontiguousarray(X0, dtype=np.float64).tobytes()).hexdigest()


def time_cloud(label: str, X: np.ndarray, M, beta: float, repeats: int) -> dict:
    """One field evaluation on the cloud X (replica, token, dim) with torch on the device and each CPU kernel:
    seconds, nanoseconds per token pair, and the torch field's largest difference from the dense one."""
    r, n, _ = X.shape
    pairs = r * n * n
    row = {"cloud": label, "replicas": r, "tokens": n, "pairs": pairs, "kernels": []}
    F_torch = torch_field.torch_field(X, M.B, M.V, beta)
    seconds = harness.best_time(lambda: torch_field.torch_field(X, M.B, M.V, beta), repeats, warm_up=True)
    row["kernels"].append(
        {"kernel": "torch", "device": torch_field.device(), "threads": None, "asked": None, "seconds": seconds}
    )
    all_threads = kernels.numba.config.NUMBA_NUM_THREADS
    for kernel, threads in CPU_KERNELS:
        kernels.set_threads(threads or all_threads)

        def fn(k=kernel):
            return kernels.field_with_kernel(X, M.B, M.V, beta, k)

        try:
            seconds = harness.best_time(fn, repeats, warm_up=True)
        except Exception as exc:  # a CPU kernel that fails there must not cost the GPU run
            logging.getLogger("lowtemp").exception("kernel %s failed", kernel)
            seconds = float("nan")
            row.setdefault("errors", []).append(f"{kernel}: {type(exc).__name__}: {exc}")
        row["kernels"].append(
            {"kernel": kernel, "device": "cpu", "threads": threads or all_threads, "asked": threads, "seconds": seconds}
        )
    kernels.set_threads(all_threads)
    try:
        F_dense = kernels.field_with_kernel(X, M.B, M.V, beta, "dense")
        row["torch_vs_dense_relative"] = float(np.max(np.abs(F_torch - F_dense)) / np.max(np.abs(F_dense)))
    except Exception:
        row["torch_vs_dense_relative"] = float("nan")
    for k in row["kernels"]:
        k["ns_per_pair"] = k["seconds"] / pairs * 1e9
    logging.getLogger("lowtemp").info("cloud %s: %s", label, json.dumps(row))
    return row


def _machine() -> dict:
    import numba
    import torch

    out = {
        "cpu": netcdf.cpu_name(),
        "cpu_threads": int(numba.config.NUMBA_NUM_THREADS),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "torch": torch.__version__,
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda"] = torch.version.cuda
    return out


def run(args) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    if not torch_field.available():
        raise SystemExit("PyTorch is not installed: this command runs the torch field")
    config = {}
    for path in args.config:
        config = merged(config, schema.load_config_file(path))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    validation.validate_config(config, SCHEMA, configfiles=args.config, results=str(work / "results"))
    name = args.experiment or next(iter(config["experiments"]))
    exp = dict(config["experiments"][name], kernel="torch")
    beta = float(args.beta)
    if beta not in [float(b) for b in exp["betas"]]:
        raise SystemExit(f"--beta {beta:g} is not among experiments.{name}.betas {exp['betas']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("summary.json", "replica0.npz"):  # a folder never mixes this run with an earlier one
        (out / stale).unlink(missing_ok=True)
    summary = {"experiment": name, "beta": beta, "commit": args.commit, "machine": _machine(), "clouds": []}

    def save():
        (out / "summary.json").write_text(json.dumps(summary, indent=1))

    root_seed = config["root_seed"]
    matrices.stage_matrices(name, exp, root_seed, work / "matrices.nc")
    initial_tokens.stage_initial_tokens(name, exp, root_seed, work / "matrices.nc", work / "tokens.nc")
    M, X0 = datasets.load_inputs(work / "matrices.nc", work / "tokens.nc")
    summary["initial_tokens_sha256"] = _tokens_digest(X0)
    summary["clouds"].append(time_cloud("t = 0", X0, M, beta, args.repeats))
    save()

    output = work / f"beta{beta:g}.nc"
    start = time.perf_counter()
    simulate.stage_finite_temperature(
        name, exp, root_seed, beta, work / "matrices.nc", work / "tokens.nc", output, work / "checkpoint.npz", 120.0
    )
    stage_seconds = time.perf_counter() - start
    ds = netcdf.read_netcdf(output, "finite_temperature")
    evaluations = int(ds["field_evaluations"].sum())
    accepted = int(ds["accepted_steps"].sum())
    summary["run"] = {
        "kernel": ds.attrs["kernel"],
        "integrator": ds.attrs["integrator"],
        "tolerance": ds.attrs.get("tolerance"),
        "stage_seconds": stage_seconds,
        "field_evaluations": evaluations,
        "accepted_steps": accepted,
        "rejected_steps": int(ds["rejected_steps"].sum()),
        "seconds_per_evaluation": stage_seconds / (evaluations + ds.sizes["time"]),  # + one ESS pass per snapshot
        "times": ds["time"].values.tolist(),
        "ess_median": ds["ess_median"].values.tolist(),
    }
    save()
    positions = ds["positions"].values  # (replica, time, token, dim)
    exact = experiment_config.exact_w2_snapshots(exp, ds.sizes["time"])
    np.savez(
        out / "replica0.npz",
        times=ds["time"].values[exact],
        positions=positions[0, exact],
        beta=beta,
        integrator=ds.attrs["integrator"],
        tolerance=float(ds.attrs.get("tolerance", np.nan)),
        initial_tokens_sha256=summary["initial_tokens_sha256"],
    )
    for t in args.times:
        k = int(np.argmin(np.abs(ds["time"].values - t)))
        X = np.ascontiguousarray(integrate.snapshot(positions, k))
        summary["clouds"].append(time_cloud(f"t = {ds['time'].values[k]:g}", X, M, beta, args.repeats))
        save()
    return summary


# ------------------------------------------------------------------ report (here, after the CPU run)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def kernel_table(summary: dict) -> list[str]:
    """Per cloud: milliseconds and ns per token pair of one field evaluation, each kernel, and torch's speed-up."""
    clouds = summary["clouds"]
    heads = [
        f"{k['kernel']} ({k['device']}{'' if k['threads'] is None else ', ' + str(k['threads']) + ' threads'})"
        for k in clouds[0]["kernels"]
    ]
    lines = [
        "| cloud | " + " | ".join(f"{h}: ms (ns/pair)" for h in heads) + " | torch faster than dense (all cores), "
        "dense (2 threads) | torch against dense, largest relative difference |",
        "|---" * (len(heads) + 3) + "|",
    ]
    for c in clouds:
        ks = c["kernels"]
        by = {(k["kernel"], k["asked"]): k["seconds"] for k in ks}  # asked: the threads asked for (None: all)
        torch_s = by["torch", None]
        dense_all, dense_2 = by["dense", None], by["dense", 2]
        cells = [f"{_ms(k['seconds'])} ({k['ns_per_pair']:.3f})" for k in ks]
        lines.append(
            f"| {c['cloud']} | " + " | ".join(cells) + f" | {dense_all / torch_s:.1f}x, {dense_2 / torch_s:.1f}x "
            f"| {c['torch_vs_dense_relative']:.1e} |"
        )
    return lines


def cpu_job(results: Path, name: str, beta: float) -> dict | None:
    """The CPU run's finite-temperature job at β: its record and wall seconds (Snakemake's benchmark file)."""
    nc = results / name / "finite_temperature" / f"beta{beta:g}.nc"
    tsv = results / name / "benchmarks" / f"finite_temperature_beta{beta:g}.tsv"
    if not nc.exists():
        return None
    ds = netcdf.read_netcdf(nc, "finite_temperature")
    job = {
        "kernel": ds.attrs["kernel"],
        "field_evaluations": int(ds["field_evaluations"].sum()),
        "accepted_steps": int(ds["accepted_steps"].sum()),
        "rejected_steps": int(ds["rejected_steps"].sum()),
        "dataset": ds,
    }
    if tsv.exists():
        header, *rows = tsv.read_text().splitlines()
        job["seconds"] = float(dict(zip(header.split("\t"), rows[-1].split("\t")))["s"])
    return job


def comparable(npz: Path, summary: dict, cpu: dict) -> list[str]:
    """Why the GPU run's replica 0 (``npz``) cannot be set against the CPU run's, or [] where it can: the same β,
    integrator and tolerance, the same snapshot times, and the same cloud at t = 0, bit for bit (the npz's t = 0
    snapshot against the CPU run's, both the initial tokens as the integrator normalised them, so a stale or foreign
    file cannot pass on its summary's word)."""
    gpu = np.load(npz)
    ds = cpu["dataset"]
    why = []
    if "beta" not in gpu.files:
        return [f"{npz} records no beta, integrator or tolerance (written by an older version of this script)"]
    for key, theirs in (("beta", float(ds["beta"])), ("integrator", ds.attrs["integrator"])):
        if gpu[key].item() != theirs:
            why.append(f"{key} {gpu[key].item()} against the CPU run's {theirs}")
    tol = float(ds.attrs.get("tolerance", np.nan))
    if not (gpu["tolerance"].item() == tol or (np.isnan(tol) and np.isnan(gpu["tolerance"].item()))):
        why.append(f"tolerance {gpu['tolerance'].item():.3g} against the CPU run's {tol:.3g}")
    if float(gpu["beta"]) != summary["beta"]:
        why.append(f"the npz holds beta {float(gpu['beta']):g}, its summary.json {summary['beta']:g}")
    times = ds["time"].values
    if not all(np.any(np.abs(times - t) <= 1e-9) for t in gpu["times"]):
        why.append("the CPU run has not every snapshot time of the GPU run: not the same time grid")
    elif gpu["times"][0] != 0.0 or not np.array_equal(gpu["positions"][0], ds["positions"].values[0, 0]):
        why.append("the GPU run's replica 0 at t = 0 is not the CPU run's initial cloud (other tokens)")
    return why


def agreement_table(npz: Path, cpu: dict, zero: xr.Dataset | None) -> list[str]:
    """Per exact snapshot: W2 between the GPU and the CPU run's replica 0, between the CPU's replicas 0 and 1 (where
    it has two), and each run's replica 0 to the zero-temperature measure (the pipeline's W2(ρ^β_t, ρ^∞_t), where the
    CPU run's zero_temperature.nc is here)."""
    from lowtemp.transport import w2 as transport

    gpu = np.load(npz)
    ds = cpu["dataset"]
    lines = [
        "| t | W2(GPU replica 0, CPU replica 0) | W2(CPU replica 0, CPU replica 1) | W2 to ρ^∞_t: GPU "
        "| W2 to ρ^∞_t: CPU |",
        "|---|---|---|---|---|",
    ]
    for t, G in zip(gpu["times"], gpu["positions"]):
        k = int(np.argmin(np.abs(ds["time"].values - t)))
        C = ds["positions"].values[:, k]
        values = [transport.w2(G, C[0]), transport.w2(C[0], C[1]) if len(C) > 1 else None]
        if zero is not None:
            Z0 = zero["positions"].values[0, k]
            values += [transport.w2(G, Z0), transport.w2(C[0], Z0)]
        else:
            values += [None, None]
        lines.append(f"| {t:g} | " + " | ".join("n/a" if v is None else f"{v:.3e}" for v in values) + " |")
    return lines


def _header(summaries: list[dict]) -> list[str]:
    """One line per distinct commit and machine of the GPU runs, naming the β each covers."""
    groups: dict[str, list[float]] = {}
    for summary in summaries:
        m = summary["machine"]
        line = (
            f"commit {summary['commit']}; GPU: {m.get('gpu', 'none')} (CUDA {m.get('cuda')}), PyTorch {m['torch']}; "
            f"that machine's CPU: {m['cpu']}, {m['cpu_threads']} threads; numba {m['numba']}, numpy {m['numpy']}, "
            f"Python {m['python']}"
        )
        groups.setdefault(line, []).append(summary["beta"])
    return [
        *(f"- GPU runs at β = {', '.join(f'{b:g}' for b in betas)}: {line}." for line, betas in groups.items()),
        f"- Experiment `{summaries[0]['experiment']}`.",
    ]


def run_rows(summary: dict, cpu: dict | None, cpu_label: str) -> list[str]:
    """The GPU run's row of the whole-run table, and the CPU run's row at the same β where its job is here."""
    beta, run_ = summary["beta"], summary.get("run")
    if run_ is None:
        return [f"| {beta:g} | GPU machine | (did not finish: no record in summary.json) | | | | | | |"]
    rows = [
        f"| {beta:g} | GPU machine | {run_['kernel']} | {run_['field_evaluations']} | {run_['accepted_steps']} | "
        f"{run_['rejected_steps']} | {run_['stage_seconds']:.1f} | "
        f"{run_['stage_seconds'] / max(run_['accepted_steps'], 1):.3f} | "
        f"{run_['seconds_per_evaluation'] * 1e3:.1f} |"
    ]
    if cpu is not None:
        evaluations = cpu["field_evaluations"] + cpu["dataset"].sizes["time"]
        seconds = cpu.get("seconds")
        timing = (
            "(no benchmark file) | | "
            if seconds is None
            else f"{seconds:.1f} | {seconds / max(cpu['accepted_steps'], 1):.3f} | {seconds / evaluations * 1e3:.1f} |"
        )
        rows.append(
            f"| {beta:g} | {cpu_label} | {cpu['kernel']} | {cpu['field_evaluations']} | {cpu['accepted_steps']} | "
            f"{cpu['rejected_steps']} | {timing}"
        )
    return rows


def backends_section(b: dict) -> list[str]:
    """The torch field against the same computation in JAX, per cloud, from the measurement kept in
    ``backends.json`` (the script that made it was removed with the JAX backend: docs/decisions/0007-gpu-backends.md).
    """
    labels = [k for k in b["rows"][0] if isinstance(b["rows"][0][k], dict)]
    lines = [
        "## PyTorch or JAX",
        "",
        f"Measured at commit {b.get('commit', 'unknown')} (docs/decisions/0007-gpu-backends.md) on {b['gpu']} "
        f"(PyTorch {b['torch']}, "
        f"JAX {b['jax']}), β = {b['beta']:g}, a GPU run's own snapshots as R = 4 copies: one field evaluation, ms "
        "(best of several after a warm-up; JAX's compilation untimed), and its largest relative difference from the "
        "dense kernel. `torch_blocks4x`: the torch kernel with blocks 4 times larger; `jax`, `jax_block8192`: the "
        f"same blocked computation compiled by XLA (blocks: {b.get('blocks', 'not recorded')}).",
        "",
        "| t | " + " | ".join(labels) + " | torch / jax |",
        "|---" * (len(labels) + 2) + "|",
    ]
    for row in b["rows"]:
        cells = [f"{row[k]['seconds'] * 1e3:.2f} ({row[k]['relative_to_dense']:.0e})" for k in labels]
        ratio = row["torch"]["seconds"] / row["jax"]["seconds"]
        lines.append(f"| {row['time']:g} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    return lines


def report(args) -> str:
    summaries = [(Path(f), json.loads((Path(f) / "summary.json").read_text())) for f in args.device]
    summaries.sort(key=lambda fs: fs[1]["beta"])
    names = {s["experiment"] for _, s in summaries}
    if len(names) != 1:
        raise SystemExit(f"the folders hold runs of different experiments: {sorted(names)}")
    name = names.pop()
    results = Path(args.results) if args.results else None
    cpus = {s["beta"]: (cpu_job(results, name, s["beta"]) if results else None) for _, s in summaries}
    cpu_label = args.cpu_label or f"CPU run ({netcdf.cpu_name()}, {args.cpu_cores} cores)"
    lines = [
        "# The paper-scale simulation on a GPU",
        "",
        harness.stamp(f"python {harness.script(__file__)} report …", "gpu-paper-scale-report"),
        "",
        f"From the files that `{harness.script(__file__)} run` wrote on the GPU machine (`make gpu-paper-scale`; they",
        "are kept in docs/data/gpu_paper_scale/) and from the CPU run of the same config in results/. What the torch",
        "kernel is: docs/kernels.md.",
        "",
        *_header([summary for _, summary in summaries]),
        "",
        "## One field evaluation, per cloud",
        "",
        "Best of several calls after a warm-up; the torch time includes moving the positions to the device and the "
        "field back. `t = 0` is the initial cloud; the later clouds are the GPU run's own snapshots. The CPU kernels "
        "ran on the GPU machine's cores.",
        "",
    ]
    for _, summary in summaries:
        lines += [f"β = {summary['beta']:g}:", "", *kernel_table(summary), ""]
    lines += [
        "## The whole runs",
        "",
        "The pipeline's `finite_temperature` stage (integration, the effective sample size at every snapshot, the "
        "NetCDF file). The GPU rows time the stage alone, in a process where the timings above had already started "
        "CUDA; the CPU rows are the pipeline's own jobs as Snakemake's benchmark files of the run in results/ time "
        "them (the whole job: start-up and loading of the compiled kernels included), with the kernel of the "
        "config, on the machine their label names (by default the one that renders this page; `--cpu-label`). "
        "The last column divides the wall time by the field evaluations plus one per snapshot (the effective "
        "sample sizes). A job resumed from a checkpoint times only its resumed part while counting every "
        "evaluation, so its times per step and evaluation read low.",
        "",
        "| β | run | kernel | field evaluations | accepted steps | rejected steps | wall s | s per accepted step "
        "| ms per evaluation |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, summary in summaries:
        lines += run_rows(summary, cpus[summary["beta"]], cpu_label)
    if args.backends and Path(args.backends).exists():
        lines += ["", *backends_section(json.loads(Path(args.backends).read_text()))]
    lines += ["", "## The same dynamics?", ""]
    zero_path = results / name / "zero_temperature.nc" if results else None
    zero = netcdf.read_netcdf(zero_path, "zero_temperature") if zero_path and zero_path.exists() else None
    for folder, summary in summaries:
        beta, cpu, npz = summary["beta"], cpus[summary["beta"]], folder / "replica0.npz"
        if summary.get("run") is None or not npz.exists() or cpu is None:
            missing = "its record" if summary.get("run") is None else "replica0.npz" if not npz.exists() else None
            lines += [
                f"β = {beta:g}: not compared ({f'the GPU run has no {missing}' if missing else 'no CPU run'}).",
                "",
            ]
            continue
        why = comparable(npz, summary, cpu)
        if why:
            lines += [f"β = {beta:g}: not compared: {'; '.join(why)}.", ""]
            continue
        lines += [
            f"β = {beta:g}: the same β, integrator, tolerance, snapshot times and initial cloud (bit for bit) as the "
            "CPU run. Two float64 evaluations of the field differ by rounding (the tables above), which the dynamics "
            "may amplify (most where the tokens depart from the metastable state), so the runs are compared as "
            "measures: the first column is to be read against the second (two independent samples of the same "
            "measure) and the last two against each other."
            + ("" if zero is not None else " (No zero_temperature.nc in the CPU results: the last two are n/a.)"),
            "",
            *agreement_table(npz, cpu, zero),
            "",
        ]
    text = "\n".join(lines) + "\n"
    Path(args.markdown).write_text(text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="on the GPU machine: the run and the timings")
    r.add_argument("config", nargs="+")
    r.add_argument("--beta", type=float, required=True)
    r.add_argument("--experiment", help="default: the config's first experiment")
    r.add_argument("--out", required=True, help="folder for summary.json and replica0.npz")
    r.add_argument("--work", default="/tmp/gpu_paper_scale", help="folder for the run's NetCDF files")
    r.add_argument("--times", type=float, nargs="*", default=[5.0, 10.0, 15.0, 20.0], help="clouds timed after the run")
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--commit", default="unknown", help="the commit of the checkout (the device copy has no .git)")
    p = sub.add_parser("report", help="here: the page, from the GPU run's folder and the CPU run's results")
    p.add_argument("device", nargs="+", help="the folders the run command wrote (one per beta)")
    p.add_argument("--results", help="the CPU run's results folder")
    p.add_argument("--cpu-cores", type=int, default=2, help="cores of the CPU run's machine (default 2)")
    p.add_argument("--cpu-label", help="the CPU rows' label (default: this machine's CPU and --cpu-cores)")
    p.add_argument("--markdown", default="docs/gpu_paper_scale.md")
    p.add_argument("--backends", help="the PyTorch-against-JAX measurement (backends.json), rendered where given")
    args = ap.parse_args(argv)
    return run(args) if args.command == "run" else print(report(args))


if __name__ == "__main__":
    main()
