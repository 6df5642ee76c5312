"""Re-judge a saved run with another judge: a new run id that reuses every generation and User Model reply of
--from-run byte for byte (no call to the evaluated model or the User Model) and asks only the judge again.

    python rejudge.py --from-run run1 --run-id run1-judgeB --model MODEL --judge-model OTHER_JUDGE

Copies a1.jsonl, interaction.jsonl, force_ask.jsonl, a1_direct.jsonl and a1_force_judge.jsonl of the source run,
then writes the judge's decisions as the stages do: LCA_results, DCG_results, LJP_direct, LJP_gold,
LJP_interaction, and interaction_labels.jsonl (the interaction's round labels asked again; the dialogue is not
replayed, since the original judge decided its course). show_results.py then compares the two judges.
"""
import sys

from protocols import DCG_STEP, DIRECT_STEPS, GOLD_STEPS, LCA_STEP, LJP_INTERACTION_STEP
from records import A1, DIRECT_PREDICTION, FORCE_ASK, GOLD_PREDICTION, INTERACTION
from rejudging import INTERACTION_LABELS_STEP, copy_source
from runner import Stage, stage_main

STAGE = Stage("rejudge", (LCA_STEP, INTERACTION_LABELS_STEP, DCG_STEP, DIRECT_STEPS[1], GOLD_STEPS[1],
                          LJP_INTERACTION_STEP),
              upstream=(A1, INTERACTION, FORCE_ASK, DIRECT_PREDICTION, GOLD_PREDICTION), source_run=True,
              prepare=copy_source)

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
