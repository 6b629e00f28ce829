"""SIGKILL the workflow while it writes its outputs: no file that exists may be half written.

``LOWTEMP_FAULT_WRITE_PAUSE`` holds every write for a moment between the
complete temporary file and its rename (``lowtemp.store.netcdf.atomic_path``), so that a
kill timed on the appearance of a temporary file lands inside a write. After
every kill, each NetCDF and figure that exists must open and equal the file of
an uninterrupted run; the run is then resumed and killed again, and finally
completed: the results equal the uninterrupted run's bit for bit and no
temporary file is left.
"""

from __future__ import annotations

import os
import random

import pytest
from conftest import TEST_CONFIG
from killing import check_every_output_is_whole, run_and_kill, run_to_completion, temporaries

from lowtemp.store import compare, netcdf

KILLS = 6


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("reference")
    run_to_completion(work, TEST_CONFIG)
    return work / "results"


def test_kills_during_writes_leave_only_whole_files(tmp_path, reference):
    rng = random.Random(2026)
    env = {**os.environ, netcdf.FAULT_PAUSE_ENV: "0.4"}
    work = tmp_path / "work"
    results = work / "results"
    seen = []
    for n in range(KILLS):
        stale = set(temporaries(results))  # left by the previous kill; the next write of that target removes it
        writes = set()
        target = rng.randint(1, 6)  # kill inside the target-th write of this run

        def inside_a_write(_elapsed, writes=writes, stale=stale, target=target):
            writes.update(set(temporaries(results)) - stale)
            return len(writes) >= target

        kill = run_and_kill(work, TEST_CONFIG, inside_a_write, delay_s=rng.uniform(0.0, 0.3), env=env)
        if not kill.killed:
            break  # the run completed before the next write could be hit
        checked = check_every_output_is_whole(results, reference)
        seen.append((n, target, round(kill.after_s, 2), checked))
    print("kills (n, inside write #, seconds, whole files checked):", seen)
    assert len(seen) >= 3, seen  # the kills did land while files were being written
    assert seen[-1][3] > seen[0][3], seen  # and the reruns made progress between kills
    run_to_completion(work, TEST_CONFIG)
    assert check_every_output_is_whole(results, reference) > 0
    assert not compare.compare_results(reference, results)
    assert not temporaries(results), temporaries(results)
