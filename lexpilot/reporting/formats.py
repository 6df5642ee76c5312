"""How a table shows a statistic: a cell of mean ± SD [interval], a number, the parts of a whole, a difference, a
row of averages (each keeping its numbers for the CSV), at the decimals `table.py` declares; and the names tables
give the setups, user conditions and plain response types.
"""
from __future__ import annotations

import numpy as np

from lexpilot.reporting.table import METRIC, PERCENT, Figure

USER_CONDITION_NAMES = (("standard", "Standard"), ("delayed", "Delayed Disclosure"), ("self-correction", "Self-Correction"))
SETUP_NAMES = {"direct": "Direct", "interaction": "Interaction-Based", "gold": "Gold-Standard"}



def cell(stat: dict | None, digits: int = METRIC, ci: tuple[float, float] | None = None) -> Figure:
    """mean ± SD [interval] (k undefined), with its numbers kept for the CSV."""
    numbers = {"mean": None, "SD": None, "low": ci[0] if ci else None, "high": ci[1] if ci else None,
               "n": stat["n"] if stat else None}
    if stat is None:
        return Figure("n/a", numbers)
    if stat["mean"] is None:
        return Figure("undefined", numbers)
    numbers |= {"mean": stat["mean"], "SD": stat["sd"]}
    text = f"{stat['mean']:.{digits}f}"
    if len(stat["runs"]) > 1:
        text += f" ± {stat['sd']:.{digits}f}" if stat["sd"] is not None else " ± n/a"
    if ci is not None:
        text += f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    if stat["undefined"]:
        text += f" ({stat['undefined']} undefined)"
    return Figure(text, numbers)


def number_cell(value: float | None, digits: int, signed: bool = False, percent: bool = False,
                key: str = "value") -> Figure:
    """One number: its text at `digits` decimals (signed, or in percent), the number whole for the CSV."""
    if value is None:
        return Figure("n/a", {key: None})
    shown = 100 * value if percent else value
    return Figure(f"{shown:{'+' if signed else ''}.{digits}f}" + ("%" if percent else ""), {key: shown})


def parts_cell(parts: dict[str, float | None], digits: int | None = None) -> Figure:
    """Numbers that make one whole, "a / b / c" (shares of the stop reasons, counts per attempt), each its own column
    in the CSV; at `digits` decimals, or as short as they go (counts)."""
    text = "n/a" if None in parts.values() and digits is not None else " / ".join(
        "n/a" if v is None else f"{v:.{digits}f}" if digits is not None else f"{v:g}" for v in parts.values())
    return Figure(text, dict(parts))


def difference_cell(d: dict | None, digits: int = METRIC) -> Figure:
    numbers = {"difference": d["difference"] if d else None, "low": d["ci"][0] if d and d["ci"] else None,
               "high": d["ci"][1] if d and d["ci"] else None, "share below 0": d["below_zero"] if d else None}
    if d is None:
        return Figure("n/a", numbers)
    text = f"{d['difference']:+.{digits}f}"
    if d["ci"] is not None:
        text += f" [{d['ci'][0]:+.{digits}f}, {d['ci'][1]:+.{digits}f}]"
    return Figure(text + (f", {100 * d['below_zero']:.{PERCENT}f}% < 0" if d["below_zero"] is not None else ""), numbers)


PLAIN_TYPE_NAMES = {"deficiency_recognition": "Deficiency recognition", "conditional_advice": "Cond. generic advice",
                    "unconditional_advice": "Uncond. generic advice", "premature_prediction": "Premature prediction"}


def average_cell(stats: list[dict | None]) -> Figure:
    means = [s["mean"] for s in stats if s and s["mean"] is not None]
    return number_cell(float(np.mean(means)) if means else None, METRIC, key="mean")  # in the column's mean

# Table 11's columns and Table 14's LCA details, (name, (task, metric)): every comparison, ranking and judge table
HEADLINE = (("LCA Macro-F1", ("LCA", "macro_f1")), ("LCA Acc_C", ("LCA", "acc_c")), ("LCA Acc_U", ("LCA", "acc_u")),
            ("DCG Acc.", ("DCG", "accuracy")), ("LJP Direct QWK", ("LJP_direct", "qwk")),
            ("LJP Interaction QWK", ("LJP_interaction", "qwk")), ("LJP Gold QWK", ("LJP_gold", "qwk")))
