"""All three LJP setups in turn, with the same options: Direct, Gold-Standard, Interaction-Based.

Writes what eval_LJP_direct.py, eval_LJP_gold.py and eval_LJP_interaction.py write.
Interaction-Based needs LexAwN_gen.py to have finished for this run; the other two do not.
"""

import sys

from common import STOPPED, stage_main
from lexpilot.protocols.catalog import ENTRY_POINTS

# Run from this script, with the same options for each, so no --user-condition: a non-ideal run's Interaction-Based
# LJP is run with eval_LJP_interaction.py (Direct and Gold-Standard belong to standard runs). Declared in the catalog.
STAGES = ENTRY_POINTS["eval_LJP"]

if __name__ == "__main__":
    status = 0
    for stage in STAGES:  # a stage that stopped (a 401, an unknown model, a bad setting) or was interrupted
        done = stage_main(stage, __doc__)  # (Ctrl-C in batch mode: 130) stops the rest
        status = max(status, done)
        if done in (STOPPED, 130):
            status = done
            break
    sys.exit(status)
