"""Config edits rerun exactly the jobs that read the edited keys (``lowtemp.config.params``).

Every rule's params are the canonical slice of its experiment's config that its
stage function reads (``params.STAGE_KEYS``). Two checks:

* the table against the code: every stage function runs on its slice behind a guard
  that fails on any read of a key outside it (``.get`` with a default included), on
  the inputs of the completed test run;
* the jobs a dry run schedules on the completed run of config/test.yaml after each
  edit of the table ``EDITS``, compared as a set with the jobs expected.

Both use the session's one run of config/test.yaml (``completed_test_run``).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from conftest import SNAKEFILE, SNAKEMAKE, TEST_CONFIG, validated
from hypothesis import given, settings
from hypothesis import strategies as st

from lowtemp.config import params, studies
from lowtemp.config import plan as lowtemp_plan
from lowtemp.plotting import figures as plotting_figures
from lowtemp.stages import convergence, figures
from lowtemp.stages import distances as distances_stage
from lowtemp.stages import fit as fit_stage
from lowtemp.stages import initial_tokens as initial_tokens_stage
from lowtemp.stages import matrices as matrices_stage
from lowtemp.stages import simulate as simulate_stage
from lowtemp.store import netcdf


# ------------------------------------------------------------------ the table itself
def test_canonical_sorts_keys_and_normalises_integral_floats():
    a = params.canonical({"b": [1.0, 2.5, {"y": 3.0, "x": True}], "a": {"d": 10, "c": 10.0}})
    assert a == {"a": {"c": 10, "d": 10}, "b": [1, 2.5, {"x": True, "y": 3}]}
    assert repr(a) == "{'a': {'c': 10, 'd': 10}, 'b': [1, 2.5, {'x': True, 'y': 3}]}"
    assert type(a["a"]["c"]) is int and a["b"][2]["x"] is True
    nan, inf, big = params.canonical([float("nan"), float("inf"), 1e300])
    assert nan != nan and inf == float("inf") and type(big) is float  # left as they are


def test_slice_keeps_empty_blocks_and_skips_absent_keys(test_config):
    exp = validated(test_config)["experiments"]["tiny"]
    assert params.stage_slice(exp, "claims") == {"claims": exp["claims"]}
    assert params.stage_slice(exp, "distances_beta") == {
        "distances": {"exact_every": 1},
        "fit": {"confidence": exp["fit"]["confidence"]},
    }
    circle = validated(copy.deepcopy(test_config))["experiments"]["tiny_circle"]
    assert params.stage_slice(circle, "figure:snapshots") == {"figures": {}, "time": {"horizon": 6}}
    assert params.stage_slice({"dim": 3}, "matrices") == {"dim": 3}
    with pytest.raises(KeyError, match="no config slice for stage 'nope'"):
        params.stage_slice(exp, "nope")


def _schema_paths(node, prefix=""):
    out = set()
    for key, sub in node.get("properties", {}).items():
        out.add(prefix + key)
        out |= _schema_paths(sub, f"{prefix}{key}.")
    return out


def _with_betas(exp, betas, beta=None):
    out = copy.deepcopy(exp)
    out["betas"] = list(betas)
    out["convergence"] = {} if beta is None else {"beta": beta}
    return out


def test_the_convergence_slice_holds_only_the_study_beta(test_config):
    """The studies depend on the betas only through the study's β and whether it is one of them (reused run):
    adding or removing another β leaves the slice, so the rule's params, unchanged; a change of the study's β,
    or its removal from the betas, changes it. Without the narrowing every β edit would rerun the studies."""
    exp = validated(test_config)["experiments"]["tiny"]

    def betas_of(betas, beta=None):
        return params.stage_slice(_with_betas(exp, betas, beta), "convergence")["betas"]

    assert betas_of([5, 50], 50) == betas_of([5, 20, 50], 50) == betas_of([50], 50) == [50]
    assert betas_of([5, 20], 50) == []  # the study's β is no longer run: its run cannot be reused
    assert betas_of([5, 50]) == [50] and betas_of([5, 50, 80]) == [80]  # the default β is the largest
    unnarrowed = {k: v for k, v in _with_betas(exp, [5, 20, 50], 50).items() if k in params.STAGE_KEYS["convergence"]}
    assert params.canonical(unnarrowed)["betas"] != betas_of([5, 20, 50], 50)


def test_a_per_beta_job_reads_its_own_level():
    """``mean_field.level`` given per β: each β's finite_temperature job sees its own entry (an integer), so
    adding a β or changing another β's level leaves its params unchanged, and changing its own changes them; the
    list itself, passed on, would change every β's params with any edit."""
    exp = {"betas": [10, 31.6, 100], "mean_field": {"level": [3, 3, 4], "max_triangles": 40000}}

    def job(experiment, beta):
        return params.stage_params("e", experiment, "finite_temperature", 1, beta=beta)["experiment"]["mean_field"]

    added = {"betas": [10, 31.6, 100, 1000], "mean_field": {"level": [3, 3, 4, 4], "max_triangles": 40000}}
    other = {"betas": [10, 31.6, 100], "mean_field": {"level": [3, 3, 5], "max_triangles": 40000}}
    assert job(exp, 10) == job(added, 10) == job(other, 10) == {"level": 3, "max_triangles": 40000}
    assert job(exp, 100) == {"level": 4, "max_triangles": 40000} != job(other, 100)
    assert job(added, 1000)["level"] == 4
    whole = params.stage_slice(exp, "finite_temperature")["mean_field"]
    assert whole != params.stage_slice(added, "finite_temperature")["mean_field"]
    one = {"betas": [10, 100], "mean_field": {"level": 4, "max_triangles": 40000}}
    assert job(one, 10) == job(one, 100) == {"level": 4, "max_triangles": 40000}


