"""The stage registry (``lowtemp.config.registry``) is the one place a stage is named: every rule that runs a
stage function reads its params, resources, threads and group from the registry entry of its own name, and
every entry is such a rule; the config slices, the resource requests and the job groups are derived from it."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, experiment_matrices, resource_experiment, rule_blocks, rule_script

from lowtemp.config import costs, params, registry, resources
from lowtemp.config import plan as lowtemp_plan
from lowtemp.plotting import figures

RULES = ROOT / "workflow" / "rules"
#: the rule files' helpers that take a stage name (workflow/rules/common.smk and resources.smk)
HELPERS = ("stage_params", "stage_mem_mb", "stage_runtime", "stage_cpus", "stage_gpus", "stage_group", "stage_threads")


#: rules that run a script but no stage of the registry: the summary of every experiment's claims (a local rule)
NOT_STAGES = {"claims_summary"}
_CALL = re.compile(rf"\b({'|'.join(HELPERS)})\s*\(\s*(?:stage\s*=\s*)?(?:([\"'])([\w:]+)\2)?\s*\)?", re.S)


def rule_stage_references(text: str) -> dict[str, list[tuple[str, str]]]:
    """For every rule of a rule file, the (helper, stage name) pairs of its body; a name that is not a string
    literal reads as "<not a literal>"."""
    return {
        rule: [(m[1], m[3] if m[3] else "<not a literal>") for m in _CALL.finditer(body)]
        for rule, body in rule_blocks(text).items()
    }


def required_helpers(name: str) -> set[str]:
    """The helpers a stage's rule must call: params and resources always, and what its registry entry asks for."""
    spec = registry.STAGES[name]
    need = {"stage_params", "stage_mem_mb", "stage_runtime", "stage_cpus"}
    return need | {
        h
        for h, on in (
            ("stage_gpus", spec.evaluates_field),
            ("stage_group", spec.group),
            ("stage_threads", spec.threads > 1),
        )
        if on
    }


def mismatches(references: dict[str, list[tuple[str, str]]], scripted: set[str]) -> list[str]:
    """Rules that name another stage than their own or a stage the registry does not hold, stages whose rule
    lacks a helper its entry asks for, and rules with a script outside the registry (``NOT_STAGES`` aside)."""
    bad = []
    for rule, calls in references.items():
        for helper, name in calls:
            if name != rule:
                bad.append(f"rule {rule}: {helper}({name!r})")
        if rule in registry.STAGES:
            missing = required_helpers(rule) - {h for h, n in calls if n == rule}
            if missing:
                bad.append(f"rule {rule} does not call {sorted(missing)}")
        elif calls or (rule in scripted and rule not in NOT_STAGES):
            bad.append(f"rule {rule}: no registry entry")
    return bad


def _all_references() -> tuple[dict[str, list[tuple[str, str]]], set[str]]:
    refs, scripted = {}, set()
    for smk in sorted(RULES.glob("*.smk")):
        text = smk.read_text(encoding="utf-8")
        refs.update(rule_stage_references(text))
        scripted |= {rule for rule, body in rule_blocks(text).items() if rule_script(body)}
    return refs, scripted


def test_every_rule_reads_its_own_registry_entry_and_every_entry_is_a_rule():
    refs, scripted = _all_references()
    assert mismatches(refs, scripted) == []
    assert {rule for rule, calls in refs.items() if calls} == set(registry.STAGES)


