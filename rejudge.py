"""Re-judge a saved run with another judge: a new run id that reuses every generation and User Model reply of
--from-run byte for byte (no call to the evaluated model or the User Model) and asks only the judge again.

    python rejudge.py --from-run run1 --run-id run1-judgeB --model MODEL --judge-model OTHER_JUDGE

Copies a1.jsonl, interaction.jsonl, force_ask.jsonl, a1_direct.jsonl and a1_force_judge.jsonl of the source run,
then writes the judge's decisions as the stages do: LCA_results, DCG_results, LJP_direct, LJP_gold,
LJP_interaction, and interaction_labels.jsonl (the interaction's round labels asked again; the dialogue is not
replayed, since the original judge decided its course). show_results.py then compares the two judges.
"""

import sys

from common import stage_main
from lexpilot.protocols.rejudging import REJUDGE_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
