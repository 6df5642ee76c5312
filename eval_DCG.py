"""DCG: two forced clarification questions per underspecified history, each judged against the case.

Reads the dataset; writes Force_ask_gen/<run>/<model>/force_ask.jsonl (both questions and the
User Model's reply between them) and eval_results/<run>/<model>/DCG_results.jsonl (both round
labels and the any-round success). Questions already in the benchmark history never count.
"""

import sys

from common import stage_main
from lexpilot.protocols.dcg import DCG_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
