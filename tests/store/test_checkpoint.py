"""Checkpoints and runtime guards of the simulation stages (issue: nothing lost, nothing silent).

The fault-injection suite (tests/faults, ``make test-faults``) kills real
Snakemake jobs with SIGKILL; these tests check the mechanism in-process: a run
interrupted at any snapshot and resumed from its checkpoint gives bit for bit
the positions and the integrator's record (norm drift, evaluations, steps,
proposed step) of an uninterrupted run, with fixed and adaptive steps, a stale checkpoint is
ignored, and a simulation that goes non-finite, takes a step far too large or
yields a non-finite effective sample size stops with an error naming step, β
and replica.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from conftest import TEST_CONFIG, random_unit, spectral_matrices, validated
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.dynamics import fields as dynamics
from lowtemp.dynamics import integrate, kernels
from lowtemp.stages import distances as distances_stage
from lowtemp.stages import initial_tokens as initial_tokens_stage
from lowtemp.stages import matrices as matrices_stage
from lowtemp.stages import simulate as simulate_stage
from lowtemp.store import checkpoint, netcdf


class Interrupt(Exception):
    """Stands for a kill: raised from inside the field after a set number of evaluations."""


def _field(M, beta=8.0):
    return lambda X: dynamics.attention_field(X, M.B, M.V, beta)


def _interrupting(field, after: int):
    calls = {"n": 0}

    def wrapped(X):
        calls["n"] += 1
        if calls["n"] > after:
            raise Interrupt
        return field(X)

    return wrapped


GRID = integrate.TimeGrid(horizon=2.0, snapshots=8, dt=0.1)  # 3 steps per snapshot


def assert_same_record(got: integrate.StepRecord, expected: integrate.StepRecord) -> None:
    for f in integrate.FIELDS:
        np.testing.assert_array_equal(getattr(got, f), getattr(expected, f), err_msg=f)


@settings(max_examples=16, deadline=None)
@given(fraction=st.floats(0.0, 0.999), method=st.sampled_from(["rk4", "euler", "dopri5", "bs3"]))
def test_resume_after_interrupt_is_bit_for_bit(tmp_path_factory, fraction, method):
    M = spectral_matrices(3)
    X0 = random_unit(np.random.default_rng(5), 2, 40, 3)
    full, full_record = integrate.simulate(_field(M), X0, GRID, method, return_record=True, tolerance=1e-5)
    # the kill comes before the last evaluation
    evaluations = int(fraction * full_record.evaluations.sum())
    path = tmp_path_factory.mktemp("ckpt") / "run.nc"
    fp = checkpoint.fingerprint(X0, M.B, M.V, method=method)
    ckpt = checkpoint.SimulationCheckpoint(path, fp, GRID.times, every_seconds=0)
    with pytest.raises(Interrupt):
        integrate.simulate(
            _interrupting(_field(M), evaluations),
            X0,
            GRID,
            method,
            resume=ckpt.load(X0.shape),
            on_snapshot=ckpt,
            tolerance=1e-5,
        )
    # snapshot k is checkpointed once its interval's evaluations are done; the last one never is
    completed = min(int(np.sum(np.cumsum(full_record.evaluations)[1:] <= evaluations)), GRID.snapshots - 1)
    if completed == 0:
        assert not path.exists()
    else:
        assert netcdf.read_netcdf(path, "checkpoint").sizes["time"] == completed + 1
    again = checkpoint.SimulationCheckpoint(path, fp, GRID.times, every_seconds=0)
    resume = again.load(X0.shape)
    assert (resume is None) == (completed == 0)
    resumed, record = integrate.simulate(
        _field(M), X0, GRID, method, resume=resume, on_snapshot=again, return_record=True, tolerance=1e-5
    )
    np.testing.assert_array_equal(resumed, full)
    assert_same_record(record, full_record)
    assert np.all(record.drift[:, 1:] > 0)  # a real record, not zeros carried over from the checkpoint
    assert np.all(record.accepted[1:] >= 1) and np.all(record.evaluations[1:] > 0)
    again.discard()
    assert not path.exists() and not path.parent.exists()


def test_checkpoint_interval_and_stale_fingerprint(tmp_path):
    M = spectral_matrices(3)
    X0 = random_unit(np.random.default_rng(6), 1, 20, 3)
    path = tmp_path / "c" / "run.nc"
    clock = iter(np.arange(0.0, 1000.0, 1.0)).__next__  # one "second" per call
    ckpt = checkpoint.SimulationCheckpoint(path, "A", GRID.times, every_seconds=3, clock=clock)
    integrate.simulate(_field(M), X0, GRID, "rk4", on_snapshot=ckpt)
    # clock calls: construction 0, then one per snapshot (1..8); saves when 3 s have passed since the last
    assert ckpt.writes == 2
    assert checkpoint.SimulationCheckpoint(path, "B", GRID.times).load(X0.shape) is None  # other fingerprint
    k, done, record = checkpoint.SimulationCheckpoint(path, "A", GRID.times).load(X0.shape)
    assert done.shape == (X0.shape[0], k + 1) + X0.shape[1:]  # (replica, time, token, dim)
    assert record.drift.shape == (X0.shape[0], k + 1) and record.evaluations.shape == (k + 1,)
    assert checkpoint.SimulationCheckpoint(path, "A", GRID.times).load((1, 21, 3)) is None  # other shape
    path.write_bytes(b"not a netcdf file")
    assert checkpoint.SimulationCheckpoint(path, "A", GRID.times).load(X0.shape) is None  # unreadable
    with pytest.raises(ValueError, match="interval must be >= 0"):
        checkpoint.SimulationCheckpoint(path, "A", GRID.times, every_seconds=-1)


def test_fingerprint_sees_every_input():
    a = np.arange(6.0).reshape(2, 3)
    base = checkpoint.fingerprint(a, beta=1.0, kernel="dense")
    assert base == checkpoint.fingerprint(a.copy(), kernel="dense", beta=1.0)
    b = a.copy()
    b[1, 2] = np.nextafter(b[1, 2], 10)
    assert checkpoint.fingerprint(b, beta=1.0, kernel="dense") != base  # one ulp of one entry
    assert checkpoint.fingerprint(a.reshape(3, 2), beta=1.0, kernel="dense") != base
    assert checkpoint.fingerprint(a, beta=1.0 + 1e-15, kernel="dense") != base
    assert checkpoint.fingerprint(a, beta=1.0, kernel="cap") != base


def test_resume_rejects_a_checkpoint_of_other_initial_positions():
    M = spectral_matrices(3)
    X0 = random_unit(np.random.default_rng(7), 1, 10, 3)
    done, record = integrate.simulate(_field(M), X0, GRID, "rk4", return_record=True)
    done, record = done[:, :3], record.truncated(2)
    with pytest.raises(ValueError, match="other initial positions"):
        integrate.simulate(
            _field(M), random_unit(np.random.default_rng(8), 1, 10, 3), GRID, "rk4", resume=(2, done, record)
        )
    with pytest.raises(ValueError, match="expected snapshots 0..3"):
        integrate.simulate(_field(M), X0, GRID, "rk4", resume=(3, done, record))
    with pytest.raises(ValueError, match="step record of snapshots 0..2"):
        integrate.simulate(_field(M), X0, GRID, "rk4", resume=(2, done, record.truncated(1)))


@pytest.mark.parametrize("missing", ["norm_drift", "record_evaluations", "record_next_step"])
def test_checkpoint_without_the_integrator_record_is_ignored(tmp_path, missing):
    """A checkpoint written before the record was kept cannot resume bit for bit (its drift, counts or
    proposed step are unknown): it is ignored like a stale one."""
    X0 = random_unit(np.random.default_rng(9), 1, 10, 3)
    path = tmp_path / "run.nc"
    ckpt = checkpoint.SimulationCheckpoint(path, "A", GRID.times, every_seconds=0)
    positions = np.repeat(X0[:, None], 3, axis=1)
    ckpt.save(2, positions, integrate.StepRecord.empty(3, (1,), 0.1))
    assert ckpt.load(X0.shape)[0] == 2
    ds = netcdf.read_netcdf(path, "checkpoint").drop_vars(missing)
    netcdf.write_netcdf(ds, path, "checkpoint", {"fingerprint": "A", "snapshot": 2})
    assert checkpoint.SimulationCheckpoint(path, "A", GRID.times).load(X0.shape) is None


# ------------------------------------------------------------------ the stages, with files
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """matrices.nc and initial_tokens.nc of the test config's ``tiny`` experiment."""
    with open(TEST_CONFIG) as fh:
        config = validated(yaml.safe_load(fh))
    exp = copy.deepcopy(config["experiments"]["tiny"])
    exp["kernel"] = "dense"
    exp["integrator"] = "rk4"  # the guards below count RK4 evaluations; the adaptive stage has its own tests
    root = tmp_path_factory.mktemp("stages")
    matrices_stage.stage_matrices("tiny", exp, config["root_seed"], root / "matrices.nc")
    initial_tokens_stage.stage_initial_tokens(
        "tiny", exp, config["root_seed"], root / "matrices.nc", root / "tokens.nc"
    )
    return exp, config["root_seed"], root


