"""Gold-Standard LJP: a dedicated direct prediction on each complete history, then its claim-level verdicts.

Reads the dataset; writes Force_judge_gen/<run>/<model>/a1_force_judge.jsonl (the prediction)
and eval_results/<run>/<model>/LJP_gold.jsonl (claims, predicted and gold verdicts in claim order).
"""
import sys

from protocols import GOLD_STEPS
from runner import Stage, stage_main

STAGE = Stage("LJP gold", GOLD_STEPS)

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
