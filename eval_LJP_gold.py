"""Gold-Standard LJP: a dedicated direct prediction on each complete history, then its claim-level verdicts.

Reads the dataset; writes Force_judge_gen/<run>/<model>/a1_force_judge.jsonl (the prediction)
and eval_results/<run>/<model>/LJP_gold.jsonl (claims, predicted and gold verdicts in claim order).
The direct prediction prompt and extract_verdicts defined here are shared by Direct,
Gold-Standard and the forced final prediction of the interaction.
"""
import sys

from common import (GOLD_GEN, LJP_GOLD, CaseCalls, Step, render_claims, render_history, stage_main,
                    verdict_parser)


def force_judge(calls: CaseCalls, history: list[dict]) -> str:
    """The direct prediction prompt (Table 21) on a history: a verdict, no further questions."""
    return calls.generate("eval", "force_judge", history=render_history(history))


def extract_verdicts(calls: CaseCalls, response: str) -> dict:
    """The extraction judge reads the response and the claims (never the gold verdicts)."""
    case = calls.case
    predicted, raw = calls.judge("judge_ljp", verdict_parser(len(case.claims)),
                                 history=response, claims=render_claims(case))
    return {"claims": list(case.claims), "predicted": predicted, "gold": list(case.verdicts), "judge_raw": raw}


def prediction_steps(setup: str, history_type: str, generation_file, results_file, producer: str) -> list[Step]:
    """Direct and Gold-Standard differ only in the history they predict from."""
    generation = f"{setup}_prediction"

    def predict(calls: CaseCalls, upstream: dict) -> dict:
        history = calls.case.history(history_type)
        return {"history_type": history_type, "input_history": history,
                "response": force_judge(calls, history)}

    def extract(calls: CaseCalls, upstream: dict) -> dict:
        return {"setup": setup, **extract_verdicts(calls, upstream[generation]["response"])}

    return [Step(generation, generation_file, predict, max_calls={"eval": 1}, producer=producer,
                 prompts={"eval": "force_judge"}),
            Step(f"LJP_{setup}", results_file, extract, needs=(generation,), max_calls={"judge": 1},
                 producer=producer, prompts={"judge": "judge_ljp"})]


GOLD_STEPS = prediction_steps("gold", "complete", GOLD_GEN, LJP_GOLD, "eval_LJP_gold.py")

if __name__ == "__main__":
    sys.exit(stage_main(__doc__, "LJP gold", GOLD_STEPS))