def _run_finite(tiny, out, **kw):
    exp, seed, root = tiny
    simulate_stage.stage_finite_temperature(
        "tiny", exp, seed, 50.0, root / "matrices.nc", root / "tokens.nc", out, **kw
    )
    return netcdf.read_netcdf(out, "finite_temperature")


def test_stage_resumes_from_its_checkpoint_bit_for_bit(tiny, tmp_path, monkeypatch):
    plain = _run_finite(tiny, tmp_path / "plain.nc")
    ckpt = tmp_path / "checkpoints" / "beta50.nc"
    real = kernels.field_with_kernel
    calls = {"n": 0}

    def dying(*args, **kw):
        calls["n"] += 1
        if calls["n"] > 4 * 2 * 11:  # RK4, 2 steps per snapshot: dies during snapshot 12 of 30
            raise Interrupt
        return real(*args, **kw)

    monkeypatch.setattr(kernels, "field_with_kernel", dying)
    with pytest.raises(Interrupt):
        _run_finite(tiny, tmp_path / "resumed.nc", checkpoint_path=ckpt, checkpoint_every=0)
    assert not (tmp_path / "resumed.nc").exists()
    assert netcdf.read_netcdf(ckpt, "checkpoint").sizes["time"] == 12  # snapshots 0..11
    monkeypatch.setattr(kernels, "field_with_kernel", real)
    calls["n"] = 0
    resumed = _run_finite(tiny, tmp_path / "resumed.nc", checkpoint_path=ckpt, checkpoint_every=0)
    for var in plain.variables:
        np.testing.assert_array_equal(resumed[var].values, plain[var].values, err_msg=var)
    assert not ckpt.exists() and not ckpt.parent.exists()


