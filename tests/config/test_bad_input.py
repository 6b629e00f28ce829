"""The table of bad inputs: each one gives its exact error before any work, and leaves no output.

Every row goes through ``lowtemp.config.validation.validate_config``, the one function
the Snakefile calls when it is read (before any job). A sample of rows also goes
through the real Snakemake command line, checking the message reaches the user
and that no ``results/`` folder appears. NetCDF inputs that are truncated, of an
older schema or of the wrong kind are refused by the stage that reads them.
docs/reliability.md lists the common ones with their fixes.
"""

from __future__ import annotations

import copy
import math
import re
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from conftest import SCHEMA, SNAKEFILE, SNAKEMAKE, TEST_CONFIG

from lowtemp.config import schema, validation
from lowtemp.model import matrices
from lowtemp.stages import initial_tokens as initial_tokens_stage
from lowtemp.stages import matrices as matrices_stage
from lowtemp.store import netcdf

ConfigError, Violation = validation.ConfigError, matrices.AssumptionViolation
EYE = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
#: explicit matrices satisfying Assumption 1: B = I, A = V = diag(2, 1, 0.5), E1 = span(e1)
EXPLICIT = {"family": "explicit", "K": EYE, "Q": EYE, "V": [[2, 0, 0], [0, 1, 0], [0, 0, 0.5]]}


def tiny(**changes):
    """Mutation of the ``tiny`` experiment: top-level keys of the experiment replaced."""
    return lambda cfg: cfg["experiments"]["tiny"].update(changes)


def tiny_in(section, **changes):
    return lambda cfg: cfg["experiments"]["tiny"][section].update(changes)


def explicit(**changes):
    return tiny(matrices={**EXPLICIT, **changes})


def renamed(name):
    """The ``tiny`` experiment under another name."""
    return lambda cfg: cfg["experiments"].update({name: cfg["experiments"].pop("tiny")})


def vmf(**params):
    return tiny(initial_measure={"name": "vmf_mixture", **params})


def mean_field_particles(experiment="tiny_mean_field", **block):
    """The particle runs against the mean-field reference (``mean_field.particles``) set to ``block``."""
    return lambda cfg: cfg["experiments"][experiment].setdefault("mean_field", {}).update(particles=block)


