"""End to end: the tiny config through Snakemake, then the output contract (README.md, "What appears in results/").

The workflow runs once per session (``completed_test_run`` in conftest.py, about a minute
on 2 cores; test_rerun.py dry-runs edits against it) in a temporary working
directory (``--directory``), so nothing is written into the repository. The
Snakefile's ``configfile: "config/config.yaml"`` is relative to that directory;
Snakemake skips a missing directive config file when ``--configfile`` is given,
so no copy of the config is needed there.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
import yaml
from conftest import SNAKEFILE, SNAKEMAKE, TEST_CONFIG, validated
from conftest import run_workflow as _run_workflow
from PIL import Image
from scipy.optimize import linear_sum_assignment

from lowtemp.config import experiment as lowtemp_experiment
from lowtemp.config import params
from lowtemp.config import plan as lowtemp_plan
from lowtemp.dynamics import fields as dynamics
from lowtemp.dynamics import integrate, meanfield, reduction
from lowtemp.model import exact, layout, matrices, measures, projection, seeding
from lowtemp.plotting import figures
from lowtemp.stages import figures as figure_stage
from lowtemp.stages import simulate as simulate_stage
from lowtemp.store import compare, netcdf

pytestmark = pytest.mark.e2e

FIGURES = lowtemp_plan.FIGURES


@pytest.fixture(scope="module")
def config() -> dict:
    with open(TEST_CONFIG) as fh:
        return validated(yaml.safe_load(fh))


@pytest.fixture(scope="module")
def results(completed_test_run) -> Path:
    return completed_test_run / "results"


def _open(path: Path) -> xr.Dataset:
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()


def _stored_inputs(results: Path, name: str):
    """The stored matrices (re-checked against Assumption 1) and initial tokens of one experiment."""
    mats = _open(results / name / "matrices.nc")
    M = matrices.check_assumption_1(mats["K"].values, mats["Q"].values, mats["V"].values)
    return M, _open(results / name / "initial_tokens.nc")["tokens"].values


def _beta_label(beta) -> str:
    return f"{float(beta):g}"


# ------------------------------------------------------------------ file contract
def test_distances_contract(results, config):
    for name, exp in config["experiments"].items():
        ds = _open(results / name / "distances.nc")
        nb, nr, nt = len(exp["betas"]), exp["replicas"], exp["time"]["snapshots"] + 1
        np.testing.assert_allclose(ds["beta"].values, sorted(float(b) for b in exp["betas"]))
        np.testing.assert_allclose(ds["time"].values, np.linspace(0, exp["time"]["horizon"], nt))
        assert ds.sizes["replica"] == nr
        for var in ("w2_projection", "w2_zero_temperature", "dist_leading_A", "dist_leading_V"):
            assert ds[var].dims == ("beta", "replica", "time"), var
            assert ds[var].shape == (nb, nr, nt)
        assert ds["w2_zero_to_projection"].dims == ("replica", "time")
        for var in (
            "w2_projection",
            "w2_zero_temperature",
            "w2_zero_to_projection",
            "dist_leading_A",
            "dist_leading_V",
        ):
            assert ds[var].dtype == np.float64, var
            assert np.all(np.isfinite(ds[var].values)), var
            assert np.all(ds[var].values >= 0) and np.all(ds[var].values <= 2.0 + 1e-12), var
        # at t = 0 every cloud is the initial cloud: finite and zero temperature coincide
        np.testing.assert_allclose(ds["w2_zero_temperature"].isel(time=0).values, 0.0, atol=1e-7)
        np.testing.assert_allclose(
            ds["w2_projection"].isel(time=0).values,
            np.broadcast_to(ds["w2_zero_to_projection"].isel(time=0).values, (nb, nr)),
            rtol=1e-10,
        )
        # W2 is bounded by the synchronous coupling stored beside it (up to the ~1e-8 rounding
        # floor of the square root of a cost computed as |x|² + |y|² − 2⟨x, y⟩)
        assert np.all(ds["w2_zero_temperature"].values <= ds["coupling_zero_temperature"].values + 1e-7)
        # every exact value carries its certified bound, within the solver's target 1e-11·W2² (0 at W2 = 0)
        w2, bound = ds["w2_zero_temperature"].values, ds["w2_zero_temperature_sq_bound"].values
        assert np.array_equal(np.isnan(w2), np.isnan(bound))
        assert np.all(bound[np.isfinite(bound)] >= 0) and np.all(
            bound[np.isfinite(w2)] <= 1e-11 * w2[np.isfinite(w2)] ** 2
        )


def test_claims_contract(results, config):
    for name, exp in config["experiments"].items():
        ds = _open(results / name / "claims.nc")
        assert list(ds.claim.values) == [
            "rate_early",
            "rate_late",
            "bound_above_data",
            "temperature_scaling",
            "metastable_log_beta",
            "conjecture_1",
        ]
        assert set(ds["status"].values.tolist()) <= {-2, -1, 0, 1}
        assert ds.sizes["beta"] == len(exp["betas"])
        fit = _open(results / name / "fit.nc")
        # one number, one place: the rate claims are about fit.nc's regime rates and intervals
        for regime in ("early", "late"):
            claim = f"rate_{regime}"
            np.testing.assert_array_equal(
                float(ds["value"].sel(claim=claim)), float(fit["c_regime_mean"].sel(regime=regime))
            )
            np.testing.assert_array_equal(
                [float(ds["interval_low"].sel(claim=claim)), float(ds["interval_high"].sel(claim=claim))],
                fit["c_regime_interval"].sel(regime=regime).values,
            )
        # every claim's line is in the log, with its status
        text = (results / name / "logs" / "claims.log").read_text()
        for line in ds["summary"].values:
            assert line in text


def _all_netcdf(results):
    files = sorted(results.rglob("*.nc"))
    assert files
    return files


def test_every_netcdf_has_schema_and_provenance(results, config):
    for path in _all_netcdf(results):
        ds = _open(path)
        assert ds.attrs["lowtemp_schema"] == netcdf.SCHEMA_VERSION, path
        prov = json.loads(ds.attrs["provenance"])
        experiment = path.relative_to(results).parts[0]
        assert prov["experiment"] == experiment
        assert prov["root_seed"] == config["root_seed"]
        # which code wrote it (lowtemp.store.version): the version from git and the full commit
        assert re.fullmatch(r"\d+\.\d+\.\d+(\+(\d+|untagged)\.g[0-9a-f]+(\.dirty)?)?", prov["version"]), prov
        assert re.fullmatch(r"[0-9a-f]{40}", prov["commit"]) and isinstance(prov["dirty"], bool), prov
        # each file records the slice of the config its stage reads (lowtemp.config.params)
        assert prov["config"] == params.stage_slice(config["experiments"][experiment], ds.attrs["lowtemp_kind"])
        netcdf.read_netcdf(path)  # the package's own reader accepts it
    assert not [p for p in results.rglob("*") if ".tmp-" in p.name]  # no leftovers of atomic writes


def test_positions_layout(results, config):
    for name, exp in config["experiments"].items():
        files = sorted((results / name / "finite_temperature").glob("*.nc"))
        assert [p.name for p in files] == sorted(f"beta{_beta_label(b)}.nc" for b in exp["betas"])
        for path in files + [results / name / "zero_temperature.nc"]:
            ds = _open(path)
            pos = ds["positions"]
            assert pos.dims == ("replica", "time", "token", "dim"), path
            assert "time" in ds.coords
            assert pos.shape == (exp["replicas"], exp["time"]["snapshots"] + 1, exp["tokens"], exp["dim"])
            np.testing.assert_allclose(np.linalg.norm(pos.values, axis=-1), 1.0, atol=1e-12)


def test_every_output_is_in_the_one_layout(results):
    """Every variable of every file has its dimensions in lowtemp.model.layout.ORDER; in particular replica before
    time before token, wherever they meet (the files are read as stored, not through the package's reader)."""
    seen = set()
    for path in _all_netcdf(results):
        for name, var in _open(path).variables.items():
            dims = var.dims
            seen.update(dims)
            assert dims == tuple(d for d in layout.ORDER if d in dims), (path, name, dims)
            at = [dims.index(d) for d in ("replica", "time", "token") if d in dims]
            assert at == sorted(at), (path, name, dims)
    assert {"beta", "replica", "time", "token", "dim", "claim", "bound"} <= seen


def test_figures_exist_and_open(results, config):
    for name, exp in config["experiments"].items():
        expected = lowtemp_plan.figures_for(exp)
        for fig in expected:
            pdf = results / name / "figures" / f"{fig}.pdf"
            png = results / name / "figures" / f"{fig}.png"
            assert pdf.stat().st_size > 0 and pdf.read_bytes()[:5] == b"%PDF-", pdf
            assert png.stat().st_size > 0, png
            img = matplotlib.image.imread(png)
            assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
        # the animation of the tokens (every experiment here is on S¹ or S²): a frame per snapshot, a panel per β
        # and one at zero temperature
        assert lowtemp_plan.animated(exp)
        with Image.open(results / name / "figures" / "tokens.gif") as gif:
            assert gif.format == "GIF" and gif.n_frames == exp["time"]["snapshots"] + 1
            assert gif.size == lowtemp_experiment.animation_size(len(exp["betas"]) + 1)


def _particle_lines(results: Path, name: str, experiment: dict, particles=True) -> list:
    """The dash-dotted lines (the particle runs) that the figure w2_projection draws for ``name``, as (x, y, colour),
    and the colour of each β's band; ``particles``: True (particle_error.nc when it exists), False, or a dataset."""
    data = {"distances": _open(results / name / "distances.nc"), "fit": _open(results / name / "fit.nc")}
    if not isinstance(particles, bool):
        data["particles"] = particles
    elif particles and (results / name / "particle_error.nc").exists():
        data["particles"] = _open(results / name / "particle_error.nc")
    fig = figures.plot_w2_projection(data, experiment)
    try:
        lines = [
            (np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float), line.get_color())
            for line in fig.axes[0].lines
            if line.get_linestyle() == "-." and len(line.get_xdata())
        ]
        bands = {line.get_label(): line.get_color() for line in fig.axes[0].lines if line.get_label().startswith("β")}
    finally:
        plt.close(fig)
    return lines, bands


