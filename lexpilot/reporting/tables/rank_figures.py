"""The ranking figures' numbers (one figure per task: LCA, DCG, LJP; a panel per headline metric of the task): each
model's mean with its 95% interval, raw and, with `--corrected`, corrected, in rank order, with the Holm letters of
each. Nothing here is computed anew: the raw mean is the group's (what the ranking and the main table print), its
interval the shared bootstrap's over cases (what `--ci` prints), the rank and raw letters are read from the `ranking`
table, the corrected value and interval from the `corrected` table and the corrected letters from the
`corrected_ranking` table. The site draws them as inline SVG (site/rank_svg.py), `--plot` as PNG (figures.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from lexpilot.benchmark.records import LJP_SETUPS
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.statistics.rankings import ranked_groups
from lexpilot.reporting.tables.formats import HEADLINE
from lexpilot.reporting.tables.table import Table

# the figures, in report order: a task's name, its title and the families of its headline metrics
LJP_FAMILIES = tuple(s.task for s in LJP_SETUPS)
TASKS = (
    ("LCA", "LCA: Macro-F1, Acc_C and Acc_U", ("LCA",)),
    ("DCG", "DCG accuracy", ("DCG",)),
    ("LJP", "LJP QWK: Direct, Interaction-Based and Gold-Standard", LJP_FAMILIES),
)


@dataclass(frozen=True)
class Point:
    """One estimate of a model's metric: its value, its 95% interval (None: not defined) and its Holm letters ("":
    none, for want of `--rank` or of a pair that could be tested)."""

    value: float
    interval: tuple[float, float] | None
    letters: str = ""


@dataclass(frozen=True)
class Mark:
    """One model on one metric: raw and corrected side by side (`corrected` None: not asked for, or refused, with
    `refused` saying so)."""

    model: str  # the group's label: untrusted text (a model id), escaped wherever it is drawn
    rank: int  # the raw rank (1, 1, 3: equal means share)
    comparable_set: str  # "" when every model is in one comparable set
    raw: Point
    corrected: Point | None = None
    refused: bool = False


@dataclass(frozen=True)
class Panel:
    metric: str  # the headline name ("DCG Acc.")
    marks: list[Mark]


@dataclass(frozen=True)
class TaskFigure:
    task: str  # "LCA", "DCG", "LJP": the PNG's file name and the SVG's id
    title: str
    panels: list[Panel]
    ranked: bool  # the raw letters are there (--rank)
    corrected: bool  # the corrected points are there (--corrected)
    notes: list[str] = field(default_factory=list)


def figure_task(family: str) -> str:
    """The figure a headline metric's family is drawn in."""
    return next(task for task, _, families in TASKS if family in families)


def rank_figures(groups: list[Group], boot: Bootstrap, tables: Sequence[Table]) -> list[TaskFigure]:
    """A figure per task with a headline metric defined for some ranked group (standard users, not re-judged)."""
    by_id = {t.id: t for t in tables}
    ranked = ranked_groups(groups)
    figures = []
    for task, title, families in TASKS:
        panels = [
            panel
            for name, (family, metric) in HEADLINE
            if family in families
            and (panel := _panel(name, MetricKey(family, metric), ranked, boot, by_id)).marks
        ]
        if panels:
            figures.append(
                TaskFigure(task, title, panels, "ranking" in by_id, "corrected" in by_id, _notes(by_id))
            )
    return figures


def _notes(by_id: dict[str, Table]) -> list[str]:
    """What a reader of the figure is told of what it lacks."""
    notes = [] if "ranking" in by_id else ["no letters: pass --rank for the Holm letters"]
    if "corrected" in by_id and "corrected_ranking" not in by_id:
        notes.append("no corrected letters: pass --rank with --corrected")
    return notes


def _panel(name: str, key: MetricKey, groups: list[Group], boot: Bootstrap, by_id: dict[str, Table]) -> Panel:
    """One metric's marks in rank order: the ranking table's order and letters (with --rank), else by mean."""
    order = _raw_order(name, by_id.get("ranking"))
    by_label = {g.label: g for g in groups}
    if not order:  # no ranking asked for: the groups by mean, the highest first, ties sharing a rank
        means = {g.label: s["mean"] for g in groups if (s := g.stat(key)) and s["mean"] is not None}
        values = sorted({round(m, 12) for m in means.values()}, reverse=True)
        order = [
            (label, 1 + sum(v > round(m, 12) for v in values), "", "")
            for label, m in sorted(means.items(), key=lambda item: -item[1])
        ]
    corrected = _corrected(name, by_id.get("corrected"), by_id.get("corrected_ranking"), by_label)
    marks = []
    for label, rank, number, letters in order:
        group = by_label.get(label)
        stat = group.stat(key) if group else None
        if group is None or stat is None or stat["mean"] is None:
            continue
        raw = Point(stat["mean"], boot.interval(group, key), letters)
        fixed = corrected.get(label)
        marks.append(Mark(label, rank, number, raw, fixed, "corrected" in by_id and fixed is None))
    return Panel(name, marks)


def _raw_order(name: str, ranking: Table | None) -> list[tuple[str, int, str, str]]:
    """(model, rank, set, letters) of the ranking table's rows of one metric, in its order ("n/a" letters: none)."""
    if ranking is None:
        return []
    column = {h: i for i, h in enumerate(ranking.headers)}
    rows = [r for r in ranking.rows if r[column["Metric"]] == name]
    return [
        (
            str(r[column["Model"]]),
            int(r[column["Rank"]]),
            str(r[column["Set"]]) if "Set" in column else "",
            "" if r[column["Group"]] == "n/a" else str(r[column["Group"]]),
        )
        for r in rows
    ]


def _corrected(
    name: str, table: Table | None, ranking: Table | None, groups: dict[str, Group]
) -> dict[str, Point]:
    """Each model's corrected mean and interval from the corrected table (its mean-over-runs row, the row of no
    single run; a model of one run, that run's row), with its letters from the corrected ranking; a refused model has none."""
    if table is None:
        return {}
    column = {h: i for i, h in enumerate(table.headers)}
    letters = _corrected_letters(name, ranking)
    points: dict[str, Point] = {}
    for row in table.rows:
        label, run = str(row[column["Model"]]), str(row[column["Run"]])
        group = groups.get(label)
        if row[column["Metric"]] != name or group is None:
            continue
        if run in group.run_ids and label in points:
            continue  # a further run's row: the figure shows the mean over runs, as the raw mark does
        value = getattr(row[column["Corrected"]], "numbers", {}).get("value")
        if value is None:
            continue  # refused, or undefined
        bounds = getattr(row[column["Corrected 95% interval"]], "numbers", {})
        interval = None if bounds.get("low") is None else (bounds["low"], bounds["high"])
        points[label] = Point(value, interval, letters.get(label, ""))
    return points


def _corrected_letters(name: str, ranking: Table | None) -> dict[str, str]:
    """The corrected ranking's letters of one metric by model ("NAME (set N)" when there are several sets)."""
    if ranking is None:
        return {}
    column = {h: i for i, h in enumerate(ranking.headers)}
    return {
        str(r[column["Model"]]): str(r[column["Group"]])
        for r in ranking.rows
        if (r[column["Metric"]] == name or str(r[column["Metric"]]).startswith(f"{name} (set "))
        and r[column["Group"]] != "n/a"
    }