def test_adaptive_stage_resumes_from_its_checkpoint_bit_for_bit(tiny, tmp_path, monkeypatch):
    """dopri5 killed halfway through its evaluations resumes with the controller's proposed step from
    the checkpoint: positions, drift, evaluations and step counts equal the uninterrupted run's."""
    exp, seed, root = tiny
    adaptive = ({**exp, "integrator": "dopri5"}, seed, root)
    plain = _run_finite(adaptive, tmp_path / "plain.nc")
    assert plain.attrs["integrator"] == "dopri5" and plain.attrs["tolerance"] == pytest.approx(1e-3 / 8)
    half = int(plain["field_evaluations"].sum()) // 2
    ckpt = tmp_path / "checkpoints" / "beta50.nc"
    real = kernels.field_with_kernel
    calls = {"n": 0}

    def dying(*args, **kw):
        calls["n"] += 1
        if calls["n"] > half:
            raise Interrupt
        return real(*args, **kw)

    monkeypatch.setattr(kernels, "field_with_kernel", dying)
    with pytest.raises(Interrupt):
        _run_finite(adaptive, tmp_path / "resumed.nc", checkpoint_path=ckpt, checkpoint_every=0)
    assert 1 < netcdf.read_netcdf(ckpt, "checkpoint").sizes["time"] < 30
    monkeypatch.setattr(kernels, "field_with_kernel", real)
    resumed = _run_finite(adaptive, tmp_path / "resumed.nc", checkpoint_path=ckpt, checkpoint_every=0)
    for var in plain.variables:
        np.testing.assert_array_equal(resumed[var].values, plain[var].values, err_msg=var)
    assert not ckpt.exists()


