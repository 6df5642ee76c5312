"""How a table shows a statistic: a cell of mean ± SD [interval], a number, the parts of a whole, a difference, a
row of averages (each keeping its numbers for the CSV), at the decimals `table.py` declares; and the names tables
give the user conditions and plain response types (the LJP setups' are benchmark/records.py's LJP_SETUPS).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from lexpilot.benchmark.records import LJP_SETUPS
from lexpilot.reporting.tables.table import METRIC, PERCENT, Figure

USER_CONDITION_NAMES = (
    ("standard", "Standard"),
    ("delayed", "Delayed Disclosure"),
    ("self-correction", "Self-Correction"),
)


def metric_drawn(digits: int | None, draw) -> Callable[[int], str] | None:
    """A cell at METRIC decimals is a metric's: it is drawn again at its table's precision (table.py)."""
    return draw if digits == METRIC else None


def cell(stat: dict | None, digits: int = METRIC, ci: tuple[float, float] | None = None) -> Figure:
    """mean ± SD [interval] (k undefined), with its numbers kept for the CSV."""
    numbers = {
        "mean": None,
        "SD": None,
        "low": ci[0] if ci else None,
        "high": ci[1] if ci else None,
        "n": stat["n"] if stat else None,
    }
    if stat is None:
        return Figure("n/a", numbers)
    if stat["mean"] is None:
        return Figure("undefined", numbers)
    numbers |= {"mean": stat["mean"], "SD": stat["sd"]}

    def draw(d: int) -> str:
        text = f"{stat['mean']:.{d}f}"
        if len(stat["runs"]) > 1:
            text += f" ± {stat['sd']:.{d}f}" if stat["sd"] is not None else " ± n/a"
        if ci is not None:
            text += f" [{ci[0]:.{d}f}, {ci[1]:.{d}f}]"
        return text + (f" ({stat['undefined']} undefined)" if stat["undefined"] else "")

    return Figure(draw(digits), numbers, metric_drawn(digits, draw))


def percent_cell(stat: dict | None, ci: tuple[float, float] | None = None) -> Figure:
    """A share as the paper prints its rates (Tables 5, 6, 12, 13): mean% ± SD [interval] at PERCENT decimals, in
    percent in the CSV too."""
    if stat is None or stat["mean"] is None:
        return cell(stat, PERCENT, ci)
    scaled = {**stat, "mean": 100 * stat["mean"], "sd": None if stat["sd"] is None else 100 * stat["sd"]}
    shown = cell(scaled, PERCENT, (100 * ci[0], 100 * ci[1]) if ci else None)
    text = str(shown).replace(f"{scaled['mean']:.{PERCENT}f}", f"{scaled['mean']:.{PERCENT}f}%", 1)
    return Figure(text, shown.numbers)


def number_cell(
    value: float | None, digits: int, signed: bool = False, percent: bool = False, key: str = "value"
) -> Figure:
    """One number: its text at `digits` decimals (signed, or in percent), the number whole for the CSV."""
    if value is None:
        return Figure("n/a", {key: None})
    shown = 100 * value if percent else value

    def draw(d: int) -> str:
        return f"{shown:{'+' if signed else ''}.{d}f}" + ("%" if percent else "")

    return Figure(draw(digits), {key: shown}, None if percent else metric_drawn(digits, draw))


def parts_cell(parts: dict[str, float | None], digits: int | None = None) -> Figure:
    """Numbers that make one whole, "a / b / c" (shares of the stop reasons, counts per attempt), each its own column
    in the CSV; at `digits` decimals, or as short as they go (counts)."""

    def draw(d: int | None) -> str:
        return (
            "n/a"
            if None in parts.values() and d is not None
            else " / ".join(
                "n/a" if v is None else f"{v:.{d}f}" if d is not None else f"{v:g}" for v in parts.values()
            )
        )

    return Figure(draw(digits), dict(parts), metric_drawn(digits, draw))


def difference_cell(d: dict | None, digits: int = METRIC) -> Figure:
    numbers = {
        "difference": d["difference"] if d else None,
        "low": d["ci"][0] if d and d["ci"] else None,
        "high": d["ci"][1] if d and d["ci"] else None,
        "share below 0": d["below_zero"] if d else None,
    }
    if d is None:
        return Figure("n/a", numbers)

    def draw(n: int) -> str:
        text = f"{d['difference']:+.{n}f}"
        if d["ci"] is not None:
            text += f" [{d['ci'][0]:+.{n}f}, {d['ci'][1]:+.{n}f}]"
        return text + (f", {100 * d['below_zero']:.{PERCENT}f}% < 0" if d["below_zero"] is not None else "")

    return Figure(draw(digits), numbers, metric_drawn(digits, draw))


def kappa_cell(kappa: float | None) -> Figure:
    """Cohen's κ at its table's precision ("undefined" where the expected agreement is total)."""
    return Figure("undefined", {"kappa": None}) if kappa is None else number_cell(kappa, METRIC, key="kappa")


def interval_cell(
    interval: tuple[float, float] | None, signed: bool = False, undefined: str = "n/a"
) -> Figure:
    """[low, high] at its table's precision (signed for an interval of a difference)."""
    numbers = {"low": interval[0] if interval else None, "high": interval[1] if interval else None}
    if interval is None:
        return Figure(undefined, numbers)
    sign = "+" if signed else ""

    def draw(d: int) -> str:
        return f"[{interval[0]:{sign}.{d}f}, {interval[1]:{sign}.{d}f}]"

    return Figure(draw(METRIC), numbers, draw)


PLAIN_TYPE_NAMES = {
    "deficiency_recognition": "Deficiency recognition",
    "conditional_advice": "Cond. generic advice",
    "unconditional_advice": "Uncond. generic advice",
    "premature_prediction": "Premature prediction",
}


def plain_tag(history_type: str, name: str) -> str:
    """The case list's tag of a plain consultation's response type (Table 6): what a cell of that type opens."""
    return f"plain: {name}" if history_type == "underspecified" else f"plain ({history_type}): {name}"


def average_cell(stats: list[dict | None]) -> Figure:
    """The mean of the models' means (in the column's mean), and over how many: "(1 of 2)" when some model has no
    value in the column."""
    means = [s["mean"] for s in stats if s and s["mean"] is not None]
    cell = number_cell(float(np.mean(means)) if means else None, METRIC, key="mean")
    redraw = cell.redraw
    if not means or len(means) == len(stats):
        return Figure(cell, {**cell.numbers, "models": len(means)}, redraw and (lambda d: redraw(d)))
    return Figure(
        f"{cell} ({len(means)} of {len(stats)})",
        {**cell.numbers, "models": len(means)},
        redraw and (lambda d: f"{redraw(d)} ({len(means)} of {len(stats)})"),
    )


# Table 11's columns and Table 14's LCA details, (name, (task, metric)): every comparison, ranking and judge table
HEADLINE = (
    ("LCA Macro-F1", ("LCA", "macro_f1")),
    ("LCA Acc_C", ("LCA", "acc_c")),
    ("LCA Acc_U", ("LCA", "acc_u")),
    ("DCG Acc.", ("DCG", "accuracy")),
    *((f"{s.short} QWK", (s.task, "qwk")) for s in LJP_SETUPS),
)
