"""The plain consultation (Appendix C.2, Table 6): the underspecified history sent as its own messages with no
task prompt, and the judge's response type.
"""

from __future__ import annotations

from lexpilot.benchmark.prompts import render_history, render_key_facts
from lexpilot.benchmark.records import PLAIN, PLAIN_TYPES
from lexpilot.protocols.judging import parse_response_type
from lexpilot.protocols.steps import CaseCalls, Stage, Step

# ----------------------------------------------------------------------------- the plain consultation (C.2)


def plain_steps(history_type: str) -> tuple[Step, Step]:
    """The evaluated model answers the history as an ordinary chat (its messages in order, no task prompt:
    the one place where a history is not rendered into a prompt slot); the judge names the response type."""
    generation, types = PLAIN[history_type], PLAIN_TYPES[history_type]
    chosen = lambda settings: history_type in settings.histories

    def answer(calls: CaseCalls, upstream: dict) -> dict:
        messages = calls.case.history(history_type)
        return {
            "history_type": history_type,
            "messages": messages,
            "response": calls.converse("eval", messages),
            "sent_as": "messages",
        }

    def classify(calls: CaseCalls, upstream: dict) -> dict:
        # the consultation and the key details beside the response (the paper's Tables 7-8 pair "Consultation &
        # Missing Details" with each response): scenarios "corresponding to the absent details" need them
        kind, raw = calls.judge(
            "judge_response_type",
            parse_response_type,
            history=render_history(calls.case.history(history_type)),
            key_facts=render_key_facts(calls.case),
            ai_response=upstream[generation.name]["response"],
        )
        return {"history_type": history_type, "type": kind, "judge_raw": raw}

    return (
        Step(generation, answer, max_calls={"eval": 1}, when=chosen),
        Step(
            types,
            classify,
            needs=(generation.name,),
            max_calls={"judge": 1},
            prompts={"judge": "judge_response_type"},
            when=chosen,
        ),
    )


PLAIN_STEPS = (*plain_steps("underspecified"), *plain_steps("complete"))

PLAIN_STAGE = Stage("plain", "eval_plain.py", PLAIN_STEPS, history_choice=True)