def _jobs_building(results: Path, target: str) -> dict[str, int]:
    """rule -> jobs of a forced dry run of the test config that builds ``target``."""
    command = [str(SNAKEMAKE), "-s", str(SNAKEFILE), "--configfile", str(TEST_CONFIG), "--directory"]
    proc = subprocess.run([*command, str(results.parent), "-n", "--forceall", target], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M)}


def test_w2_projection_draws_the_particle_runs_beside_the_mean_field(results, config, tmp_path):
    """With particle runs beside a mean-field reference (tiny_mean_field's mean_field.particles), the figure
    w2_projection draws, per β in that β's colour, the largest N's W2 to the projected initial measure against the
    stored times, mean over replicas, as stored in particle_error.nc; the pipeline's own figure is that drawing (the
    rule hands the file through the script to the stage); an experiment without particle runs, or the figure drawn
    without the file, draws none."""
    name = "tiny_mean_field"
    exp = config["experiments"][name]
    stored = _open(results / name / "particle_error.nc")
    n = int(stored.tokens.max())
    drawn, bands = _particle_lines(results, name, exp)
    assert len(drawn) == stored.beta.size > 0
    for (x, y, colour), beta in zip(drawn, stored.beta.values):
        np.testing.assert_array_equal(x, stored.time.values)
        np.testing.assert_allclose(
            y, stored["w2_projection"].sel(beta=beta, tokens=n).mean("replica").values, rtol=1e-12
        )
        assert [c for label, c in bands.items() if label.split(" (")[0] == f"β = {beta:g}"] == [colour]
    # three replicas, one far off: the mean is drawn, not the median (two replicas cannot tell them apart)
    third = stored.isel(replica=[0]).assign_coords(replica=[stored.replica.size])
    three = xr.concat([stored, third.assign(w2_projection=3 * third["w2_projection"])], "replica")
    (_, y, _), *_ = _particle_lines(results, name, exp, particles=three)[0]
    want = three["w2_projection"].sel(beta=stored.beta.values[0], tokens=n).mean("replica").values
    np.testing.assert_allclose(y, want, rtol=1e-12)
    assert not np.allclose(y, three["w2_projection"].sel(beta=stored.beta.values[0], tokens=n).median("replica"))
    assert _particle_lines(results, name, exp, particles=False)[0] == []
    assert _particle_lines(results, "tiny", config["experiments"]["tiny"])[0] == []
    # the pipeline's PNG is the drawing with the particle runs, not the one without
    pipeline = matplotlib.image.imread(results / name / "figures" / "w2_projection.png")
    for with_particles in (True, False):
        png = tmp_path / f"particles_{with_particles}.png"
        figure_stage.stage_figure(
            "w2_projection",
            name,
            exp,
            matrices_path=results / name / "matrices.nc",
            distances_path=results / name / "distances.nc",
            fit_path=results / name / "fit.nc",
            zero_path=results / name / "zero_temperature.nc",
            finite_paths=[],
            pdf=tmp_path / "f.pdf",
            png=png,
            particles_path=results / name / "particle_error.nc" if with_particles else None,
        )
        drawn_png = matplotlib.image.imread(png)
        assert (drawn_png.shape == pipeline.shape and np.array_equal(drawn_png, pipeline)) == with_particles
    assert "particle_error" in _jobs_building(results, f"results/{name}/figures/w2_projection.png")
    assert "particle_error" not in _jobs_building(results, f"results/{name}/figures/collapse.png")


