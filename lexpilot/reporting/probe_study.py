"""The probe study's scoring (Appendix E.3.3, Table 13): the blind sheet for the experts, their adjudicated
labels, the rates per condition and the paired B - A difference.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.probe_file import CONDITION_NAMES, CONDITIONS, Probe
from lexpilot.benchmark.prompts import render_history
from lexpilot.benchmark.vocabulary import NO, YES
from lexpilot.files import fits_a_cell
from lexpilot.reporting.table import Table

EXPERT = ("answer", "over_disclosure", "error")  # the three criteria, each 是/否
SHEET_COLUMNS = ["item_id", "case_number", "history", "question", "reply", "sufficient_reply", "permitted",
                 *(f"expert_{i}_{c}" for i in (1, 2) for c in EXPERT), *(f"adjudicated_{c}" for c in EXPERT)]
PROBE_KEY_COLUMNS = ["item_id", "case_number", "condition", "dcg_label"]


# ----------------------------------------------------------------------------- the annotation sheet

def sheet(probes: dict[str, Probe], replies: dict, labels: dict, cases: dict[str, Case], seed: int):
    """(rows for the experts, key rows): every reply, shuffled with a seed; no condition, no DCG label."""
    items = []
    for number, record in replies.items():
        if not record.get("probed"):
            continue
        probe = probes[number]
        for condition, r in record["replies"].items():
            sufficient = {"C": "（不适用）", "D": "应说明不清楚或无法确认所问事实"}.get(condition, probe.minimum_answer)
            items.append(({"case_number": number, "history": render_history(cases[number].underspecified),
                           "question": r["question"], "reply": fits_a_cell(r["reply"], "the run's probe_replies.jsonl"), "sufficient_reply": sufficient,
                           "permitted": probe.permitted[condition]},
                          condition, labels.get(number, {}).get("labels", {}).get(condition, {}).get("label", "")))
    random.Random(seed).shuffle(items)
    rows, keys = [], []
    for i, (row, condition, dcg) in enumerate(items, 1):
        item_id = f"P-{i:04d}"
        rows.append({"item_id": item_id, **row} | {c: "" for c in SHEET_COLUMNS[7:]})
        keys.append({"item_id": item_id, "case_number": row["case_number"], "condition": condition, "dcg_label": dcg})
    return rows, keys


# ----------------------------------------------------------------------------- Table 13

def adjudicated(path: Path, rows, key: dict) -> tuple[list[dict], list[str], dict]:
    """Each item's final labels, every problem by row, and the agreement before adjudication per criterion."""
    items, problems, agree = [], [], {c: [] for c in EXPERT}
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
            one, two, adj = (row[f"expert_1_{criterion}"], row[f"expert_2_{criterion}"],
                             row[f"adjudicated_{criterion}"])
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
            problems.append(f"{where}: {', '.join(bad)}: every expert column must be 是 or 否 (answer may be empty "
                            "only for a broad question)")
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


def table_13(items: list[dict], agree: dict) -> list[Table]:
    pct = lambda v: "—" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    rows = []
    for condition in CONDITIONS:
        chosen = [i for i in items if i["condition"] == condition]
        if not chosen:
            continue
        dcg = [i["dcg_label"] == YES for i in chosen if condition != "D" and i["dcg_label"]]
        rows.append([CONDITION_NAMES[condition], str(len(chosen))]
                    + [pct(rate(chosen, c)[0]) if not (c == "answer" and condition == "C") else "—" for c in EXPERT]
                    + [pct(float(np.mean(dcg))) if dcg else "—"])
    tables = [Table("table_13", "User simulator fidelity and DCG judge acceptance (Table 13): rates over applicable replies",
                    ["Condition", "Replies", "Answer", "OD", "Error", "DCG+"], rows)]
    diff, withheld = answer_difference(items), answer_difference(items, other="D")
    accepted = [i for i in items if i["condition"] in ("A", "B") and i["dcg_label"] == YES]
    failed = [i for i in accepted if i.get("answer") == NO or i.get("over_disclosure") == YES or i.get("error") == YES]
    tables.append(Table("probe_study", "Probe study: the A-B comparison, agreement before adjudication, factual recovery (E.3.3)",
                        ["Measure", "Value"],
                        [["Answer rate, indirect − direct (B − A), pp [95% paired case-bootstrap interval]",
                          "n/a" if diff is None else f"{100 * diff[0]:+.1f} [{100 * diff[1]:+.1f}, {100 * diff[2]:+.1f}]"
                                                     f" over {diff[3]} cases"],
                         ["Answer rate, withheld − direct (D − A), pp [95% paired case-bootstrap interval]",
                          "n/a" if withheld is None else f"{100 * withheld[0]:+.1f} [{100 * withheld[1]:+.1f}, "
                                                         f"{100 * withheld[2]:+.1f}] over {withheld[3]} cases"]]
                        + [[f"Agreement before adjudication: {c}", pct(float(np.mean(v))) if v else "n/a"]
                           for c, v in agree.items()]
                        + [["Factual-recovery failures among DCG-accepted A/B requests (insufficient, over-disclosing "
                            "or erroneous)", f"{len(failed)}/{len(accepted)} = {100 * len(failed) / len(accepted):.1f}%"
                            if accepted else "n/a"]]))
    return tables
