"""The probe study's input (Appendix E.3.3): the probe file the experts fill per case (questions A-C, the
minimum sufficient answer, permitted disclosures, the key details removed for D), its template and its
validation against the dataset.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import key_detail_lines, render_history
from lexpilot.errors import HarnessError, first_of
from lexpilot.files import read_sheet

CONDITIONS = ("A", "B", "C", "D")
CONDITION_NAMES = {"A": "A: Direct", "B": "B: Indirect", "C": "C: Broad", "D": "D: Withheld"}
PROBE_COLUMNS = [
    "case_number",
    "cause_of_action",
    "history",
    "key_details",
    "A_question",
    "B_question",
    "C_question",
    "minimum_answer",
    "permitted_A",
    "permitted_B",
    "permitted_C",
    "D_removed",
    "permitted_D",
]


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
    chosen = [
        c
        for cause in sorted(by_cause)
        for c in rng.sample(by_cause[cause], min(per_cause, len(by_cause[cause])))
    ]
    return [
        {
            "case_number": c.number,
            "cause_of_action": c.cause,
            "history": render_history(c.underspecified),
            "key_details": numbered(key_detail_lines(c)),
        }
        | {k: "" for k in PROBE_COLUMNS[4:]}
        for c in chosen
    ]


def load_probes(path: Path, cases: dict[str, Case]) -> tuple[dict[str, Probe], str]:
    """The filled probe file (case number -> Probe) and its hash; every problem is listed with its row and
    field."""
    rows = [(line, {k: v.strip() for k, v in row.items()}) for line, row in read_sheet(path, PROBE_COLUMNS)]
    probes: dict[str, Probe] = {}
    problems: list[str] = []
    seen: dict[str, int] = {}  # case number -> the row that gave it first
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
        removed = _removed_details(row["D_removed"], key_detail_lines(case), where, problems)
        if not any(p.startswith(where) for p in problems):
            probes[number] = Probe(
                number,
                {
                    "A": row["A_question"],
                    "B": row["B_question"],
                    "C": row["C_question"],
                    "D": row["A_question"],
                },
                row["minimum_answer"],
                {c: row[f"permitted_{c}"] for c in CONDITIONS},
                removed,
            )
    if problems:
        shown = first_of(problems, 20)
        raise HarnessError(
            f"{len(problems)} problem(s) in the probe file; fix them and rerun:\n  " + "\n  ".join(shown)
        )
    if not probes:
        raise HarnessError(f"{path}: no probe rows")
    return probes, hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _removed_details(text: str, details: list[str], where: str, problems: list[str]) -> tuple[int, ...]:
    """D_removed (e.g. "2;3"): the numbers of the key details condition D withholds, sorted; what is wrong
    with it goes into `problems`."""
    removed: tuple[int, ...] = ()
    if text:
        try:
            entries = text.replace("；", ";").replace(",", ";").split(";")
            removed = tuple(sorted({int(x) for x in entries if x.strip()}))
        except ValueError:
            problems.append(f"{where}: D_removed: {text!r} is not a list of key-detail numbers (e.g. 2;3)")
        else:
            if not removed or any(not 1 <= i <= len(details) for i in removed):
                problems.append(
                    f"{where}: D_removed: {text!r} does not match the case's {len(details)} key "
                    f"details (numbers 1 to {len(details)})"
                )
            elif len(removed) == len(details):
                problems.append(
                    f"{where}: D_removed: removes every key detail; leave D_removed empty for a "
                    "case without D"
                )
    return removed