def _phase_panels(dist, fit, experiment: dict):
    """What the phase figure draws: the arrays of its two panels (one QuadMesh each), the left panel's row labels
    (bottom to top) and its departure marks as (time, row)."""
    fig = figures.plot_phase({"distances": dist, "fit": fit}, experiment)
    try:
        drawn = [np.ma.filled(ax.collections[0].get_array().astype(float), np.nan) for ax in fig.axes[:2]]
        labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        marks = [
            (x, y)
            for line in fig.axes[0].lines
            for x, y in zip(np.atleast_1d(line.get_xdata()), np.atleast_1d(line.get_ydata()))
        ]
    finally:
        plt.close(fig)
    return drawn, labels, sorted(marks)


@pytest.mark.parametrize("name, shuffled", [("tiny", False), ("tiny", True), ("tiny_circle", False)])
def test_phase_figure_draws_the_stored_distances(results, config, name, shuffled):
    """The (β, t) picture shows distances.nc's replica means, one row per β from the smallest up and zero
    temperature on top (an independent mean over replicas, rows labelled with their β, also when the files list β
    in another order), and every replica's departure from fit.nc on its β's row: departed replicas at their time,
    censored ones at the horizon (departures set by hand where the tiny run has none)."""
    dist, fit = _open(results / name / "distances.nc"), _open(results / name / "fit.nc")
    if shuffled:  # the files' β in decreasing order: the picture must not change
        dist, fit = dist.isel(beta=slice(None, None, -1)), fit.isel(beta=slice(None, None, -1))
    horizon = float(dist.time.values[-1])
    dims = fit["departure_time"].dims
    dep = np.linspace(0.5, 0.5 * horizon, fit["departure_time"].size).reshape(fit["departure_time"].shape)
    cens = np.zeros(dep.shape, bool)
    cens.flat[0], dep.flat[0], dep.flat[-1] = True, np.nan, np.nan  # one censored, one that never arrived
    fit = fit.assign(departure_time=(dims, dep), departure_censored=(dims, cens))
    drawn, labels, marks = _phase_panels(dist, fit, config["experiments"][name])
    betas = np.sort(dist.beta.values)
    for var, shown in zip(("dist_leading_A", "dist_leading_V"), drawn):
        rows = [dist[var].sel(beta=b).mean("replica").values for b in betas]
        expected = np.stack([*rows, dist[f"{var}_zero_temperature"].mean("replica").values])
        np.testing.assert_allclose(shown.reshape(expected.shape), expected, rtol=1e-12, equal_nan=True)
        # rows in another order would be another picture: the check can fail
        assert not np.allclose(shown.reshape(expected.shape), expected[::-1], equal_nan=True)
    assert [label.split(" (")[0] for label in labels] == [f"β = {b:g}" for b in betas] + ["β = ∞"]
    by_beta = fit[["departure_time", "departure_censored"]].transpose("beta", "replica")
    expected_marks = []
    for row, b in enumerate(betas):
        d, c = by_beta["departure_time"].sel(beta=b).values, by_beta["departure_censored"].sel(beta=b).values
        expected_marks += [(t, row) for t in d[np.isfinite(d) & ~c]] + [(horizon, row)] * int(c.sum())
    assert marks == sorted(expected_marks)


