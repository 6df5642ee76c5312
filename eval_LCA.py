"""LCA: the judge labels each new LexAwN response as a prediction (策略一) or a question (策略二).

Reads AwN_gen/<run>/<model>/a1.jsonl (written by LexAwN_gen.py) and never generates: run on its
own, it judges every a1 response that has no label yet. Writes eval_results/<run>/<model>/LCA_results.jsonl
with, for the complete and the underspecified history, the label and the history's true type.
"""
import sys

from common import A1, HISTORY_TYPES, LCA_RESULTS, CaseCalls, Step, parse_lca_label, stage_main

A1_FILE = Step("a1", A1, None, producer="LexAwN_gen.py")


def judge_strategy(calls: CaseCalls, response: str) -> tuple[str, list[str]]:
    """The judge sees only the new response, never the history before it."""
    return calls.judge("judge_lca", parse_lca_label, history=response)


def lca_labels(calls: CaseCalls, upstream: dict) -> dict:
    judgments = {}
    for history_type in HISTORY_TYPES:
        label, raw = judge_strategy(calls, upstream["a1"]["responses"][history_type]["response"])
        judgments[history_type] = {
            "label": label, "true_type": history_type,
            "predicted_type": "underspecified" if label == "策略二" else "complete", "judge_raw": raw,
        }
    return {"judgments": judgments}


LCA_STEP = Step("LCA", LCA_RESULTS, lca_labels, needs=("a1",), max_calls={"judge": 2},
                producer="LexAwN_gen.py", prompts={"judge": "judge_lca"})

if __name__ == "__main__":
    sys.exit(stage_main(__doc__, "LCA", [LCA_STEP], external=[A1_FILE]))
