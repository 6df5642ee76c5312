"""The grid quote's tables as a person reads them: counts with thousands separators, money at the decimals its
smallest amount needs; every number whole in the CSV."""

from __future__ import annotations

import math
import sys
from typing import Any, TextIO

from lexpilot.reporting.tables.table import Figure, Table

MAX_MONEY_DECIMALS = 6


def money_decimals(tables: list[tuple]) -> int:
    """2, or as many decimals as the smallest amount needs to show two significant digits (a quote of 0.0016 is
    not "0.00"), at most MAX_MONEY_DECIMALS."""
    amounts = [c for _, _, _, rows in tables for r in rows for c in r if isinstance(c, float) and c > 0]
    if not amounts:
        return 2
    return min(MAX_MONEY_DECIMALS, max(2, 1 - math.floor(math.log10(min(amounts)))))


def quote_cell(value, digits: int):
    """A count (an int) with thousands separators, an amount (a float) at `digits` decimals (one too small for them
    as "<0.000001"); text as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int):
        return Figure(f"{value:,}", {"value": value})
    # an amount too small for the most decimals shown is not drawn as nothing
    shown = f"<{10**-digits:.{digits}f}" if 0 < value < 0.5 * 10**-digits else f"{value:.{digits}f}"
    return Figure(shown, {"value": value})


def drawn_quote(tables: list[tuple]) -> list[Table]:
    """(id, title, headers, rows of numbers) -> Tables, every amount at one precision."""
    digits = money_decimals(tables)
    return [
        Table(id_, title, headers, [[quote_cell(c, digits) for c in r] for r in rows])
        for id_, title, headers, rows in tables
    ]


def print_quote(quote: Any, fmt: str, width: int, out: TextIO | None = None) -> int:
    """The grid's quote printed (running/grid/quote.py `GridQuote`: its tables and notes), as quote_grid.py and
    run_grid.py --dry-run print it; the exit status: 1 when a stage would refuse to run (it is not quoted)."""
    print(quote_text(quote.tables, quote.notes, fmt, width), file=out or sys.stdout)
    return 1 if quote.refused else 0


def quote_text(quoted: list[tuple], notes: list[str], fmt: str, width: int) -> str:
    """The quote as quote_grid.py and run_grid.py --dry-run print it: its tables, then its notes (the text wraps
    each note), in one of the report's formats."""
    from lexpilot.reporting.tables.renderings import RENDERINGS, render_text

    tables = drawn_quote(
        [
            *quoted,
            ("grid_quote_notes", "Time, and what the quote leaves out", ["Note"], [[note] for note in notes]),
        ]
    )
    return render_text(tables, width or 10**9) if fmt == "text" else RENDERINGS[fmt](tables)
