"""Interaction-Based LJP: claim-level verdicts from the final new response of each interaction.

Reads AwN_gen/<run>/<model>/interaction.jsonl (LexAwN_gen.py must have finished, with the same
--user-condition); writes eval_results/<run>/<model>/LJP_interaction.jsonl.
"""

import sys

from common import stage_main
from lexpilot.protocols.ljp import INTERACTION_LJP_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