# (id, mutation of the parsed test config, exception, exact message as a regular expression)
BAD_CONFIGS = [
    (
        "unknown-top-level-key",
        lambda c: c.update(foo=1),
        ConfigError,
        r"config key \(top level\): Additional properties are not allowed \('foo' was unexpected\)",
    ),
    (
        "unknown-experiment-key",
        tiny(tokenz=64),
        ConfigError,
        r"config key experiments\.tiny: Additional properties are not allowed \('tokenz' was unexpected\)",
    ),
    (
        "wrong-type",
        tiny(tokens="many"),
        ConfigError,
        r"config key experiments\.tiny\.tokens: 'many' is not of type 'integer'",
    ),
    (
        "negative-beta",
        tiny(betas=[5, -1]),
        ConfigError,
        r"config key experiments\.tiny\.betas\.1: -1 is less than or equal to the minimum of 0",
    ),
    (
        "zero-beta",
        tiny(betas=[0]),
        ConfigError,
        r"config key experiments\.tiny\.betas\.0: 0 is less than or equal to the minimum of 0",
    ),
    (
        "nan-beta",
        tiny(betas=[math.nan]),
        ConfigError,
        r"config key experiments\.tiny\.betas\.0: nan is not a finite number",
    ),
    ("empty-beta-grid", tiny(betas=[]), ConfigError, r"config key experiments\.tiny\.betas: \[\] should be non-empty"),
    (
        "duplicate-beta",
        tiny(betas=[5, 5.0]),
        ConfigError,
        r"experiments\.tiny\.betas has duplicate values: \[5\.0, 5\.0\]",
    ),
    (
        # %g keeps 6 significant digits: both would be written to finite_temperature/beta5.nc
        "betas-sharing-a-file-label",
        tiny(betas=[5, 5.0000001]),
        ConfigError,
        r"experiments\.tiny\.betas: \[5\.0, 5\.0000001\] share the file label beta5 ",
    ),
    (
        "experiment-name-read-as-a-number",
        lambda c: c["experiments"].update({123: c["experiments"].pop("tiny")}),
        ConfigError,
        r"experiments: the name 123 is read by YAML as int, not as a name",
    ),
    (
        "experiment-name-read-as-a-boolean",
        lambda c: c["experiments"].update({True: c["experiments"].pop("tiny")}),
        ConfigError,
        r"experiments: the name True is read by YAML as bool, not as a name",
    ),
    (
        "experiment-names-differing-by-case",
        lambda c: c["experiments"].update(TINY=copy.deepcopy(c["experiments"]["tiny"])),
        ConfigError,
        r"experiments: 'tiny' and 'TINY' differ only by case",
    ),
    (
        "yte-templating-keys",
        lambda c: c.update(__use_yte__=True),
        ConfigError,
        r"the config: __use_yte__: YTE templating keys make a config a program",
    ),
    (
        "collapsed-projected-gaussian",
        tiny(initial_measure={"name": "projected_gaussian", "mean": [1, 0, 0], "scale": 1e-12}),
        ConfigError,
        r"experiments\.tiny\.initial_measure\.scale: scale 1e-12 against a mean of size 1 puts every token within",
    ),
    (
        # 1e10 RK4 steps of 64 tokens × 2 replicas: years by the resource model
        "job-beyond-max-job-hours",
        tiny(integrator="rk4", time={"horizon": 1e9, "dt": 0.1, "snapshots": 30}),
        ConfigError,
        r"experiments\.tiny: the finite_temperature job at beta = 5 would ask for about .* hours of wall time .*"
        r"more than max_job_hours = 24",
    ),
    (
        # the studies of convergence_all count too: N up to 2^20 at beta = 50
        "convergence-study-beyond-max-job-hours",
        tiny(convergence={"beta": [50], "particles": {"tokens": [2**17, 2**18, 2**19, 2**20]}}),
        ConfigError,
        r"experiments\.tiny: the convergence job would ask for about .* hours .* more than max_job_hours = 24",
    ),
    (
        "dim-above-1024",
        tiny(dim=2000),
        ConfigError,
        r"config key experiments\.tiny\.dim: 2000 is greater than the maximum of 1024",
    ),
    (
        "zero-tokens",
        tiny(tokens=0),
        ConfigError,
        r"config key experiments\.tiny\.tokens: 0 is less than the minimum of 2",
    ),
    (
        "negative-tokens",
        tiny(tokens=-64),
        ConfigError,
        r"config key experiments\.tiny\.tokens: -64 is less than the minimum of 2",
    ),
    ("dim-1", tiny(dim=1), ConfigError, r"config key experiments\.tiny\.dim: 1 is less than the minimum of 2"),
    (
        "zero-replicas",
        tiny(replicas=0),
        ConfigError,
        r"config key experiments\.tiny\.replicas: 0 is less than the minimum of 1",
    ),
    (
        "zero-dt",
        tiny_in("time", dt=0),
        ConfigError,
        r"config key experiments\.tiny\.time\.dt: 0 is less than or equal to the minimum of 0",
    ),
    (
        "dt-larger-than-horizon",
        tiny_in("time", dt=7.0),
        ConfigError,
        r"experiments\.tiny\.time\.dt = 7\.0 is larger than time\.horizon = 6\.0",
    ),
    (
        "infinite-horizon",
        tiny_in("time", horizon=math.inf),
        ConfigError,
        r"config key experiments\.tiny\.time\.horizon: inf is not a finite number",
    ),
    (
        "denormal-dt",
        tiny_in("time", dt=1e-320),
        ConfigError,
        r"experiments\.tiny\.time\.dt = 9\.99989e-321 against time\.horizon = 6 makes inf steps, more than float64 "
        r"time can count \(2\^53: t \+ dt == t\); raise time\.dt or shorten time\.horizon",
    ),
    (
        "horizon-of-1e308",
        tiny_in("time", horizon=1e308),
        ConfigError,
        r"experiments\.tiny\.time\.dt = 0\.1 against time\.horizon = 1e\+308 makes inf steps",
    ),
    (
        "beta-of-1e300",
        tiny(betas=[5, 1e300]),
        ConfigError,
        r"experiments\.tiny\.betas: β·σmax\(B\) = 1e\+300·1\.25 = 1\.25e\+300 exceeds 1e\+12: the softmax kernel "
        r"would be 8\.9e-151 rad wide, its weights decided by rounding",
    ),
    (
        "study-beta-of-1e300",
        tiny(convergence={"beta": 1e300}),
        ConfigError,
        r"experiments\.tiny\.convergence\.beta: β·σmax\(B\) = 1e\+300",
    ),
    (
        "eigenvalue-of-1e300",
        tiny_in("matrices", eigenvalues=[1e300, 1, 0.5]),
        ConfigError,
        r"experiments\.tiny\.matrices: A = VBᵀ \(its symmetric part\) has an eigenvalue of size 1e\+300: over "
        r"time\.horizon = 6 an explicit integrator needs at least 1\.5e\+300 steps for stability alone",
    ),
    (
        "atom-at-the-origin",
        tiny(initial_measure={"name": "atoms", "points": [[1, 0, 0], [0, 0, 0]], "positive_density": False}),
        ConfigError,
        r"experiments\.tiny\.initial_measure\.points: a vector is zero \(it has no direction on the sphere\)",
    ),
    (
        "vmf-without-means",
        vmf(kappas=[2.0], means=[]),
        ConfigError,
        r"experiments\.tiny\.initial_measure\.means and kappas must have the same length",
    ),
    (
        "vmf-mean-at-the-origin",
        vmf(kappas=[2.0, 3.0], means=[[0, 0, 0], [1, 0, 0]]),
        ConfigError,
        r"experiments\.tiny\.initial_measure\.means: a vector is zero \(it has no direction on the sphere\)",
    ),
    (
        "tolerance-below-float64",
        tiny_in("time", tolerance=1e-300),
        ConfigError,
        r"config key experiments\.tiny\.time\.tolerance: 1e-300 is less than the minimum of 1e-12",
    ),
    (
        "nan-under-fit",
        tiny(fit={"max_residual": math.nan}),
        ConfigError,
        r"config key experiments\.tiny\.fit\.max_residual: nan is not a finite number",
    ),
    (
        "nan-memory-limit",
        lambda c: c.update(memory_limit_gb=math.nan),
        ConfigError,
        r"config key memory_limit_gb: nan is not a finite number",
    ),
    (
        "infinite-checkpoint-interval",
        lambda c: c.update(checkpoint_every_seconds=math.inf),
        ConfigError,
        r"config key checkpoint_every_seconds: inf is not a finite number",
    ),
    (
        "tokens-beyond-int64",
        tiny(tokens=2**64),
        ConfigError,
        r"config key experiments\.tiny\.tokens: 18446744073709551616 is out of range \(integers must lie within "
        r"±2\*\*63, numpy's int64\)",
    ),
    (
        "tokens-as-a-float",
        tiny(tokens=1.0e300),
        ConfigError,
        r"config key experiments\.tiny\.tokens: 1e\+300 is not of type 'integer'",
    ),
    (
        "tokens-beyond-any-memory",
        tiny(tokens=2**62),
        ConfigError,
        r"experiments\.tiny: the largest job needs about \d+\.?\d* GiB \(tokens = 4611686018427387904, replicas = 2, "
        r"snapshots = 30\), more than",
    ),
    (
        "no-experiments",
        lambda c: c.update(experiments={}),
        ConfigError,
        r"config key experiments: \{\} should be non-empty",
    ),
    (
        "bad-experiment-name",
        lambda c: c["experiments"].update({"9 lives": c["experiments"]["tiny"]}),
        ConfigError,
        r"config key experiments: '9 lives' does not match",
    ),
    (
        "experiment-name-with-newline",
        renamed("tiny\n"),
        ConfigError,
        r"config key experiments: 'tiny\\n' does not match",
    ),
    ("experiment-name-too-long", renamed("a" * 300), ConfigError, r"config key experiments: 'a{300}' is too long"),
    (
        "matrix-wrong-shape",
        explicit(K=[[1, 0], [0, 1]]),
        ConfigError,
        r"experiments\.tiny\.matrices\.K must be a 3x3 matrix \(dim = 3\), got shape \(2, 2\)",
    ),
    (
        "matrix-ragged",
        explicit(Q=[[1, 0, 0], [0, 1], [0, 0, 1]]),
        ConfigError,
        r"experiments\.tiny\.matrices\.Q is not a rectangular matrix \(rows of unequal length\)",
    ),
    (
        "matrix-nan",
        explicit(V=[[2, 0, 0], [0, math.nan, 0], [0, 0, 0.5]]),
        ConfigError,
        r"config key experiments\.tiny\.matrices\.V\.1\.1: nan is not a finite number",
    ),
    (
        "matrix-inf",
        explicit(K=[[1, 0, 0], [0, math.inf, 0], [0, 0, 1]]),
        ConfigError,
        r"config key experiments\.tiny\.matrices\.K\.1\.1: inf is not a finite number",
    ),
    (
        "singular-B",
        explicit(K=[[1, 0, 0], [0, 1, 0], [0, 0, 0]]),
        Violation,
        r"experiments\.tiny\.matrices: Assumption 1 violated: B = QᵀK is singular or ill-conditioned "
        r"\(σmin = 0\.000e\+00, σmax = 1\.000e\+00, condition number inf > 1\.0e\+08\)",
    ),
    (
        "ill-conditioned-B",
        tiny_in("matrices", sigma_min=1e-9, sigma_max=1.0),
        Violation,
        r"Assumption 1 violated: B = QᵀK is singular or ill-conditioned \(σmin = 1\.000e-09, σmax = 1\.000e\+00, "
        r"condition number 1\.000e\+09 > 1\.0e\+08\)",
    ),
    (
        "VBt-not-symmetric",
        explicit(V=[[2, 1, 0], [0, 1, 0], [0, 0, 0.5]]),
        Violation,
        r"experiments\.tiny\.matrices: Assumption 1 violated: A = VBᵀ is not symmetric "
        r"\(‖A − Aᵀ‖/‖A‖ = 5\.657e-01 > 1\.0e-10\)",
    ),
    (
        "no-spectral-gap",
        tiny_in("matrices", eigenvalues=[1, 1, 1]),
        Violation,
        r"experiments\.tiny\.matrices: Assumption 1 violated: A = VBᵀ has no spectral gap \(all eigenvalues equal 1 ",
    ),
    (
        "eigenvalues-wrong-length",
        tiny_in("matrices", eigenvalues=[1, 0.5]),
        ConfigError,
        r"experiments\.tiny\.matrices\.eigenvalues must have length dim = 3, got 2",
    ),
    (
        "cap-is-not-a-positive-density",
        tiny(initial_measure={"name": "cap", "center": [0, 0, 1], "angle": 30}),
        Violation,
        r"experiments\.tiny\.initial_measure: 'cap' is not a positive density on the sphere \(a cap of angle 30° has "
        r"zero density outside it; Assumption 3\)\. Set experiments\.tiny\.initial_measure\.positive_density: false",
    ),
    (
        "atoms-are-not-a-density",
        tiny(initial_measure={"name": "atoms", "points": [[1, 0, 0]]}),
        Violation,
        r"'atoms' is not a positive density on the sphere \(finitely many atoms have no density; Assumption 3\)",
    ),
    (
        "assumption-2-mass-on-E1-complement",
        lambda c: c["experiments"]["tiny"].update(
            matrices=EXPLICIT,
            initial_measure={"name": "atoms", "points": [[1, 1, 0], [0, 1, 0], [0, 0, 2]], "positive_density": False},
        ),
        Violation,
        r"experiments\.tiny\.initial_measure: Assumption 2 fails: point\(s\) \[1, 2\] lie on E1⊥ \(P1 x = 0\), so "
        r"∫\|P1 x\|\^\(-1/2\) dρ0 is infinite",
    ),
    (
        "kernel-for-another-dim",
        tiny(
            kernel="dense",
            dim=4,
            matrices={"family": "spectral", "eigenvalues": [1, 0.5, 0.3, 0.2], "sigma_min": 0.8, "sigma_max": 1.25},
        ),
        ConfigError,
        r"experiments\.tiny\.kernel: 'dense' supports dim 2 and 3, got dim = 4; use 'numpy' or 'auto'",
    ),
    (
        "kappa-infinite",
        vmf(kappas=[math.inf, 1.0]),
        ConfigError,
        r"config key experiments\.tiny\.initial_measure\.kappas\.0: inf is not a finite number",
    ),
    (
        "kappa-beyond-the-sampler",
        vmf(kappas=[1e300, 1.0]),
        ConfigError,
        r"experiments\.tiny\.initial_measure\.kappas must be finite numbers in \[0, 1e\+12\] \(the vMF sampler's "
        r"range\), got \[1e\+300, 1\.0\]",
    ),
    (
        "weights-summing-to-1.00001",
        vmf(kappas=[2.0, 1.0], weights=[0.5, 0.50001]),
        ConfigError,
        r"experiments\.tiny\.initial_measure\.weights must sum to 1 \(to 1\.5e-08\), got 1\.00001",
    ),
    (
        "unknown-integrator",
        tiny(integrator="leapfrog"),
        ConfigError,
        r"config key experiments\.tiny\.integrator: 'leapfrog' is not one of \['dopri5', 'bs3', 'rk4', 'euler'\]",
    ),
    (
        "unknown-measure",
        tiny(initial_measure={"name": "gaussian"}),
        ConfigError,
        r"config key experiments\.tiny\.initial_measure\.name: 'gaussian' is not one of",
    ),
    (
        "snapshot-time-outside-horizon",
        tiny_in("figures", snapshot_times=[0, 9]),
        ConfigError,
        r"experiments\.tiny\.figures\.snapshot_times: 9 is outside \[0, time\.horizon = 6\.0\]",
    ),
    (
        "particle-numbers-above-tokens",
        mean_field_particles(tokens=[12, 96]),
        ConfigError,
        r"experiments\.tiny_mean_field\.mean_field\.particles\.tokens\.1: 96 is outside \[2, tokens = 48\]: every run "
        r"starts from the first n of the experiment's 48 initial tokens per replica",
    ),
    (
        "particle-number-not-an-integer",
        mean_field_particles(tokens=[12, 24.5]),
        ConfigError,
        r"config key experiments\.tiny_mean_field\.mean_field\.particles\.tokens\.1: 24\.5 is not of type 'integer'",
    ),
    (
        "particle-numbers-decreasing",
        mean_field_particles(tokens=[24, 12]),
        ConfigError,
        r"experiments\.tiny_mean_field\.mean_field\.particles\.tokens must be increasing without repeats, got "
        r"\[24, 12\]",
    ),
    (
        "particle-numbers-repeated",
        mean_field_particles(tokens=[12, 12]),
        ConfigError,
        r"config key experiments\.tiny_mean_field\.mean_field\.particles\.tokens: \[12, 12\] has non-unique elements",
    ),
    (
        "particle-runs-without-numbers",
        mean_field_particles(),
        ConfigError,
        r"config key experiments\.tiny_mean_field\.mean_field\.particles: 'tokens' is a required property",
    ),
    (
        "particle-runs-of-a-particles-experiment",
        mean_field_particles("tiny", tokens=[16, 32]),
        ConfigError,
        r"experiments\.tiny\.mean_field\.particles: particle runs are measured against the reference of a model: "
        r"mean_field experiment, and this one is model: particles",
    ),
    (
        "too-many-tokens-for-memory",
        lambda c: c.update(memory_limit_gb=4) or c["experiments"]["tiny"].update(tokens=200_000, replicas=4),
        ConfigError,
        r"experiments\.tiny: the largest job needs about [0-9.]+ GiB "
        r"\(tokens = 200000, replicas = 4, snapshots = 30\), "
        r"more than the 4 GiB of memory_limit_gb",
    ),
]


