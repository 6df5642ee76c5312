"""LexAwN and LCA (Section 4.1, 5.1) and the Interaction-Based consultation with the User Model (Section 5.3),
for the standard and the non-ideal users (Appendix E.5).
"""

from __future__ import annotations

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import render_fault, render_history
from lexpilot.benchmark.records import A1, INTERACTION, LCA
from lexpilot.benchmark.vocabulary import ASKS, HISTORY_TYPES, PREDICTS, YES
from lexpilot.protocols.dcg import judge_question
from lexpilot.protocols.judging import parse_lca_label
from lexpilot.protocols.ljp import force_judge
from lexpilot.protocols.steps import CaseCalls, Stage, Step
from lexpilot.settings import Settings

# user turns allowed after new assistant turns; pre-existing history turns do not count
CLARIFICATION_ROUNDS = 3
DISRUPTION_PROMPTS = {"delayed": "user_delayed", "self-correction": "user_self_correction"}


# ----------------------------------------------------------------------------- LexAwN and LCA


def a1_responses(calls: CaseCalls, upstream: dict) -> dict:
    """One new LexAwN response (Table 19) after each history, complete and underspecified."""
    responses = {}
    for history_type in HISTORY_TYPES:
        history = calls.case.history(history_type)
        responses[history_type] = {
            "history": history,
            "response": calls.generate("eval", "lexawn", history=render_history(history)),
        }
    return {"responses": responses}


def judge_strategy(calls: CaseCalls, response: str) -> tuple[str, list[str]]:
    """The LCA judge (Table 23) sees only the new response, never the history before it."""
    return calls.judge("judge_lca", parse_lca_label, history=response)


def lca_labels(calls: CaseCalls, upstream: dict) -> dict:
    judgments = {}
    for history_type in HISTORY_TYPES:
        label, raw = judge_strategy(calls, upstream["a1"]["responses"][history_type]["response"])
        judgments[history_type] = {
            "label": label,
            "true_type": history_type,
            "predicted_type": "underspecified" if label == ASKS else "complete",
            "judge_raw": raw,
        }
    return {"judgments": judgments}


# ----------------------------------------------------------------------------- the interaction


def interact(calls: CaseCalls, upstream: dict) -> dict:
    """Rounds of LexAwN response → LCA judge → User Model reply, until a prediction or the budget.

    Non-ideal users disrupt the reply to the first new clarification request the DCG judge accepts
    (relevant to a focal point and answerable from the key details); that decision is saved per round.
    A self-correcting user corrects in the next user turn, even after a prediction, which then gets updated.
    """
    condition = calls.user_condition
    history = calls.case.history("underspecified")
    dialogue = list(history)
    rounds = []
    disrupted_round = corrected_round = fault = None
    # Round 1 is the a1 response to the underspecified history, with the label LCA already gave it.
    response = upstream["a1"]["responses"]["underspecified"]["response"]
    label = upstream["LCA"]["judgments"]["underspecified"]["label"]
    judge_raw = upstream["LCA"]["judgments"]["underspecified"]["judge_raw"]
    for round_number in range(1, CLARIFICATION_ROUNDS + 1):
        if round_number > 1:
            response = calls.generate("eval", "lexawn", history=render_history(dialogue))
            label, judge_raw = judge_strategy(calls, response)
        dialogue.append({"role": "assistant", "content": response})
        entry = {
            "round": round_number,
            "prompt": "lexawn",
            "assistant": response,
            "label": label,
            "judge_raw": judge_raw,
        }
        rounds.append(entry)
        correction_due = condition == "self-correction" and disrupted_round == round_number - 1
        if correction_due:
            user_prompt, corrected_round = "user_correction", round_number
        elif label == PREDICTS:
            return _interaction_record(
                history, rounds, dialogue, "judged", condition, disrupted_round, corrected_round, fault
            )
        else:
            user_prompt = "user_standard"
            if condition in DISRUPTION_PROMPTS and disrupted_round is None:
                relevant, raws = judge_question(calls, response)
                entry["relevance"] = {"label": relevant, "judge_raw": raws}
                if relevant == YES:
                    user_prompt, disrupted_round = DISRUPTION_PROMPTS[condition], round_number
        entry["user_prompt"] = user_prompt
        fault = _user_turn(calls, dialogue, entry, fault)
    final = force_judge(calls, dialogue)
    dialogue.append({"role": "assistant", "content": final})
    rounds.append(
        {"round": CLARIFICATION_ROUNDS + 1, "prompt": "force_judge", "assistant": final, "label": None}
    )
    return _interaction_record(
        history, rounds, dialogue, "budget", condition, disrupted_round, corrected_round, fault
    )


def _user_turn(calls: CaseCalls, dialogue: list[dict], entry: dict, fault: dict | None) -> dict | None:
    """The User Model's reply to a round, with the prompt the round's entry names, added to the dialogue; the
    self-correcting user's fault, once it has recorded one."""
    user_prompt = entry["user_prompt"]
    if user_prompt == "user_self_correction":
        entry["user_reply"], fault = calls.faulty_user_reply(dialogue)
        entry["fault"] = fault
    elif user_prompt == "user_correction":
        assert fault is not None, "a correction follows the round that recorded its fault"
        entry["user_reply"] = calls.user_reply(dialogue, user_prompt, fault=render_fault(fault))
    else:
        entry["user_reply"] = calls.user_reply(dialogue, user_prompt)
    dialogue.append({"role": "user", "content": entry["user_reply"]})
    return fault


def _interaction_record(
    history, rounds, dialogue, stop_reason, condition, disrupted_round, corrected_round, fault
) -> dict:
    record = {
        "user_condition": condition,
        "input_history": history,
        "rounds": rounds,
        "continued_history": dialogue,
        "stop_reason": stop_reason,
        "final_response": rounds[-1]["assistant"],
        "disrupted_round": disrupted_round,
        "corrected_round": corrected_round,
    }
    if fault:  # a self-correcting user's fault: its kind and the key detail it concerned
        record["fault"] = fault
    return record


def interaction_calls(upstream: dict, settings: Settings, case: Case | None = None) -> dict:
    lca = upstream.get("LCA")
    if lca and lca["judgments"]["underspecified"]["label"] == PREDICTS:
        return {}
    relevance_checks = CLARIFICATION_ROUNDS if settings.user_condition in DISRUPTION_PROMPTS else 0
    return {
        "eval": CLARIFICATION_ROUNDS,
        "user": CLARIFICATION_ROUNDS,
        "judge": CLARIFICATION_ROUNDS - 1 + relevance_checks,
    }


# ----------------------------------------------------------------------------- the steps

A1_STEP = Step(A1, a1_responses, max_calls={"eval": 2}, prompts={"eval": "lexawn"})
LCA_STEP = Step(LCA, lca_labels, needs=("a1",), max_calls={"judge": 2}, prompts={"judge": "judge_lca"})
INTERACTION_STEP = Step(
    INTERACTION,
    interact,
    needs=("a1", "LCA"),
    max_calls=interaction_calls,
    prompts={"eval": "lexawn", "user": "user_standard", "judge": "judge_lca"},
    also_sends=("force_judge", "judge_dcg"),  # the forced prediction; a non-ideal user's relevance check
)

LEXAWN_STAGE = Stage("LexAwN", "LexAwN_gen.py", (A1_STEP, LCA_STEP, INTERACTION_STEP), user_condition=True)
LCA_STAGE = Stage("LCA", "eval_LCA.py", (LCA_STEP,), upstream=(A1,))
