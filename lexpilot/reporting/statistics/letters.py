"""Decisions over many pairs: Holm's step-down adjustment, the compact letter display that shows which models tie,
and the p-value's cell; shared by the raw rankings (rankings.py) and the judge-corrected ones (corrected_rankings.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from lexpilot.reporting.tables.formats import interval_cell, number_cell
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


def pair_row(metric: str, a: str, b: str, difference: float, interval, p, p_holm, said: str) -> list:
    """One row of a pairs table (raw or corrected): A and B, the difference (A − B) and its interval, p and Holm's
    p, and what was decided."""
    return [
        metric,
        a,
        b,
        number_cell(difference, METRIC, signed=True),
        interval_cell(interval, signed=True),
        p_cell(p),
        p_cell(p_holm),
        said,
    ]


UNSETTLED_MARK = "*"  # after the letters of a model one of whose decisions is unsettled


@dataclass
class Decisions:
    """What a ranking decided on one metric and comparable set: the pairs found different, each model's letters
    (by group label; none when some pair could not be tested), and the pairs whose decision is unsettled (it could
    change with the randomization test's seed: settling.py)."""

    different: set[frozenset]
    letters: dict[str, str]
    unsettled: set[frozenset] = field(default_factory=set)
    marked: set[str] = field(default_factory=set)  # the models whose letters the unsettled pairs could change

    def shown(self, label: str) -> str:
        """The model's letters as the ranking prints them, marked when the unsettled decisions could change them."""
        if label not in self.letters:
            return "n/a"
        return self.letters[label] + UNSETTLED_MARK * (label in self.marked)


def decisions(
    ranked: list[str],
    tested: list[tuple[str, str, float | None]],
    alpha: float,
    unsettled: set[frozenset] | None = None,
) -> Decisions:
    """The decisions of a set's pairs (`tested`: each pair's labels and Holm-adjusted p, None where untested), the
    models `ranked` best first; `unsettled`: the pairs whose decision is."""
    done = {frozenset((a, b)) for a, b, p in tested if p is not None}
    different = {frozenset((a, b)) for a, b, p in tested if p is not None and p < alpha}
    complete = all(frozenset(pair) in done for pair in itertools.combinations(ranked, 2))
    if not complete:
        return Decisions(different, {}, unsettled or set())
    letters = letter_display(ranked, different)
    return Decisions(
        different, letters, unsettled or set(), marked(ranked, different, unsettled or set(), letters)
    )


MAX_OUTCOMES = 2**8  # the unsettled decisions' outcomes tried for the letters; beyond, every model is marked


def marked(
    ranked: list[str], different: set[frozenset], unsettled: set[frozenset], letters: dict
) -> set[str]:
    """The models whose letters could change with the unsettled decisions: those of an unsettled pair, and any whose
    letters differ under some other outcome of them. Letters follow the whole set's decisions, so a pair's flip can
    rename a third model's letters."""
    if not unsettled:
        return set()
    if 2 ** len(unsettled) > MAX_OUTCOMES:
        return set(ranked)
    out = {m for pair in unsettled for m in pair}
    pairs = sorted(unsettled, key=sorted)
    for outcome in itertools.product((False, True), repeat=len(pairs)):
        other = (different - unsettled) | {pair for pair, apart in zip(pairs, outcome) if apart}
        out |= {m for m, shown in letter_display(ranked, other).items() if shown != letters[m]}
    return out