def test_every_rule_has_a_log(results, config):
    for name, exp in config["experiments"].items():
        logs = results / name / "logs"
        labels = [_beta_label(b) for b in exp["betas"]]
        figs = lowtemp_plan.figures_for(exp)
        expected = (
            ["matrices", "initial_tokens", "zero_temperature", "distances", "fit", "claims"]
            + [f"finite_temperature_beta{b}" for b in labels]
            + [f"distances_beta{b}" for b in labels]
            + [f"figure_{f}" for f in figs]
            + (["animation"] if lowtemp_plan.animated(exp) else [])
            + (
                [f"particle_error_beta{b}" for b in labels] + ["particle_error"]
                if "particles" in exp["mean_field"]
                else []
            )
        )
        for stem in expected:
            assert (logs / f"{stem}.log").is_file(), stem
        # the computing stages write their progress there (the figure rules may stay silent)
        for stem in expected:
            if not stem.startswith("figure_") and stem != "animation":
                assert "INFO" in (logs / f"{stem}.log").read_text(), stem


# ------------------------------------------------------------------ numbers recomputed from stored inputs
def _lsa_w2(X, Y):
    C = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)
    r, c = linear_sum_assignment(C)
    return np.sqrt(np.mean(C[r, c]))


@pytest.mark.parametrize("name", ["tiny", "tiny_circle", "tiny_mean_field"])
def test_stored_inputs_are_reproducible_from_the_seed(results, config, name):
    exp = config["experiments"][name]
    seed = config["root_seed"]
    mats = _open(results / name / "matrices.nc")
    params = dict(exp["matrices"])
    family = params.pop("family")
    M = matrices.generate_matrices(family, exp["dim"], seeding.generator(seed, name, "matrices"), **params)
    for key in ("K", "Q", "V"):
        np.testing.assert_array_equal(mats[key].values, getattr(M, key))
    np.testing.assert_allclose(mats["B"].values, mats["Q"].values.T @ mats["K"].values, atol=1e-14)
    assert float(mats["gamma"]) == pytest.approx(M.gamma)
    assert (float(mats["rate_lower"]), float(mats["rate_upper"])) == pytest.approx(M.rate_bounds)
    tok = _open(results / name / "initial_tokens.nc")
    im = dict(exp["initial_measure"])
    X0 = measures.sample_initial_tokens(
        im.pop("name"),
        seeding.generator(seed, name, "initial_tokens"),
        exp["replicas"],
        exp["tokens"],
        exp["dim"],
        **im,
    )
    np.testing.assert_array_equal(tok["tokens"].values, X0)
    fit = _open(results / name / "fit.nc")
    assert (float(fit["rate_lower"]), float(fit["rate_upper"])) == pytest.approx(M.rate_bounds)