@settings(max_examples=60, deadline=None)
@given(
    betas=st.lists(st.sampled_from([1.0, 3.0, 10.0, 31.6, 100.0]), min_size=1, max_size=5, unique=True),
    beta=st.one_of(st.none(), st.sampled_from([3.0, 10.0, 1000.0])),
)
def test_the_studies_read_the_same_from_the_narrowed_slice(betas, beta):
    """The stage receives the narrowed slice: its settings and its reuse of the experiment's run are those of
    the whole config."""
    with open(TEST_CONFIG) as fh:
        exp = validated(yaml.safe_load(fh))["experiments"]["tiny"]
    exp = _with_betas(exp, sorted(betas), beta)
    exp["replicas"] = 4  # enough for the study to reuse the run of its β
    exp["convergence"]["particles"] = {"tokens": [8, 16, 32, 64], "replicas": 4}
    narrowed = params.stage_slice(exp, "convergence")
    full, cut = studies.study_settings("tiny", exp), studies.study_settings("tiny", narrowed)
    assert full == cut
    assert studies.reused_betas(exp, full) == studies.reused_betas(narrowed, cut)


def test_every_path_of_the_table_is_a_config_key():
    schema = yaml.safe_load((SNAKEFILE.parent / "workflow" / "schemas" / "config.schema.yaml").read_text())
    known = _schema_paths(schema["$defs"]["experiment"])
    for stage, paths in params.STAGE_KEYS.items():
        assert set(paths) <= known, (stage, set(paths) - known)
        assert list(paths) == sorted(paths), stage
    # one slice per figure, no more, no fewer (the names are those of plan.FIGURES)
    assert {k for k in params.STAGE_KEYS if k.startswith("figure:")} == {f"figure:{f}" for f in lowtemp_plan.FIGURES}
    assert list(plotting_figures.FIGURES) == list(lowtemp_plan.FIGURES)


def test_every_rule_takes_its_slice_from_the_table():
    """Each rule with a stage passes stage_params(<its stage>) and nothing else from the config."""
    rules = {}
    for path in (SNAKEFILE.parent / "workflow" / "rules").glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", path.read_text(), re.M):
            rules[name] = body
    staged = {name: re.findall(r'stage=stage_params\("(\w+)"\)', body) for name, body in rules.items()}
    assert {name: s for name, s in staged.items() if s} == {
        name: [name]
        for name in (
            "matrices",
            "initial_tokens",
            "finite_temperature",
            "zero_temperature",
            "distances_beta",
            "distances",
            "fit",
            "claims",
            "figure",
            "convergence",
            "convergence_figure",
            "particle_error_beta",
            "particle_error",
            "animation",
        )
    }
    for name, body in rules.items():
        assert "EXPERIMENTS[" not in body and "config[" not in body, name


