"""NetCDF reading and writing: round trip, provenance, schema checks, atomic writes."""

from __future__ import annotations

import errno
import json
import os
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp import __version__
from lowtemp.model import layout
from lowtemp.store import analyses, netcdf


def _dataset():
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {
            "positions": (
                ("replica", "time", "token", "dim"),
                rng.standard_normal((2, 3, 5, 3)),
                netcdf.attrs("positions", flag=True, meta={"a": 1}),
            ),
            "gamma": ((), 1.25, netcdf.attrs("gap")),
        },
        coords={"time": ("time", np.linspace(0, 1, 3), netcdf.attrs("time", "1")), "replica": np.arange(2)},
        attrs={"integrator": "rk4", "optional": None},
    )


def test_round_trip_with_provenance(tmp_path):
    ds = _dataset()
    prov = netcdf.provenance("tiny", {"dim": 3, "betas": [5.0, 50.0]}, 7, beta=np.float64(5.0))
    path = netcdf.write_netcdf(ds, tmp_path / "sub" / "out.nc", "demo", prov)
    assert path == tmp_path / "sub" / "out.nc"
    back = netcdf.read_netcdf(path, "demo")
    xr.testing.assert_identical(back[["positions", "gamma"]].drop_attrs(), ds[["positions", "gamma"]].drop_attrs())
    assert back["positions"].dtype == np.float64
    assert back.attrs["lowtemp_schema"] == netcdf.SCHEMA_VERSION
    assert back.attrs["lowtemp_kind"] == "demo"
    assert back.attrs["integrator"] == "rk4"
    record = netcdf.read_provenance(back)
    assert record == json.loads(json.dumps(prov, default=float))
    assert record["version"] == __version__ and record["root_seed"] == 7 and record["beta"] == 5.0
    assert record["config"] == {"dim": 3, "betas": [5.0, 50.0]}
    # attributes that NetCDF cannot hold natively are stored in a readable form
    assert back["positions"].attrs["flag"] == 1
    assert json.loads(back["positions"].attrs["meta"]) == {"a": 1}
    # the caller's dataset is not modified
    assert "lowtemp_schema" not in ds.attrs and ds["positions"].attrs["flag"] is True


def test_no_temporary_files_left(tmp_path):
    for k in range(3):
        netcdf.write_netcdf(_dataset(), tmp_path / f"f{k}.nc", "demo", {})
    netcdf.write_netcdf(_dataset(), tmp_path / "f0.nc", "demo", {"again": True})  # overwrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f0.nc", "f1.nc", "f2.nc"]


