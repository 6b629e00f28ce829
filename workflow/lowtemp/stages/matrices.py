"""Stage ``matrices``: the attention matrices K, Q, V and what the paper derives from them.

Called by ``workflow/scripts/`` (thin Snakemake adapters) or from a notebook; ``experiment`` is one
validated entry of the config's ``experiments`` (or its ``lowtemp.config.params`` slice).
"""

from __future__ import annotations

import logging

from ..config.experiment import build_matrices
from ..store import datasets, netcdf

log = logging.getLogger("lowtemp")


def stage_matrices(name, experiment, root_seed, output):
    """Generate K, Q, V (``experiment.build_matrices``) and write matrices.nc."""
    M = build_matrices(name, experiment, root_seed)
    log.info(
        "%s: matrices (%s) gamma=%.4g sigma(B) in [%.4g, %.4g], dim E1=%d, rate bounds [%.4g, %.4g]",
        name,
        experiment["matrices"]["family"],
        M.gamma,
        M.sigma_min,
        M.sigma_max,
        M.E1.shape[1],
        *M.rate_bounds,
    )
    netcdf.write_netcdf(
        datasets.matrices_dataset(M), output, "matrices", netcdf.provenance(name, experiment, root_seed)
    )
