"""What a table is, for every rendering and the viewer: an identity that stays when its title is reworded, the
title, headers and rows, and which task's cases its cells are about (the viewer links each cell to them)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

# Decimals, one rule: "a table's precision is its paper table's" (the CSV and JSON keep every digit). A metric or a
# share on the 0–1 scale (F1, accuracy, QWK, κ, ρ, a share of cases), with its SD, interval bounds and differences,
# is drawn at its table's precision (as its builder declares it: `declares`), and --decimals N
# redraws it at N in the text formats; a percentage is at 1 (the paper's Tables 5, 6, 12 and 13), an average count
# (questions, provisions) at 2 and a variance at 6, in every table.
METRIC, PERCENT, AVERAGE, VARIANCE = 3, 1, 2, 6
RELATIVE = 2  # a relative change, as the paper quotes it (Interaction-Based 23.84% below Gold-Standard)


@dataclass(frozen=True)
class Kind:
    """A table identity, declared once, by the builder that makes it (`declares`): the id the JSON, the viewer's
    links and --table key on; the paper's table it reproduces, or the nearest one, or "the harness's"; the decimals
    its metrics print at (docs/results.md lists them)."""

    id: str
    paper: str
    decimals: int


class Builder(Protocol):
    """A table builder as `declares` leaves it: called as it was, with the kinds of the tables it makes."""

    kinds: tuple[Kind, ...]

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def declares(*kinds: Kind):
    """A table builder's declaration of the tables it makes, by kind: each table it returns carries its kind's
    decimals; a table of another id is a programming error, refused at once (every test that builds it finds it).
    The builder keeps its signature; `builder.kinds` lists them (reporting/catalog.py reads every builder's)."""

    def declare(build):
        by_id = {kind.id: kind for kind in kinds}

        @functools.wraps(build)
        def built(*args, **kwargs):
            made = build(*args, **kwargs)
            for table in made if isinstance(made, list) else [made] if made is not None else []:
                if table.id not in by_id:
                    raise TypeError(
                        f"{build.__qualname__} made table {table.id!r}, which it does not declare"
                    )
                table.decimals = by_id[table.id].decimals
            return made

        built.kinds = kinds
        return built

    return declare


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
    # header -> the filters that column's links add (its tag)
    column_query: dict = field(default_factory=dict)
    row_queries: list = field(default_factory=list)  # per row, the filters its links add (its run, its setup)
    cell_queries: list = field(default_factory=list)  # per row, header -> the filters that cell's link adds
    # a view of compare.html its rows link to ("never", "disagree"), not the case list
    compare: str | None = None
    # which one of a family of tables with one id (one per re-judged group): with the id, the table's identity
    part: str | None = None
    decimals: int = METRIC  # its metrics' decimals: its paper table's, as its builder declares (`declares`)

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