def test_failed_write_leaves_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.nc"
    netcdf.write_netcdf(_dataset(), path, "demo", {"first": 1})
    bad = xr.Dataset({"x": (("token",), np.array([{"k": 1}, None, 3], dtype=object))})
    with pytest.raises(ValueError):  # a dict cannot be stored in a NetCDF variable
        netcdf.write_netcdf(bad, path, "demo", {"second": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["out.nc"]
    assert netcdf.read_provenance(netcdf.read_netcdf(path, "demo")) == {"first": 1}


def test_a_dataset_out_of_the_layout_is_refused_before_anything_is_written(tmp_path):
    """Every output is in layout.ORDER: time before replica, or a dimension ORDER does not place, is refused
    with the variable named, and neither the file nor a temporary appears."""
    ds = _dataset()
    swapped = ds.transpose("time", "replica", "token", "dim")
    with pytest.raises(layout.LayoutError, match=r"'positions' has dimensions \('time', 'replica'"):
        netcdf.write_netcdf(swapped, tmp_path / "swapped.nc", "demo", {})
    unknown = ds.rename_dims(token="particle")
    with pytest.raises(layout.LayoutError, match=r"\['particle'\] have no place"):
        netcdf.write_netcdf(unknown, tmp_path / "unknown.nc", "demo", {})
    assert list(tmp_path.iterdir()) == []
    netcdf.write_netcdf(swapped, tmp_path / "checkpoint.nc", "checkpoint", {})  # a writer's own file: its own axes
    netcdf.write_netcdf(ds, tmp_path / "ok.nc", "demo", {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.nc", "ok.nc"]


def test_the_layout_places_every_dimension_once():
    assert len(set(layout.ORDER)) == len(layout.ORDER)
    assert layout.ordered_dims(("time", "beta", "replica")) == ("beta", "replica", "time")
    assert layout.ORDER.index("replica") < layout.ORDER.index("time") < layout.ORDER.index("token")


def test_wrong_kind_is_refused(tmp_path):
    path = netcdf.write_netcdf(_dataset(), tmp_path / "out.nc", "matrices", {})
    with pytest.raises(netcdf.NetCDFSchemaError, match="expected 'distances'"):
        netcdf.read_netcdf(path, "distances")
    netcdf.read_netcdf(path)  # no kind requested: accepted


@pytest.mark.parametrize("version", [0, 1, 2, "3", None])
def test_wrong_or_missing_schema_version_is_refused(tmp_path, version):
    ds = _dataset().drop_attrs()
    ds.attrs["lowtemp_kind"] = "demo"
    if version is not None:
        ds.attrs["lowtemp_schema"] = version
    path = tmp_path / "old.nc"
    ds.to_netcdf(path, engine=netcdf.ENGINE)
    with pytest.raises(netcdf.NetCDFSchemaError, match="schema version"):
        netcdf.read_netcdf(path, "demo")


def test_truncated_file_is_refused(tmp_path):
    path = netcdf.write_netcdf(_dataset(), tmp_path / "out.nc", "demo", {})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(netcdf.NetCDFSchemaError, match="cannot be read"):
        netcdf.read_netcdf(path, "demo")


def test_garbage_file_is_refused_and_missing_file_is_not_found(tmp_path):
    path = tmp_path / "garbage.nc"
    path.write_bytes(b"this is not HDF5 at all" * 10)
    with pytest.raises(netcdf.NetCDFSchemaError):
        netcdf.read_netcdf(path)
    with pytest.raises(FileNotFoundError):
        netcdf.read_netcdf(tmp_path / "missing.nc")


def test_read_loads_into_memory(tmp_path):
    """The file handle is closed on return: the file can be replaced while the data are in use."""
    path = netcdf.write_netcdf(_dataset(), tmp_path / "out.nc", "demo", {})
    ds = netcdf.read_netcdf(path, "demo")
    path.unlink()
    assert np.all(np.isfinite(ds["positions"].values))


def test_atomic_path_removes_stale_temporaries_of_the_same_target_only(tmp_path):
    target = tmp_path / "a.nc"
    stale = tmp_path / ".a.tmp-99999.nc"  # left by a writer killed mid-write
    other = tmp_path / ".b.tmp-99999.nc"  # another target's: not ours to remove
    stale.write_bytes(b"half")
    other.write_bytes(b"half")
    with netcdf.atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".a.tmp-")
        assert not stale.exists()
        tmp.write_bytes(b"complete")
        assert not target.exists()  # nothing visible before the block completes
    assert target.read_bytes() == b"complete"
    assert other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.tmp-99999.nc", "a.nc"]


def test_atomic_path_pauses_before_the_rename_only_when_fault_injection_asks(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv(netcdf.FAULT_PAUSE_ENV, "0.3")
    start = time.perf_counter()
    with netcdf.atomic_path(tmp_path / "x.png") as tmp:
        tmp.write_bytes(b"png")
    assert time.perf_counter() - start >= 0.3
    assert (tmp_path / "x.png").read_bytes() == b"png"


def test_fit_dataset_lays_out_exactly_its_table():
    """fit.nc's layout (analyses.FIT_VARIABLES) takes one value per name: a missing and an unknown name are
    refused by name; the long names are filled with the coverage and the early time."""

    def value(dims):
        return np.zeros([{"beta": 2, "replica": 3, "bound": 2, "regime": 2, "pair": 1}[d] for d in dims])

    values = {name: value(dims) for name, (dims, _, _) in analyses.FIT_VARIABLES.items()}
    coords = {
        "beta": [10.0, 100.0],
        "replica": [0, 1, 2],
        "bound": ["start", "stop"],
        "regime": ["early", "late"],
        "pair": ["10-100"],
    }
    attrs = {"confidence": 0.9, "early_time": 1.5}
    ds = analyses.fit_dataset(values, coords, attrs)
    assert list(ds.data_vars) == list(analyses.FIT_VARIABLES)
    assert ds["C1_interval"].attrs["long_name"] == "C1, 90% Student-t interval over replicas of the mean"
    assert "t = 1.5 (NaN" in ds["early_error"].attrs["long_name"]
    assert "{" not in "".join(ds[v].attrs["long_name"].replace("e^{", "") for v in ds.data_vars)
    with pytest.raises(ValueError, match=r"no value for \['C1'\]"):
        analyses.fit_dataset({k: v for k, v in values.items() if k != "C1"}, coords, attrs)
    with pytest.raises(ValueError, match=r"no layout for \['C2'\]"):
        analyses.fit_dataset({**values, "C2": value(())}, coords, attrs)


def test_convergence_dataset_refuses_a_missing_or_unknown_variable():
    values = {name: None for name in analyses.CONVERGENCE_VARIABLES}
    sizes = dict(
        methods=["rk4"],
        steps=[0.1, 0.05],
        check_times=[1.0],
        step_replicas=1,
        tokens=[8, 16],
        replicas=2,
        times=[0.0, 1.0],
        budget_exponents=[0.5],
        betas=[100.0],
        attrs={},
    )
    with pytest.raises(ValueError, match=r"no value for \['w2_mean'\]"):
        analyses.convergence_dataset({k: v for k, v in values.items() if k != "w2_mean"}, **sizes)
    with pytest.raises(ValueError, match=r"no layout for \['w2_median'\]"):
        analyses.convergence_dataset({**values, "w2_median": None}, **sizes)


# ---------------------------------------------------------------- the content checksum


def test_the_same_dataset_is_written_to_the_same_bytes(tmp_path):
    """The checksum is added to the file in place: two writes must still be bit-for-bit equal (reruns compare so)."""
    a = netcdf.write_netcdf(_dataset(), tmp_path / "a.nc", "demo", {"x": 1})
    b = netcdf.write_netcdf(_dataset(), tmp_path / "b.nc", "demo", {"x": 1})
    assert a.read_bytes() == b.read_bytes()
    assert netcdf.read_netcdf(a).attrs[netcdf.CHECKSUM_ATTR] == netcdf.content_checksum(netcdf.read_netcdf(b))


def test_a_flipped_byte_in_the_data_is_named(tmp_path):
    """One bit of one stored float flipped, the timestamp kept: the read must refuse it, naming the checksum."""
    path = netcdf.write_netcdf(_dataset(), tmp_path / "out.nc", "demo", {})
    raw = bytearray(path.read_bytes())
    values = np.ascontiguousarray(_dataset()["positions"].values).tobytes()
    at = raw.find(values[:16])
    assert at > 0  # the values are stored contiguously: the byte flipped below is one of them
    stat = path.stat()
    raw[at + 3] ^= 0x10
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(netcdf.NetCDFSchemaError, match=r"out\.nc: its content does not match its checksum"):
        netcdf.read_netcdf(path, "demo")


def test_an_edited_attribute_is_named(tmp_path):
    path = netcdf.write_netcdf(_dataset(), tmp_path / "out.nc", "demo", {"experiment": "a"})
    with h5py.File(path, "r+") as fh:
        fh.attrs["integrator"] = "euler"
    with pytest.raises(netcdf.NetCDFSchemaError, match="does not match its checksum"):
        netcdf.read_netcdf(path)


def test_a_file_without_a_checksum_is_refused(tmp_path):
    path = netcdf.write_netcdf(_dataset(), tmp_path / "out.nc", "demo", {})
    with h5py.File(path, "r+") as fh:
        del fh.attrs[netcdf.CHECKSUM_ATTR]
    with pytest.raises(netcdf.NetCDFSchemaError, match=r"checksum \(stored None\)"):
        netcdf.read_netcdf(path)


@settings(max_examples=40, deadline=None)
@given(index=st.integers(0, 2 * 3 * 5 * 3 - 1), bit=st.integers(0, 63))
def test_any_one_bit_of_the_values_changes_the_checksum(index, bit):
    """The checksum reads every bit of every value: flipping any one (here of ``positions``) changes it."""
    ds = _dataset()
    before = netcdf.content_checksum(ds)
    flat = ds["positions"].values.reshape(-1).view(np.uint64)
    flat[index] ^= np.uint64(1) << np.uint64(bit)
    assert netcdf.content_checksum(ds) != before


def test_an_edit_that_turns_data_into_coordinates_is_named(tmp_path):
    """xarray reads the CF `coordinates` attribute into the encoding, not the attributes: the variables' roles are
    hashed, so rewriting it (which changes what a reader gets as data) fails the check."""
    ds = _dataset()
    ds["label"] = (("replica",), np.array(["a", "b"]))
    path = netcdf.write_netcdf(ds, tmp_path / "out.nc", "demo", {})
    with h5py.File(path, "r+") as fh:
        fh["positions"].attrs["coordinates"] = "label"
    with pytest.raises(netcdf.NetCDFSchemaError, match="does not match its checksum"):
        netcdf.read_netcdf(path)


def test_lists_of_strings_that_join_alike_hash_apart():
    a = xr.Dataset({"s": (("k",), np.array(["a\x1fb", "c"], dtype=object))})
    b = xr.Dataset({"s": (("k",), np.array(["a", "b\x1fc"], dtype=object))})
    assert netcdf.content_checksum(a) != netcdf.content_checksum(b)


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB tmpfs (needs the right to mount: root, as in CI); skipped where mounting is not allowed."""
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount rights)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def _big_dataset(megabytes: float) -> xr.Dataset:
    n = int(megabytes * 2**20 / 8)
    return xr.Dataset({"positions": (("token",), np.arange(n, dtype=float))})


def test_a_file_too_big_for_the_disk_is_refused_before_writing(small_disk):
    """On a 2 MiB disk a 16 MiB file is refused with ENOSPC naming the file and the room, and nothing is left
    behind (no file, no temporary)."""
    with pytest.raises(OSError, match=r"out\.nc: not enough disk space to write it: it needs about 20\.0 MiB") as err:
        netcdf.write_netcdf(_big_dataset(16), small_disk / "run" / "out.nc", "demo", {})
    assert err.value.errno == errno.ENOSPC
    assert not any(small_disk.rglob("*.nc"))


def test_the_room_check_lets_a_file_that_fits_through(tmp_path, monkeypatch):
    """The check must be able to pass: with the disk reported 1 MiB larger than the need, the write goes through;
    1 byte smaller, it is refused."""
    ds = _big_dataset(1)
    need = ds.nbytes + netcdf.FILE_OVERHEAD_BYTES
    for free, ok in ((need + 2**20, True), (need - 1, False)):
        monkeypatch.setattr(netcdf.shutil, "disk_usage", lambda _p, free=free: SimpleNamespace(free=free))
        if ok:
            netcdf.write_netcdf(ds, tmp_path / "fits.nc", "demo", {})
        else:
            with pytest.raises(OSError, match="not enough disk space"):
                netcdf.write_netcdf(ds, tmp_path / "tight.nc", "demo", {})
    assert (tmp_path / "fits.nc").exists() and not (tmp_path / "tight.nc").exists()