@pytest.fixture
def base_config() -> dict:
    with open(TEST_CONFIG) as fh:
        return yaml.safe_load(fh)


def _validate(config, results):
    return validation.validate_config(config, SCHEMA, results=results)


def test_the_table_names_each_case_once():
    """pytest would run a repeated name under a changed id, hiding which row failed."""
    names = [row[0] for row in BAD_CONFIGS]
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize(
    "mutate, error, message", [row[1:] for row in BAD_CONFIGS], ids=[row[0] for row in BAD_CONFIGS]
)
def test_bad_config_gives_its_exact_error_and_no_output(tmp_path, base_config, mutate, error, message):
    mutate(base_config)
    with pytest.raises(error, match=message):
        _validate(base_config, tmp_path / "results")
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the results folder


def test_the_unchanged_test_config_passes(tmp_path, base_config):
    checked = _validate(base_config, tmp_path / "results")
    assert set(checked) == {"tiny", "tiny_circle", "tiny_mean_field"}
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def every_numeric_key(base_config) -> dict:
    """The test config with the optional numeric keys set too and the schema's defaults filled in:
    a config with a number at (nearly) every numeric key of the schema."""
    base_config.update(memory_limit_gb=64, checkpoint_every_seconds=300)
    tiny = base_config["experiments"]["tiny"]
    tiny["matrices"]["max_condition_B"] = 1e8
    tiny["convergence"] = {
        "beta": 50,
        "steps": {"dt": 0.1, "times": [1.6, 6.0], "tokens": 32, "replicas": 1},
        "particles": {"tokens": [8, 16, 32, 64], "replicas": 4, "horizon": 6.0},
    }
    circle = base_config["experiments"]["tiny_circle"]
    circle["initial_measure"].update(means=[[1, 0], [0, 1]], weights=[0.25, 0.75])
    circle["matrices"].update(angle_V=45, V_shear=0.1)
    schema.check_schema(base_config, SCHEMA)
    return base_config


