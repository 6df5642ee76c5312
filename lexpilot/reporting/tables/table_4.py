"""Table 4: QWK Direct / Targeted / Off-target over every case and over the cases resolved in both conditions,
and the dialogues' attempts.
"""

from __future__ import annotations

from collections import Counter

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.statistics.bootstrap import Bootstrap, paired_difference
from lexpilot.reporting.tables.formats import (
    cell,
    difference_cell,
    parts_cell,
)
from lexpilot.reporting.tables.table import METRIC, Figure, Kind, Table, declares


@declares(
    Kind("table_4", "Table 4", 3),
    Kind("table_4_resolved", "Table 4", 3),
    Kind("table_4_attempts", "Table 4", 3),
)
def table_4(groups: list[Group], boot: Bootstrap | None = None) -> list[Table]:
    """Table 4: LJP QWK Direct / Targeted / Off-target over every case and claim (unresolved cases flagged), the
    same over the cases resolved in both conditions as a sensitivity view, with the paired differences under --ci;
    and how many cases each condition's dialogues were accepted at each attempt, with the rejection reasons."""
    shown = [g for g in groups if g.stat(MetricKey("T4_targeted", "qwk"))]
    if not shown:
        return []
    suffix = ", [95% bootstrap interval over cases]" if boot else ""
    main = table_4_qwk(
        shown,
        boot,
        "T4",
        "table_4",
        "Interaction behaviour and LJP (Table 4): QWK over every case and "
        "claim, Direct as in Table 3 (every run); an unresolved case is predicted from its last attempted "
        f"dialogue, mean ± SD over runs{suffix}",
    )
    sensitivity = table_4_qwk(
        shown,
        boot,
        "T4r",
        "table_4_resolved",
        "Table 4, sensitivity: QWK over the cases "
        f"resolved in both conditions only (Direct on the same cases), mean ± SD over runs{suffix}",
    )
    rows = []
    for g in shown:
        for b, name in (("targeted", "Targeted"), ("off_target", "Off-target")):
            counts = [(g.stat(MetricKey("T4 attempts", f"{b} {k}")) or {}).get("mean") for k in range(1, 6)]
            unresolved = g.stat(MetricKey("T4 unresolved", b))
            reasons: Counter[str] = Counter()  # why dialogues were rejected
            for r in g.runs:
                reasons.update(r.rejections.get(b, {}))
            rows.append(
                [
                    g.label,
                    name,
                    parts_cell(dict(zip(map(str, range(1, 6)), counts))),
                    f"{unresolved['mean']:g}" if unresolved else "n/a",
                    "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common(3)) or "-",
                ]
            )
    attempts = Table(
        "table_4_attempts",
        "Table 4 dialogues: cases accepted at attempt 1 / 2 / 3 / 4 / 5 and unresolved "
        "cases (mean per run), and the most frequent rejection reasons (all runs)",
        ["Model", "Condition", "Accepted at attempt", "Unresolved", "Rejections"],
        rows,
        row_tasks={"Targeted": "targeted", "Off-target": "off_target"},
    )
    return [main, attempts, sensitivity]


def table_4_qwk(shown: list[Group], boot: Bootstrap | None, prefix: str, table_id: str, title: str) -> Table:
    key = lambda task: MetricKey(f"{prefix}_{task}", "qwk")  # noqa: E731
    headers = [
        "Model",
        "Cases (unresolved T / O)" if prefix == "T4" else "Resolved cases",
        "Direct",
        "Targeted",
        "Off-target",
    ] + (["Targeted − Direct", "Off-target − Direct"] if boot else [])
    rows = []
    for g in shown:
        cases = g.stat(MetricKey("T4 cases", "all" if prefix == "T4" else "resolved"))
        flagged = [
            (g.stat(MetricKey("T4 unresolved", b)) or {}).get("mean") for b in ("targeted", "off_target")
        ]
        count = f"{cases['mean']:g}" if cases else "n/a"
        if prefix == "T4" and None not in flagged:
            count = Figure(
                f"{count} ({flagged[0]:g} / {flagged[1]:g})",
                {
                    "all": cases["mean"] if cases else None,
                    "unresolved targeted": flagged[0],
                    "unresolved off-target": flagged[1],
                },
            )
        row = [g.label, count]
        # "Direct results are reused from Table 3": over every run of the group, as Table 3 takes them (the
        # paired differences stay within the runs that have the dialogues)
        direct = MetricKey("LJP_direct", "qwk") if prefix == "T4" else key("direct")
        row += [
            cell(g.stat(k), METRIC, boot.interval(g, k) if boot else None)
            for k in (direct, key("targeted"), key("off_target"))
        ]
        if boot:
            row += [
                difference_cell(paired_difference(boot, (g, key(t)), (g, key("direct"))))
                for t in ("targeted", "off_target")
            ]
        rows.append(row)
    return Table(
        table_id,
        title,
        headers,
        rows,
        column_tasks={
            "Direct": "direct",
            "Targeted": "targeted",
            "Off-target": "off_target",
            "Targeted − Direct": "targeted",
            "Off-target − Direct": "off_target",
        },
    )
