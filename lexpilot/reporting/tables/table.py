"""What a table is, for every rendering and the viewer: an identity that stays when its title is reworded, the
title, headers and rows, and which task's cases its cells are about (the viewer links each cell to them)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

# Decimals, one rule: "a table's precision is its paper table's" (the CSV and JSON keep every digit). A metric or a
# share on the 0–1 scale (F1, accuracy, QWK, κ, ρ, a share of cases), with its SD, interval bounds and differences,
# is drawn at its table's precision (PAPER_TABLES; METRIC, 3, for a table not declared there), and --decimals N
# redraws it at N in the text formats; a percentage is at 1 (the paper's Tables 5, 6, 12 and 13), an average count
# (questions, provisions) at 2 and a variance at 6, in every table.
METRIC, PERCENT, AVERAGE, VARIANCE = 3, 1, 2, 6
RELATIVE = 2  # a relative change, as the paper quotes it (Interaction-Based 23.84% below Gold-Standard)

# Each table identity with the paper's table it reproduces, or the nearest one for the harness's own tables, and the
# decimals that table prints its metrics at: Tables 2, 14, 15, 16 and 17 at 4; Tables 3, 4 and 11 at 3; Table 12's κ
# at 2 (docs/results.md lists them).
PAPER_TABLES: dict[str, tuple[str, int]] = {
    "runs": ("the harness's", METRIC),
    "main": ("Table 11", 3),
    "comparison": ("nearest: Table 11", 3),
    "lca_detail": ("Table 14", 4),
    "lca_by_class": ("Table 2", 4),
    "dcg_by_class": ("Table 2", 4),
    "ljp_gold_by_class": ("Table 16", 4),
    "ljp_interaction_by_class": ("Table 17", 4),
    "ljp_direct_by_class": ("nearest: Tables 16-17", 4),
    "ljp_accuracy": ("nearest: Table 3", 3),
    "interaction_gain": ("nearest: Table 3", 3),
    "paired_setups": ("nearest: Table 3", 3),
    "claim_order": ("nearest: Table 3", 3),
    "behaviour": ("nearest: Table 4", 3),
    "qwk_by_stop": ("nearest: Table 4", 3),
    "questions_by_class": ("nearest: Table 4", 3),
    "premature_by_class": ("nearest: Table 4", 3),
    "stop_by_class": ("nearest: Table 4", 3),
    "table_4": ("Table 4", 3),
    "table_4_resolved": ("Table 4", 3),
    "table_4_attempts": ("Table 4", 3),
    "non_ideal": ("Table 15", 4),
    "non_ideal_faults": ("nearest: Table 15", 4),
    "figure_3": ("nearest: Table 2 (Figure 3)", 4),
    "figure_4a": ("nearest: Table 2 (Figure 4)", 4),
    "figure_4b": ("nearest: Table 2 (Figure 4)", 4),
    "figure_4c": ("Figure 4 (counts)", METRIC),
    "plain_types_underspecified": ("Table 6", 1),
    "plain_types_complete": ("Table 6", 1),  # rates in percent
    "plain_by_class_underspecified": ("nearest: Table 6", 3),
    "plain_by_class_complete": ("nearest: Table 6", 3),
    "plain_against_lexawn": ("nearest: Table 6", 3),
    "audit_rates": ("nearest: Table 13", 1),
    "audit_clean_cases": ("nearest: Table 13", 3),
    "table_13": ("Table 13", 3),
    "probe_study": ("nearest: Table 13", 3),
    "table_12": ("Table 12", 2),
    "table_12_intervals": ("Table 12", 2),
    "judge_labels": ("nearest: Table 12", 2),
    "judge_sensitivity": ("nearest: Table 11", 3),
    "consistency": ("nearest: Table 11", 3),
    "judge_noise": ("nearest: Table 11", 3),
    "pairs": ("nearest: Table 11", 3),
    "ranking": ("nearest: Table 11", 3),
    "not_comparable": ("the harness's", 3),
    "power": ("nearest: Table 11", 3),
    "usage_per_run": ("the harness's", METRIC),
    "usage_per_stage": ("the harness's", METRIC),
    "usage_grid_total": ("the harness's", METRIC),
}

# the tables a report has only when an option asks for them (the others come with the records they show)
TABLE_OPTIONS = {
    "comparison": "--compare A B",
    "paired_setups": "--ci",
    "figure_3": "--complexity FILE",
    **dict.fromkeys(("pairs", "ranking", "not_comparable"), "--rank"),
    "power": "--power",
    **dict.fromkeys(("consistency", "judge_noise"), "--consistency"),
    **dict.fromkeys(("usage_per_run", "usage_per_stage", "usage_grid_total"), "--usage"),
}


@dataclass
class Table:
    id: str  # e.g. "main", "lca_by_class", "table_4": JSON output, the viewer's links and the tests key on it
    title: str
    headers: list[str]
    rows: list[list[str]]
    task: str | None = None  # the task whose cases a cell is about (None: the table links to no cases)
    column_tasks: dict[str, str] = field(default_factory=dict)  # a column about another task than `task`
    # a row about another task, named by a cell of the row (Table 4's "Condition", the clean-case table's "Metric")
    row_tasks: dict[str, str] = field(default_factory=dict)
    # the group (a model's runs) a table's rows are about, when its rows are not groups
    group: str | None = None
    row_filter: str | None = None  # what a row label selects in the case list ("cause"), when not a model
    query: dict = field(default_factory=dict)  # filters every link of the table adds (a tag of the case list)
    column_query: dict = field(
        default_factory=dict
    )  # header -> the filters that column's links add (its tag)
    row_queries: list = field(default_factory=list)  # per row, the filters its links add (its run, its setup)
    cell_queries: list = field(default_factory=list)  # per row, header -> the filters that cell's link adds
    # a view of compare.html its rows link to ("never", "disagree"), not the case list
    compare: str | None = None
    # which one of a family of tables with one id (one per re-judged group): with the id, the table's identity
    part: str | None = None

    @property
    def decimals(self) -> int:
        """The decimals of its metrics: its paper table's."""
        return PAPER_TABLES.get(self.id, ("", METRIC))[1]

    def at(self, decimals: int | None = None) -> Table:
        """The table with its metric cells drawn at `decimals` (None: its paper table's precision)."""
        digits = self.decimals if decimals is None else decimals
        rows = [[c.redraw(digits) if isinstance(c, Figure) and c.redraw else c for c in r] for r in self.rows]
        return dataclasses.replace(self, rows=rows)

    def task_of(self, header: str, row: list | None = None) -> str | None:
        for value in row or ():
            if value in self.row_tasks:
                return self.row_tasks[value]
        return self.column_tasks.get(header, self.task)


class Figure(str):
    """A cell's text with the numbers it shows (mean, SD, interval bounds, n…; None where a number is undefined),
    for a rendering that keeps numbers apart, as the CSV does so that a spreadsheet can compute on them; a metric's
    cell can draw itself again at other decimals (`redraw`)."""

    numbers: dict
    redraw: Callable[[int], Figure] | None

    def __new__(cls, text: str, numbers: dict, draw: Callable[[int], str] | None = None):
        figure = super().__new__(cls, text)
        figure.numbers = numbers
        figure.redraw = (lambda digits: Figure(draw(digits), numbers, draw)) if draw else None
        return figure
