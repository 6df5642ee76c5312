"""LJP (Section 5.3): Direct and Gold-Standard predictions, and the claim-level verdicts the judge extracts from
every prediction (Direct, Gold-Standard, Interaction-Based).
"""

from __future__ import annotations

from lexpilot.benchmark.prompts import render_claims, render_history
from lexpilot.benchmark.records import (
    DIRECT_PREDICTION,
    GOLD_PREDICTION,
    INTERACTION,
    LJP_DIRECT,
    LJP_GOLD,
    LJP_INTERACTION,
    RecordKind,
)
from lexpilot.protocols.judging import verdict_parser
from lexpilot.protocols.steps import CaseCalls, Stage, Step

# ----------------------------------------------------------------------------- LJP


def force_judge(calls: CaseCalls, history: list[dict]) -> str:
    """The direct prediction prompt (Table 21) on a history: a verdict, no further questions."""
    return calls.generate("eval", "force_judge", history=render_history(history))


def extract_verdicts(calls: CaseCalls, response: str) -> dict:
    """The extraction judge (Table 25) reads the response and the claims, never the gold verdicts."""
    case = calls.case
    predicted, raw = calls.judge(
        "judge_ljp", verdict_parser(len(case.claims)), history=response, claims=render_claims(case)
    )
    return {
        "claims": list(case.claims),
        "predicted": predicted,
        "gold": list(case.verdicts),
        "judge_raw": raw,
    }


def prediction_steps(
    setup: str, history_type: str, generation: RecordKind, results: RecordKind
) -> tuple[Step, Step]:
    """Direct and Gold-Standard differ only in the history they predict from."""

    def predict(calls: CaseCalls, upstream: dict) -> dict:
        history = calls.case.history(history_type)
        return {
            "history_type": history_type,
            "input_history": history,
            "response": force_judge(calls, history),
        }

    def extract(calls: CaseCalls, upstream: dict) -> dict:
        return {"setup": setup, **extract_verdicts(calls, upstream[generation.name]["response"])}

    return (
        Step(generation, predict, max_calls={"eval": 1}, prompts={"eval": "force_judge"}),
        Step(
            results, extract, needs=(generation.name,), max_calls={"judge": 1}, prompts={"judge": "judge_ljp"}
        ),
    )


def interaction_verdicts(calls: CaseCalls, upstream: dict) -> dict:
    interaction = upstream["interaction"]
    return {
        "setup": "interaction",
        "stop_reason": interaction["stop_reason"],
        **extract_verdicts(calls, interaction["final_response"]),
    }


DIRECT_STEPS = prediction_steps("direct", "underspecified", DIRECT_PREDICTION, LJP_DIRECT)
GOLD_STEPS = prediction_steps("gold", "complete", GOLD_PREDICTION, LJP_GOLD)
LJP_INTERACTION_STEP = Step(
    LJP_INTERACTION,
    interaction_verdicts,
    needs=("interaction",),
    max_calls={"judge": 1},
    prompts={"judge": "judge_ljp"},
)

DIRECT_STAGE = Stage("LJP direct", "eval_LJP_direct.py", DIRECT_STEPS)
GOLD_STAGE = Stage("LJP gold", "eval_LJP_gold.py", GOLD_STEPS)
INTERACTION_LJP_STAGE = Stage(
    "LJP interaction",
    "eval_LJP_interaction.py",
    (LJP_INTERACTION_STEP,),
    upstream=(INTERACTION,),
    user_condition=True,
)