def _numeric_leaves(node, path=()):
    """Key path of every int or float in the config (independently of ``lowtemp.config.validation``)."""
    if isinstance(node, dict):
        return [leaf for key, value in node.items() for leaf in _numeric_leaves(value, (*path, key))]
    if isinstance(node, list):
        return [leaf for i, value in enumerate(node) for leaf in _numeric_leaves(value, (*path, i))]
    return [path] if isinstance(node, (int, float)) and not isinstance(node, bool) else []


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, 2**63, -(2**63) - 1], ids=["nan", "inf", "-inf", "2**63", "-2**63-1"]
)
def test_a_non_finite_or_overflowing_number_is_refused_at_every_numeric_key(tmp_path, every_numeric_key, value):
    """The schema's bounds let NaN through (every comparison with NaN is false): one walk over the whole
    config refuses NaN, ±inf and integers beyond int64 wherever they are, naming the key. (Where the schema
    refuses the value first, e.g. NaN for an integer or -inf below a minimum, its error names the key too.)"""
    _validate(copy.deepcopy(every_numeric_key), tmp_path / "results")  # the base passes every check
    leaves = _numeric_leaves(every_numeric_key)
    assert len(leaves) > 60
    wrong = []
    for path in leaves:
        if isinstance(value, int) and isinstance(_get(every_numeric_key, path), float):
            continue  # an integer where a float is: an ordinary number, within any float's range
        config = copy.deepcopy(every_numeric_key)
        _put(config, path, value)
        where = ".".join(map(str, path))
        try:
            _validate(config, tmp_path / "results")
            wrong.append(f"{where}: accepted")
        except ConfigError as exc:
            if not str(exc).startswith(f"config key {where}: {value!r} "):
                wrong.append(f"{where}: {exc}")
    assert not wrong, wrong
    assert list(tmp_path.iterdir()) == []


