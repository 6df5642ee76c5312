"""LexAwN generation, LCA, and the Interaction-Based consultations.

Reads the dataset. For every selected case it writes, in this order:
  AwN_gen/<run>/<model>/a1.jsonl               one new LexAwN response after each history (complete, underspecified)
  eval_results/<run>/<model>/LCA_results.jsonl  the judge's label of each (as eval_LCA.py does)
  AwN_gen/<run>/<model>/interaction.jsonl       the underspecified consultation continued with the User Model
                                                for up to three clarification rounds, then a forced prediction
--user-condition delayed|self-correction runs the interaction with a non-ideal user (Appendix E.5).
"""
import sys

from common import A1, HISTORY_TYPES, INTERACTION, CaseCalls, Settings, Step, render_history, stage_main
from eval_DCG import judge_question
from eval_LCA import LCA_STEP, judge_strategy
from eval_LJP_gold import force_judge

CLARIFICATION_ROUNDS = 3  # user turns allowed after new assistant turns; pre-existing history turns do not count
DISRUPTION_PROMPTS = {"delayed": "user_delayed", "self-correction": "user_self_correction"}


def a1_responses(calls: CaseCalls, upstream: dict) -> dict:
    responses = {}
    for history_type in HISTORY_TYPES:
        history = calls.case.history(history_type)
        responses[history_type] = {
            "history": history, "response": calls.generate("eval", "lexawn", history=render_history(history))}
    return {"responses": responses}


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
    disrupted_round = corrected_round = None
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
        correction_due = condition == "self-correction" and disrupted_round == round_number - 1
        if correction_due:
            user_prompt, corrected_round = "user_correction", round_number
        elif label == "策略一":
            return _interaction_record(history, rounds, dialogue, "judged", condition,
                                       disrupted_round, corrected_round)
        else:
            user_prompt = "user_standard"
            if condition in DISRUPTION_PROMPTS and disrupted_round is None:
                relevant, raws = judge_question(calls, response)
                entry["relevance"] = {"label": relevant, "judge_raw": raws}
                if relevant == "是":
                    user_prompt, disrupted_round = DISRUPTION_PROMPTS[condition], round_number
        entry["user_prompt"] = user_prompt
        entry["user_reply"] = calls.user_reply(dialogue, user_prompt)
        dialogue.append({"role": "user", "content": entry["user_reply"]})
    final = force_judge(calls, dialogue)
    dialogue.append({"role": "assistant", "content": final})
    rounds.append({"round": CLARIFICATION_ROUNDS + 1, "prompt": "force_judge", "assistant": final, "label": None})
    return _interaction_record(history, rounds, dialogue, "budget", condition, disrupted_round, corrected_round)


def _interaction_record(history, rounds, dialogue, stop_reason, condition, disrupted_round, corrected_round) -> dict:
    return {"user_condition": condition, "input_history": history, "rounds": rounds,
            "continued_history": dialogue, "stop_reason": stop_reason, "final_response": rounds[-1]["assistant"],
            "disrupted_round": disrupted_round, "corrected_round": corrected_round}


def interaction_calls(upstream: dict, settings: Settings) -> dict:
    lca = upstream.get("LCA")
    if lca and lca["judgments"]["underspecified"]["label"] == "策略一":
        return {}
    relevance_checks = CLARIFICATION_ROUNDS if settings.user_condition in DISRUPTION_PROMPTS else 0
    return {"eval": CLARIFICATION_ROUNDS, "user": CLARIFICATION_ROUNDS,
            "judge": CLARIFICATION_ROUNDS - 1 + relevance_checks}


A1_STEP = Step("a1", A1, a1_responses, max_calls={"eval": 2}, producer="LexAwN_gen.py", prompts={"eval": "lexawn"})
INTERACTION_STEP = Step("interaction", INTERACTION, interact, needs=("a1", "LCA"), max_calls=interaction_calls,
                        producer="LexAwN_gen.py",
                        prompts={"eval": "lexawn", "user": "user_standard", "judge": "judge_lca"})

if __name__ == "__main__":
    sys.exit(stage_main(__doc__, "LexAwN", [A1_STEP, LCA_STEP, INTERACTION_STEP], user_condition=True))
