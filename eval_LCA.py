"""LCA: the judge labels each new LexAwN response as a prediction (策略一) or a question (策略二).

Reads AwN_gen/<run>/<model>/a1.jsonl (written by LexAwN_gen.py) and never generates: run on its
own, it judges every a1 response that has no label yet. Writes eval_results/<run>/<model>/LCA_results.jsonl
with, for the complete and the underspecified history, the label and the history's true type.
"""

import sys

from common import stage_main
from lexpilot.protocols.consultation import LCA_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
