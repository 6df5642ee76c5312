"""Focal-point types (Appendix E.8, Table 18, Figure 4): the type of every focal point of dispute of the
selected cases, one of seven (subject identity, rights allocation, contract validity, factual conduct, amount
assessment, liability allocation, others).

Where the dataset gives a case's types (`focal_point_types`), they are used as they are (no call); otherwise
the judge classifies each focal point (prompts/judge_focal_type.txt, written for this harness from Table 18).
Writes eval_results/<run>/<model>/focal_types.jsonl; show_results.py then gives Figure 4, and
judge_agreement.py export adds FOCAL items so the judge's types can be checked by people.
"""

import sys

from common import stage_main
from lexpilot.protocols.focal_types import FOCAL_TYPE_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
