"""Figure 4 as tables: DCG accuracy by focal-point type, over the standard runs with focal-point types, and the
count of focal points per type and class.
"""

from __future__ import annotations

from collections import Counter

from lexpilot.benchmark.categories import FOCAL_TYPES
from lexpilot.reporting.scoring.groups import Group, classes_present
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.tables.formats import (
    average_cell,
    cell,
)
from lexpilot.reporting.tables.table import METRIC, Kind, Table, declares
from lexpilot.text import counted

TYPED = "with focal-point types"  # a standard run's case with focal-point types: what Figure 4's averages are over


@declares(
    Kind("figure_4a", "nearest: Table 2 (Figure 4)", 4),
    Kind("figure_4b", "nearest: Table 2 (Figure 4)", 4),
    Kind("figure_4c", "Figure 4 (counts)", METRIC),
)
def figure_4_tables(groups: list[Group]) -> list[Table]:
    """Figure 4 as tables: (a) DCG accuracy per focal-point type, (b) per class, (c) focal points per type and
    class (from eval_focal_types.py)."""
    # the models with the analysis (a model without focal-point types is not in the average); a re-judged copy is
    # the judge's analysis, not another model
    groups = [g for g in groups if g.condition == "standard" and not g.rejudged]
    typed = [g for g in groups if any(k.family == "focal points" for r in g.runs for k in r.metrics)]
    if not typed:
        return []
    types = list(FOCAL_TYPES.values())
    classes = classes_present(typed)
    with_types = sum(1 for g in typed for r in g.runs if r.focal_types)
    runs = (
        f"over the {with_types} of {counted(sum(len(g.runs) for g in typed), 'run')} with focal-point types"
    )
    panels = []
    for panel, key, columns, title in (  # (a) and (b) over the same runs: those with focal-point types
        (
            "figure_4a",
            lambda c: MetricKey("DCG by focal type", c),
            types,
            f"Figure 4 (a): DCG accuracy by focal-point type (a case counts in each type among its focal points), "
            f"{runs}",
        ),
        (
            "figure_4b",
            lambda c: MetricKey("DCG typed", "accuracy", c),
            classes,
            f"Figure 4 (b): DCG accuracy by class, {runs}",
        ),
    ):
        panels.append(_figure_4_panel(typed, panel, key, columns, title))
    panels.append(_figure_4c(typed, types, classes))
    return panels


def _figure_4_panel(typed: list[Group], panel: str, key, columns: list[str], title: str) -> Table:
    """Panel (a) or (b): DCG accuracy per column for each model, and the average the figure plots."""
    rows = [[g.label] + [cell(g.stat(key(c))) for c in columns] for g in typed]
    # the figure plots the average over the models shown (the paper: three; choose them with --model)
    rows.append(
        [f"Average over {counted(len(typed), 'model')} with focal-point types"]
        + [average_cell([g.stat(key(c)) for g in typed]) for c in columns]
    )
    return Table(
        panel,
        f"{title}, mean ± SD over runs; the last row averages the models' means",
        ["Model"] + columns,
        rows,
        task="DCG",  # the average's cells: the typed runs' cases
        row_queries=[{}] * (len(rows) - 1) + [{"tag": TYPED}],
    )


def _figure_4c(typed: list[Group], types: list[str], classes: list[str]) -> Table:
    """Panel (c): focal points per type and class over the benchmark, every case typed in any run shown
    once."""
    counts: Counter[tuple[str, str]] = Counter()  # (type, class) -> focal points
    cases: dict = {}
    for g in typed:
        for r in g.runs:
            for number, typed_case in r.focal_types.items():
                cases.setdefault(number, typed_case)
    for cls, of_case in cases.values():
        counts.update((t, cls) for t in of_case)
    return Table(
        "figure_4c",
        f"Figure 4 (c): focal points per type and class, over the {len(cases)} typed cases of the benchmark",
        ["Type"] + classes + ["Total"],
        [
            [t] + [str(counts[(t, c)]) for c in classes] + [str(sum(counts[(t, c)] for c in classes))]
            for t in types
        ],
        task="DCG",
    )
