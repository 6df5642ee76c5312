"""Interaction-Based LJP: claim-level verdicts from the final new response of each interaction.

Reads AwN_gen/<run>/<model>/interaction.jsonl (LexAwN_gen.py must have finished, with the same
--user-condition); writes eval_results/<run>/<model>/LJP_interaction.jsonl.
"""
import sys

from protocols import LJP_INTERACTION_STEP
from records import INTERACTION
from runner import Stage, stage_main

STAGE = Stage("LJP interaction", (LJP_INTERACTION_STEP,), upstream=(INTERACTION,), user_condition=True)

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
