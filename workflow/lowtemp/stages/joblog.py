"""The package's log (logger ``lowtemp``): one log file per job, and progress lines of long runs.

Every module logs to ``logging.getLogger("lowtemp")``; a Snakemake script wraps its
stage in ``logged(log_path)`` so the job's log file (and stderr) receive it.
"""

from __future__ import annotations

import logging
import time

from ..store import version

log = logging.getLogger("lowtemp")


class logged:
    """Context manager: send the package's log to ``path`` (and stderr); log any exception before it propagates.

    The code version is read, and logged, as the job starts: the provenance its files record is that of the code
    that ran (``store.version.code_version`` is read once per process), not of the checkout when the job ended,
    which a commit during a long job would have changed."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
        self.handlers = [logging.FileHandler(self.path, mode="w"), logging.StreamHandler()]
        for h in self.handlers:
            h.setFormatter(fmt)
            log.addHandler(h)
        log.setLevel(logging.INFO)
        log.info("code version %s", version.code_version().version)
        return log

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            log.error("stage failed: %s: %s", exc_type.__name__, exc, exc_info=(exc_type, exc, tb))
        for h in self.handlers:
            log.removeHandler(h)
            h.close()
        return False


def progress_logger(label: str, grid, n_tokens: int, n_replicas: int):
    """A ``progress(t, k, record)`` callback for ``integrate.simulate`` that logs about 20 lines per run.

    ``grid`` is the run's ``integrate.TimeGrid``; a line is logged every twentieth of
    the snapshots and at the last one, with the steps and field evaluations so far
    (``record``, an ``integrate.StepRecord``) and the elapsed wall time.
    """
    start = time.perf_counter()
    every = max(1, grid.snapshots // 20)

    def progress(t: float, k: int, record):
        if k % every == 0 or k == grid.snapshots:
            elapsed = time.perf_counter() - start
            log.info(
                "%s: t = %.3f / %.3f (snapshot %d / %d, %d steps + %d rejected, %d field evaluations, "
                "%d tokens x %d replicas), %.1f s elapsed",
                label,
                t,
                grid.horizon,
                k,
                grid.snapshots,
                record.accepted[: k + 1].sum(),
                record.rejected[: k + 1].sum(),
                record.evaluations[: k + 1].sum(),
                n_tokens,
                n_replicas,
                elapsed,
            )

    return progress
