"""Simulator audit: the judge checks every User Model reply of a saved run (can the simulator be trusted?).

For each selected case, every reply the User Model gave in the run (the DCG round, and each interaction
round, non-ideal users included) is given to the judge with the question it answered, the conversation before
it and the key details (prompts/judge_simulator_audit.txt, written for this harness): which key details it
disclosed unasked, whether it stated anything unsupported or contradicting them, whether it answered.
Writes eval_results/<run>/<model>/simulator_audit_dcg.jsonl and simulator_audit_interaction.jsonl;
show_results.py reports the rates and the task metrics on the cases whose replies were all clean.
Run it after LexAwN_gen.py and eval_DCG.py, with the run's own options (--user-condition for a non-ideal run).
"""

import sys

from common import stage_main
from lexpilot.protocols.audit import AUDIT_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
