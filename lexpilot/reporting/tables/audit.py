"""The simulator audit's tables: the flag rates of the User Model's replies (Table 13's criteria), and the task
metrics on the cases whose replies were all clean.
"""

from __future__ import annotations

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.scoring.scoring import AUDITED
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.tables.formats import (
    cell,
    percent_cell,
)
from lexpilot.reporting.tables.table import Kind, Table, declares

# a case with audited replies there
AUDIT_TAGS = {"dcg": "audited: DCG", "interaction": "audited: interaction"}


# in order of audit_counts' flags
AUDIT_FLAGS = (("over_disclosure", "Over-disclosure"), ("error", "Error"), ("non_answer", "Non-answer"))


# a case with a reply of the source flagged so
AUDIT_FLAG_TAGS = {
    (source, metric): f"audit {name.lower()}: {source}"
    for source in AUDIT_TAGS
    for metric, name in AUDIT_FLAGS
}


# the replies audited (the User Model's in DCG and in the interaction), as the rows name them
AUDIT_SOURCES = {"dcg": "DCG", "interaction": "interaction"}


# the tasks that rest on the audited replies, recomputed on the cases whose replies were all clean
CLEAN_METRICS = (("DCG", "DCG accuracy"), ("LJP_interaction", "Interaction-Based QWK"))


@declares(Kind("audit_rates", "nearest: Table 13", 1), Kind("audit_clean_cases", "nearest: Table 13", 3))
def audit_tables(groups: list[Group], boot: Bootstrap | None = None) -> list[Table]:
    """The simulator audit: how often the User Model's replies over-disclosed, erred or did not answer, and
    the tasks that rest on those replies recomputed on the cases whose replies were all clean."""
    audited = [g for g in groups if any(g.stat(MetricKey(f"audit_{s}", "error")) for s in AUDIT_SOURCES)]
    if not audited:
        return []
    return [_audit_rates_table(audited, boot), _audit_clean_table(audited)]


def _audit_rates_table(audited: list[Group], boot: Bootstrap | None) -> Table:
    """Per model and source of replies: how many replies were audited and the share of each flag."""
    suffix = ", [95% bootstrap interval over cases]" if boot else ""
    rows, selects, flags = [], [], []
    for g in audited:
        for source in AUDIT_SOURCES:
            task = f"audit_{source}"
            if g.stat(MetricKey(task, "error")):
                selects.append({"tag": AUDIT_TAGS[source]})  # the cases with replies of this source audited
                flags.append(
                    {name: {"tag": AUDIT_FLAG_TAGS[(source, metric)]} for metric, name in AUDIT_FLAGS}
                )
                replies = sum(int(r.tasks[task].counts[:, 0].sum()) for r in g.runs if task in r.tasks)
                rows.append(
                    [g.label, AUDIT_SOURCES[source], str(replies)]
                    + [
                        # in percent, as Table 13
                        percent_cell(
                            g.stat(MetricKey(task, m)), boot.interval(g, MetricKey(task, m)) if boot else None
                        )
                        for m, _ in AUDIT_FLAGS
                    ]
                )
    return Table(
        "audit_rates",
        "Simulator audit: User Model replies judged over-disclosing (key details not "
        "asked for), erroneous (unsupported or contradicting) or not answering, mean ± SD over "
        f"runs{suffix}",
        ["Model", "Replies of", "Replies audited (all runs)", "Over-disclosure", "Error", "Non-answer"],
        rows,
        task="audit",
        row_queries=selects,
        cell_queries=flags,  # a rate's cell: its flagged cases
    )


def _audit_clean_table(audited: list[Group]) -> Table:
    """The tasks resting on the audited replies, on all cases and on the cases whose replies were all
    clean."""
    rows = []
    for g in audited:
        for task, name in CLEAN_METRICS:
            clean = g.stat(MetricKey("clean", task))
            if clean is not None:
                cases = g.stat(MetricKey("clean cases", task))
                rows.append(
                    [
                        g.label,
                        name,
                        cell(g.stat(MetricKey(task, AUDITED[task][1]))),
                        cell(clean),
                        f"{cases['mean']:.0f}" if cases and cases["mean"] is not None else "n/a",
                    ]
                )
    return Table(
        "audit_clean_cases",
        "Task metrics on all cases and on the cases whose simulator replies "
        "were all clean (no over-disclosure, no error), mean over runs",
        ["Model", "Metric", "All cases", "Clean cases only", "Clean cases (mean per run)"],
        rows,
        row_tasks={"DCG accuracy": "DCG", "Interaction-Based QWK": "interaction"},
    )