# ------------------------------------------------------------------ the table against the code
class OutsideSlice(AssertionError):
    """A stage read a config key that its row of STAGE_KEYS does not list."""


class Guarded(dict):
    """A stage's slice that fails on reading a key outside ``allowed`` (a tree from ``params.allowed_tree``)
    and records in ``reads`` the paths of the table it did read."""

    def __init__(self, data, allowed, stage, reads, where=""):
        super().__init__(data)
        self._allowed, self._stage, self._reads, self._where = allowed, stage, reads, where

    def _check(self, key):
        if key not in self._allowed:
            raise OutsideSlice(
                f"stage {self._stage!r} reads {self._where}{key}, which params.STAGE_KEYS does not list for it"
            )
        if self._allowed[key] is True:
            self._reads.add(f"{self._where}{key}")

    def __getitem__(self, key):
        self._check(key)
        value = super().__getitem__(key)
        sub = self._allowed[key]
        return value if sub is True else Guarded(value, sub, self._stage, self._reads, f"{self._where}{key}.")

    def get(self, key, default=None):
        self._check(key)
        return self[key] if super().__contains__(key) else default

    def __contains__(self, key):
        self._check(key)
        return super().__contains__(key)

    def __iter__(self):  # also makes a copy ({**slice}, dict(slice)) read every key through __getitem__
        return iter(list(super().__iter__()))


def guarded(experiment, stage, reads=None):
    return Guarded(
        params.stage_slice(experiment, stage),
        params.allowed_tree(stage),
        stage,
        set() if reads is None else reads.setdefault(stage, set()),
    )


def test_guard_catches_reads_outside_the_slice(test_config):
    exp = validated(test_config)["experiments"]["tiny"]
    g = guarded(exp, "fit")
    assert g["fit"]["confidence"] == 0.95 and g["tokens"] == 64
    for read in (
        lambda: g["claims"],
        lambda: g.get("kernel", "auto"),
        lambda: "convergence" in g,
        lambda: g["time"]["horizon"],
        lambda: g["matrices"].get("family", "spectral"),
    ):
        with pytest.raises(OutsideSlice):
            read()


@pytest.fixture(scope="module")
def run_dir(completed_test_run) -> Path:
    return completed_test_run


@pytest.fixture(scope="module")
def test_experiments() -> dict:
    with open(TEST_CONFIG) as fh:
        return validated(yaml.safe_load(fh))


def _prov(path):
    return netcdf.read_provenance(netcdf.read_netcdf(path))


