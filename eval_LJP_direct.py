"""Direct LJP: a dedicated direct prediction on each underspecified history, then its claim-level verdicts.

Reads the dataset; writes Force_judge_gen/<run>/<model>/a1_direct.jsonl (the prediction)
and eval_results/<run>/<model>/LJP_direct.jsonl (claims, predicted and gold verdicts in claim order).
"""
import sys

from common import DIRECT_GEN, LJP_DIRECT, stage_main
from eval_LJP_gold import prediction_steps

DIRECT_STEPS = prediction_steps("direct", "underspecified", DIRECT_GEN, LJP_DIRECT, "eval_LJP_direct.py")

if __name__ == "__main__":
    sys.exit(stage_main(__doc__, "LJP direct", DIRECT_STEPS))
