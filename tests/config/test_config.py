"""Config validation: the JSON schema (defaults, named errors), the pipeline's own checks,
and the Snakemake CLI refusing a bad config before any job runs."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess

import numpy as np
import pytest
import yaml
from conftest import ROOT, SCHEMA, SNAKEFILE, SNAKEMAKE, TEST_CONFIG, validated

from lowtemp.config import schema, validation
from lowtemp.model import matrices


def _both(*mutations):
    def mutate(cfg):
        for m in mutations:
            m(cfg)

    return mutate


def _set(path, value):
    def mutate(cfg):
        node = cfg
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def _delete(path):
    def mutate(cfg):
        node = cfg
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (_set(["bogus_top_level"], 1), ["bogus_top_level"]),
        (_set(["experiments", "tiny", "tokenz"], 64), ["tokenz"]),
        (_set(["experiments", "tiny", "tokens"], "many"), ["tokens", "'many'", "integer"]),
        (_set(["experiments", "tiny", "tokens"], 64.5), ["tokens", "64.5"]),
        (_set(["experiments", "tiny", "betas"], [5, -1]), ["betas", "-1"]),
        (_set(["experiments", "tiny", "betas"], [0]), ["betas"]),
        (_set(["experiments", "tiny", "dim"], 0), ["dim", "0"]),
        (_set(["experiments", "tiny", "matrices", "family"], "hilbert"), ["family", "'hilbert'"]),
        (_set(["experiments", "tiny", "matrices", "sigma_mn"], 0.8), ["sigma_mn"]),
        (_delete(["experiments", "tiny", "time", "horizon"]), ["'horizon' is a required property"]),
        (_set(["experiments", "tiny", "time", "dt"], -0.1), ["dt", "-0.1"]),
        (_set(["experiments", "tiny", "integrator"], "leapfrog"), ["integrator", "'leapfrog'"]),
        (_set(["experiments", "tiny", "initial_measure"], {"name": "vmf_mixture"}), ["'kappas' is a required"]),
        (_set(["root_seed"], -3), ["root_seed", "-3"]),
        (_set(["experiments", "tiny", "tokens"], 64.0), ["tokens", "64.0", "integer"]),
        (_set(["experiments", "tiny\n"], {}), ["config key experiments:", "'tiny\\n' does not match"]),
        (_set(["experiments", "a" * 65], {}), ["config key experiments:", "is too long"]),
    ],
    ids=[
        "top-level-key",
        "experiment-key",
        "tokens-type",
        "tokens-float",
        "negative-beta",
        "zero-beta",
        "zero-dim",
        "unknown-family",
        "matrices-key",
        "missing-horizon",
        "negative-dt",
        "integrator",
        "vmf-needs-kappas",
        "negative-seed",
        "tokens-integral-float",
        "name-with-final-newline",
        "name-too-long",
    ],
)
def test_schema_violation_names_the_key(test_config, mutate, expected):
    mutate(test_config)
    with pytest.raises(validation.ConfigError) as info:
        schema.check_schema(test_config, SCHEMA)
    message = str(info.value)
    for fragment in expected:
        assert fragment in message, (fragment, message[:500])


@pytest.mark.parametrize(
    "name",
    [
        "tiny",
        "E",
        "a" * 64,
        "b-2_c",
        "x\ny",
        "tiny\n",
        "tiny\r",
        " tiny",
        "tiny ",
        "9lives",
        "a/b",
        "a.b",
        "",
        "a" * 65,
        "tinÿ",
    ],
)
def test_experiment_names_are_folder_names(test_config, name):
    """A name is the folder results/<name>/: a letter, then letters, digits, _ or -, at most 64 characters,
    and nothing after (Python's $ would match before a final newline)."""
    test_config["experiments"] = {name: test_config["experiments"]["tiny"]}
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,63}", name):
        schema.check_schema(test_config, SCHEMA)
    else:
        with pytest.raises(validation.ConfigError, match=r"^config key experiments: "):
            schema.check_schema(test_config, SCHEMA)


