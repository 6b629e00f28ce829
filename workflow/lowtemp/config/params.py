"""Which config keys each stage reads (the registry's table) and the canonical slices built from it.

Snakemake reruns a job when its ``params`` change. Every rule's params hold the slice
of its experiment's config that its stage function reads (``STAGE_KEYS``), so an edit
reruns only the stages that read the edited key and what depends on their outputs.
The slice is canonical: keys sorted at every level and integral floats written as
integers (10.0 -> 10), so a config whose keys are merely reordered, or whose numbers
are written 10.0 instead of 10, reruns nothing. The slice is also what the stage
passes on to ``store.netcdf.provenance``: each output records the keys it depends on.

``tests/workflow/test_rerun.py`` runs every stage function on its slice with a guard that
fails on any read outside it, and checks which jobs a dry run reruns after each kind
of edit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from . import registry

#: config keys (dotted paths into one experiment) read by each rule's stage function, from the registry
#: (``lowtemp.config.registry.Stage.keys``); the rule ``figure`` has one entry per figure (``figure:<name>``)
STAGE_KEYS: dict[str, tuple[str, ...]] = {
    key: keys
    for name, spec in registry.STAGES.items()
    for key, keys in (
        [(f"figure:{figure}", k) for figure, k in spec.figure_keys.items()] if spec.figure_keys else [(name, spec.keys)]
    )
}


def canonical(value):
    """``value`` with mapping keys sorted at every level, tuples as lists and integral floats as ints.

    Two configs that differ only in key order, or in writing 10.0 for 10, give equal
    canonical values with equal ``repr`` (what Snakemake compares for params).
    """
    if isinstance(value, Mapping):
        return {str(k): canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def stage_slice(experiment: Mapping, stage: str) -> dict:
    """The canonical part of one experiment's config that ``stage`` reads (``STAGE_KEYS[stage]``).

    A path whose block is present but whose key is not (a default the stage resolves
    itself) keeps the empty block, so the stage reads it as it would the whole config. A stage whose
    registry entry narrows its slice (``registry.Stage.narrow``) gets the narrowed one."""
    try:
        paths = STAGE_KEYS[stage]
    except KeyError:
        raise KeyError(f"no config slice for stage {stage!r}; known: {sorted(STAGE_KEYS)}") from None
    out: dict = {}
    for path in paths:
        src, dst = experiment, out
        *parents, leaf = path.split(".")
        for key in parents:
            if not isinstance(src, Mapping) or key not in src:
                break
            src = src[key]
            dst = dst.setdefault(key, {})
        else:
            if isinstance(src, Mapping) and leaf in src:
                dst[leaf] = src[leaf]
    spec = registry.STAGES.get(stage)
    return canonical(spec.narrow(out) if spec is not None and spec.narrow is not None else out)


def stage_params(name: str, experiment: Mapping, stage: str, root_seed: int, beta: float | None = None) -> dict:
    """What a rule passes to its stage: the experiment's name, its slice for ``stage``, the root seed. A per-β job
    (``beta``) gets its own β's entry of a setting given per β (``for_beta``)."""
    sliced = stage_slice(experiment, stage)
    if beta is not None:
        sliced = for_beta(sliced, experiment["betas"], beta)
    return {"name": name, "experiment": sliced, "root_seed": int(root_seed)}


#: settings that may be a list of one value per β of ``betas`` (config/README.md)
PER_BETA = ("mean_field.level",)


def for_beta(sliced: dict, betas, beta: float) -> dict:
    """``sliced`` with every ``PER_BETA`` setting given as a list replaced by its entry for β (the list in the
    order of ``betas``): a job reads its own β's value, so adding a β, or changing another β's entry, leaves its
    params, and so the job, as they were. A list of another length than ``betas`` is left for the config check."""
    out = canonical(sliced)
    index = [float(b) for b in betas].index(float(beta))
    for path in PER_BETA:
        *parents, leaf = path.split(".")
        block = out
        for key in parents:
            block = block.get(key) if isinstance(block, Mapping) else None
        if isinstance(block, dict) and isinstance(block.get(leaf), list) and len(block[leaf]) == len(betas):
            block[leaf] = block[leaf][index]
    return out


def allowed_tree(stage: str) -> dict:
    """``STAGE_KEYS[stage]`` as a tree: key -> True (the whole value) or a tree of its allowed keys."""
    tree: dict = {}
    for path in STAGE_KEYS[stage]:
        node = tree
        *parents, leaf = path.split(".")
        for key in parents:
            child = node.get(key)
            if child is True:
                break
            node = node.setdefault(key, {})
        else:
            node[leaf] = True
    return tree
