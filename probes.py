"""The probe study of the User Model (Appendix E.3.2, E.3.3, Table 13): the probe file the legal experts fill
(template and validation), the generation steps (one User Model reply per condition from a fresh copy of the
underspecified history, then the DCG judge on the A-C questions with the reply withheld), the blind annotation
sheet and its key, and the scoring of Table 13 with E.3.3's factual-recovery failures.

Conditions: A direct question for a missing fact the simulator has; B the same fact asked indirectly; C a
broad question naming the legal concept only; D = A again with the target fact (and what lets one infer it)
removed from the key details. Minimum answers and permitted disclosures are for the experts: the simulator
never sees them.
"""
from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common import key_detail_lines, render_history
from dataset import Case, load_dataset
from errors import HarnessError
from protocols import CaseCalls, Step, judge_question
from records import PROBE_DCG, PROBE_REPLIES
from renderings import read_sheet
from tables import Table

CONDITIONS = ("A", "B", "C", "D")
CONDITION_NAMES = {"A": "A: Direct", "B": "B: Indirect", "C": "C: Broad", "D": "D: Withheld"}
PROBE_COLUMNS = ["case_number", "cause_of_action", "history", "key_details", "A_question", "B_question",
                 "C_question", "minimum_answer", "permitted_A", "permitted_B", "permitted_C", "D_removed",
                 "permitted_D"]
EXPERT = ("answer", "over_disclosure", "error")  # the three criteria, each 是/否
SHEET_COLUMNS = ["item_id", "case_number", "history", "question", "reply", "sufficient_reply", "permitted",
                 *(f"expert_{i}_{c}" for i in (1, 2) for c in EXPERT), *(f"adjudicated_{c}" for c in EXPERT)]
KEY_COLUMNS = ["item_id", "case_number", "condition", "dcg_label"]
YES, NO = "是", "否"


@dataclass(frozen=True)
class Probe:
    case_number: str
    questions: dict  # condition -> question (D: A's)
    minimum_answer: str
    permitted: dict  # condition -> permitted disclosures
    removed: tuple[int, ...]  # key-detail numbers removed for D (empty: the case has no D)


def numbered(details: list[str]) -> str:
    return "\n".join(f"{i}. {d}" for i, d in enumerate(details, 1))


# ----------------------------------------------------------------------------- template and validation

def template(cases: list[Case], per_cause: int, seed: int) -> list[dict]:
    """A seeded sample of `per_cause` cases per cause of action, as rows for the experts to fill."""
    rng = random.Random(seed)
    by_cause: dict[str, list[Case]] = {}
    for case in cases:
        by_cause.setdefault(case.cause, []).append(case)
    chosen = [c for cause in sorted(by_cause) for c in rng.sample(by_cause[cause], min(per_cause, len(by_cause[cause])))]
    return [{"case_number": c.number, "cause_of_action": c.cause, "history": render_history(c.underspecified),
             "key_details": numbered(key_detail_lines(c))} | {k: "" for k in PROBE_COLUMNS[4:]} for c in chosen]


def load_probes(path: Path, cases: dict[str, Case]) -> tuple[dict[str, Probe], str]:
    """The filled probe file (case number -> Probe) and its hash; every problem is listed with its row and
    field."""
    rows = [(line, {k: v.strip() for k, v in row.items()}) for line, row in read_sheet(path, PROBE_COLUMNS)]
    probes, problems, seen = {}, [], {}
    for line, row in rows:
        number = row["case_number"]
        where = f"{path}:{line} (case {number or '?'})"
        if number in seen:
            problems.append(f"{where}: case_number: a second row for this case (first at row {seen[number]})")
            continue
        seen[number] = line
        case = cases.get(number)
        if case is None:
            problems.append(f"{where}: case_number: not a case of the dataset")
            continue
        for field in ("A_question", "B_question", "C_question", "minimum_answer"):
            if not row[field]:
                problems.append(f"{where}: {field}: empty")
        details = key_detail_lines(case)
        removed: tuple[int, ...] = ()
        if row["D_removed"]:
            try:
                removed = tuple(sorted({int(x) for x in row["D_removed"].replace("；", ";").replace(",", ";").split(";")
                                        if x.strip()}))
            except ValueError:
                problems.append(f"{where}: D_removed: {row['D_removed']!r} is not a list of key-detail numbers "
                                "(e.g. 2;3)")
            else:
                if not removed or any(not 1 <= i <= len(details) for i in removed):
                    problems.append(f"{where}: D_removed: {row['D_removed']!r} does not match the case's "
                                    f"{len(details)} key details (numbers 1 to {len(details)})")
                elif len(removed) == len(details):
                    problems.append(f"{where}: D_removed: removes every key detail; leave D_removed empty for a "
                                    "case without D")
        if not any(p.startswith(where) for p in problems):
            probes[number] = Probe(number, {"A": row["A_question"], "B": row["B_question"], "C": row["C_question"],
                                            "D": row["A_question"]}, row["minimum_answer"],
                                   {c: row[f"permitted_{c}"] for c in CONDITIONS}, removed)
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise HarnessError(f"{len(problems)} problem(s) in the probe file; fix them and rerun:\n  " + "\n  ".join(shown))
    if not probes:
        raise HarnessError(f"{path}: no probe rows")
    return probes, hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# ----------------------------------------------------------------------------- generation (a stage)

