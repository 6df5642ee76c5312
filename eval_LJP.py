"""All three LJP setups in turn, with the same options: Direct, Gold-Standard, Interaction-Based.

Writes what eval_LJP_direct.py, eval_LJP_gold.py and eval_LJP_interaction.py write.
Interaction-Based needs LexAwN_gen.py to have finished for this run; the other two do not.
"""
import sys

from common import stage_main
from eval_LJP_direct import DIRECT_STEPS
from eval_LJP_gold import GOLD_STEPS
from eval_LJP_interaction import INTERACTION_FILE, INTERACTION_LJP_STEP

if __name__ == "__main__":
    status = 0
    for name, steps, external in (("LJP direct", DIRECT_STEPS, None), ("LJP gold", GOLD_STEPS, None),
                                  ("LJP interaction", [INTERACTION_LJP_STEP], [INTERACTION_FILE])):
        status = max(status, stage_main(__doc__, name, steps, external))
    sys.exit(status)
