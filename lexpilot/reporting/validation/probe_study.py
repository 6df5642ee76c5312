"""The probe study's scoring (Appendix E.3.3, Table 13): the blind sheet for the experts, their adjudicated
labels, the rates per condition and the paired B - A difference.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.probe_file import CONDITION_NAMES, CONDITIONS, Probe, numbered
from lexpilot.benchmark.prompts import key_detail_lines, render_history
from lexpilot.benchmark.vocabulary import NO, YES
from lexpilot.files import fits_a_cell
from lexpilot.reporting.tables.formats import number_cell
from lexpilot.reporting.tables.table import PERCENT, Kind, Table, declares

EXPERT = ("answer", "over_disclosure", "error")  # the three criteria, each 是/否
# One sheet per expert, so that the two reviews stay independent; every item looks alike whatever its condition
# (the facts the simulated plaintiff knew, the fact asked about, the disclosures permitted), so the condition is
# not in the layout
EXPERT_SHEET_COLUMNS = [
    "item_id",
    "case_number",
    "history",
    "question",
    "reply",
    "facts_known",
    "asked_fact",
    "permitted",
    *EXPERT,
]
ADJUDICATION_COLUMNS = [
    "item_id",
    "case_number",
    "question",
    "reply",
    *(f"expert_{i}_{c}" for i in (1, 2) for c in EXPERT),
    *(f"adjudicated_{c}" for c in EXPERT),
]
SHEET_COLUMNS = [
    "item_id",
    "case_number",
    *(f"expert_{i}_{c}" for i in (1, 2) for c in EXPERT),
    *(f"adjudicated_{c}" for c in EXPERT),  # the two reviews and the adjudication, joined for scoring
]
PROBE_KEY_COLUMNS = ["item_id", "case_number", "condition", "dcg_label"]


# ----------------------------------------------------------------------------- the annotation sheets


def sheets(probes: dict[str, Probe], replies: dict, labels: dict, cases: dict[str, Case], seed: int):
    """(expert 1's rows, expert 2's rows, key rows): every reply, each expert's sheet in its own seeded order; no
    condition, no DCG label."""
    items = []
    for number, record in replies.items():
        if not record.get("probed"):
            continue
        probe, details = probes[number], key_detail_lines(cases[number])
        for condition, r in record["replies"].items():
            known = [d for i, d in enumerate(details, 1) if not (condition == "D" and i in probe.removed)]
            items.append(
                (
                    {
                        "case_number": number,
                        "history": render_history(cases[number].underspecified),
                        "question": r["question"],
                        "reply": fits_a_cell(r["reply"], "the run's probe_replies.jsonl"),
                        "facts_known": numbered(known),
                        "asked_fact": probe.minimum_answer,
                        "permitted": probe.permitted[condition],
                    },
                    condition,
                    labels.get(number, {}).get("labels", {}).get(condition, {}).get("label", ""),
                )
            )
    random.Random(seed).shuffle(items)
    keys, rows = [], []
    for i, (row, condition, dcg) in enumerate(items, 1):
        rows.append({"item_id": f"P-{i:04d}", **row} | {c: "" for c in EXPERT})
        keys.append(
            {
                "item_id": f"P-{i:04d}",
                "case_number": row["case_number"],
                "condition": condition,
                "dcg_label": dcg,
            }
        )
    second = list(rows)
    random.Random(seed + 1).shuffle(second)  # the second expert reads them in another order
    return rows, second, keys


def joined(one: list, two: list, adjudication: list) -> tuple[list, list[str]]:
    """The two experts' sheets (and the adjudication sheet) as rows of SHEET_COLUMNS by item, with problems."""
    by_item: dict[str, dict] = {}
    problems = []
    for expert, rows in ((1, one), (2, two)):
        for line, row in rows:
            entry = by_item.setdefault(
                row["item_id"], {"item_id": row["item_id"], "case_number": row["case_number"], "line": line}
            )
            entry.update({f"expert_{expert}_{c}": row[c] for c in EXPERT})
    for _line, row in adjudication:
        if row["item_id"] in by_item:
            by_item[row["item_id"]].update({f"adjudicated_{c}": row[f"adjudicated_{c}"] for c in EXPERT})
    rows = []
    for item, entry in by_item.items():
        if not all(f"expert_{i}_answer" in entry for i in (1, 2)):
            problems.append(f"item {item}: in one expert's sheet only; keep every row as exported")
            continue
        rows.append((entry.pop("line"), {c: entry.get(c, "") for c in SHEET_COLUMNS}))
    return rows, problems