def test_schema_fills_defaults(test_config):
    exp = test_config["experiments"]["tiny"]
    exp["time"] = {"horizon": 5.0}
    for key in ("integrator", "ess_threshold", "fit", "figures", "initial_measure"):
        exp.pop(key, None)
    test_config.pop("root_seed")
    validated(test_config)
    assert test_config["root_seed"] == 20260530
    assert exp["integrator"] == "dopri5"
    assert exp["time"] == {"horizon": 5.0, "dt": 0.05, "snapshots": 80}
    assert exp["ess_threshold"] == 30
    assert exp["fit"] == {
        "max_residual": 0.05,
        "min_points": 5,
        "saturation": 0.5,
        "confidence": 0.95,
        "calibration_betas": 1,
        "early_time": 1.0,
        "particle_error_fraction": 0.25,
    }
    assert exp["claims"] == {"bound_fraction": 0.9, "end_phase_tolerance": 0.1, "rate_tolerance": 0.15}
    assert exp["initial_measure"] == {"name": "uniform"}
    assert exp["figures"] == {}
    # each experiment gets its own copy of a default, not the one dict of the schema shared by all
    other = test_config["experiments"]["tiny_circle"]
    assert other["fit"] == exp["fit"] and other["fit"] is not exp["fit"]
    assert other["distances"] is not exp["distances"]


def test_test_config_is_valid_and_consistent(test_config):
    validated(test_config)
    for name, exp in test_config["experiments"].items():
        M = validation.validate_experiment(name, exp, test_config["root_seed"])
        assert isinstance(M, matrices.AttentionMatrices)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (_set(["betas"], [5, 50, 5.0]), r"experiments\.tiny\.betas has duplicate"),
        (_set(["time"], {"horizon": 1.0, "dt": 2.0, "snapshots": 4}), r"experiments\.tiny\.time\.dt"),
        (_set(["matrices", "eigenvalues"], [1.5, 0.5]), r"experiments\.tiny\.matrices\.eigenvalues must have length"),
        (_set(["figures"], {"snapshot_times": [0.0, 7.0]}), r"experiments\.tiny\.figures\.snapshot_times"),
        (
            _set(["initial_measure"], {"name": "projected_gaussian", "mean": [1, 0], "scale": 1.0}),
            r"experiments\.tiny\.initial_measure\.mean",
        ),
        (
            _set(["initial_measure"], {"name": "vmf_mixture", "kappas": [1.0, 2.0], "means": [[1, 0, 0]]}),
            r"experiments\.tiny\.initial_measure\.means",
        ),
        (
            _set(
                ["matrices"],
                {"family": "explicit", "K": [[1, 0], [0, 1]], "Q": [[1, 0], [0, 1]], "V": [[2, 0], [0, 1]]},
            ),
            r"experiments\.tiny\.matrices\.K must be a 3x3",
        ),
        (
            _set(
                ["matrices"], {"family": "spectral", "eigenvalues": [1, 0.5, 0.2], "sigma_min": 2.0, "sigma_max": 1.0}
            ),
            r"experiments\.tiny\.matrices: need 0 < sigma_min",
        ),
        # tiny's random d = 3 matrices have no axis of symmetry: the S² mesh solves it, with a density to carry
        (
            _both(
                _set(["model"], "mean_field"),
                _set(["initial_measure"], {"name": "cap", "center": [1, 0, 0], "angle": 30, "positive_density": False}),
            ),
            r"experiments\.tiny\.mean_field: S² mean field: initial measure 'cap' has no positive smooth density",
        ),
        # ... and icosphere levels that resolve every β: level 3's error estimate (level 2) cannot at β = 5000
        (
            _both(_set(["model"], "mean_field"), _set(["mean_field"], {"level": 3}), _set(["betas"], [5, 5000])),
            r"experiments\.tiny\.mean_field: .*beta = 5000 the error estimate's level 2 \(one below level 3\) is too",
        ),
        (
            _both(_set(["model"], "mean_field"), _set(["mean_field"], {"max_triangles": 1000})),
            r"experiments\.tiny\.mean_field: at beta = 5 the reference starts on icosphere level 3 \(1280 triangles\)",
        ),
        # B invertible for Assumption 1 at a condition of 1e12, not for the S² softmax's centre Bᵀx/|Bᵀx| (1e8)
        (
            _both(
                _set(["model"], "mean_field"),
                _set(
                    ["matrices"],
                    {
                        "family": "explicit",
                        "K": [[1, 0, 0], [0, 1, 0], [0, 0, 1e-9]],
                        "Q": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
                        "V": [[2, 0, 0], [0, 1, 0], [0, 0, 0.5]],
                        "max_condition_B": 1e12,
                    },
                ),
            ),
            r"experiments\.tiny\.matrices: the S² mean field needs B well invertible .*1e-09\]",
        ),
        (
            _both(_set(["model"], "mean_field"), _set(["betas"], [5, 1e6])),
            r"experiments\.tiny\.mean_field: .*no icosphere level up to 6 resolves beta = 1e\+06",
        ),
    ],
)
def test_validate_experiment_raises_config_error(test_config, mutate, match):
    exp = test_config["experiments"]["tiny"]
    mutate(exp)
    validated(test_config)  # the schema accepts it; only the pipeline's checks can catch it
    with pytest.raises(validation.ConfigError, match=match):
        validation.validate_experiment("tiny", exp, test_config["root_seed"])


