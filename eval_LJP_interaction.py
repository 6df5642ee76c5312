"""Interaction-Based LJP: claim-level verdicts from the final new response of each interaction.

Reads AwN_gen/<run>/<model>/interaction.jsonl (LexAwN_gen.py must have finished, with the same
--user-condition); writes eval_results/<run>/<model>/LJP_interaction.jsonl.
"""
import sys

from common import INTERACTION, LJP_INTERACTION, CaseCalls, Step, stage_main
from eval_LJP_gold import extract_verdicts

INTERACTION_FILE = Step("interaction", INTERACTION, None, producer="LexAwN_gen.py")


def interaction_verdicts(calls: CaseCalls, upstream: dict) -> dict:
    interaction = upstream["interaction"]
    return {"setup": "interaction", "stop_reason": interaction["stop_reason"],
            **extract_verdicts(calls, interaction["final_response"])}


INTERACTION_LJP_STEP = Step("LJP_interaction", LJP_INTERACTION, interaction_verdicts, needs=("interaction",),
                            max_calls={"judge": 1}, producer="eval_LJP_interaction.py", prompts={"judge": "judge_ljp"})

if __name__ == "__main__":
    sys.exit(stage_main(__doc__, "LJP interaction", [INTERACTION_LJP_STEP], external=[INTERACTION_FILE],
                        user_condition=True))