def _get(node, path):
    for key in path:
        node = node[key]
    return node


def _put(node, path, value):
    _get(node, path[:-1])[path[-1]] = value


# ------------------------------------------------------------------ config files and the results folder
def test_duplicate_experiment_names_in_the_yaml_file(tmp_path):
    text = TEST_CONFIG.read_text().replace("  tiny_circle:", "  tiny:")
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    first, second = [n + 1 for n, line in enumerate(text.splitlines()) if line == "  tiny:"]
    with pytest.raises(
        ConfigError,
        match=rf"dup\.yaml, line {second}: duplicate key 'tiny' \(first at line {first}\); "
        r"YAML would silently keep only the last one",
    ):
        schema.load_config_file(path)


def _alias_bomb(levels: int) -> str:
    """A 'billion laughs' config: each level maps nine keys to the level below (9**levels values)."""
    lines = ["l0: &l0 {a: lol, b: lol, c: lol, d: lol, e: lol, f: lol, g: lol, h: lol, i: lol}"]
    lines += [f"l{i}: &l{i} {{" + ", ".join(f"{k}: *l{i - 1}" for k in "abcdefghi") + "}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused(tmp_path, base_config):
    """A file of aliases standing for 9**9 values (docs/reliability.md) is refused by the project's loader,
    naming the file and its first alias, before anything builds or walks the expanded config; so is an
    alias inside the node it refers to."""
    path = tmp_path / "bomb.yaml"
    bomb = "".join(f"  {line}\n" for line in _alias_bomb(9).splitlines())
    path.write_text(TEST_CONFIG.read_text() + "bomb:\n" + bomb)
    line = TEST_CONFIG.read_text().count("\n") + 3  # the first alias: the second line of the bomb
    message = (
        rf"bomb\.yaml: its YAML aliases \(the first: \*l0, line {line}\) expand it to more than "
        rf"{schema.MAX_EXPANDED_NODES} keys and values, which Snakemake and this check would visit one by "
        r"one; write a config of that size out, or use fewer aliases"
    )
    with pytest.raises(ConfigError, match=message):
        schema.load_config_file(path)
    with pytest.raises(ConfigError, match=message):
        validation.validate_config(base_config, SCHEMA, configfiles=[path], results=tmp_path / "results")
    loop = tmp_path / "loop.yaml"
    loop.write_text("root_seed: 7\nexperiments:\n  a: &a [1, *a]\n")
    with pytest.raises(
        ConfigError,
        match=r"loop\.yaml, line 3: this node contains a YAML alias to itself, which "
        r"would expand forever",
    ):
        schema.load_config_file(loop)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.yaml", "loop.yaml"]  # nothing written


def test_yaml_aliases_within_the_budget_are_read(tmp_path, base_config):
    """PyYAML's dumper writes an alias (&id001) wherever a config built in Python holds one object twice:
    within MAX_EXPANDED_NODES (keys and values, counted once per path to them) aliases are read as usual."""
    tiny = base_config["experiments"]["tiny"]
    base_config["experiments"]["tiny_copy"] = tiny  # the same object twice: dumped as an anchor and an alias
    text = yaml.safe_dump(base_config)
    assert "*id001" in text
    path = tmp_path / "shared.yaml"
    path.write_text(text)
    assert schema.load_config_file(path) == yaml.safe_load(text)
    # n levels of doubling lists stand for 1 + Σ_i (key + list of 2**(i+2) - 1 nodes) = 2**(n+2) - 3 nodes
    under = int(math.log2(schema.MAX_EXPANDED_NODES + 3)) - 2
    assert 2 ** (under + 2) - 3 <= schema.MAX_EXPANDED_NODES < 2 ** (under + 3) - 3
    for levels in (under, under + 1):
        lines = ["l0: &l0 [x, x]"] + [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, levels)]
        (tmp_path / "doubling.yaml").write_text("\n".join(lines) + "\n")
        if levels == under:
            assert len(schema.load_config_file(tmp_path / "doubling.yaml")) == under
        else:
            with pytest.raises(ConfigError, match=r"doubling\.yaml: its YAML aliases \(the first: \*l0, line 2\)"):
                schema.load_config_file(tmp_path / "doubling.yaml")