def test_sphere_mean_field_is_accepted_and_level_belongs_to_it(test_config):
    """d = 3 without symmetry is the S² mesh's (vMF means drawn as the initial tokens draw them); mean_field.level
    is the mesh's key, refused on the circle; d = 4 has no mean-field solver."""
    exp = test_config["experiments"]["tiny"]
    exp.update(model="mean_field", initial_measure={"name": "vmf_mixture", "kappas": [2.0, 1.0]})
    validated(test_config)
    validation.validate_experiment("tiny", exp, test_config["root_seed"])
    circle = test_config["experiments"]["tiny_mean_field"]
    circle["mean_field"]["level"] = 3
    validated(test_config)
    with pytest.raises(validation.ConfigError, match=r"tiny_mean_field\.mean_field\.level: the S² mesh's level"):
        validation.validate_experiment("tiny_mean_field", circle, test_config["root_seed"])
    four = {
        "dim": 4,
        "model": "mean_field",
        "tokens": 8,
        "replicas": 1,
        "betas": [5],
        "matrices": {"family": "spectral", "eigenvalues": [1.5, 0.5, 0.3, 0.2], "sigma_min": 0.8, "sigma_max": 1.2},
        "time": {"horizon": 1.0, "dt": 0.1, "snapshots": 2},
    }
    cfg = validated({"root_seed": 1, "experiments": {"four": four}})
    with pytest.raises(
        validation.ConfigError, match=r"four\.model: mean_field needs .* no one-dimensional reduction in d = 4"
    ):
        validation.validate_experiment("four", cfg["experiments"]["four"], 1)


def test_streams_share_matrices_and_initial_tokens(test_config, tmp_path):
    """Two experiments with the same streams, matrices block, measure, replicas and tokens hold the same K, Q, V and
    initial tokens; without it (other names) they differ."""
    from lowtemp.stages import initial_tokens
    from lowtemp.stages import matrices as matrices_stage
    from lowtemp.store import datasets

    base = validated(test_config)["experiments"]["tiny"]
    out = {}
    for name, streams in (("tiny", None), ("twin", "tiny"), ("other", None)):
        exp = copy.deepcopy(base)
        if streams:
            exp["streams"] = streams
        matrices_stage.stage_matrices(name, exp, 7, output=tmp_path / f"{name}_m.nc")
        initial_tokens.stage_initial_tokens(name, exp, 7, tmp_path / f"{name}_m.nc", output=tmp_path / f"{name}_x.nc")
        out[name] = datasets.load_inputs(tmp_path / f"{name}_m.nc", tmp_path / f"{name}_x.nc")
    (M, X), (M2, X2), (M3, X3) = out["tiny"], out["twin"], out["other"]
    assert np.array_equal(M.B, M2.B) and np.array_equal(M.V, M2.V) and np.array_equal(X, X2)
    assert not np.allclose(M.B, M3.B) and not np.allclose(X, X3)


@pytest.mark.parametrize("weights", [[0.5, 0.3, 0.2], [0.9, 0.9]], ids=["wrong-length", "not-summing-to-1"])
def test_validate_experiment_rejects_bad_vmf_weights(test_config, weights):
    """Mixture weights that the sampler will refuse must be caught at config time, naming the key,
    not only when the initial_tokens job runs."""
    exp = test_config["experiments"]["tiny"]
    exp["initial_measure"] = {"name": "vmf_mixture", "kappas": [1.0, 2.0], "weights": weights}
    validated(test_config)
    with pytest.raises(validation.ConfigError, match=r"experiments\.tiny\.initial_measure\.weights"):
        validation.validate_experiment("tiny", exp, test_config["root_seed"])