def disagreements(rows: list, key: dict, sheet_rows: dict) -> list[dict]:
    """The items whose applicable criteria the two experts labelled differently, for the adjudication sheet."""
    out = []
    for _, row in rows:
        item = key.get(row["item_id"], {})
        differ = [
            c
            for c in EXPERT
            if not (c == "answer" and item.get("condition") == "C")
            and {row[f"expert_1_{c}"], row[f"expert_2_{c}"]} == {YES, NO}  # an invalid label: scoring says so
        ]
        if differ and not all(row[f"adjudicated_{c}"] for c in differ):
            shown = sheet_rows.get(row["item_id"], {})
            out.append(
                {c: row.get(c, "") for c in ADJUDICATION_COLUMNS}
                | {"question": shown.get("question", ""), "reply": shown.get("reply", "")}
            )
    return out


# ----------------------------------------------------------------------------- Table 13


def adjudicated(path: Path, rows, key: dict) -> tuple[list[dict], list[str], dict]:
    """Each item's final labels, every problem by row, and the agreement before adjudication per criterion."""
    items: list[dict] = []
    problems: list[str] = []
    agree: dict[str, list[bool]] = {c: [] for c in EXPERT}  # criterion -> the experts agreed, per item
    seen: dict[str, int] = {}
    for line, row in rows:
        where = f"{path}:{line} (item {row.get('item_id') or '?'})"
        item = key.get(row["item_id"])
        if item is None:
            problems.append(f"{where}: not in the key file; keep the item_id column as exported")
            continue
        if row["item_id"] in seen:
            problems.append(f"{where}: a second row for this item (first at row {seen[row['item_id']]})")
            continue
        seen[row["item_id"]] = line
        final, bad = {}, []
        for criterion in EXPERT:
            applies = not (criterion == "answer" and item["condition"] == "C")
            one, two, adj = (
                row[f"expert_1_{criterion}"],
                row[f"expert_2_{criterion}"],
                row[f"adjudicated_{criterion}"],
            )
            if not applies:
                continue
            if one not in (YES, NO) or two not in (YES, NO) or adj not in ("", YES, NO):
                bad.append(criterion)
                continue
            if one != two and not adj:
                problems.append(f"{where}: {criterion}: the experts disagree; fill adjudicated_{criterion}")
                continue
            agree[criterion].append(one == two)
            final[criterion] = adj or one
        if bad:
            problems.append(
                f"{where}: {', '.join(bad)}: every expert column must be 是 or 否 (answer may be empty "
                "only for a broad question)"
            )
            continue
        if len(final) == len([c for c in EXPERT if not (c == "answer" and item["condition"] == "C")]):
            items.append({**item, **final})
    return items, problems, agree


def rate(items: list[dict], criterion: str) -> tuple[float | None, int]:
    values = [i[criterion] == YES for i in items if criterion in i]
    return (float(np.mean(values)) if values else None), len(values)


def answer_difference(items: list[dict], resamples: int = 1000, seed: int = 0, other: str = "B"):
    """`other` − A answer rate on the cases with both (B: indirect; D: withheld, E.3.3's paired A/D comparison),
    and its 95% interval from a paired bootstrap over cases."""
    by_case: dict[str, dict] = {}
    for i in items:
        if i["condition"] in ("A", other) and "answer" in i:
            by_case.setdefault(i["case_number"], {})[i["condition"]] = float(i["answer"] == YES)
    pairs = np.array([[v["A"], v[other]] for v in by_case.values() if "A" in v and other in v])
    if not len(pairs):
        return None
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
    diffs = pairs[draws, 1].mean(axis=1) - pairs[draws, 0].mean(axis=1)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(pairs[:, 1].mean() - pairs[:, 0].mean()), float(lo), float(hi), len(pairs)


