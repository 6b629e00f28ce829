"""The stage registry (``lowtemp.config.registry``) is the one place a stage is named: every rule that runs a
stage function reads its params, resources, threads and group from the registry entry of its own name, and
every entry is such a rule; the config slices, the resource requests and the job groups are derived from it."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, experiment_matrices, resource_experiment

from lowtemp.config import costs, params, registry, resources
from lowtemp.config import experiment as lowtemp_experiment
from lowtemp.stages import figures

RULES = ROOT / "workflow" / "rules"
#: the rule files' helpers that take a stage name (workflow/rules/common.smk and resources.smk)
HELPERS = ("stage_params", "stage_mem_mb", "stage_runtime", "stage_cpus", "stage_gpus", "stage_group", "stage_threads")


def rule_stage_references(text: str) -> dict[str, set[str]]:
    """For every rule of a rule file, the stage names its body passes to the registry's helpers."""
    out = {}
    for rule, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", text, flags=re.M):
        out[rule] = set(re.findall(rf"\b(?:{'|'.join(HELPERS)})\(\"([\w:]+)\"\)", body))
    return out


def mismatches(references: dict[str, set[str]]) -> list[str]:
    """Rules that name another stage than their own, or a stage the registry does not hold."""
    bad = []
    for rule, names in references.items():
        for name in sorted(names):
            if name != rule:
                bad.append(f"rule {rule} reads the registry entry {name!r}")
            elif name not in registry.STAGES:
                bad.append(f"rule {rule}: no registry entry")
    return bad


def _all_references() -> dict[str, set[str]]:
    refs = {}
    for smk in sorted(RULES.glob("*.smk")):
        refs.update(rule_stage_references(smk.read_text(encoding="utf-8")))
    return refs


def test_every_rule_reads_its_own_registry_entry_and_every_entry_is_a_rule():
    refs = _all_references()
    assert not mismatches(refs)
    assert {rule for rule, names in refs.items() if names} == set(registry.STAGES)


def test_a_rule_reading_another_stage_is_caught():
    """The inputs the check must fail on: a rule sized as another stage, and a stage the registry lacks."""
    text = (
        'rule claims:\n    resources:\n        mem_mb=stage_mem_mb("fit"),\n\n\n'
        'rule extra:\n    params:\n        stage=stage_params("extra"),\n'
    )
    refs = rule_stage_references(text)
    assert refs == {"claims": {"fit"}, "extra": {"extra"}}
    assert mismatches(refs) == ["rule claims reads the registry entry 'fit'", "rule extra: no registry entry"]


def test_threaded_rules_take_their_threads_from_the_registry():
    for smk in RULES.glob("*.smk"):
        text = smk.read_text(encoding="utf-8")
        for threads in re.findall(r"^\s+threads:\s*(.+)$", text, flags=re.M):
            assert re.fullmatch(r'stage_threads\("\w+"\)', threads.strip()), f"{smk.name}: threads: {threads}"
    threaded = {name for name, s in registry.STAGES.items() if s.threads > 1}
    assert threaded == {rule for rule, names in _all_references().items() if any(n for n in names)} & threaded
    assert threaded == {"finite_temperature", "convergence"}


def test_the_config_slices_are_the_registry_keys():
    for name, spec in registry.STAGES.items():
        if spec.figure_keys:
            assert set(spec.figure_keys) == set(lowtemp_experiment.FIGURES) == set(figures.FIGURES)
            for figure, keys in spec.figure_keys.items():
                assert params.STAGE_KEYS[f"figure:{figure}"] == keys
        else:
            assert params.STAGE_KEYS[name] == spec.keys


@pytest.mark.parametrize("name", sorted(registry.STAGES))
def test_each_estimate_is_the_registry_cost_turned_into_a_request(name):
    """memory = base + margin · bytes, wall time = startup + safety · seconds, CPUs = the threads of a threaded
    stage, recomputed here from the registry's cost function."""
    exp = resource_experiment()
    M = experiment_matrices(exp)
    spec = registry.stage(name)
    beta = 100.0 if name == "finite_temperature" else None
    data, seconds = spec.cost(exp, beta=beta, matrices=M, threads=spec.threads)
    est = resources.estimate(name, exp, beta=beta, matrices=M, threads=spec.threads)
    base = resources.FIGURE_BASE_MB if spec.plotting else resources.BASE_MB
    assert est.mem_mb >= base + resources.MEMORY_MARGIN * data / 2**20 > est.mem_mb - 100
    assert est.runtime_min * 60 >= resources.STARTUP_SECONDS + resources.RUNTIME_SAFETY * seconds
    assert est.cpus == (spec.threads if spec.threads > 1 else 1)


def test_groups_come_from_the_registry():
    exp = resource_experiment(tokens=256, replicas=2)
    groups = {name: resources.group_of(name, exp) for name in registry.STAGES}
    assert groups == {name: s.group for name, s in registry.STAGES.items()}
    assert {n for n, g in groups.items() if g == "figures"} == {"fit", "claims", "figure"}
    # a long member (many exact W2 at large N) keeps every distance job on its own
    big = resource_experiment(tokens=65536)
    assert costs.w2_seconds(65536) * 4 * 81 / 60 > resources.SHORT_JOB_MINUTES
    assert resources.group_of("distances", big) is None


def test_an_unknown_stage_is_named():
    with pytest.raises(ValueError, match="unknown stage 'simulate'; known: \\['matrices'"):
        resources.estimate("simulate", resource_experiment())