@pytest.mark.e2e
def test_every_stage_reads_exactly_its_slice(run_dir, test_experiments, tmp_path):
    """Each stage function of the tiny experiment runs on its guarded slice, from the completed run's
    inputs: it reads no key outside its row of the table and every key in it, and its output records
    the slice as provenance."""
    name, seed = "tiny", test_experiments["root_seed"]
    exp = test_experiments["experiments"][name]
    res = run_dir / "results" / name
    mats, toks, zero = res / "matrices.nc", res / "initial_tokens.nc", res / "zero_temperature.nc"
    out, reads = tmp_path, {}

    def g(stage, experiment=exp):
        return guarded(experiment, stage, reads)

    def check(stage, path, experiment=exp):
        assert _prov(path)["config"] == params.stage_slice(experiment, stage), stage

    matrices_stage.stage_matrices(name, g("matrices"), seed, output=out / "matrices.nc")
    check("matrices", out / "matrices.nc")
    initial_tokens_stage.stage_initial_tokens(
        name, g("initial_tokens"), seed, matrices_path=mats, output=out / "initial_tokens.nc"
    )
    check("initial_tokens", out / "initial_tokens.nc")
    simulate_stage.stage_finite_temperature(
        name, g("finite_temperature"), seed, beta=5.0, matrices_path=mats, tokens_path=toks, output=out / "beta5.nc"
    )
    check("finite_temperature", out / "beta5.nc")
    # a model: mean_field experiment's finite-temperature stage reads the rest of its row
    mf_exp, mf_res = test_experiments["experiments"]["tiny_mean_field"], run_dir / "results" / "tiny_mean_field"
    simulate_stage.stage_finite_temperature(
        "tiny_mean_field",
        g("finite_temperature", mf_exp),
        seed,
        beta=10.0,
        matrices_path=mf_res / "matrices.nc",
        tokens_path=mf_res / "initial_tokens.nc",
        output=out / "mf_beta10.nc",
    )
    check("finite_temperature", out / "mf_beta10.nc", mf_exp)
    # and, in d = 3 without symmetry, the S² mesh's keys: tiny's matrices (streams: tiny) and a vMF mixture whose
    # means the stage draws from tiny's streams as the initial tokens did, to t = 0.5
    s2_exp = validated(
        {
            "root_seed": seed,
            "experiments": {
                "tiny_s2": {
                    **copy.deepcopy(exp),
                    "model": "mean_field",
                    "streams": "tiny",
                    "initial_measure": {"name": "vmf_mixture", "kappas": [2.0, 1.0]},
                    "mean_field": {"level": 3, "max_triangles": 20000},
                    "time": {"horizon": 0.5, "dt": 0.05, "snapshots": 2},
                    "figures": {"snapshot_times": [0.0, 0.5]},
                }
            },
        }
    )["experiments"]["tiny_s2"]
    initial_tokens_stage.stage_initial_tokens(
        "tiny_s2", g("initial_tokens", s2_exp), seed, matrices_path=mats, output=out / "s2_tokens.nc"
    )
    simulate_stage.stage_finite_temperature(
        "tiny_s2",
        g("finite_temperature", s2_exp),
        seed,
        beta=5.0,
        matrices_path=mats,
        tokens_path=out / "s2_tokens.nc",
        output=out / "s2_beta5.nc",
    )
    check("finite_temperature", out / "s2_beta5.nc", s2_exp)
    # and its particle runs against the reference (mean_field.particles), then their collection
    distances_stage.stage_particle_error_beta(
        "tiny_mean_field",
        g("particle_error_beta", mf_exp),
        seed,
        matrices_path=mf_res / "matrices.nc",
        tokens_path=mf_res / "initial_tokens.nc",
        finite_path=mf_res / "finite_temperature" / "beta10.nc",
        output=out / "particle_error_beta10.nc",
    )
    check("particle_error_beta", out / "particle_error_beta10.nc", mf_exp)
    distances_stage.stage_particle_error(
        "tiny_mean_field",
        g("particle_error", mf_exp),
        seed,
        parts=[out / "particle_error_beta10.nc"],
        output=out / "particle_error.nc",
    )
    check("particle_error", out / "particle_error.nc", mf_exp)
    simulate_stage.stage_zero_temperature(
        name, g("zero_temperature"), seed, matrices_path=mats, tokens_path=toks, output=out / "zero_temperature.nc"
    )
    check("zero_temperature", out / "zero_temperature.nc")
    distances_stage.stage_distances_beta(
        name,
        g("distances_beta"),
        seed,
        matrices_path=mats,
        tokens_path=toks,
        finite_path=res / "finite_temperature" / "beta5.nc",
        zero_path=zero,
        output=out / "distances_beta5.nc",
    )
    check("distances_beta", out / "distances_beta5.nc")
    parts = sorted((res / "distances").glob("beta*.nc"))
    distances_stage.stage_distances(
        name,
        g("distances"),
        seed,
        matrices_path=mats,
        tokens_path=toks,
        zero_path=zero,
        parts=parts,
        output=out / "distances.nc",
    )
    check("distances", out / "distances.nc")
    fit_stage.stage_fit(
        name, g("fit"), seed, matrices_path=mats, distances_path=res / "distances.nc", output=out / "fit.nc"
    )
    check("fit", out / "fit.nc")
    fit_stage.stage_claims(
        name, g("claims"), seed, distances_path=res / "distances.nc", fit_path=res / "fit.nc", output=out / "claims.nc"
    )
    check("claims", out / "claims.nc")
    for fig in plotting_figures.FIGURES:
        figures.stage_figure(
            fig,
            name,
            g(f"figure:{fig}"),
            matrices_path=mats,
            distances_path=res / "distances.nc",
            fit_path=res / "fit.nc",
            zero_path=zero,
            finite_paths=sorted((res / "finite_temperature").glob("*.nc")),
            pdf=out / f"{fig}.pdf",
            png=out / f"{fig}.png",
        )
    figures.stage_animation(
        name,
        g("animation"),
        zero_path=zero,
        finite_paths=sorted((res / "finite_temperature").glob("*.nc")),
        gif=out / "tokens.gif",
    )
    # the convergence studies, on a small block (the defaults would take minutes)
    small = {
        **exp,
        "convergence": {
            "steps": {"dt": 0.1, "times": [1.0], "tokens": 16},
            "particles": {"tokens": [8, 16, 32, 64], "replicas": 4, "horizon": 1.0},
        },
    }
    convergence.stage_convergence(
        name, g("convergence", small), seed, matrices_path=mats, tokens_path=toks, output=out / "convergence.nc"
    )
    check("convergence", out / "convergence.nc", small)
    figures.stage_convergence_figure(
        name,
        g("convergence_figure", small),
        convergence_path=out / "convergence.nc",
        pdf=out / "convergence.pdf",
        png=out / "convergence.png",
    )
    # no key of the table is left unread (tiny uses kernel 'auto', whose rule reads tokens and dim)
    assert set(reads) == set(params.STAGE_KEYS)
    unread = {stage: sorted(set(paths) - reads[stage]) for stage, paths in params.STAGE_KEYS.items()}
    unread = {stage: keys for stage, keys in unread.items() if keys}
    assert not unread, f"listed in params.STAGE_KEYS but never read: {unread}"