def _corrupt_field_at_call(monkeypatch, call: int, corrupt) -> None:
    """Replace kernels.field_with_kernel by one whose ``call``-th evaluation is passed through ``corrupt(X, F)``."""
    real = kernels.field_with_kernel
    calls = {"n": 0}

    def field(X, *args, **kw):
        calls["n"] += 1
        F = real(X, *args, **kw)
        return corrupt(X, F.copy()) if calls["n"] == call else F

    monkeypatch.setattr(kernels, "field_with_kernel", field)


def test_stage_stops_on_non_finite_positions_naming_step_beta_replica(tiny, tmp_path, monkeypatch):
    def poison(X, F):  # the third RK4 step's last stage: only token 17 of replica 1 goes bad
        F[1, 17, 0] = np.nan
        return F

    _corrupt_field_at_call(monkeypatch, 12, poison)
    with pytest.raises(
        FloatingPointError,
        match=r"tiny beta = 50: positions became non-finite at t = 0\.3 \(step 3\), replica 1, token 17",
    ):
        _run_finite(tiny, tmp_path / "bad.nc")
    assert not (tmp_path / "bad.nc").exists()


def test_stage_outputs_norm_drift(tiny, tmp_path, caplog):
    """finite_temperature and zero_temperature carry norm_drift (replica, time): 0 at t = 0, positive
    after (steps leave the sphere before renormalisation), below the guard's tolerance; the log
    names its maximum."""
    exp, seed, root = tiny
    caplog.set_level("INFO", logger="lowtemp")
    fin = _run_finite(tiny, tmp_path / "fin.nc")
    simulate_stage.stage_zero_temperature(
        "tiny", exp, seed, root / "matrices.nc", root / "tokens.nc", tmp_path / "zero.nc"
    )
    zero = netcdf.read_netcdf(tmp_path / "zero.nc", "zero_temperature")
    for ds in (fin, zero):
        drift = ds["norm_drift"]
        assert drift.dims == ("replica", "time")
        assert drift.shape == ds["positions"].shape[:2]
        assert drift.attrs["long_name"] and "units" in drift.attrs
        assert np.all(drift.values[:, 0] == 0.0)
        assert np.all(drift.values[:, 1:] > 0.0)
        assert np.all(drift.values < integrate.DRIFT_TOLERANCE)
    for label, ds in (("tiny beta = 50", fin), ("tiny zero temperature", zero)):
        assert (
            f"{label}: rk4, {int(ds['field_evaluations'].sum())} field evaluations, "
            f"{int(ds['accepted_steps'].sum())} accepted and 0 rejected steps; largest norm drift of a step "
            f"before renormalisation {ds['norm_drift'].values.max():.3e}" in caplog.text
        )
        assert int(ds["field_evaluations"].sum()) == 4 * int(ds["accepted_steps"].sum()) == 4 * 60