def test_validate_experiment_reports_assumption_violation_with_location(test_config):
    exp = test_config["experiments"]["tiny"]
    exp["matrices"] = {
        "family": "explicit",
        "K": [[1, 0, 0], [0, 1, 0], [0, 0, 0]],
        "Q": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
        "V": [[2, 0, 0], [0, 1, 0], [0, 0, 1]],
    }
    validated(test_config)
    with pytest.raises(matrices.AssumptionViolation, match=r"experiments\.tiny\.matrices: .*singular"):
        validation.validate_experiment("tiny", exp, test_config["root_seed"])


# ------------------------------------------------------------------ through the Snakemake CLI
@pytest.mark.parametrize(
    "mutate, expected",
    [
        (_set(["experiments", "tiny", "tokenz"], 64), "tokenz"),
        (_set(["experiments", "tiny", "betas"], [5, 5]), "experiments.tiny.betas"),
        (
            _set(
                ["experiments", "tiny", "matrices"],
                {
                    "family": "explicit",
                    "K": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
                    "Q": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
                    "V": [[2, 0, 0], [0, 2, 0], [0, 0, 2]],
                },
            ),
            "no spectral gap",
        ),
    ],
    ids=["schema", "pipeline-check", "assumption-1"],
)
def test_snakemake_refuses_bad_config_before_running(tmp_path, test_config, mutate, expected):
    mutate(test_config)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(test_config))
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(SNAKEFILE),
            "--directory",
            str(work),
            "--configfile",
            str(bad),
            "--cores",
            "1",
            "-n",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr
    assert not (work / "results").exists()


def test_configfile_option_runs_only_the_given_experiments(tmp_path):
    """`snakemake --configfile config/test.yaml` from a directory holding the default
    config/config.yaml must plan the test config's experiments only. (Snakemake merges the
    Snakefile's `configfile:` with --configfile, so the default experiments would be added.)"""
    default = ROOT / "config" / "config.yaml"
    (tmp_path / "config").mkdir()
    shutil.copy(default, tmp_path / "config" / "config.yaml")
    proc = subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(SNAKEFILE),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(TEST_CONFIG),
            "--cores",
            "1",
            "-n",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = set(re.findall(r"results/([A-Za-z0-9_-]+)/matrices\.nc", proc.stdout + proc.stderr))
    with open(TEST_CONFIG) as fh:
        wanted = set(yaml.safe_load(fh)["experiments"])
    assert planned == wanted


def _schema_keys(node, out):
    """Every property name the schema defines, at any depth."""
    if isinstance(node, dict):
        for key, sub in node.get("properties", {}).items():
            out.add(key)
            _schema_keys(sub, out)
        for value in node.values():
            if isinstance(value, (dict, list)):
                _schema_keys(value, out)
    elif isinstance(node, list):
        for item in node:
            _schema_keys(item, out)
    return out


def test_overrides_merge_into_valid_configs():
    """config/overrides/*.yaml are merged over a shipped config (as Snakemake merges --configfile files):
    paper_scale_beta1000 leaves the paper-scale experiment with beta = 1000 alone and valid; alone, an
    override is no config (no root seed), so it cannot be run by mistake on its own."""
    est = _estimate_cost()
    with open(ROOT / "config" / "paper_scale.yaml") as fh:
        base = yaml.safe_load(fh)
    with open(ROOT / "config" / "overrides" / "paper_scale_beta1000.yaml") as fh:
        override = yaml.safe_load(fh)
    cfg = validated(est.merged(base, override))
    assert cfg["experiments"]["paper_scale"]["betas"] == [1000]
    assert cfg["experiments"]["paper_scale"]["tokens"] == base["experiments"]["paper_scale"]["tokens"]
    assert "root_seed" not in override