# ------------------------------------------------------------------ what an edit reruns
BETAS = {"tiny": ["5", "50"], "tiny_circle": ["10"], "tiny_mean_field": ["10", "100"]}
FIGURES = {
    "tiny": lowtemp_plan.figures_for({"dim": 3}),
    "tiny_circle": lowtemp_plan.figures_for({"dim": 2}),
    "tiny_mean_field": lowtemp_plan.figures_for({"dim": 2}),
}
SUMMARY = {"claims_summary"}


#: the experiments of config/test.yaml with particle runs against their mean-field reference (mean_field.particles)
PARTICLE_ERROR = {"tiny_mean_field"}


def _jobs(e, rule, betas=None):
    if rule in ("finite_temperature", "distances_beta", "particle_error_beta"):
        return {f"{rule}[{e},{b}]" for b in (BETAS[e] if betas is None else betas)}
    if rule == "figure":
        return {f"figure[{e},{f}]" for f in FIGURES[e]}
    return {f"{rule}[{e}]"}


def from_fit(e):
    return _jobs(e, "fit") | _jobs(e, "claims") | _jobs(e, "figure") | SUMMARY


def from_distances(e, betas=None):
    return _jobs(e, "distances_beta", betas) | _jobs(e, "distances") | from_fit(e)


def from_particle_error(e, betas=None):
    if e not in PARTICLE_ERROR:
        return set()
    # the figure w2_projection draws the particle runs beside the reference
    return _jobs(e, "particle_error_beta", betas) | _jobs(e, "particle_error") | {f"figure[{e},w2_projection]"}


def from_finite(e, betas=None):
    """The finite-temperature runs onward; every experiment of config/test.yaml is on S¹ or S², so its animation too."""
    return (
        _jobs(e, "finite_temperature", betas)
        | from_distances(e, betas)
        | from_particle_error(e, betas)
        | _jobs(e, "animation")
    )


def from_simulations(e):
    return from_finite(e) | _jobs(e, "zero_temperature")


def from_tokens(e):
    return _jobs(e, "initial_tokens") | from_simulations(e)


def everything(e):
    return _jobs(e, "matrices") | from_tokens(e)


def _set(path, value):
    """An edit: set the key at the dotted ``path`` (from the top of the config) to ``value``."""

    def edit(cfg):
        node = cfg
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return edit


