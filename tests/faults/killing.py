"""Run the real workflow in a process group and kill it with SIGKILL when a condition holds.

Shared by the fault-injection tests (``make test-faults``). A kill takes down
Snakemake and every job it started, like a preempted node or a power cut
would; Snakemake's lock is left behind, so a rerun first calls ``--unlock``,
then runs with ``--rerun-incomplete``, as docs/reliability.md tells users to.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import xarray as xr  # noqa: E402
from conftest import SNAKEFILE, SNAKEMAKE  # noqa: E402

from lowtemp.store import compare, netcdf  # noqa: E402

#: upper bound on one workflow run in these tests (the runs take seconds to a minute)
RUN_TIMEOUT = 600


def snakemake_command(work: Path, configfile: Path, *extra: str) -> list[str]:
    return [
        str(SNAKEMAKE),
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(work),
        "--configfile",
        str(configfile),
        "--cores",
        "2",
        "--rerun-incomplete",
        *extra,
    ]


def run_to_completion(work: Path, configfile: Path, env: dict | None = None) -> float:
    """Unlock (after a kill), run to the end, return the wall time; fail with Snakemake's output otherwise."""
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        snakemake_command(work, configfile, "--unlock"), capture_output=True, text=True, timeout=120, env=env
    )
    start = time.perf_counter()
    proc = subprocess.run(
        snakemake_command(work, configfile), capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env
    )
    assert proc.returncode == 0, f"snakemake failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
    return time.perf_counter() - start


@dataclass
class Kill:
    killed: bool  # False when the run finished before the condition held
    after_s: float  # seconds from the start to the kill


def run_and_kill(
    work: Path,
    configfile: Path,
    when: Callable[[float], bool],
    delay_s: float = 0.0,
    env: dict | None = None,
    poll_s: float = 0.01,
) -> Kill:
    """Start the workflow; once ``when(elapsed)`` holds, wait ``delay_s`` and SIGKILL the whole process group."""
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        snakemake_command(work, configfile, "--unlock"), capture_output=True, text=True, timeout=120, env=env
    )
    start = time.perf_counter()
    proc = subprocess.Popen(
        snakemake_command(work, configfile),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    try:
        while proc.poll() is None and not when(time.perf_counter() - start):
            if time.perf_counter() - start > RUN_TIMEOUT:
                raise TimeoutError("the kill condition never held")
            time.sleep(poll_s)
        if proc.poll() is not None:
            return Kill(False, time.perf_counter() - start)
        time.sleep(delay_s)
        elapsed = time.perf_counter() - start
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        return Kill(proc.returncode == -signal.SIGKILL, elapsed)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def temporaries(results: Path) -> list[Path]:
    return [p for p in results.rglob("*") if ".tmp-" in p.name] if results.exists() else []


def check_every_output_is_whole(results: Path, reference: Path) -> int:
    """Every NetCDF and figure that exists under ``results`` opens and equals the reference run's file.

    Returns the number of files checked. Temporaries (``.tmp-``) are skipped: a
    killed writer may leave one, which the next write of that target removes.
    """
    checked = 0
    for path in sorted(results.rglob("*")):
        if not path.is_file() or ".tmp-" in path.name or "checkpoints" in path.parts:
            continue
        rel = path.relative_to(results)
        if path.suffix == ".nc":
            ds = netcdf.read_netcdf(path)  # opens, current schema
            with xr.open_dataset(reference / rel, engine=netcdf.ENGINE) as ref:
                problems = compare.compare_datasets(ds, ref.load())
            assert not problems, (rel, problems)
        elif path.suffix == ".png":
            img = matplotlib.image.imread(path)
            assert img.shape == matplotlib.image.imread(reference / rel).shape, rel
        elif path.suffix == ".pdf":
            data = path.read_bytes()
            assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF"), rel
        else:
            continue
        checked += 1
    return checked