def test_shipped_configs_validate_and_every_schema_key_is_documented():
    """config/*.yaml (and the overrides) pass the project's loader (no duplicate keys, no aliases), the schema,
    the finiteness and integer-range walk and the semantic checks; config/README.md names every schema key."""
    paths = sorted((ROOT / "config").glob("*.yaml"))
    assert len(paths) >= 4
    for path in sorted((ROOT / "config" / "overrides").glob("*.yaml")):
        schema.check_numbers(schema.load_config_file(path))
    for path in paths:
        cfg = validated(schema.load_config_file(path))
        schema.check_numbers(cfg)
        for name, exp in cfg["experiments"].items():
            validation.validate_experiment(name, exp, cfg["root_seed"])
    with open(ROOT / "workflow" / "schemas" / "config.schema.yaml") as fh:
        keys = _schema_keys(yaml.safe_load(fh), set())
    doc = (ROOT / "config" / "README.md").read_text()
    missing = sorted(k for k in keys if f"`{k}`" not in doc)
    assert not missing, f"config/README.md does not document: {missing}"


def _estimate_cost():
    import importlib.util

    spec = importlib.util.spec_from_file_location("estimate_cost", ROOT / "reports" / "estimate_cost.py")
    est = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(est)
    return est


def test_estimate_cost_sets_measured_jobs_against_their_estimates(tmp_path, capsys):
    """--measured reads Snakemake's benchmark files: the job that has one gets its seconds, peak memory and
    the ratios to the estimate (computed here from the printed estimate); a job without one gets none."""
    est = _estimate_cost()
    bench = tmp_path / "tiny" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "finite_temperature_beta5.tsv").write_text("s\th:m:s\tmax_rss\tmax_vms\n12.5\t0:00:12\t512.0\t900\n")
    (bench / "distances_beta50.tsv").write_text("s\th:m:s\tmax_rss\tmax_vms\n3.0\t0:00:03\t256.0\t900\n")
    rows = est.main([str(ROOT / "config" / "test.yaml"), "--measured", str(tmp_path)])
    lines = {tuple(line.split()[:3]): line.split() for line in capsys.readouterr().out.splitlines()}
    ft = lines[("tiny", "finite_temperature", "5")]
    e = next(e for n, s, b, e in rows if (n, s, b) == ("tiny", "finite_temperature", 5))
    assert float(ft[6]) == 12.5 or ft[6] == "12"  # printed to whole seconds
    assert abs(float(ft[7]) - 12.5 / e.compute_seconds) <= 0.01 * 12.5 / e.compute_seconds + 0.005
    assert float(ft[8]) == 0.5 and abs(float(ft[9]) - 0.5 / (e.mem_mb / 1024)) < 0.01
    assert len(lines[("tiny", "distances_beta", "50")]) == 10
    assert len(lines[("tiny", "distances_beta", "5")]) == 6  # no benchmark file: estimate only


def test_a_mean_field_experiment_is_checked_before_any_work(test_config):
    """tiny_mean_field (the circle) validates; with a particle-number study it is refused naming the key. With
    explicit axisymmetric 3×3 matrices and uniform tokens it validates too (the d = 3 reduction), and with a mean
    off the axis (the S² mesh), unless a mesh level too coarse for a β is asked for."""
    exp = test_config["experiments"]["tiny_mean_field"]
    validated(test_config)
    validation.validate_experiment("tiny_mean_field", exp, test_config["root_seed"])
    bad = dict(exp, convergence={})
    with pytest.raises(validation.ConfigError, match=r"tiny_mean_field\.convergence: a model: mean_field"):
        validation.validate_experiment("tiny_mean_field", bad, test_config["root_seed"])
    axis = {
        "family": "explicit",
        "K": [[2, 0, 0], [0, 1, 0], [0, 0, 1]],
        "Q": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
        "V": [[1.5, 0, 0], [0, 1, 0], [0, 0, 1]],
    }
    sphere = dict(exp, dim=3, matrices=axis, initial_measure={"name": "uniform"})
    validation.validate_experiment("tiny_mean_field", sphere, test_config["root_seed"])
    # a mean off the axis breaks the symmetry: the S² mesh takes it, at levels that resolve every β
    tilted = dict(sphere, initial_measure={"name": "vmf_mixture", "kappas": [2.0], "means": [[0, 1, 0]]})
    validation.validate_experiment("tiny_mean_field", tilted, test_config["root_seed"])
    # level 3's error estimate, level 2, is beyond the softmax's halvings at β = 5000 (it takes level 2 at β = 100)
    validation.validate_experiment("tiny_mean_field", dict(tilted, mean_field={**tilted["mean_field"], "level": 3}), 1)
    coarse = dict(tilted, betas=[5, 5000], mean_field={**tilted["mean_field"], "level": 3})
    with pytest.raises(validation.ConfigError, match=r"tiny_mean_field\.mean_field: .*beta = 5000 the error estimate"):
        validation.validate_experiment("tiny_mean_field", coarse, test_config["root_seed"])
    # a level per β: its length must be that of betas
    per_beta = dict(tilted, betas=[5, 100], mean_field={**tilted["mean_field"], "level": [3, 4]})
    validation.validate_experiment("tiny_mean_field", per_beta, test_config["root_seed"])
    short = dict(tilted, betas=[5, 100], mean_field={**tilted["mean_field"], "level": [3]})
    with pytest.raises(validation.ConfigError, match=r"tiny_mean_field\.mean_field: .*one level per beta"):
        validation.validate_experiment("tiny_mean_field", short, test_config["root_seed"])
    # cells float64 cannot carry (the narrowest graded cell 2·width·depth below 64 ulp of 2π), or a depth not below
    # the width (at the error estimate's twice the width too): named before any job
    for cells, match in (
        ({"width": 0.01, "depth": 1e-13}, "narrowest graded cell"),
        ({"width": 0.001, "depth": 0.002}, "depth < width"),
    ):
        with pytest.raises(validation.ConfigError, match=rf"tiny_mean_field\.mean_field: .*{match}"):
            validation.validate_experiment("tiny_mean_field", dict(exp, mean_field=cells), test_config["root_seed"])
    validation.validate_experiment(
        "tiny_mean_field", dict(exp, mean_field={"width": 0.01, "depth": 1e-10}), test_config["root_seed"]
    )