def _integral_floats(cfg):
    tiny = cfg["experiments"]["tiny"]
    tiny["time"]["horizon"] = 6  # was 6.0
    tiny["betas"] = [5.0, 50.0]  # were 5, 50
    tiny["figures"]["snapshot_times"] = [0, 1, 6]  # were 0.0, 1.0, 6.0


#: (what, edit of the config as read from config/test.yaml, jobs a dry run must schedule)
EDITS = [
    ("figure option", _set("experiments.tiny.figures.snapshot_times", [0.0, 2.0, 6.0]), {"figure[tiny,snapshots]"}),
    (
        "figure option of a d = 2 experiment (its tokens on the circle)",
        _set("experiments.tiny_circle.figures.snapshot_times", [0.0, 2.0, 6.0]),
        {"figure[tiny_circle,snapshots]"},
    ),
    # the level of the spread's lower bound over resampled tokens in distances.nc too
    ("fit option (confidence)", _set("experiments.tiny.fit.confidence", 0.9), from_distances("tiny")),
    ("fit option (early_time)", _set("experiments.tiny.fit.early_time", 2.0), from_fit("tiny")),
    ("claims option", _set("experiments.tiny.claims.rate_tolerance", 0.2), {"claims[tiny]"} | SUMMARY),
    ("distances.exact_every", _set("experiments.tiny.distances.exact_every", 2), from_distances("tiny")),
    ("one beta added", _set("experiments.tiny.betas", [5, 20, 50]), from_finite("tiny", ["20"])),
    # judged by the fit (and drawn by the figures), not by the simulations
    ("ess_threshold", _set("experiments.tiny.ess_threshold", 20), from_fit("tiny")),
    ("integrator", _set("experiments.tiny.integrator", "euler"), from_simulations("tiny")),
    ("time", _set("experiments.tiny.time.dt", 0.05), from_simulations("tiny")),
    ("tokens", _set("experiments.tiny.tokens", 80), from_tokens("tiny")),
    (
        "initial_measure",
        _set("experiments.tiny.initial_measure", {"name": "vmf_mixture", "kappas": [1.0]}),
        from_tokens("tiny"),
    ),
    ("matrices", _set("experiments.tiny.matrices.sigma_max", 1.3), everything("tiny")),
    ("root_seed", _set("root_seed", 8), everything("tiny") | everything("tiny_circle") | everything("tiny_mean_field")),
    (
        "the mean-field reference's cells",
        _set("experiments.tiny_mean_field.mean_field.width", 0.25),
        from_finite("tiny_mean_field", ["10", "100"]),
    ),
    (
        "the particle numbers of the mean-field experiment's particle runs (not its reference)",
        _set("experiments.tiny_mean_field.mean_field.particles.tokens", [24, 48]),
        from_particle_error("tiny_mean_field"),
    ),
    (
        "distances.exact_every of the mean-field experiment: its distances and its particle errors",
        _set("experiments.tiny_mean_field.distances.exact_every", 2),
        from_distances("tiny_mean_field") | from_particle_error("tiny_mean_field"),
    ),
    (
        "the particle runs switched off: only the figure that drew them beside the reference is redrawn",
        lambda cfg: cfg["experiments"]["tiny_mean_field"]["mean_field"].pop("particles"),
        {"figure[tiny_mean_field,w2_projection]"},
    ),
    (
        "another experiment's fit option",
        _set("experiments.tiny_circle.fit.confidence", 0.9),
        from_distances("tiny_circle"),
    ),
    (
        "a convergence block: its particle-number study then decides with the ESS which beta the fit resolves, and "
        "its figure joins the default target",
        _set("experiments.tiny.convergence", {"steps": {"tokens": 16}}),
        {"convergence[tiny]", "convergence_figure[tiny]"} | from_fit("tiny"),
    ),
    ("checkpoint_every_seconds", _set("checkpoint_every_seconds", 60), set()),
    ("integral floats written as integers and back", _integral_floats, set()),
    ("keys sorted (YAML round trip with sort_keys)", "sort_keys", set()),
    ("experiments reordered", lambda c: c.update(experiments=dict(reversed(list(c["experiments"].items())))), set()),
]

