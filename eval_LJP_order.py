"""A diagnostic outside the paper's protocol: the LJP extraction judge asked again with each case's claims in a
shuffled order (seeded), its verdicts mapped back to the claims' order, for the agreement with the original
extraction per setup (show_results.py reports it, labelled as a diagnostic).

Needs eval_LJP.py (Direct, Gold-Standard and Interaction-Based) to have finished for the run. Writes
  eval_results/<run>/<model>/LJP_order_direct.jsonl, LJP_order_interaction.jsonl, LJP_order_gold.jsonl
"""

import sys

from common import stage_main
from lexpilot.protocols.order import ORDER_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
