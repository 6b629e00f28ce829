"""Stages ``fit``, ``claims`` and ``claims_summary``: the constants of the bound with their intervals, the
paper's statements judged on them, and every experiment's verdicts in one table.

Called by ``workflow/scripts/`` (thin Snakemake adapters) or from a notebook; ``experiment`` is one
validated entry of the config's ``experiments`` (or its ``lowtemp.config.params`` slice).
"""

from __future__ import annotations

import logging

import numpy as np

from ..analysis import claims, estimates, resolution, verdicts
from ..plotting import summary
from ..store import analyses, datasets, netcdf

log = logging.getLogger("lowtemp")


def stage_fit(name, experiment, root_seed, matrices_path, distances_path, output, convergence_path=None):
    """fit.nc: every constant and interval of the experiment, computed once (``estimates.fit_experiment``).

    With ``convergence_path`` (an experiment with a ``convergence`` block), its
    particle-number budgets decide for which claims each of the study's β is resolved.
    """
    M = datasets.load_matrices(matrices_path)
    ds = netcdf.read_netcdf(distances_path, "distances")
    budgets = None
    if convergence_path is not None:
        conv = netcdf.read_netcdf(convergence_path, "convergence")
        budgets = resolution.study_budgets(conv, float(experiment["fit"]["particle_error_fraction"]))
        betas = [float(b) for b in ds["beta"].values]  # the betas of the runs (the slice holds no betas key)
        for b in budgets:
            if not np.any(np.isclose(b.beta, betas, rtol=1e-12, atol=0.0)):
                log.warning(
                    "%s: the particle-number study at beta = %r decides nothing: it is not one of betas %s",
                    name,
                    b.beta,
                    betas,
                )
    numbers = estimates.fit_experiment(
        name,
        ds,
        M,
        experiment["fit"],
        float(experiment["ess_threshold"]),
        int(experiment["tokens"]),
        particle_budgets=budgets,
    )
    out = analyses.fit_dataset(numbers.values, numbers.coords, numbers.attrs)
    for line in estimates.describe(out, name):
        log.info("%s", line)
    for level, line in resolution.describe_resolution(
        out, name, budgets, float(experiment["fit"]["particle_error_fraction"])
    ):
        log.log(level, "%s", line)
    netcdf.write_netcdf(out, output, "fit", netcdf.provenance(name, experiment, root_seed))


def stage_claims(name, experiment, root_seed, distances_path, fit_path, output):
    """claims.nc: the paper's statements judged on fit.nc and distances.nc (``claims.evaluate``)."""
    dist = netcdf.read_netcdf(distances_path, "distances")
    fit = netcdf.read_netcdf(fit_path, "fit")
    found = claims.evaluate(dist, fit, experiment["claims"])
    ds = analyses.claims_dataset(found, fit)
    counts = {s.word: sum(c.status == s for c in found) for s in verdicts.Status}
    log.info(
        "%s: %s (intervals: %g%% Student-t over %d replicas)",
        name,
        ", ".join(f"{n} {w.lower()}" for w, n in counts.items() if n),
        100 * float(fit.attrs["confidence"]),
        dist.sizes["replica"],
    )
    for c in found:
        (log.info if c.status == verdicts.Status.PASSED else log.warning)("%s: %s", name, c.line())
    netcdf.write_netcdf(ds, output, "claims", netcdf.provenance(name, experiment, root_seed))


def stage_claims_summary(claims_files: dict, output) -> None:
    """results/claims_summary.md: every experiment's verdicts as one markdown table, generated from its
    claims.nc (``plotting.summary.claims_summary``; ``claims_files`` maps experiment name to path)."""
    text = summary.claims_summary({name: netcdf.read_netcdf(path, "claims") for name, path in claims_files.items()})
    with netcdf.atomic_path(output) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)
    log.info("claims summary of %d experiments written to %s", len(claims_files), output)
