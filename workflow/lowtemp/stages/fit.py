"""Stages ``fit``, ``claims`` and ``claims_summary``: the constants of the bound with their intervals, the
paper's statements judged on them, and every experiment's verdicts in one table.

Called by ``workflow/scripts/`` (thin Snakemake adapters) or from a notebook; ``experiment`` is one
validated entry of the config's ``experiments`` (or its ``lowtemp.config.params`` slice).
"""

from __future__ import annotations

import logging

import numpy as np

from ..analysis import claims, estimates
from ..store import datasets, io

log = logging.getLogger("lowtemp")


def stage_fit(name, experiment, root_seed, matrices_path, distances_path, output, convergence_path=None):
    """fit.nc: every constant and interval of the experiment, computed once (``estimates.fit_experiment``).

    With ``convergence_path`` (an experiment with a ``convergence`` block), its
    particle-number budgets decide for which claims each of the study's β is resolved.
    """
    M = datasets.load_matrices(matrices_path)
    ds = io.read_netcdf(distances_path, "distances")
    budgets = None
    if convergence_path is not None:
        conv = io.read_netcdf(convergence_path, "convergence")
        budgets = estimates.study_budgets(conv, float(experiment["fit"]["particle_error_fraction"]))
        betas = [float(b) for b in ds["beta"].values]  # the betas of the runs (the slice holds no betas key)
        for b in budgets:
            if not np.any(np.isclose(b.beta, betas, rtol=1e-12, atol=0.0)):
                log.warning(
                    "%s: the particle-number study at beta = %r decides nothing: it is not one of betas %s",
                    name,
                    b.beta,
                    betas,
                )
    out = estimates.fit_experiment(
        name,
        ds,
        M,
        experiment["fit"],
        float(experiment["ess_threshold"]),
        int(experiment["tokens"]),
        particle_budgets=budgets,
    )
    for line in estimates.describe(out, name):
        log.info("%s", line)
    for beta, low in zip(out.beta.values, out["ess_min_to_horizon"].values):
        if "reference_error_to_horizon" in out:  # a mean-field experiment: no ESS, its reference's error decides
            log.info(
                "%s: beta = %g: mean-field reference error over W2, early %.3g, to departure %.3g; departure "
                "shift against the coarser solution %.3g",
                name,
                beta,
                *(
                    float(out[k].sel(beta=beta))
                    for k in ("reference_error_early", "reference_error_to_departure", "reference_departure_shift")
                ),
            )
            continue
        budget = next((b for b in budgets or () if np.isclose(beta, b.beta)), None)
        if budget is not None:  # the budget decides here, the ESS is a diagnostic
            log.info(
                "%s: beta = %g, N = %d: particle-number budget: remaining N error of W2 <= %.3g x W2 (95%%; "
                "%.3g x W2 reached at N ~ %.3g), departure time per doubling of N in [%.3g, %.3g]; median ESS "
                "down to %.1f (a diagnostic here)",
                name,
                beta,
                budget.tokens,
                budget.w2_ratio,
                float(experiment["fit"]["particle_error_fraction"]),
                budget.tokens_needed,
                *budget.slope_interval,
                low,
            )
            continue
        if not low >= experiment["ess_threshold"]:
            log.warning(
                "%s: beta = %g, N = %d: median effective sample size falls to %.1f < %g; the particle "
                "system does not stand for the mean field there (N must grow like beta^((d-1)/2)); the "
                "claims leave this beta out where it falls inside their window",
                name,
                beta,
                int(experiment["tokens"]),
                low,
                experiment["ess_threshold"],
            )
    io.write_netcdf(out, output, "fit", io.provenance(name, experiment, root_seed))


def stage_claims(name, experiment, root_seed, distances_path, fit_path, output):
    """claims.nc: the paper's statements judged on fit.nc and distances.nc (``claims.evaluate``)."""
    dist = io.read_netcdf(distances_path, "distances")
    fit = io.read_netcdf(fit_path, "fit")
    found = claims.evaluate(dist, fit, experiment["claims"])
    ds = claims.claims_dataset(found, fit)
    counts = {s.word: sum(c.status == s for c in found) for s in claims.Status}
    log.info(
        "%s: %s (intervals: %g%% Student-t over %d replicas)",
        name,
        ", ".join(f"{n} {w.lower()}" for w, n in counts.items() if n),
        100 * float(fit.attrs["confidence"]),
        dist.sizes["replica"],
    )
    for c in found:
        (log.info if c.status == claims.Status.PASSED else log.warning)("%s: %s", name, c.line())
    io.write_netcdf(ds, output, "claims", io.provenance(name, experiment, root_seed))


def stage_claims_summary(claims_files: dict, output) -> None:
    """results/claims_summary.md: every experiment's verdicts as one markdown table, generated from its
    claims.nc (``claims.summary_markdown``; ``claims_files`` maps experiment name to path)."""
    text = claims.summary_markdown(claims_files)
    with io.atomic_path(output) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)
    log.info("claims summary of %d experiments written to %s", len(claims_files), output)
