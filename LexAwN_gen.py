"""LexAwN generation, LCA, and the Interaction-Based consultations.

Reads the dataset. For every selected case it writes, in this order:
  AwN_gen/<run>/<model>/a1.jsonl               one new LexAwN response after each history (complete, underspecified)
  eval_results/<run>/<model>/LCA_results.jsonl  the judge's label of each (as eval_LCA.py does)
  AwN_gen/<run>/<model>/interaction.jsonl       the underspecified consultation continued with the User Model
                                                for up to three clarification rounds, then a forced prediction
--user-condition delayed|self-correction runs the interaction with a non-ideal user (Appendix E.5).
"""

import sys

from common import stage_main
from lexpilot.protocols.consultation import LEXAWN_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