def test_stage_stops_on_a_step_far_too_large_naming_step_beta_replica(tiny, tmp_path, monkeypatch):
    def kick(X, F):  # the third RK4 step's first stage: token 5 of replica 0 is thrown off
        x = X[0, 5]
        e = np.eye(3)[0] - x[0] * x
        F[0, 5] = 100.0 * e / np.linalg.norm(e)
        return F

    _corrupt_field_at_call(monkeypatch, 9, kick)
    with pytest.raises(
        FloatingPointError,
        match=r"tiny beta = 50: the step is far too large: at t = 0\.3 "
        r"\(step 3\) it left the sphere .*replica 0, token 5",
    ):
        _run_finite(tiny, tmp_path / "bad.nc")
    assert not (tmp_path / "bad.nc").exists()


def test_stage_stops_on_non_finite_effective_sample_size(tiny, tmp_path, monkeypatch):
    """A NaN ESS would slip through the ``median < ess_threshold`` warning (NaN < x is False) into
    the claims; the stage raises instead, naming experiment, β, snapshot time, replica and token."""
    real = kernels.ess_with_kernel
    calls = {"n": 0}

    def poisoned(X, *args, **kw):
        calls["n"] += 1
        ess = real(X, *args, **kw)
        if calls["n"] == 8:  # snapshot 7 (t = 1.4 on the tiny grid)
            ess = ess.copy()
            ess[1, 23] = np.nan
        return ess

    monkeypatch.setattr(kernels, "ess_with_kernel", poisoned)
    with pytest.raises(
        FloatingPointError,
        match=r"tiny: beta = 50: the effective sample size is nan at t = 1\.4 "
        r"\(snapshot 7\), replica 1, token 23",
    ):
        _run_finite(tiny, tmp_path / "bad.nc")
    assert not (tmp_path / "bad.nc").exists()


# ------------------------------------------------------------------ the exact W2 loop of the distances stage
def _run_distances(tiny, root, out, **kw):
    exp, seed, base = tiny
    if not (root / "finite.nc").exists():
        _run_finite(tiny, root / "finite.nc")
        simulate_stage.stage_zero_temperature(
            "tiny", exp, seed, base / "matrices.nc", base / "tokens.nc", root / "zero.nc"
        )
    distances_stage.stage_distances_beta(
        "tiny", exp, seed, base / "matrices.nc", base / "tokens.nc", root / "finite.nc", root / "zero.nc", out, **kw
    )
    return netcdf.read_netcdf(out, "distances_beta")


def test_distances_stage_resumes_its_exact_w2_loop_losing_at_most_one_solve(tiny, tmp_path, monkeypatch):
    from lowtemp.transport import w2 as transport

    plain = _run_distances(tiny, tmp_path, tmp_path / "plain.nc")
    solves = int(np.sum(np.isfinite(plain["w2_zero_temperature"].values)))
    assert solves >= 6
    ckpt = tmp_path / "checkpoints" / "distances.nc"
    real = transport.w2_certified
    calls = {"n": 0}

    def dying(*args, **kw):
        calls["n"] += 1
        if calls["n"] > 3:  # killed during the fourth solve
            raise Interrupt
        return real(*args, **kw)

    monkeypatch.setattr(transport, "w2_certified", dying)
    with pytest.raises(Interrupt):
        _run_distances(tiny, tmp_path, tmp_path / "resumed.nc", checkpoint_path=ckpt)
    assert not (tmp_path / "resumed.nc").exists()
    stored = netcdf.read_netcdf(ckpt, "checkpoint")
    assert int(stored["done"].values.sum()) == 3  # every finished solve is kept: only the fourth is lost
    calls["n"] = -(10**9)  # no more kills
    resumed = _run_distances(tiny, tmp_path, tmp_path / "resumed.nc", checkpoint_path=ckpt)
    assert calls["n"] == -(10**9) + solves - 3  # the resumed run solves only what was missing
    for var in plain.variables:
        np.testing.assert_array_equal(resumed[var].values, plain[var].values, err_msg=var)
    assert not ckpt.exists() and not ckpt.parent.exists()


