"""What a table is, for every rendering and the viewer: an identity that stays when its title is reworded, the
title, headers and rows, and which task's cases its cells are about (the viewer links each cell to them)."""
from __future__ import annotations

from dataclasses import dataclass, field

# Decimals, one rule for every table (the CSV and JSON keep every digit): a metric or a share on the 0–1 scale (F1,
# accuracy, QWK, κ, ρ, a share of cases), with its SD, interval bounds and differences, at 3 as in the paper's
# Tables 3, 4 and 11; a percentage at 1 (its Tables 5, 6 and 12); an average count (questions, provisions) at 2; a
# variance at 6.
METRIC, PERCENT, AVERAGE, VARIANCE = 3, 1, 2, 6


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
    group: str | None = None  # the group (a model's runs) a table's rows are about, when its rows are not groups
    row_filter: str | None = None  # what a row label selects in the case list ("cause"), when not a model
    query: dict = field(default_factory=dict)  # filters every link of the table adds (a tag of the case list)
    compare: str | None = None  # a view of compare.html its rows link to ("never", "disagree"), not the case list

    def task_of(self, header: str, row: list | None = None) -> str | None:
        for value in row or ():
            if value in self.row_tasks:
                return self.row_tasks[value]
        return self.column_tasks.get(header, self.task)


class Figure(str):
    """A cell's text with the numbers it shows (mean, SD, interval bounds, n…; None where a number is undefined),
    for a rendering that keeps numbers apart, as the CSV does so that a spreadsheet can compute on them."""
    numbers: dict

    def __new__(cls, text: str, numbers: dict):
        figure = super().__new__(cls, text)
        figure.numbers = numbers
        return figure
