"""The claims page: every experiment's verdicts as Markdown tables, written from their claims.nc datasets (read by
the stage), so that nothing on it is written by hand.
"""

from __future__ import annotations

from ..analysis import verdicts


def claims_summary(claims_of: dict) -> str:
    """A Markdown page of every experiment's claims, generated from their claims.nc (experiment -> dataset).

    One table per experiment (claim, status, the logged line); nothing in it is
    written by hand, so it says what the numbers of this run say.
    """
    lines = [
        "# What the paper's statements say on these numbers",
        "",
        "Generated from each experiment's `claims.nc` (statuses: PASSED, FAILED, UNDER-RESOLVED = the particle "
        "system does not stand for the mean field over the judged window (for a `model: mean_field` experiment: "
        "the mean-field reference's own error is too large there), INCONCLUSIVE = the interval straddles the "
        "target, NOT EVALUABLE = nothing to judge; docs/claims.md says how each is decided).",
        "",
    ]
    for name, ds in claims_of.items():
        lines += [f"## {name}", "", "| claim | status | numbers |", "|---|---|---|"]
        for claim, status, summary in zip(ds.claim.values, ds["status"].values, ds["summary"].values):
            numbers = str(summary).split(": ", 1)[1].replace("|", "\\|")
            lines.append(f"| `{claim}` | {verdicts.Status(int(status)).word} | {numbers} |")
        lines.append("")
    return "\n".join(lines)