RULE = re.compile(r"^\s*(?:local)?rule (\w+):$")
WILDCARDS = re.compile(r"^\s*wildcards: (.*)$")


def scheduled_jobs(stdout: str) -> set[str]:
    """The jobs (``rule[wildcard values]``) of a dry run's output, without the target ``all``
    (a job of a group is printed indented under the group)."""
    jobs, rule, values = set(), None, []

    def close():
        if rule is not None and rule != "all":
            jobs.add(f"{rule}[{','.join(values)}]" if values else rule)

    for line in stdout.splitlines():
        if m := RULE.match(line):
            close()
            rule, values = m.group(1), []
        elif rule is not None and (m := WILDCARDS.match(line)):
            values = [kv.split("=", 1)[1] for kv in m.group(1).split(", ")]
    close()
    return jobs


def dry_run(workdir: Path, config: dict, folder: Path, sort_keys=False, env=None) -> tuple[set[str], str]:
    """The jobs a dry run on ``workdir`` schedules for ``config`` (Snakemake run with ``env``), and its output."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=sort_keys))
    proc = subprocess.run(
        [
            str(SNAKEMAKE),
            "--snakefile",
            str(SNAKEFILE),
            "--directory",
            str(workdir),
            "--configfile",
            str(path),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return scheduled_jobs(proc.stdout), proc.stdout


def _edited(edit) -> dict:
    config = yaml.safe_load(TEST_CONFIG.read_text())
    if edit == "sort_keys":
        assert list(config) != sorted(config)  # the file's own order is not the sorted one
    else:
        edit(config)
    return config


@pytest.fixture(scope="module")
def dry_runs(run_dir, tmp_path_factory) -> dict:
    """what -> (jobs, output) of every edit's dry run (a few seconds each, two at a time)."""
    base = tmp_path_factory.mktemp("edits")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            what: pool.submit(dry_run, run_dir, _edited(edit), base / f"edit{i}", edit == "sort_keys")
            for i, (what, edit, _) in enumerate(EDITS)
        }
        return {what: f.result() for what, f in futures.items()}


@pytest.mark.e2e
@pytest.mark.parametrize("what, expected", [(e[0], e[2]) for e in EDITS], ids=[e[0] for e in EDITS])
def test_an_edit_reruns_exactly_the_jobs_that_read_it(dry_runs, what, expected):
    jobs, out = dry_runs[what]
    reasons = "\n".join(
        line.strip() for line in out.splitlines() if RULE.match(line) or line.strip().startswith("reason:")
    )
    assert jobs == expected, (
        f"{what}: unexpected {sorted(jobs - expected)}, missing {sorted(expected - jobs)}\n{reasons}"
    )


@pytest.mark.e2e
def test_another_code_version_reruns_nothing(run_dir, tmp_path):
    """The code version is provenance, not a param: with git unable to read the checkout (GIT_DIR elsewhere), the
    version the Snakemake process would compute is ``unknown``, not the one the finished run recorded, and a dry
    run schedules nothing. A rule whose params held ``lowtemp.__version__`` would rerun here."""
    env = dict(os.environ, GIT_DIR=str(tmp_path / "no-repository"))
    probe = subprocess.run(
        [sys.executable, "-c", "import lowtemp; print(lowtemp.__version__)"], capture_output=True, text=True, env=env
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    recorded = _prov(run_dir / "results" / "tiny" / "fit.nc")["version"]
    assert probe.stdout.strip() == "unknown" != recorded
    jobs, out = dry_run(run_dir, yaml.safe_load(TEST_CONFIG.read_text()), tmp_path / "cfg", env=env)
    assert jobs == set(), out[-3000:]


def test_a_dry_run_lists_grouped_jobs():
    out = (
        "[date] Group job figures (jobs in lexicogr. order):\n\n    [date]\n    rule claims:\n"
        "        input: a\n        wildcards: experiment=tiny\n[date]\nrule claims_summary:\n    input: b\n"
        "[date]\nlocalrule all:\n    input: c\n"
    )
    assert scheduled_jobs(out) == {"claims[tiny]", "claims_summary"}