def test_the_default_runs_sphere_experiment_is_make_spheres_early_window():
    """`mean_field_sphere_generic` (config/config.yaml) is `make sphere`'s experiment (config/sphere.yaml) on a shorter
    horizon and fewer β: every other key the same (streams, matrices, ρ0, tokens, replicas, distances, particles, the
    grid's interval and step, the root seed), and at β = 10 the same reference levels, so that its numbers there are
    the first snapshots of `make sphere`'s (a run of both agreed bit for bit to t = 2 at β = 10 and 31.6). An edit to
    one config that the other does not follow fails here."""
    configs = {name: yaml.safe_load((ROOT / "config" / name).read_text()) for name in ("config.yaml", "sphere.yaml")}
    assert configs["config.yaml"]["root_seed"] == configs["sphere.yaml"]["root_seed"]
    default = copy.deepcopy(configs["config.yaml"]["experiments"]["mean_field_sphere_generic"])
    sphere = copy.deepcopy(configs["sphere.yaml"]["experiments"]["concentration_mean_field"])
    assert set(default["betas"]) <= set(sphere["betas"]) and 10 in default["betas"]
    levels = dict(zip(sphere["betas"], sphere["mean_field"]["level"]))
    assert default["mean_field"]["level"] == levels[10]
    assert default["time"]["horizon"] < sphere["time"]["horizon"]
    interval = [block["time"]["horizon"] / block["time"]["snapshots"] for block in (default, sphere)]
    assert interval[0] == interval[1]
    for block in (default, sphere):
        del block["betas"], block["mean_field"]["level"], block["time"]["horizon"], block["time"]["snapshots"]
    assert default == sphere


@pytest.mark.parametrize(
    "horizon, snapshots, expected",
    [(None, 56, 14.0), (60.0, 240, 60.0), (14.1, 56, 14.0), (14.2, 57, 14.25), (0.01, 1, 0.25)],
)
def test_a_study_horizon_keeps_the_snapshot_interval(horizon, snapshots, expected):
    """The experiment's grid (14 in 56 snapshots) up to a study's horizon: the interval 0.25 and dt kept, the
    horizon rounded to the nearest whole snapshot (14.1 to 14, 14.2 to 14.25), at least one snapshot; a horizon
    that is not finite and positive is refused."""
    from lowtemp.config import experiment

    exp = {"time": {"horizon": 14.0, "snapshots": 56, "dt": 0.05}}
    grid = experiment.time_grid(exp, horizon)
    assert (grid.snapshots, grid.horizon, grid.dt) == (snapshots, pytest.approx(expected, rel=1e-15), 0.05)
    np.testing.assert_allclose(np.diff(grid.times), 0.25, rtol=1e-12)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="a horizon must be finite and positive"):
            experiment.time_grid(exp, bad)