@pytest.mark.parametrize("name", ["tiny", "tiny_circle"])
def test_simulations_recomputed_from_stored_inputs(results, config, name):
    exp = config["experiments"][name]
    M, X0 = _stored_inputs(results, name)
    zero = _open(results / name / "zero_temperature.nc")
    times = zero["time"].values
    # zero temperature: against the exact time-changed solution, computed here
    ref = exact.exact_zero_temperature(X0, M.A, M.B, times)
    assert np.max(np.abs(zero["positions"].values - ref)) < 1e-5
    # finite temperature: the stored run is the particle system at its β from the stored X0
    grid = integrate.TimeGrid(exp["time"]["horizon"], exp["time"]["snapshots"], exp["time"]["dt"])
    beta = float(exp["betas"][0])
    fin = _open(results / name / "finite_temperature" / f"beta{_beta_label(beta)}.nc")
    assert float(fin["beta"]) == beta
    sim = integrate.simulate(lambda X: dynamics.attention_field(X, M.B, M.V, beta), X0, grid, exp["integrator"])
    np.testing.assert_allclose(fin["positions"].values, sim, atol=1e-10)


def test_mean_field_experiment_is_the_references_push_forward(results, config):
    """model: mean_field: the stored tokens are meanfield.solve's push-forward of the stored initial tokens (solved
    here again at the config's cells), on the circle; the error estimate is the distance to the solution at twice the
    width; there is no ESS; fit.nc holds the reference's error ratios; no particle system was run."""
    name = "tiny_mean_field"
    exp = config["experiments"][name]
    M, X0 = _stored_inputs(results, name)
    red = reduction.reduce(M.B, M.V)
    for b in exp["betas"]:
        fin = _open(results / name / "finite_temperature" / f"beta{_beta_label(b)}.nc")
        times = fin["time"].values
        sols = [
            meanfield.solve(
                red,
                float(b),
                times,
                width=w,
                depth=exp["mean_field"]["depth"],
                rtol=simulate_stage.MEAN_FIELD_RTOL,
                atol=simulate_stage.MEAN_FIELD_ATOL,
            ).push_forward(X0)
            for w in (exp["mean_field"]["width"], 2 * exp["mean_field"]["width"])
        ]
        np.testing.assert_allclose(fin["positions"].values, sols[0], atol=1e-12)
        err = np.sqrt(np.mean(np.sum((sols[0] - sols[1]) ** 2, axis=-1), axis=-1))
        np.testing.assert_allclose(fin["reference_error"].values, err, atol=1e-12)
        assert fin.attrs["model"] == "mean_field" and np.all(np.isnan(fin["ess_median"].values))
        # a particle run from the same tokens is a different cloud (the reference is not a particle system)
        particles = integrate.simulate(
            lambda X, b=b: dynamics.attention_field(X, M.B, M.V, float(b)),
            X0,
            integrate.TimeGrid(exp["time"]["horizon"], exp["time"]["snapshots"], exp["time"]["dt"]),
        )
        assert np.max(np.abs(particles[:, -1] - fin["positions"].values[:, -1])) > 1e-3
    fit = _open(results / name / "fit.nc")
    for key in ("reference_error_early", "reference_error_to_departure", "reference_departure_shift"):
        assert key in fit and np.all(fit[key].values >= 0), key
    dist = _open(results / name / "distances.nc")
    assert "reference_error" in dist and "reference_error" not in _open(results / "tiny" / "distances.nc")