@pytest.mark.parametrize(
    "rule, expected",
    [
        ('rule claims:\n    resources:\n        mem_mb=stage_mem_mb("fit"),\n', "rule claims: stage_mem_mb('fit')"),
        ("rule claims:\n    resources:\n        mem_mb=stage_mem_mb('fit'),\n", "rule claims: stage_mem_mb('fit')"),
        (
            'rule claims:\n    resources:\n        mem_mb=stage_mem_mb(\n            "fit"\n        ),\n',
            "rule claims: stage_mem_mb('fit')",
        ),
        (
            'rule claims:  # sized as the fit\n    resources:\n        mem_mb=stage_mem_mb(stage="fit"),\n',
            "rule claims: stage_mem_mb('fit')",
        ),
        (
            "rule claims:\n    resources:\n        mem_mb=stage_mem_mb(STAGE),\n",
            "rule claims: stage_mem_mb('<not a literal>')",
        ),
        ('checkpoint extra:\n    params:\n        stage=stage_params("extra"),\n', "rule extra: no registry entry"),
        (
            'rule extra:\n    output:\n        "x"\n    script:\n        "../scripts/extra.py"\n',
            "rule extra: no registry entry",
        ),
    ],
)
def test_a_rule_reading_another_stage_is_caught(rule, expected):
    """The inputs the check must fail on: a rule sized as another stage (however the call is written), a name
    that is not a literal, a rule or checkpoint the registry lacks."""
    refs = rule_stage_references(rule)
    scripted = {r for r, body in rule_blocks(rule).items() if rule_script(body)}
    assert expected in mismatches(refs, scripted)


@pytest.mark.parametrize("helper", ["stage_threads", "stage_group", "stage_gpus", "stage_mem_mb"])
def test_a_rule_missing_a_helper_its_entry_asks_for_is_caught(helper):
    """Deleting a rule's threads, group, GPU or memory line (a hard-coded value instead) is caught."""
    text = "\n".join((RULES / f).read_text(encoding="utf-8") for f in ("simulate.smk", "fit.smk", "convergence.smk"))
    refs = rule_stage_references(text)
    rule = {
        "stage_threads": "convergence",
        "stage_group": "claims",
        "stage_gpus": "finite_temperature",
        "stage_mem_mb": "claims",
    }[helper]
    refs[rule] = [(h, n) for h, n in refs[rule] if h != helper]
    assert mismatches(refs, set()) == [f"rule {rule} does not call ['{helper}']"]


def test_threaded_rules_take_their_threads_from_the_registry():
    for smk in RULES.glob("*.smk"):
        text = smk.read_text(encoding="utf-8")
        for threads in re.findall(r"^\s+threads:\s*(.+)$", text, flags=re.M):
            assert re.fullmatch(r'stage_threads\("\w+"\)', threads.strip()), f"{smk.name}: threads: {threads}"
    refs, _ = _all_references()
    threaded = {name for name, s in registry.STAGES.items() if s.threads > 1}
    assert threaded == {rule for rule, calls in refs.items() if ("stage_threads", rule) in calls}
    assert threaded == {"finite_temperature", "convergence"}


def test_the_config_slices_are_the_registry_keys():
    for name, spec in registry.STAGES.items():
        if spec.figure_keys:
            assert set(spec.figure_keys) == set(lowtemp_plan.FIGURES) == set(figures.FIGURES)
            for figure, keys in spec.figure_keys.items():
                assert params.STAGE_KEYS[f"figure:{figure}"] == keys
        else:
            assert params.STAGE_KEYS[name] == spec.keys


def test_every_stage_has_one_cost_and_a_stage_without_one_is_refused(monkeypatch):
    assert set(costs.STAGE_COSTS) == set(registry.STAGES)
    monkeypatch.delitem(costs.STAGE_COSTS, "fit")
    exp = resource_experiment()
    with pytest.raises(KeyError, match="fit"):
        resources.estimate("fit", exp, matrices=experiment_matrices(exp))


@pytest.mark.parametrize("name", sorted(registry.STAGES))
def test_each_estimate_is_the_registry_cost_turned_into_a_request(name):
    """memory = base + margin · bytes, wall time = startup + safety · seconds, CPUs = the threads of a threaded
    stage, recomputed here from the registry's cost function."""
    exp = resource_experiment()
    M = experiment_matrices(exp)
    spec = registry.stage(name)
    beta = 100.0 if name == "finite_temperature" else None
    data, seconds = costs.STAGE_COSTS[name](exp, beta=beta, matrices=M, threads=spec.threads)
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