def _percent(v: float | None) -> str:
    return "—" if v is None else number_cell(v, PERCENT, percent=True)


def _difference_cell(diff) -> str:
    """A paired answer-rate difference in points, its interval and its cases (`answer_difference`)."""
    if diff is None:
        return "n/a"
    return (
        f"{100 * diff[0]:+.{PERCENT}f} [{100 * diff[1]:+.{PERCENT}f}, {100 * diff[2]:+.{PERCENT}f}]"
        f" over {diff[3]} cases"
    )


def dcg_acceptance(labels: Iterable[tuple[str, str]]) -> dict[str, float]:
    """Condition -> the DCG judge's acceptance of its probe questions (Table 13's DCG+): the share of 是 among the
    questions it labelled, from (condition, label) pairs; D is never judged, and an empty label is no label."""
    judged: dict[str, list[bool]] = {}
    for condition, label in labels:
        if condition != "D" and label:
            judged.setdefault(condition, []).append(label == YES)
    return {condition: float(np.mean(found)) for condition, found in judged.items()}


def _condition_rows(items: list[dict]) -> list[list[str]]:
    """Table 13's rows: per condition, each applicable criterion's rate and the DCG judge's acceptance."""
    rows = []
    for condition in CONDITIONS:
        chosen = [i for i in items if i["condition"] == condition]
        if not chosen:
            continue
        dcg = dcg_acceptance((i["condition"], i["dcg_label"]) for i in chosen).get(condition)
        rows.append(
            [CONDITION_NAMES[condition], str(len(chosen))]
            + [
                _percent(rate(chosen, c)[0]) if not (c == "answer" and condition == "C") else "—"
                for c in EXPERT
            ]
            + [_percent(dcg) if dcg is not None else "—"]
        )
    return rows


def _recovery_cell(items: list[dict]) -> str:
    """The DCG-accepted A/B requests whose reply was insufficient, over-disclosing or erroneous, of all."""
    accepted = [i for i in items if i["condition"] in ("A", "B") and i["dcg_label"] == YES]
    failed = [
        i
        for i in accepted
        if i.get("answer") == NO or i.get("over_disclosure") == YES or i.get("error") == YES
    ]
    if not accepted:
        return "n/a"
    return f"{len(failed)}/{len(accepted)} = {100 * len(failed) / len(accepted):.{PERCENT}f}%"


@declares(Kind("table_13", "Table 13", 3), Kind("probe_study", "nearest: Table 13", 3))
def table_13(items: list[dict], agree: dict) -> list[Table]:
    tables = [
        Table(
            "table_13",
            "User simulator fidelity and DCG judge acceptance (Table 13): rates over applicable replies",
            ["Condition", "Replies", "Answer", "OD", "Error", "DCG+"],
            _condition_rows(items),
        )
    ]
    diff, withheld = answer_difference(items), answer_difference(items, other="D")
    tables.append(
        Table(
            "probe_study",
            "Probe study: the A-B comparison, agreement before adjudication, factual recovery (E.3.3)",
            ["Measure", "Value"],
            [
                [
                    "Answer rate, indirect − direct (B − A), pp [95% paired case-bootstrap interval]",
                    _difference_cell(diff),
                ],
                [
                    "Answer rate, withheld − direct (D − A), pp [95% paired case-bootstrap interval]",
                    _difference_cell(withheld),
                ],
            ]
            + [
                [f"Agreement before adjudication: {c}", _percent(float(np.mean(v))) if v else "n/a"]
                for c, v in agree.items()
            ]
            + [
                [
                    "Factual-recovery failures among DCG-accepted A/B requests (insufficient, over-disclosing "
                    "or erroneous)",
                    _recovery_cell(items),
                ]
            ],
        )
    )
    return tables