def test_particle_error_recomputed_from_stored_inputs(results, config):
    """tiny_mean_field's particle_error.nc (mean_field.particles): at every β and N, the particle system from the
    first N stored initial tokens of each replica (integrated here with the numpy reference field and the
    experiment's integrator) against the first N tokens of the stored reference (its push-forward of the same
    tokens), W2 by linear_sum_assignment; the reference's own error estimate beside it, as stored with the reference.
    Only that experiment has one."""
    name = "tiny_mean_field"
    exp = config["experiments"][name]
    M, X0 = _stored_inputs(results, name)
    ds = _open(results / name / "particle_error.nc")
    assert ds["particle_error"].dims == ("beta", "tokens", "replica", "time")
    assert ds["reference_error"].dims == ("beta", "replica", "time")
    assert ds["tokens"].values.tolist() == exp["mean_field"]["particles"]["tokens"]
    grid = integrate.TimeGrid(exp["time"]["horizon"], exp["time"]["snapshots"], exp["time"]["dt"])
    for b in exp["betas"]:
        fin = _open(results / name / "finite_temperature" / f"beta{_beta_label(b)}.nc")
        row = ds.sel(beta=float(b))
        np.testing.assert_array_equal(row["reference_error"].values, fin["reference_error"].values)
        for n in row["tokens"].values:
            X = integrate.simulate(
                lambda Y, b=b: dynamics.attention_field(Y, M.B, M.V, float(b)),
                np.ascontiguousarray(X0[:, :n]),
                grid,
                exp["integrator"],
            )
            P = fin["positions"].values[:, :, :n]
            stored = row["particle_error"].sel(tokens=n).values
            for r in range(exp["replicas"]):
                for k in range(0, grid.times.size, 3):
                    assert stored[r, k] == pytest.approx(_lsa_w2(X[r, k], P[r, k]), rel=1e-7, abs=1e-8), (b, n, r, k)
    assert not [p for p in results.glob("*/particle_error.nc") if p.parent.name != name]


