"""DCG: two forced clarification questions per underspecified history, each judged against the case.

Reads the dataset; writes Force_ask_gen/<run>/<model>/force_ask.jsonl (both questions and the
User Model's reply between them) and eval_results/<run>/<model>/DCG_results.jsonl (both round
labels and the any-round success). Questions already in the benchmark history never count.
"""
import sys

from common import (DCG_RESULTS, FORCE_ASK, CaseCalls, Step, parse_dcg_label, render_details_by_focal_point,
                    render_focal_points, render_history, stage_main)

DCG_ROUNDS = 2


def force_ask(calls: CaseCalls, upstream: dict) -> dict:
    history = calls.case.history("underspecified")
    dialogue = list(history)
    rounds = []
    for round_number in range(1, DCG_ROUNDS + 1):
        question = calls.generate("eval", "force_ask", history=render_history(dialogue))
        dialogue.append({"role": "assistant", "content": question})
        rounds.append({"round": round_number, "question": question})
        if round_number < DCG_ROUNDS:  # the second question sees the first and the reply to it
            rounds[-1]["user_reply"] = calls.user_reply(dialogue)
            dialogue.append({"role": "user", "content": rounds[-1]["user_reply"]})
    return {"input_history": history, "rounds": rounds}


def judge_question(calls: CaseCalls, question: str) -> tuple[str, list[str]]:
    """是 when the question targets a focal point and the key details can answer it (Table 24)."""
    return calls.judge("judge_dcg", parse_dcg_label, ai_response=question, focus_text=render_focal_points(calls.case),
                       key_facts=render_details_by_focal_point(calls.case))


def judge_questions(calls: CaseCalls, upstream: dict) -> dict:
    """The DCG judge sees the new question, the focal points and the key details."""
    rounds = []
    for generated in upstream["force_ask"]["rounds"]:
        label, raw = judge_question(calls, generated["question"])
        rounds.append({"round": generated["round"], "label": label, "judge_raw": raw})
    return {"rounds": rounds, "success": any(r["label"] == "是" for r in rounds)}


DCG_STEPS = [
    Step("force_ask", FORCE_ASK, force_ask, max_calls={"eval": DCG_ROUNDS, "user": DCG_ROUNDS - 1},
         producer="eval_DCG.py", prompts={"eval": "force_ask", "user": "user_standard"}),
    Step("DCG", DCG_RESULTS, judge_questions, needs=("force_ask",), max_calls={"judge": DCG_ROUNDS},
         producer="eval_DCG.py", prompts={"judge": "judge_dcg"}),
]

if __name__ == "__main__":
    sys.exit(stage_main(__doc__, "DCG", DCG_STEPS))
