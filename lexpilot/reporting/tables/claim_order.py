"""The claim-order diagnostic's table: how often a verdict changes when the claims are shown shuffled, against
the same-order control.
"""

from __future__ import annotations

from lexpilot.benchmark.records import LJP_ORDER, LJP_SETUPS, SETUP
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import saved_records
from lexpilot.reporting.tables.formats import (
    kappa_cell,
    number_cell,
)
from lexpilot.reporting.tables.table import PERCENT, Kind, Table, declares
from lexpilot.reporting.validation.judges import (
    order_agreement,
)

ORDER_CHANGED = "claim order changed"  # the case list's tag: a verdict changed with the claims shuffled


ORDER_TAGS = {s.name: f"{ORDER_CHANGED}: {s.title}" for s in LJP_SETUPS}  # ... in that setup


@declares(Kind("claim_order", "nearest: Table 3", 3))
def order_table(groups: list[Group], root) -> Table | None:
    """The diagnostic eval_LJP_order.py runs: per run and setup, the extraction judge's verdicts with the claims
    shuffled against its original ones."""
    rows, selects = [], []
    for g in groups:
        for run in g.runs:
            for setup, kind in LJP_ORDER.items():
                if not kind.path(root, run.run_id, run.folder).exists():
                    continue
                found = order_agreement(saved_records(run, root, kind))
                if found:
                    rows.append(
                        [
                            g.label,
                            run.run_id,
                            SETUP[setup].title,
                            str(found["claims"]),
                            number_cell(found["agreement"], PERCENT, percent=True),
                            kappa_cell(found["kappa"]),
                            number_cell(found["control"], PERCENT, percent=True),
                            number_cell(found["effect"], PERCENT, signed=True, percent=True),
                        ]
                    )
                    # its run's cases, in its setup
                    selects.append({"run": run.run_id, "tag": ORDER_TAGS[setup]})
    if not rows:
        return None
    return Table(
        "claim_order",
        "Diagnostic, outside the paper's protocol: the LJP extraction judge with each case's "
        "claims shuffled (eval_LJP_order.py), its verdicts against the original extraction's; the control "
        "asks again in the original order (the judge's own noise), and the order's effect is the control's "
        "agreement less the shuffled one's (n/a: records made before the control)",
        ["Model", "Run", "Setup", "Claims", "Agreement", "Cohen's κ", "Same order (control)", "Order effect"],
        rows,
        query={"tag": ORDER_CHANGED},
        row_queries=selects,
    )