@pytest.mark.parametrize("name", ["tiny", "tiny_circle", "tiny_mean_field"])
def test_distances_recomputed_from_stored_positions(results, config, name):
    exp = config["experiments"][name]
    M, X0 = _stored_inputs(results, name)
    Z = _open(results / name / "zero_temperature.nc")["positions"].values
    ds = _open(results / name / "distances.nc")
    r = 0
    target = projection.projection_map(X0[r], M.E1)  # Π(x0_i), one atom per initial token
    for k in range(0, Z.shape[1], 5):
        assert ds["w2_zero_to_projection"].values[r, k] == pytest.approx(_lsa_w2(Z[r, k], target), rel=1e-8, abs=1e-8)
    for b in exp["betas"]:
        Y = _open(results / name / "finite_temperature" / f"beta{_beta_label(b)}.nc")["positions"].values
        row = ds.sel(beta=float(b))
        for k in range(0, Y.shape[1], 5):
            assert row["w2_projection"].values[r, k] == pytest.approx(_lsa_w2(Y[r, k], target), rel=1e-8, abs=1e-8)
            assert row["w2_zero_temperature"].values[r, k] == pytest.approx(
                _lsa_w2(Y[r, k], Z[r, k]), rel=1e-8, abs=1e-7
            )
            for var, E in (("dist_leading_A", M.E1), ("dist_leading_V", M.E1_V_real)):
                d = np.sqrt(np.mean([np.sum((x - E @ E.T @ x / np.linalg.norm(E @ E.T @ x)) ** 2) for x in Y[r, k]]))
                assert row[var].values[r, k] == pytest.approx(d, rel=1e-8, abs=1e-7), var


def test_zero_temperature_log_reports_progress_and_error(results):
    text = (results / "tiny" / "logs" / "zero_temperature.log").read_text()
    assert "t = 6.000 / 6.000" in text
    assert "max deviation from the exact solution" in text


# ------------------------------------------------------------------ determinism
def test_second_run_from_scratch_on_one_core_gives_identical_values(results, tmp_path):
    """Same config, another directory, --cores 1 instead of 2 (the finite-temperature jobs get one
    thread instead of two): every NetCDF value and provenance is bit for bit the same."""
    _run_workflow(tmp_path / "again", cores=1)
    problems = compare.compare_results(results, tmp_path / "again" / "results")
    assert not problems, problems
    assert len(compare.netcdf_files(results)) >= 2 * 7


# ------------------------------------------------------------------ report
def test_snakemake_report_holds_every_figure(results):
    """The Snakemake report of the finished run builds and embeds every figure with its caption."""
    work = results.parent
    report = work / "report.html"
    proc = subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(SNAKEFILE),
            "--directory",
            str(work),
            "--configfile",
            str(TEST_CONFIG),
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = report.read_text(errors="replace")
    for fig in FIGURES:
        assert f"{fig}.png" in html, fig
    assert "tokens.gif" in html
    assert "data collapse" in html.lower()
