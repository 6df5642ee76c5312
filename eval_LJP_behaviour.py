"""Targeted and Off-target dialogues (Section 6.5, Appendix E.7, Table 4): LJP after clarification that
recovers the missing facts, or that leaves them undisclosed, against Direct prediction on the same cases.

For every selected case and both conditions: three rounds of model-written questions (the evaluated model
sees the key details, never the verdicts) answered by the Standard User Model, validated by the judge, rebuilt
from scratch when rejected (at most five attempts; then the case is saved as unresolved, which is not an
error); then a prediction in a fresh context from the validated dialogue alone (Table 21) and its verdicts
(Table 25). Writes Behaviour_gen/<run>/<model>/dialogues_{targeted,off_target}.jsonl,
prediction_{targeted,off_target}.jsonl and eval_results/<run>/<model>/LJP_{targeted,off_target}.jsonl.
Table 4 reuses the run's Direct LJP (eval_LJP_direct.py) under the same settings.
"""

import sys

from common import stage_main
from lexpilot.protocols.behaviour import BEHAVIOUR_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
