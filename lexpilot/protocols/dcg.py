"""DCG (Section 5.2): two forced clarification questions per underspecified history, each judged against the
focal points and key details.
"""

from __future__ import annotations

from lexpilot.benchmark.prompts import (
    render_details_by_focal_point,
    render_focal_points,
    render_history,
)
from lexpilot.benchmark.records import DCG, FORCE_ASK
from lexpilot.benchmark.vocabulary import YES
from lexpilot.protocols.judging import parse_dcg_label
from lexpilot.protocols.steps import CaseCalls, Stage, Step

DCG_ROUNDS = 2


# ----------------------------------------------------------------------------- DCG


def force_ask(calls: CaseCalls, upstream: dict) -> dict:
    """Two forced clarification questions (Table 20); the second sees the first and the User Model's reply."""
    history = calls.case.history("underspecified")
    dialogue = list(history)
    rounds = []
    for round_number in range(1, DCG_ROUNDS + 1):
        question = calls.generate("eval", "force_ask", history=render_history(dialogue))
        dialogue.append({"role": "assistant", "content": question})
        rounds.append({"round": round_number, "question": question})
        if round_number < DCG_ROUNDS:
            rounds[-1]["user_reply"] = calls.user_reply(dialogue)
            dialogue.append({"role": "user", "content": rounds[-1]["user_reply"]})
    return {"input_history": history, "rounds": rounds}


def judge_question(calls: CaseCalls, question: str) -> tuple[str, list[str]]:
    """是 when the question targets a focal point and the key details can answer it (Table 24)."""
    return calls.judge(
        "judge_dcg",
        parse_dcg_label,
        ai_response=question,
        focus_text=render_focal_points(calls.case),
        key_facts=render_details_by_focal_point(calls.case),
    )


def judge_questions(calls: CaseCalls, upstream: dict) -> dict:
    """The DCG judge sees each new question, the focal points and the key details; questions already in the
    history never count."""
    rounds = []
    for generated in upstream["force_ask"]["rounds"]:
        label, raw = judge_question(calls, generated["question"])
        rounds.append({"round": generated["round"], "label": label, "judge_raw": raw})
    return {"rounds": rounds, "success": any(r["label"] == YES for r in rounds)}


FORCE_ASK_STEP = Step(
    FORCE_ASK,
    force_ask,
    max_calls={"eval": DCG_ROUNDS, "user": DCG_ROUNDS - 1},
    prompts={"eval": "force_ask", "user": "user_standard"},
)
DCG_STEP = Step(
    DCG,
    judge_questions,
    needs=("force_ask",),
    max_calls={"judge": DCG_ROUNDS},
    prompts={"judge": "judge_dcg"},
)

DCG_STAGE = Stage("DCG", "eval_DCG.py", (FORCE_ASK_STEP, DCG_STEP))
