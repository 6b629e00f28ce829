"""Stage ``initial_tokens``: the tokens sampled from ρ0.

Called by ``workflow/scripts/`` (thin Snakemake adapters) or from a notebook; ``experiment`` is one
validated entry of the config's ``experiments`` (or its ``lowtemp.config.params`` slice).
"""

from __future__ import annotations

import logging

import numpy as np

from ..config.experiment import measure_of, stream_name
from ..model import measures
from ..model.seeding import generator
from ..store import datasets, netcdf

log = logging.getLogger("lowtemp")


def stage_initial_tokens(name, experiment, root_seed, matrices_path, output):
    """Sample the tokens from ρ0 (stream ``(streams, "initial_tokens")``, ``experiment.stream_name``) and write
    initial_tokens.nc."""
    M = datasets.load_matrices(matrices_path)
    measure, params = measure_of(experiment)
    rng = generator(root_seed, stream_name(name, experiment), "initial_tokens")
    X0 = measures.sample_initial_tokens(
        measure, rng, experiment["replicas"], experiment["tokens"], experiment["dim"], **params
    )
    moment = measures.assumption_2_moment(X0, M.E1, p=0.5)
    log.info(
        "%s: %d replicas x %d tokens from %s; Assumption 2 moment (p=1/2) %s",
        name,
        X0.shape[0],
        X0.shape[1],
        measure,
        np.array2string(moment, precision=3),
    )
    netcdf.write_netcdf(
        datasets.initial_tokens_dataset(X0, moment),
        output,
        "initial_tokens",
        netcdf.provenance(name, experiment, root_seed),
    )
