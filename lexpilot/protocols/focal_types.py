"""Focal-point types (Section 6.5, Table 18): from the dataset where it gives them, else judged once per focal
point.
"""
from __future__ import annotations

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.records import FOCAL_TYPE_RECORDS
from lexpilot.protocols.judging import parse_focal_type
from lexpilot.protocols.steps import CaseCalls, Stage, Step
from lexpilot.settings import Settings


def focal_types(calls: CaseCalls, upstream: dict) -> dict:
    """Each focal point's type: the dataset's where it gives them (no call), else the judge's (Table 18)."""
    case = calls.case
    if case.focal_types is not None:
        return {"types": [{"focal_point": fp, "type": t, "source": "dataset"}
                          for fp, t in zip(case.focal_points, case.focal_types)]}
    types = []
    for fp in case.focal_points:
        label, raw = calls.judge("judge_focal_type", parse_focal_type, focus_text=fp)
        types.append({"focal_point": fp, "type": label, "source": "judge", "judge_raw": raw})
    return {"types": types}


def focal_type_calls(upstream: dict, settings: Settings, case: Case | None = None) -> dict:
    if case is not None and case.focal_types is not None:
        return {}
    return {"judge": len(case.focal_points) if case else 2}
FOCAL_TYPE_STEP = Step(FOCAL_TYPE_RECORDS, focal_types, max_calls=focal_type_calls,
                       prompts={"judge": "judge_focal_type"})

FOCAL_TYPE_STAGE = Stage("focal types", "eval_focal_types.py", (FOCAL_TYPE_STEP,))
