"""LexAwN generation, LCA, and the Interaction-Based consultations.

Reads the dataset. For every selected case it writes, in this order:
  AwN_gen/<run>/<model>/a1.jsonl               one new LexAwN response after each history (complete, underspecified)
  eval_results/<run>/<model>/LCA_results.jsonl  the judge's label of each (as eval_LCA.py does)
  AwN_gen/<run>/<model>/interaction.jsonl       the underspecified consultation continued with the User Model
                                                for up to three clarification rounds, then a forced prediction
"""
import sys

from common import (A1, HISTORY_TYPES, INTERACTION, CaseCalls, Step, render_history, render_key_facts,
                    stage_main)
from eval_LCA import LCA_STEP, judge_strategy
from eval_LJP_gold import force_judge

CLARIFICATION_ROUNDS = 3  # new assistant questions allowed; pre-existing history turns do not count


def a1_responses(calls: CaseCalls, upstream: dict) -> dict:
    responses = {}
    for history_type in HISTORY_TYPES:
        history = calls.case.history(history_type)
        responses[history_type] = {
            "history": history, "response": calls.generate("eval", "lexawn", history=render_history(history))}
    return {"responses": responses}


def user_reply(calls: CaseCalls, dialogue: list[dict], condition: str) -> str:
    """The User Model sees the conversation and the hidden key details, never focal points or verdicts."""
    return calls.generate("user", f"user_{condition}", history=render_history(dialogue),
                          key_facts=render_key_facts(calls.case))


def interact(calls: CaseCalls, upstream: dict, condition: str = "standard") -> dict:
    history = calls.case.history("underspecified")
    dialogue = list(history)
    rounds = []
    # Round 1 is the a1 response to the underspecified history, with the label LCA already gave it.
    response = upstream["a1"]["responses"]["underspecified"]["response"]
    label = upstream["LCA"]["judgments"]["underspecified"]["label"]
    judge_raw = upstream["LCA"]["judgments"]["underspecified"]["judge_raw"]
    for round_number in range(1, CLARIFICATION_ROUNDS + 1):
        if round_number > 1:
            response = calls.generate("eval", "lexawn", history=render_history(dialogue))
            label, judge_raw = judge_strategy(calls, response)
        dialogue.append({"role": "assistant", "content": response})
        entry = {"round": round_number, "prompt": "lexawn", "assistant": response, "label": label,
                 "judge_raw": judge_raw}
        rounds.append(entry)
        if label == "策略一":
            return _interaction_record(history, rounds, dialogue, "judged", condition)
        entry["user_reply"] = user_reply(calls, dialogue, condition)
        dialogue.append({"role": "user", "content": entry["user_reply"]})
    final = force_judge(calls, dialogue)
    dialogue.append({"role": "assistant", "content": final})
    rounds.append({"round": CLARIFICATION_ROUNDS + 1, "prompt": "force_judge", "assistant": final, "label": None})
    return _interaction_record(history, rounds, dialogue, "budget", condition)


def _interaction_record(history, rounds, dialogue, stop_reason, condition) -> dict:
    return {"user_condition": condition, "input_history": history, "rounds": rounds,
            "continued_history": dialogue, "stop_reason": stop_reason, "final_response": rounds[-1]["assistant"]}


def interaction_calls(upstream: dict) -> dict:
    lca = upstream.get("LCA")
    if lca and lca["judgments"]["underspecified"]["label"] == "策略一":
        return {}
    return {"eval": CLARIFICATION_ROUNDS, "user": CLARIFICATION_ROUNDS, "judge": CLARIFICATION_ROUNDS - 1}


A1_STEP = Step("a1", A1, a1_responses, max_calls={"eval": 2}, producer="LexAwN_gen.py")
INTERACTION_STEP = Step("interaction", INTERACTION, interact, needs=("a1", "LCA"),
                        max_calls=interaction_calls, producer="LexAwN_gen.py")

if __name__ == "__main__":
    sys.exit(stage_main(__doc__, "LexAwN", [A1_STEP, LCA_STEP, INTERACTION_STEP]))
