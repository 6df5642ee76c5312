"""Figure 3 as a table: each cause's metrics against its complexity (the --complexity file, read here), with
Spearman's rho per task.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from lexpilot.benchmark.categories import CAUSES, cause_class
from lexpilot.errors import UsageError
from lexpilot.files import check_input
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.tables.formats import (
    cell,
    number_cell,
)
from lexpilot.reporting.tables.table import AVERAGE, METRIC, Kind, Table, declares


def figure_3_groups(groups: list[Group]) -> list[Group]:
    """Figure 3's series: the models' runs with standard users and LCA results. A re-judged copy is the judge's
    analysis (Tables 6, 13), not another model's series."""
    return [
        g
        for g in groups
        if g.condition == "standard" and not g.rejudged and g.stat(MetricKey("LCA", "macro_f1"))
    ]


@declares(Kind("figure_3", "nearest: Table 2 (Figure 3)", 4))
def figure_3_tables(groups: list[Group], complexity: dict[str, float] | None) -> list[Table]:
    """Figure 3 as tables: per cause of action its complexity, LCA Macro-F1 and DCG accuracy (mean over runs),
    and Spearman's rho between complexity and each metric across the causes."""
    groups = figure_3_groups(groups)
    if not groups:
        return []
    if not complexity:
        return [
            Table(
                "figure_3",
                "Case complexity (Figure 3)",
                ["Note"],
                [
                    [
                        "no complexity data: pass --complexity FILE (cause_of_action,complexity: provisions cited "
                        "per cause; for the sample, data/LexPilot_sample_complexity.csv)"
                    ]
                ],
            )
        ]
    tables = []
    for g in groups:
        rows, points = _figure_3_cause_rows(g, complexity)
        for task, name in (("LCA", "LCA Macro-F1"), ("DCG", "DCG Acc.")):
            rows.append(_spearman_row(task, name, points[task]))
        tables.append(
            Table(
                "figure_3",
                f"Case complexity (Figure 3): {g.label}, per cause of action (mean over "
                "runs); rho over the causes with complexity data",
                ["Cause of action", "Class", "Cases", "Complexity", "LCA Macro-F1", "DCG Acc."],
                rows,
                column_tasks={"LCA Macro-F1": "LCA", "DCG Acc.": "DCG"},
                group=g.label,
                row_filter="cause",
            )
        )
    return tables


def _figure_3_cause_rows(g: Group, complexity: dict[str, float]) -> tuple[list, dict[str, list]]:
    """A group's row per cause of action, least complex first, and each task's (complexity, mean) points."""
    causes = sorted(
        {k.part for r in g.runs for k in r.metrics if k.family == "by cause"},
        key=lambda c: complexity.get(c, 0),
    )
    rows: list[list] = []
    points: dict[str, list[tuple[float, float]]] = {"LCA": [], "DCG": []}  # task -> (complexity, mean)
    for cause in causes:
        row = [
            cause,
            cause_class(cause),
            f"{(g.stat(MetricKey('cases by cause', 'LCA', cause)) or {}).get('mean') or 0:.0f}",
            f"{complexity[cause]:.{AVERAGE}f}" if cause in complexity else "n/a",
        ]
        for task in ("LCA", "DCG"):
            stat = g.stat(MetricKey("by cause", task, cause))
            row.append(cell(stat))
            if stat and stat["mean"] is not None and cause in complexity:
                points[task].append((complexity[cause], stat["mean"]))
        rows.append(row)
    return rows, points


def _spearman_row(task: str, name: str, points: list[tuple[float, float]]) -> list:
    """Spearman's rho between complexity and one task's metric over the causes, under that metric's column."""
    from scipy.stats import spearmanr  # scipy (scikit-learn brings it) loaded only when Figure 3 has data

    xs, ys = zip(*points) if points else ((), ())
    rho = spearmanr(xs, ys).statistic if len(xs) > 2 and len(set(xs)) > 1 and len(set(ys)) > 1 else None
    shown = number_cell(None if rho is None or rho != rho else float(rho), METRIC, signed=True)
    return [f"Spearman's rho, complexity vs {name}", "", str(len(xs)), ""] + (
        [shown, ""] if task == "LCA" else ["", shown]  # under its own metric's column
    )


def read_complexity(path: Path) -> dict[str, float]:
    """--complexity: a CSV of cause_of_action,complexity; unknown causes, missing or non-numeric values and a
    cause listed twice are errors naming the line."""
    if not path.is_file():
        raise UsageError(f"--complexity {path}: not found")
    values: dict[str, float] = {}
    lines: dict[str, int] = {}  # cause -> the line that gave it
    try:
        check_input(path)
        with path.open(encoding="utf-8-sig", newline="") as f:
            for line, row in enumerate(csv.reader(f), 1):
                if not row or (line == 1 and row[0].strip() == "cause_of_action"):
                    continue
                cause = row[0].strip()
                where = f"--complexity {path}:{line}"
                if cause not in CAUSES:
                    raise UsageError(f"{where}: unknown cause of action {cause!r}")
                if len(row) < 2 or not row[1].strip():
                    raise UsageError(f"{where}: missing complexity for {cause}")
                try:
                    value = float(row[1])
                    if not math.isfinite(value) or value < 0:
                        raise ValueError
                except ValueError:
                    raise UsageError(f"{where}: {row[1]!r} is not a non-negative number") from None
                if cause in values:  # the last would win silently
                    raise UsageError(
                        f"{where}: {cause} is listed twice (lines {lines[cause]} and {line}); give "
                        "each cause one complexity"
                    )
                values[cause], lines[cause] = value, line
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"--complexity {path}: unreadable CSV ({e})") from None
    return values
