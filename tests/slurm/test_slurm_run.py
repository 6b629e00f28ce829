"""Checks of `make test-slurm`, run by tests/slurm/run.sh after its two runs of
config/test.yaml: one local, one through the SLURM profile on the single-node
cluster the script started. Not collected by `make test` (pytest's norecursedirs
holds "slurm"); run on its own it fails, since it needs the runs' folder.

* the SLURM run gives the local run's numbers, bit for bit (lowtemp.store.compare);
* every job really ran inside a SLURM allocation (sbatch job ids, one SLURM log
  per job, the job id in that job's own environment);
* the short jobs went as group jobs (distances; fit and figures);
* the profile's settings reached sbatch: memory, wall time and CPUs from
  lowtemp.config.resources, HDF5 file locking off, the partition given with
  --default-resources, no retry needed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from lowtemp.config import experiment, registry, resources

ROOT = Path(__file__).resolve().parents[2]
if not os.environ.get("LOWTEMP_SLURM_STATE"):
    raise RuntimeError(
        "tests/slurm/test_slurm_run.py checks the runs of tests/slurm/run.sh; run that (make test-slurm)"
    )
STATE = Path(os.environ["LOWTEMP_SLURM_STATE"])
PARTITION = os.environ["LOWTEMP_SLURM_PARTITION"]
LOCAL = STATE / "local" / "results"
SLURM = STATE / "slurm" / "results"
SLURM_OUT = (STATE / "slurm.out").read_text()

SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
SBATCH = re.compile(r"^sbatch call: (sbatch .*)$", re.M)
FINISHED = re.compile(r"^Finished jobid: \d+ \(Rule: (\w+)\)", re.M)
#: rules whose jobs go as group jobs (for config/test.yaml every job of them is short)
GROUPED = {"distances_beta": "distances", "distances": "distances", "fit": "figures", "figure": "figures"}


def _config():
    cfg = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    return cfg


def _outputs(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.suffix in (".nc", ".pdf", ".png") and ".tmp-" not in p.name
    }


def _submissions() -> list[tuple[str, Path]]:
    subs = [(jobid, Path(log)) for jobid, log in SUBMITTED.findall(SLURM_OUT)]
    assert subs, "the SLURM run's log names no SLURM job id: nothing went through sbatch"
    return subs


def _sbatch_calls() -> list[str]:
    calls = SBATCH.findall(SLURM_OUT)
    assert calls, "no 'sbatch call:' lines in the SLURM run's log (it runs with --verbose)"
    return calls


def _option(call: str, pattern: str) -> str:
    m = re.search(pattern, call)
    assert m, f"{pattern!r} not in sbatch call: {call[:300]}"
    return m.group(1)


def test_same_numbers_as_the_local_run():
    out = subprocess.run(
        [sys.executable, "-m", "lowtemp.store.compare", str(LOCAL), str(SLURM)], capture_output=True, text=True
    )
    assert out.returncode == 0, f"SLURM and local results differ:\n{out.stdout}\n{out.stderr}"
    assert "bit for bit" in out.stdout, out.stdout


def test_same_outputs_as_the_local_run():
    local, slurm = _outputs(LOCAL), _outputs(SLURM)
    assert local == slurm, f"only local: {sorted(local - slurm)}; only SLURM: {sorted(slurm - local)}"
    for name in _config()["experiments"]:
        assert f"{name}/fit.nc" in slurm
        assert f"{name}/figures/w2_projection.pdf" in slurm


def test_every_job_ran_inside_a_slurm_allocation():
    for jobid, log in _submissions():
        assert log.is_file(), f"SLURM job {jobid}: no SLURM log {log} (--slurm-keep-successful-logs)"
        text = log.read_text()
        # the job's own Snakemake (--verbose) prints its environment: set by slurmstepd
        assert f"'SLURM_JOB_ID': '{jobid}'" in text, f"SLURM job {jobid}: its log {log} shows no SLURM_JOB_ID"
        assert "steps (100%) done" in text, f"SLURM job {jobid} did not finish its steps: {log}"
    # the SLURM run finished the same rule jobs as the local run, in fewer SLURM jobs
    finished = sorted(r for r in FINISHED.findall(SLURM_OUT) if r != "all")
    local = sorted(r for r in FINISHED.findall((STATE / "local.out").read_text()) if r != "all")
    assert local and finished == local, f"SLURM run finished {finished}, local run {local}"
    assert len(finished) > len(_submissions()), "no job went in a group"


def test_short_jobs_went_as_group_jobs():
    dirs = [log.relative_to(STATE / "slurm" / ".snakemake" / "slurm_logs").parts[0] for _, log in _submissions()]
    rules = {d.removeprefix("rule_") for d in dirs if d.startswith("rule_")}
    groups = [d for d in dirs if d.startswith("group_")]
    assert not rules & set(GROUPED), f"short jobs sent alone: {sorted(rules & set(GROUPED))}"
    assert rules >= {"matrices", "initial_tokens", "finite_temperature", "zero_temperature"}, rules
    # group-components (4) puts both experiments of the test config in one job per group
    assert sorted(g.split("_")[1] for g in groups) == ["distances", "figures"], groups


def test_sbatch_requests_follow_the_resource_estimates():
    cfg = _config()
    experiments = cfg["experiments"]
    mats = {name: experiment.build_matrices(name, exp, cfg["root_seed"]) for name, exp in experiments.items()}
    labels = {}  # "<experiment>[_<beta>]" as the plugin writes wildcards in --comment
    for name, exp in experiments.items():
        labels[name] = (name, None)
        for b in exp["betas"]:
            labels[f"{name}_{float(b):g}"] = (name, float(b))
    seen = set()
    for call in _sbatch_calls():
        comment = _option(call, r"--comment (\S+)")
        m = re.fullmatch(r"rule_(\w+?)_wildcards_(\S+)", comment)
        if not m:  # a group job: its requests are Snakemake's layering of the members' requests
            continue
        rule, wildcards = m.groups()
        if rule not in registry.STAGES:
            continue  # a rule that runs no stage (an aggregating target)
        name, beta = labels[wildcards]
        threads = registry.stage(rule).threads
        est = resources.estimate(rule, experiments[name], beta=beta, matrices=mats[name], threads=threads)
        assert int(_option(call, r" --mem (\d+)")) == est.mem_mb, call[:300]
        assert int(_option(call, r" -t (\d+)")) == est.runtime_min, call[:300]
        assert int(_option(call, r"--cpus-per-task=(\d+)")) == est.cpus, call[:300]
        seen.add(rule)
    assert seen >= {"matrices", "initial_tokens", "finite_temperature", "zero_temperature"}, seen


def test_profile_settings_reach_every_job():
    for call in _sbatch_calls():
        head = call.split("--wrap=")[0]
        assert f" -p {PARTITION} " in head, f"partition from --default-resources missing: {head}"
        assert " -A " not in head, f"an account was sent although none is set: {head}"
        assert "--attempt 1 " in call, f"a job needed a retry: {head}"
        assert call.split("--wrap=")[1].startswith('"export HDF5_USE_FILE_LOCKING=FALSE && '), (
            f"profile precommand missing: {call[:400]}"
        )
    for jobid, log in _submissions():
        assert "'HDF5_USE_FILE_LOCKING': 'FALSE'" in log.read_text(), f"SLURM job {jobid}: HDF5 locking not off"


@pytest.mark.parametrize("group", ["distances", "figures"])
def test_group_jobs_fit_the_cluster(group):
    """--cores (the node's CPUs here) bounds a group job's CPUs: its members run in layers."""
    calls = [c for c in _sbatch_calls() if f"--comment rule_{group}_" in c]
    assert len(calls) == 1, calls
    cpus = int(_option(calls[0], r"--cpus-per-task=(\d+)"))
    assert 1 <= cpus <= os.cpu_count()
