"""Gold-Standard LJP: a dedicated direct prediction on each complete history, then its claim-level verdicts.

Reads the dataset; writes Force_judge_gen/<run>/<model>/a1_force_judge.jsonl (the prediction)
and eval_results/<run>/<model>/LJP_gold.jsonl (claims, predicted and gold verdicts in claim order).
"""

import sys

from common import stage_main
from lexpilot.protocols.ljp import GOLD_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
