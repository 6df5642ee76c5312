"""The simulator audit: the judge's check of every User Model reply a saved run produced (DCG rounds and
interaction rounds, non-ideal users included), asked with the question it answered, the conversation before
it and the case's key details: did it disclose key details the question did not ask for (which ones), did it
state anything unsupported or contradicting the key details, did it answer the question. The steps for
`audit_simulator.py`, and the rates and clean-case metrics the reports show.
"""

from __future__ import annotations

from lexpilot.benchmark.prompts import (
    key_detail_lines,
    render_history,
    render_numbered_details,
)
from lexpilot.benchmark.records import AUDIT, FORCE_ASK, INTERACTION
from lexpilot.benchmark.vocabulary import NO, YES
from lexpilot.protocols.consultation import DISRUPTION_PROMPTS
from lexpilot.protocols.judging import judge_json
from lexpilot.protocols.steps import CaseCalls, Stage, Step

YES_NO = {YES: True, NO: False}


def audit_parser(n_details: int):
    def parse(raw: str) -> dict:
        data = judge_json(raw)
        disclosed = data.get("超范围披露")
        if not isinstance(disclosed, list) or not all(
            isinstance(i, int) and 1 <= i <= n_details for i in disclosed
        ):
            raise ValueError(f"超范围披露 must list key-detail numbers from 1 to {n_details}")
        if data.get("不实陈述") not in YES_NO or data.get("回答了问题") not in YES_NO:
            raise ValueError("不实陈述 and 回答了问题 must be 是 or 否")
        return {
            "over_disclosed": sorted(set(disclosed)),
            "error": YES_NO[data["不实陈述"]],
            "answered": YES_NO[data["回答了问题"]],
        }

    return parse


def audit_reply(calls: CaseCalls, before: list[dict], question: str, reply: str, source: str) -> dict:
    details = key_detail_lines(calls.case)
    found, raw = calls.judge(
        "judge_simulator_audit",
        audit_parser(len(details)),
        history=render_history(before),
        ai_response=question,
        reply=reply,
        key_facts=render_numbered_details(calls.case),
    )
    return {
        "source": source,
        **found,
        "over_disclosed": [details[i - 1] for i in found["over_disclosed"]],
        "judge_raw": raw,
    }


def audited(record: dict, asked: str) -> list[tuple[list[dict], str, dict]]:
    """Every User Model reply of a DCG or interaction record, audited in order with what came before it:
    (the dialogue before the question, the question, the round's entry)."""
    dialogue, replies = list(record["input_history"]), []
    for entry in record["rounds"]:
        dialogue.append({"role": "assistant", "content": entry[asked]})
        if entry.get("user_reply"):
            replies.append((list(dialogue[:-1]), entry[asked], entry))
            dialogue.append({"role": "user", "content": entry["user_reply"]})
    return replies


def audit_dcg(calls: CaseCalls, upstream: dict) -> dict:
    return {
        "replies": [
            audit_reply(calls, before, question, entry["user_reply"], f"DCG round {entry['round']}")
            for before, question, entry in audited(upstream["force_ask"], "question")
        ]
    }


def audit_interaction(calls: CaseCalls, upstream: dict) -> dict:
    """Every interaction reply audited; the non-ideal user's deliberate disruption (the delayed reply, the
    self-correcting user's fault) is labelled `injected`, and its correction `correction`: protocol turns, whose
    judge verdicts are kept, and no simulator error."""
    return {
        "replies": [
            {
                **audit_reply(
                    calls,
                    before,
                    question,
                    entry["user_reply"],
                    f"interaction round {entry['round']} ({entry.get('user_prompt', 'user_standard')})",
                ),
                "injected": entry.get("user_prompt") in DISRUPTION_PROMPTS.values(),
                # the correction that follows the disruption is a protocol turn too: it corrects rather
                # than answers the question (after a judgment, there is none left to answer)
                "correction": entry.get("user_prompt") == "user_correction",
            }
            for before, question, entry in audited(upstream["interaction"], "assistant")
        ]
    }


def replies_in(kind: str, upstream: dict) -> int:
    record = upstream.get(kind)
    return (
        sum(1 for e in record["rounds"] if e.get("user_reply"))
        if record
        else (1 if kind == "force_ask" else 3)
    )


AUDIT_STEPS = (
    Step(
        AUDIT["dcg"],
        audit_dcg,
        needs=("force_ask",),
        max_calls=lambda up, s, case: {"judge": replies_in("force_ask", up)},
        prompts={"judge": "judge_simulator_audit"},
        when=lambda s: s.user_condition == "standard",
    ),
    Step(
        AUDIT["interaction"],
        audit_interaction,
        needs=("interaction",),
        max_calls=lambda up, s, case: {"judge": replies_in("interaction", up)},
        prompts={"judge": "judge_simulator_audit"},
    ),
)
UPSTREAM = (FORCE_ASK, INTERACTION)

AUDIT_STAGE = Stage("audit", "audit_simulator.py", AUDIT_STEPS, upstream=UPSTREAM, user_condition=True)
