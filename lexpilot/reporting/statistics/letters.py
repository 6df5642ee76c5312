"""Decisions over many pairs: Holm's step-down adjustment, the compact letter display that shows which models tie,
and the p-value's cell; shared by the raw rankings (rankings.py) and the judge-corrected ones (corrected_rankings.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from lexpilot.reporting.tables.table import METRIC, Figure


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment: the i-th smallest of m p-values times (m − i + 1), made monotone, at most 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def letter(i: int) -> str:
    """a … z, then aa, ab, …: as many groups as there are."""
    name = ""
    i += 1
    while i:
        i, rest = divmod(i - 1, 26)
        name = "abcdefghijklmnopqrstuvwxyz"[rest] + name
    return name


def letter_display(ranked: list[str], different: set[frozenset]) -> dict[str, str]:
    """A compact letter display (Piepho 2004: insert-and-absorb, then the sweep): models sharing a letter are not
    significantly different. `ranked`: best first; `different`: the pairs found different. Letters follow the
    ranking."""
    columns = [set(ranked)]
    for pair in sorted(different, key=lambda p: sorted(ranked.index(m) for m in p)):
        a, b = tuple(pair)
        split = []
        for column in columns:
            split += [column - {a}, column - {b}] if {a, b} <= column else [column]
        # absorb what another holds
        columns = [c for c in split if c and not any(c < other for other in split)]
        columns = [c for i, c in enumerate(columns) if c not in columns[:i]]
    columns = swept(columns)
    columns.sort(key=lambda c: sorted(ranked.index(m) for m in c))
    joiner = "" if len(columns) <= 26 else "."  # past z, letters of two characters: dotted apart
    return {m: joiner.join(letter(i) for i, c in enumerate(columns) if m in c) for m in ranked}


def swept(columns: list[set]) -> list[set]:
    """Piepho's sweep: a letter is dropped when every model it holds, and every pair of them, shares another
    letter too, so that no letter is redundant (insert-and-absorb alone can leave twice the letters needed)."""
    columns = list(columns)
    for column in list(columns):
        others = [c for c in columns if c is not column]
        covered = all(
            any({a, b} <= c for c in others) for a, b in itertools.combinations_with_replacement(column, 2)
        )
        if covered:
            columns = others
    return columns


def p_cell(p: float | None) -> Figure:
    """A p-value at three decimals ("<0.001" below), the number whole in the CSV and JSON."""
    return Figure("n/a" if p is None else "<0.001" if p < 0.001 else f"{p:.{METRIC}f}", {"value": p})


@dataclass
class Decisions:
    """What a ranking decided on one metric and comparable set: the pairs found different, and each model's letters
    (by group label; none when some pair could not be tested)."""

    different: set[frozenset]
    letters: dict[str, str]


def decisions(ranked: list[str], tested: list[tuple[str, str, float | None]], alpha: float) -> Decisions:
    """The decisions of a set's pairs (`tested`: each pair's labels and Holm-adjusted p, None where untested), the
    models `ranked` best first."""
    done = {frozenset((a, b)) for a, b, p in tested if p is not None}
    different = {frozenset((a, b)) for a, b, p in tested if p is not None and p < alpha}
    complete = all(frozenset(pair) in done for pair in itertools.combinations(ranked, 2))
    return Decisions(different, letter_display(ranked, different) if complete else {})
