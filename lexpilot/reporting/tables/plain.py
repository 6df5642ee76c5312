"""The plain consultation's tables (Table 6): the response types per history, per class, and against LexAwN's
label on the same cases.
"""

from __future__ import annotations

from lexpilot.benchmark.vocabulary import HISTORY_TYPES
from lexpilot.reporting.scoring.groups import Group, classes_present
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.tables.formats import (
    PLAIN_TYPE_NAMES,
    cell,
    parts_cell,
    percent_cell,
    plain_tag,
)
from lexpilot.reporting.tables.table import METRIC, Figure, Kind, Table, declares

PLAIN_TITLES = {
    "underspecified": "Plain consultation (Table 6): response types on underspecified histories, "
    "mean ± SD over runs",
    "complete": "Plain consultation, control: response types on complete histories, mean ± SD over runs",
}


@declares(
    *(Kind(f"plain_types_{t}", "Table 6", 1) for t in HISTORY_TYPES),  # rates in percent
    *(Kind(f"plain_by_class_{t}", "nearest: Table 6", 3) for t in HISTORY_TYPES),
    Kind("plain_against_lexawn", "nearest: Table 6", 3),
)
def plain_tables(groups: list[Group], boot: Bootstrap | None = None) -> list[Table]:
    """Table 6 on the benchmark: the response types of a plain consultation, per model and per class; on the
    same histories, how often LexAwN then asked; and the complete-history control where it was run."""
    tables = []
    for history_type in ("underspecified", "complete"):
        shown = [g for g in groups if g.stat(MetricKey(f"plain_{history_type}", "premature_prediction"))]
        if shown:
            tables += _plain_history_tables(shown, boot, history_type)
    crossed = [g for g in groups if any(g.stat(MetricKey("plain_then_asked", k)) for k in PLAIN_TYPE_NAMES)]
    if crossed:
        tables.append(
            Table(
                "plain_against_lexawn",
                "Plain response type against the LexAwN label on the same underspecified history: "
                "share of those cases where LexAwN asked (策略二), mean over runs",
                ["Model"] + list(PLAIN_TYPE_NAMES.values()),
                [
                    [g.label] + [cell(g.stat(MetricKey("plain_then_asked", k))) for k in PLAIN_TYPE_NAMES]
                    for g in crossed
                ],
                task="plain",
                # a type's cell: the cases answered with that type (what its share is over)
                column_query=_plain_type_links("underspecified"),
            )
        )
    return tables


def _plain_history_tables(shown: list[Group], boot: Bootstrap | None, history_type: str) -> list[Table]:
    """The plain consultation's response types on one kind of history: per model, then per class."""
    task = f"plain_{history_type}"
    suffix = ", [95% bootstrap interval over cases]" if boot else ""
    labels = [g.label for g in shown]
    classes = classes_present(shown) + [OVERALL]
    return [
        Table(
            f"plain_types_{history_type}",
            PLAIN_TITLES[history_type] + suffix,
            ["Model"] + list(PLAIN_TYPE_NAMES.values()),
            [
                [label]
                + [
                    # in percent, as Table 6
                    percent_cell(
                        g.stat(MetricKey(task, k)), boot.interval(g, MetricKey(task, k)) if boot else None
                    )
                    for k in PLAIN_TYPE_NAMES
                ]
                for label, g in zip(labels, shown)
            ],
            task="plain",
            # a type's cell opens the cases answered with that type (not the list sorted by type)
            column_query=_plain_type_links(history_type),
        ),
        Table(
            f"plain_by_class_{history_type}",
            f"Plain consultation by class ({history_type}): "
            "deficiency / conditional / unconditional / premature, share (mean over runs)",
            ["Model"] + classes,
            [[label] + [_plain_shares(g, task, c) for c in classes] for label, g in zip(labels, shown)],
            task="plain",
        ),
    ]


def _plain_type_links(history_type: str) -> dict:
    """Each response type's column opens the cases answered with that type, on that kind of history."""
    return {name: {"tag": plain_tag(history_type, name)} for name in PLAIN_TYPE_NAMES.values()}


def _plain_shares(g: Group, task: str, cls: str) -> Figure:
    """The four response types' shares of one class, in one cell."""
    return parts_cell(
        {name: (g.stat(MetricKey(task, k, cls)) or {}).get("mean") for k, name in PLAIN_TYPE_NAMES.items()},
        METRIC,
    )
