"""Focal-point types (Section 6.5, Table 18): from the dataset where it gives them, else judged once per focal
point.
"""

from __future__ import annotations

import functools

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.records import (
    FOCAL_TYPE_RECORDS,
    canonical_hash,
    readable_records,
)
from lexpilot.protocols.judging import parse_focal_type
from lexpilot.protocols.steps import CaseCalls, Stage, Step
from lexpilot.settings import Settings


def focal_types(calls: CaseCalls, upstream: dict) -> dict:
    """Each focal point's type: the dataset's where it gives them (no call), else the judge's (Table 18)."""
    case = calls.case
    if case.focal_types is not None:
        return {
            "types": [
                {"focal_point": fp, "type": t, "source": "dataset"}
                for fp, t in zip(case.focal_points, case.focal_types)
            ]
        }
    typed = typed_before(calls.run_settings, case, calls.prompts)
    if typed:  # a property of the benchmark: judged once, reused by every run and model
        return typed
    types = []
    for fp in case.focal_points:
        label, raw = calls.judge("judge_focal_type", parse_focal_type, focus_text=fp)
        types.append({"focal_point": fp, "type": label, "source": "judge", "judge_raw": raw})
    return {
        "types": types,
        "judge_model": calls.run_settings.roles["judge"].model,
        "judge_settings": judge_settings(calls.run_settings, calls.prompts),
    }


def judge_settings(settings: Settings, prompts: dict) -> str:
    """What decides the judge's types: its model, temperature and output limit, and the prompt it is given."""
    judge = settings.roles["judge"]
    return canonical_hash(
        {
            "model": judge.model,
            "temperature": judge.temperature,
            "max_tokens": judge.max_tokens,
            "prompt": prompts["judge_focal_type"],
        }
    )


def typed_before(settings: Settings, case: Case, prompts: dict) -> dict | None:
    """The types another run or model under the output root saved for this case: same inputs, and the same judge
    settings (model, temperature, output limit, prompt); a judge at another temperature types the case again.
    A record saved before records named the judge's settings is matched by its judge model alone, and one saved
    before they named the judge by the case."""
    judge, mine = settings.roles["judge"].model, judge_settings(settings, prompts)
    paths = sorted(settings.output_root.glob(f"{FOCAL_TYPE_RECORDS.top}/*/*/{FOCAL_TYPE_RECORDS.file}"))
    typed = _typed_cases(tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in paths))
    found = next(
        (
            typed[k]
            for k in (
                (case.number, case.input_hash, judge, mine),
                (case.number, case.input_hash, judge, None),
                (case.number, case.input_hash, None, None),
            )
            if k in typed
        ),
        None,
    )
    if found:
        record, run = found
        return {
            "types": record["types"],
            "judge_model": judge,
            "judge_settings": mine,
            "reused_from": record.get("reused_from", run),
        }
    return None


# keyed by every file's time and size: each file is read once, not once per case
@functools.lru_cache(maxsize=4)
def _typed_cases(files: tuple) -> dict:
    """(case, input hash, judge) -> (the first typed record saved for it, its run), over the files given."""
    typed: dict = {}
    for path, _, _ in files:
        for record in readable_records(path):
            if record.get("types"):
                key = (
                    record.get("case_number"),
                    record.get("input_hash"),
                    record.get("judge_model"),
                    record.get("judge_settings"),
                )
                typed.setdefault(key, (record, path.parent.parent.name))
    return typed


def focal_type_calls(upstream: dict, settings: Settings, case: Case | None = None) -> dict:
    if case is not None and case.focal_types is not None:
        return {}
    return {"judge": len(case.focal_points) if case else 2}


FOCAL_TYPE_STEP = Step(
    FOCAL_TYPE_RECORDS, focal_types, max_calls=focal_type_calls, prompts={"judge": "judge_focal_type"}
)

FOCAL_TYPE_STAGE = Stage("focal types", "eval_focal_types.py", (FOCAL_TYPE_STEP,))
