"""Direct LJP: a dedicated direct prediction on each underspecified history, then its claim-level verdicts.

Reads the dataset; writes Force_judge_gen/<run>/<model>/a1_direct.jsonl (the prediction)
and eval_results/<run>/<model>/LJP_direct.jsonl (claims, predicted and gold verdicts in claim order).
"""
import sys

from protocols import DIRECT_STEPS
from runner import Stage, stage_main

STAGE = Stage("LJP direct", DIRECT_STEPS)

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
