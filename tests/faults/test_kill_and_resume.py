"""SIGKILL the workflow in the middle of a simulation, rerun with --rerun-incomplete, several times.

The resumed results must be bit for bit those of an uninterrupted run (every
NetCDF value, compared with ``lowtemp.store.compare``). The experiment is sized so
that the finite-temperature rule steps for about ten seconds with the plain
numpy kernel, and writes a checkpoint at every snapshot
(``checkpoint_every_seconds: 0``), so kills land between and inside steps.
Kill points are random (seeded per test, printed on failure).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from killing import run_and_kill, run_to_completion, temporaries

from lowtemp.store import compare

CONFIG = {
    "root_seed": 11,
    "checkpoint_every_seconds": 0,
    "experiments": {
        "slow": {
            # rk4 at the fixed step: the adaptive default finishes the run within the kill's random delay after
            # the first checkpoint, and the test would find no checkpoint left to resume from
            "dim": 3,
            "tokens": 640,
            "replicas": 2,
            "betas": [50],
            "kernel": "numpy",
            "integrator": "rk4",
            "matrices": {"family": "spectral", "eigenvalues": [1.5, 0.5, 0.25], "sigma_min": 0.8, "sigma_max": 1.25},
            "time": {"horizon": 6.0, "dt": 0.05, "snapshots": 30},
            "distances": {"exact_every": 1},
        }
    },
}
CHECKPOINT = Path("results/slow/checkpoints/finite_temperature_beta50.nc")
LOG = Path("results/slow/logs/finite_temperature_beta50.log")


@pytest.fixture(scope="module")
def configfile(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "slow.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, configfile):
    work = tmp_path_factory.mktemp("reference")
    wall = run_to_completion(work, configfile)
    return work / "results", wall


def _log(work: Path) -> str:
    path = work / LOG
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("seed", [1, 2])
def test_killed_runs_resume_to_bit_for_bit_results(tmp_path, configfile, reference, seed):
    ref, wall = reference
    rng = random.Random(seed)
    work = tmp_path / "work"
    story = []

    # 1. killed in the middle of the finite-temperature run, once it has a checkpoint
    kill = run_and_kill(work, configfile, lambda _: (work / CHECKPOINT).exists(), delay_s=rng.uniform(0.0, 2.0))
    story.append(("mid-simulation", kill))
    assert kill.killed, story
    snapshots_before = _snapshots(work)
    assert snapshots_before >= 1, story

    # 2. rerun: it must resume from the checkpoint, not from t = 0; killed again while stepping
    kill = run_and_kill(
        work, configfile, lambda _: "resuming from checkpoint" in _log(work), delay_s=rng.uniform(0.5, 2.5)
    )
    story.append(("after resuming", kill))
    assert kill.killed, story
    assert f"at snapshot {snapshots_before - 1} of 30" in _log(work), (story, _log(work))

    # 3. a kill at a uniformly random time of a whole run
    at = rng.uniform(0.0, wall)
    kill = run_and_kill(work, configfile, lambda elapsed: elapsed >= at)
    story.append((f"random time {at:.1f} s", kill))

    # 4. to the end
    run_to_completion(work, configfile)
    problems = compare.compare_results(ref, work / "results")
    assert not problems, (story, problems)
    assert not (work / CHECKPOINT).exists() and not (work / CHECKPOINT).parent.exists()
    assert not temporaries(work / "results"), story


def _snapshots(work: Path) -> int:
    from lowtemp.store import netcdf

    return netcdf.read_netcdf(work / CHECKPOINT, "checkpoint").sizes["time"]
