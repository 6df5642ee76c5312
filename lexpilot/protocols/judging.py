"""Parsers of what the judge (and the self-correcting User Model's fault record) writes: each turns a reply
into a label or raises ValueError, which makes the call be asked again.
"""

from __future__ import annotations

import json
import re
from typing import Callable

from lexpilot.benchmark.categories import FOCAL_TYPES
from lexpilot.benchmark.vocabulary import (
    DCG_LABELS,
    LCA_LABELS,
    RESPONSE_TYPES,
    VERDICTS,
)

# ----------------------------------------------------------------------------- judge outputs


def clean_judge_output(raw: str) -> str:
    """Drop what reasoning models add around an answer: a <think> block, a code fence, whitespace."""
    text = raw
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    text = text.strip()
    fenced = re.fullmatch(r"```[A-Za-z]*\s*(.*?)\s*```", text, re.S)
    return fenced.group(1).strip() if fenced else text


def judge_json(raw: str) -> dict:
    """A judge output that must be one JSON object (after the usual cleaning), or ValueError."""
    try:
        data = json.loads(clean_judge_output(raw))
    except (ValueError, RecursionError):
        raise ValueError("not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def exactly_one_of(raw: str, labels) -> str:
    """The judge's answer when it is exactly one of `labels` (think blocks and fences aside)."""
    text = clean_judge_output(raw)
    if text not in labels:
        raise ValueError(f"expected exactly {', '.join(labels[:-1])} or {labels[-1]}")
    return text


def parse_lca_label(raw: str) -> str:
    return exactly_one_of(raw, LCA_LABELS)


def parse_dcg_label(raw: str) -> str:
    return exactly_one_of(raw, DCG_LABELS)


def parse_response_type(raw: str) -> str:
    return RESPONSE_TYPES[exactly_one_of(raw, tuple(RESPONSE_TYPES))]


def verdict_parser(n_claims: int) -> Callable[[str], list[str]]:
    def parse(raw: str) -> list[str]:
        try:
            data = json.loads(clean_judge_output(raw))
        except json.JSONDecodeError:
            raise ValueError("not JSON") from None
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise ValueError('expected {"results": [...]}')
        labels = ["驳回" if label == "被驳回" else label for label in data["results"]]
        if any(label not in VERDICTS for label in labels):
            raise ValueError("every label must be 支持, 部分支持 or 驳回")
        if len(labels) != n_claims:
            raise ValueError(f"{len(labels)} labels for {n_claims} claims")
        return labels

    return parse


FAULT_RECORD = re.compile(r"<故障记录>(.*?)</故障记录>\s*$", re.S)
FAULT_KINDS = {"不完整": "incomplete", "有误": "wrong"}


def fault_parser(details: list[str]) -> Callable[[str], tuple[str, dict]]:
    """The reply and its fault record: {"类型": 不完整|有误, "涉及": one key detail, verbatim}."""

    def parse(raw: str) -> tuple[str, dict]:
        match = FAULT_RECORD.search(raw.strip())
        if not match:
            raise ValueError("no <故障记录> at the end")
        try:
            record = json.loads(match.group(1))
        except ValueError:
            raise ValueError("the <故障记录> is not JSON") from None
        if not isinstance(record, dict) or record.get("类型") not in FAULT_KINDS:
            raise ValueError("类型 must be 不完整 or 有误")
        detail = str(record.get("涉及", "")).strip()
        if detail not in {d.strip() for d in details}:
            raise ValueError("涉及 is not one of the key details, verbatim")
        reply = raw.strip()[: match.start()].strip()
        if not reply:
            raise ValueError("no reply before the <故障记录>")
        return reply, {"kind": FAULT_KINDS[record["类型"]], "detail": detail}

    return parse


# ----------------------------------------------------------------------------- focal-point types (E.8)


def parse_focal_type(raw: str) -> str:
    return exactly_one_of(raw, tuple(FOCAL_TYPES))