def test_solve_checkpoint_of_other_inputs_or_shape_starts_afresh(tmp_path):
    path = tmp_path / "solves.nc"
    ckpt = checkpoint.SolveCheckpoint(path, "abc", ("w2",), (2, 5))
    values, done = ckpt.load()
    assert not done.any() and np.isnan(values["w2"]).all()
    values["w2"][1, 3], done[1, 3] = 0.25, True
    ckpt.save(values, done)
    again, done2 = checkpoint.SolveCheckpoint(path, "abc", ("w2",), (2, 5)).load()
    assert done2.sum() == 1 and again["w2"][1, 3] == 0.25 and np.isnan(again["w2"][0, 0])
    other, done3 = checkpoint.SolveCheckpoint(path, "xyz", ("w2",), (2, 5)).load()  # other inputs
    assert not done3.any()
    other, done4 = checkpoint.SolveCheckpoint(path, "abc", ("w2",), (3, 5)).load()  # other shape
    assert not done4.any()
    path.write_bytes(b"not a netcdf file")  # unreadable: start afresh, no crash
    assert not checkpoint.SolveCheckpoint(path, "abc", ("w2",), (2, 5)).load()[1].any()


def test_a_mesh_checkpoint_gives_back_the_state_it_was_given_and_only_to_its_own_problem(tmp_path, caplog):
    """A ``Resumable`` of an icosphere mesh with tracers and curves, saved and loaded: every array and count back
    exactly (the step None too). The fingerprint follows B, β, the times and the settings, but not max_triangles;
    a checkpoint of another problem, or a truncated file, is passed over with a warning."""
    import dataclasses

    from lowtemp.dynamics import sphere_meanfield
    from lowtemp.dynamics.sphere_march import Resumable

    mesh = sphere_meanfield.initial_mesh("uniform", {}, 1)
    B, V, times = np.diag([1.5, 0.6, 0.5]), np.eye(3), np.linspace(0.0, 1.0, 5)
    tracers = random_unit(np.random.default_rng(0), 4, 3)
    settings = sphere_meanfield.reference_settings(1, 40000)
    path = tmp_path / "mesh.nc"

    def made(**changes):
        args = {"B": B, "beta": 10.0, "times": times, "settings": settings} | changes
        return checkpoint.mesh_checkpoint(path, args["B"], V, args["beta"], args["times"], mesh, tracers,
                                          args["settings"])  # fmt: skip

    for step in (0.125, None):
        state = Resumable(0.5, step, mesh, tracers, 3, {"nfev": 40, "steps": 2, "halvings": 0, "remeshings": 3,
                                                        "repaired_w2": 0.0})  # fmt: skip
        made().save(state, {"to_A": [1.0, 0.9, 0.8]}, {"done": False, "stopped": ""})
        back, curves, info = made().load()
        for name in ("points", "log_density", "triangles", "log_mass"):
            np.testing.assert_array_equal(getattr(back.mesh, name), getattr(mesh, name))
        np.testing.assert_array_equal(back.tracers, tracers)
        assert (back.t, back.step, back.recorded, back.counts) == (0.5, step, 3, state.counts)
        np.testing.assert_array_equal(curves["to_A"], [1.0, 0.9, 0.8])
        assert info == {"done": False, "stopped": ""}
    assert made(settings=dataclasses.replace(settings, max_triangles=10)).load()[0] is not None
    for other in (
        {"B": 2 * B},
        {"beta": 10.5},
        {"times": times[:-1]},
        {"settings": dataclasses.replace(settings, depth=30.0)},
    ):
        caplog.clear()
        assert made(**other).load() == (None, {}, {})
        assert "belongs to other inputs" in caplog.text
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a disk that filled mid-copy
    assert made().load() == (None, {}, {}) and "unreadable" in caplog.text
    assert checkpoint.mesh_checkpoint(None, B, V, 10.0, times, mesh, tracers, settings) is None