@pytest.mark.parametrize(
    "text, message",
    [
        ("- 1\n- 2\n", r"a config must be a mapping of keys at top level, got list"),
        ("experiments: {tiny: [\n", r"not valid YAML"),
    ],
    ids=["not-a-mapping", "not-yaml"],
)
def test_config_file_that_is_not_a_mapping(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        schema.load_config_file(path)
    with pytest.raises(ConfigError, match=r"cannot read the config file"):
        schema.load_config_file(tmp_path / "absent.yaml")


def test_max_job_hours_admits_what_it_refused(tmp_path, base_config):
    """The wall-time refusal is the limit's, not the experiment's: raising max_job_hours above the estimate lets the
    same config through."""
    # about 9 hours of wall time by the resource model for the finite_temperature jobs
    base_config["experiments"]["tiny"].update(integrator="rk4", time={"horizon": 1e7, "dt": 0.1, "snapshots": 30})
    with pytest.raises(ConfigError, match=r"the finite_temperature job at beta = 5 .* more than max_job_hours = 2"):
        _validate({**base_config, "max_job_hours": 2}, tmp_path / "results")
    _validate({**base_config, "max_job_hours": 1000}, tmp_path / "results")


@pytest.mark.parametrize(
    "content, message",
    [
        (
            "root_seed: 1\nexperiments: {caf\xe9: 1}\n".encode("latin-1"),
            r"c\.yaml, line 2: not UTF-8 text \(byte 0xe9\)",
        ),
        (("a: " + "[" * 20000 + "]" * 20000 + "\n").encode(), r"c\.yaml: the YAML is nested too deeply"),
        (b"__use_yte__: true\n__definitions__: [import os]\nroot_seed: 1\n", r"c\.yaml: __use_yte__, __definitions__:"),
        (
            b"root_seed: !!python/object/apply:os.system [true]\n",
            r"(?s)c\.yaml: not valid YAML: could not determine a constructor.*line 1, column 12",
        ),
    ],
    ids=["latin-1", "nested-too-deeply", "yte", "python-tag"],
)
def test_config_file_that_is_not_data_is_named_with_its_line(tmp_path, content, message):
    """Bytes that are not UTF-8, nesting the parser cannot follow, YTE templating and Python tags: each named with
    the file (and the line where there is one), never a parser traceback, never run."""
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        schema.load_config_file(path)


def test_results_folder_that_is_a_file(tmp_path, base_config):
    (tmp_path / "results").write_text("")
    with pytest.raises(ConfigError, match=r"results folder '.*results' exists but is not a folder"):
        _validate(base_config, tmp_path / "results")


@pytest.mark.parametrize("target", ["/nonexistent-lowtemp-target/results", "results"], ids=["dangling", "loop"])
def test_results_folder_that_is_a_link_to_nothing(tmp_path, base_config, target):
    """Snakemake's os.makedirs cannot create a folder through a link whose target is missing: refused,
    naming the link and its target (the check creates nothing, not even the target)."""
    (tmp_path / "results").symlink_to(target)
    with pytest.raises(
        ConfigError,
        match=rf"results folder '.*results': .*results is a link to '{target}', "
        r"which does not exist \(or is a loop of links\)",
    ):
        _validate(base_config, tmp_path / "results")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_results_folder_that_is_a_link_to_a_folder(tmp_path, base_config):
    """The link's target is what is checked: a link to a writable folder passes, a link to a file does not."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "results").symlink_to(tmp_path / "scratch")
    _validate(copy.deepcopy(base_config), tmp_path / "results")
    (tmp_path / "a-file").write_text("")
    (tmp_path / "results2").symlink_to(tmp_path / "a-file")
    with pytest.raises(ConfigError, match=r"results folder '.*results2 -> .*a-file' exists but is not a folder"):
        _validate(base_config, tmp_path / "results2")


@pytest.mark.parametrize("inside", ["matrices.nc", "figures/w2_projection.png", "finite_temperature/beta10.nc"])
def test_a_folder_where_an_output_file_goes_is_named(tmp_path, base_config, inside):
    """Snakemake takes an existing path as a finished output, a folder too: refused before any job, naming it."""
    name = next(iter(base_config["experiments"]))
    (tmp_path / "results" / name / inside).mkdir(parents=True)
    with pytest.raises(ConfigError, match=rf"experiments\.{name}: .*{inside} is a folder where the pipeline writes"):
        _validate(base_config, tmp_path / "results")
    # the same folder under another name, and a file of that name, pass: the check looks only at output names
    (tmp_path / "results" / name / inside).rename(tmp_path / "results" / name / "notes")
    _validate(copy.deepcopy(base_config), tmp_path / "results")


def test_an_experiment_folder_that_is_a_file_is_named(tmp_path, base_config):
    name = next(iter(base_config["experiments"]))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / name).write_text("")
    with pytest.raises(ConfigError, match=rf"experiments\.{name}: .*results/{name} exists but is not a folder"):
        _validate(base_config, tmp_path / "results")


def test_results_folder_that_cannot_be_written(tmp_path, base_config):
    """/proc/self/fdinfo accepts no new file, even for root (chmod does not stop root)."""
    (tmp_path / "results").symlink_to("/proc/self/fdinfo")
    with pytest.raises(ConfigError, match=r"results folder '.*results -> /proc/[0-9]+/fdinfo' is not writable"):
        _validate(base_config, tmp_path / "results")


# ------------------------------------------------------------------ through the Snakemake command line
CLI_ROWS = [
    "unknown-experiment-key",
    "negative-beta",
    "singular-B",
    "assumption-2-mass-on-E1-complement",
    "too-many-tokens-for-memory",
    "experiment-name-with-newline",
]


def _snakemake(work: Path, configfile: Path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(SNAKEFILE),
            "--directory",
            str(work),
            "--configfile",
            str(configfile),
            "--cores",
            "1",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("row", CLI_ROWS)
def test_snakemake_stops_with_the_message_and_writes_nothing(tmp_path, base_config, row):
    _, mutate, _, message = next(r for r in BAD_CONFIGS if r[0] == row)
    mutate(base_config)
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(base_config, allow_unicode=True))
    work = tmp_path / "work"
    work.mkdir()
    proc = _snakemake(work, config)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert any(re.search(message, line) for line in out.splitlines()), out[-2000:]
    assert not (work / "results").exists()


def test_snakemake_refuses_duplicate_experiment_names(tmp_path):
    config = tmp_path / "dup.yaml"
    config.write_text(TEST_CONFIG.read_text().replace("  tiny_circle:", "  tiny:"))
    work = tmp_path / "work"
    work.mkdir()
    proc = _snakemake(work, config)
    assert proc.returncode != 0
    assert "duplicate key 'tiny'" in proc.stdout + proc.stderr
    assert not (work / "results").exists()


def test_snakemake_runs_yte_before_the_check_which_then_refuses(tmp_path):
    """What happens today with a YTE config: Snakemake evaluates its Python when it reads the file (the marker file
    appears: before any of this project's code runs, docs/reliability.md), then the project's check refuses the run,
    naming the keys, and nothing is written. A change in either direction fails this test."""
    marker = tmp_path / "yte-ran"
    config = tmp_path / "yte.yaml"
    config.write_text(
        "__use_yte__: true\n"
        f"__definitions__:\n  - import pathlib; pathlib.Path({str(marker)!r}).touch()\n" + TEST_CONFIG.read_text()
    )
    work = tmp_path / "work"
    work.mkdir()
    proc = _snakemake(work, config)
    assert proc.returncode != 0
    assert "__use_yte__, __definitions__: YTE templating keys make a config a program" in proc.stdout + proc.stderr
    assert marker.exists()  # Snakemake ran the config's code before the check
    assert not (work / "results").exists()


# ------------------------------------------------------------------ NetCDF inputs
@pytest.fixture
def stage_inputs(tmp_path, base_config):
    config = copy.deepcopy(base_config)
    validation.validate_config(config, SCHEMA, results=tmp_path / "results")
    exp = config["experiments"]["tiny"]
    matrices_stage.stage_matrices("tiny", exp, config["root_seed"], tmp_path / "matrices.nc")
    return exp, config["root_seed"], tmp_path


def _initial_tokens(stage_inputs):
    exp, seed, root = stage_inputs
    initial_tokens_stage.stage_initial_tokens("tiny", exp, seed, root / "matrices.nc", root / "tokens.nc")


def test_truncated_netcdf_input(stage_inputs):
    root = stage_inputs[2]
    path = root / "matrices.nc"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(netcdf.NetCDFSchemaError, match=r"matrices\.nc: cannot be read as NetCDF \("):
        _initial_tokens(stage_inputs)
    assert not (root / "tokens.nc").exists()


def _set_attribute(path: Path, key: str, value) -> None:
    with h5py.File(path, "r+") as fh:
        fh.attrs[key] = value


def test_netcdf_from_an_older_schema(stage_inputs):
    root = stage_inputs[2]
    _set_attribute(root / "matrices.nc", "lowtemp_schema", netcdf.SCHEMA_VERSION - 1)
    with pytest.raises(
        netcdf.NetCDFSchemaError,
        match=rf"matrices\.nc: schema version {netcdf.SCHEMA_VERSION - 1}, "
        rf"expected {netcdf.SCHEMA_VERSION}; rerun the stage that writes it",
    ):
        _initial_tokens(stage_inputs)
    assert not (root / "tokens.nc").exists()


def test_netcdf_of_another_kind(stage_inputs):
    root = stage_inputs[2]
    _set_attribute(root / "matrices.nc", "lowtemp_kind", "distances")
    with pytest.raises(netcdf.NetCDFSchemaError, match=r"matrices\.nc: holds 'distances', expected 'matrices'"):
        _initial_tokens(stage_inputs)
    assert not (root / "tokens.nc").exists()


def _make_b_singular(path: Path) -> None:
    with h5py.File(path, "r+") as fh:
        K = fh["K"][...]
        K[:, 0] = 0.0
        fh["K"][...] = K


def test_matrices_file_edited_after_it_was_written_is_refused(stage_inputs):
    """An edit the checksum did not see: the read names the damage before any use of the matrices."""
    root = stage_inputs[2]
    _make_b_singular(root / "matrices.nc")
    with pytest.raises(netcdf.NetCDFSchemaError, match=r"matrices\.nc: its content does not match its checksum"):
        _initial_tokens(stage_inputs)
    assert not (root / "tokens.nc").exists()


def test_matrices_file_edited_to_violate_assumption_1(stage_inputs):
    """A matrices.nc whose B was made singular and its checksum renewed (a file another tool wrote) is re-checked
    on read."""
    root = stage_inputs[2]
    _make_b_singular(root / "matrices.nc")
    netcdf._stamp_checksum(root / "matrices.nc")
    with pytest.raises(matrices.AssumptionViolation, match=r"B = QᵀK is singular"):
        _initial_tokens(stage_inputs)
    assert not (root / "tokens.nc").exists()


def test_snakemake_job_with_a_truncated_input_fails_and_removes_its_output(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    target = "results/tiny_circle/initial_tokens.nc"
    proc = _snakemake(work, TEST_CONFIG, "results/tiny_circle/matrices.nc")
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = work / "results/tiny_circle/matrices.nc"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    proc = _snakemake(work, TEST_CONFIG, target)
    assert proc.returncode != 0
    assert (
        "cannot be read as NetCDF"
        in proc.stdout + proc.stderr + (work / "results/tiny_circle/logs/initial_tokens.log").read_text()
    )
    assert not (work / target).exists()
    assert not np.any([".tmp-" in p.name for p in (work / "results").rglob("*")])


def test_memory_refusal_against_this_machine_when_no_limit_is_set(tmp_path, base_config):
    exp = base_config["experiments"]["tiny"]
    exp["tokens"] = 200_000_000  # the stored positions alone: (snapshots + 1)·R·N·d·8 bytes, terabytes
    with pytest.raises(
        ConfigError,
        match=r"GiB \(tokens = 200000000, .* more than the [0-9.]+ GiB of this "
        r"machine's memory",
    ):
        _validate(base_config, tmp_path / "results")
    need = validation.largest_job_memory_bytes(exp)
    positions = (exp["time"]["snapshots"] + 1) * exp["replicas"] * exp["tokens"] * exp["dim"] * 8
    assert need > positions  # at least the trajectory (the exact W2 is O(N) at this size)
    assert validation.machine_memory_bytes() < need


@pytest.mark.parametrize("name", ["config.yaml", "extensions.yaml", "test.yaml", "circle.yaml"])
def test_shipped_configs_pass_every_check(tmp_path, name):
    """Through the project's loader (no duplicate keys, no aliases) and every check, memory included
    (paper_scale.yaml needs a bigger machine than the test's: tests/config/test_config.py checks it without memory)."""
    path = TEST_CONFIG.parent / name
    config = schema.load_config_file(path)
    checked = validation.validate_config(config, SCHEMA, configfiles=[path], results=tmp_path / "results")
    assert set(checked) == set(config["experiments"])