def probes_of(calls: CaseCalls) -> Probe | None:
    settings = calls.caller.settings
    return probe_table(settings.probes, settings.dataset)[0].get(calls.case.number)


@functools.lru_cache(maxsize=4)
def probe_table(path: Path, dataset: Path) -> tuple[dict[str, Probe], str]:
    """The probe file, validated against the dataset; read once per process (a pure function of the files)."""
    return load_probes(path, {c.number: c for c in load_dataset(dataset)[0]})


def check_probe_file(settings) -> str:
    """Before any case starts: the probe file is valid, or every problem is listed."""
    probes, digest = probe_table(settings.probes, settings.dataset)
    return f"probe file {settings.probes} (sha256 {digest}): {len(probes)} cases"


def reply_for(calls: CaseCalls, probe: Probe, condition: str) -> dict:
    """A fresh copy of the underspecified history, the probe question as the assistant's turn, and the
    Standard User Model; for D, the key details without the removed ones."""
    details = key_detail_lines(calls.case)
    if condition == "D":
        details = [d for i, d in enumerate(details, 1) if i not in probe.removed]
    dialogue = calls.case.history("underspecified") + [{"role": "assistant", "content": probe.questions[condition]}]
    reply = calls.generate("user", "user_standard", history=render_history(dialogue), key_facts="\n".join(details))
    return {"question": probe.questions[condition], "reply": reply, "key_details_given": len(details)}


def probe_replies(calls: CaseCalls, upstream: dict) -> dict:
    probe = probes_of(calls)
    if probe is None:
        return {"probed": False, "replies": {}}
    conditions = CONDITIONS if probe.removed else CONDITIONS[:3]
    digest = probe_table(calls.caller.settings.probes, calls.caller.settings.dataset)[1]
    return {"probed": True, "probe_file": digest, "replies": {c: reply_for(calls, probe, c) for c in conditions}}


def probe_dcg(calls: CaseCalls, upstream: dict) -> dict:
    """The DCG judge once per A-C question, the simulator's reply withheld."""
    replies = upstream["probe_replies"]["replies"]
    labels = {}
    for condition in ("A", "B", "C"):
        if condition in replies:
            label, raw = judge_question(calls, replies[condition]["question"])
            labels[condition] = {"label": label, "judge_raw": raw}
    return {"labels": labels}


def probe_calls(role: str):
    def calls(upstream: dict, settings, case: Case | None = None) -> dict:
        probe = probe_table(settings.probes, settings.dataset)[0].get(case.number) if case else None
        if case is not None and probe is None:
            return {}
        return {"user": 4 if probe is None or probe.removed else 3} if role == "user" else {"judge": 3}
    return calls


PROBE_STEPS = (Step(PROBE_REPLIES, probe_replies, max_calls=probe_calls("user"), prompts={"user": "user_standard"}),
               Step(PROBE_DCG, probe_dcg, needs=("probe_replies",), max_calls=probe_calls("judge"),
                    prompts={"judge": "judge_dcg"}))


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
                           "question": r["question"], "reply": r["reply"], "sufficient_reply": sufficient,
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


def answer_difference(items: list[dict], resamples: int = 1000, seed: int = 0):
    """B − A answer rate on the cases with both, and its 95% interval from a paired bootstrap over cases."""
    by_case: dict[str, dict] = {}
    for i in items:
        if i["condition"] in ("A", "B") and "answer" in i:
            by_case.setdefault(i["case_number"], {})[i["condition"]] = float(i["answer"] == YES)
    pairs = np.array([[v["A"], v["B"]] for v in by_case.values() if "A" in v and "B" in v])
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
    tables = [Table("User simulator fidelity and DCG judge acceptance (Table 13): rates over applicable replies",
                    ["Condition", "Replies", "Answer", "OD", "Error", "DCG+"], rows)]
    diff = answer_difference(items)
    accepted = [i for i in items if i["condition"] in ("A", "B") and i["dcg_label"] == YES]
    failed = [i for i in accepted if i.get("answer") == NO or i.get("over_disclosure") == YES or i.get("error") == YES]
    tables.append(Table("Probe study: the A-B comparison, agreement before adjudication, factual recovery (E.3.3)",
                        ["Measure", "Value"],
                        [["Answer rate, indirect − direct (B − A), pp [95% paired case-bootstrap interval]",
                          "n/a" if diff is None else f"{100 * diff[0]:+.1f} [{100 * diff[1]:+.1f}, {100 * diff[2]:+.1f}]"
                                                     f" over {diff[3]} cases"]]
                        + [[f"Agreement before adjudication: {c}", pct(float(np.mean(v))) if v else "n/a"]
                           for c, v in agree.items()]
                        + [["Factual-recovery failures among DCG-accepted A/B requests (insufficient, over-disclosing "
                            "or erroneous)", f"{len(failed)}/{len(accepted)} = {100 * len(failed) / len(accepted):.1f}%"
                            if accepted else "n/a"]]))
    return tables
