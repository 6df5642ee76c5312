"""Plain consultation (Pilot Study II, Appendix C.2, Table 6): how the evaluated model answers an
underspecified consultation without the LexAwN prompt, and which of the four response types it gives.

For every selected case the history is sent as an ordinary chat, its messages in order, with no task prompt
(the one place where a history is not rendered into a prompt slot). Writes
  Plain_gen/<run>/<model>/plain_underspecified.jsonl          the plain response
  eval_results/<run>/<model>/plain_types_underspecified.jsonl the judge's response type: deficiency
      recognition, conditional generic advice, unconditional generic advice or premature prediction
--histories underspecified,complete answers the complete history too, as a control (plain_complete.jsonl,
plain_types_complete.jsonl).
"""

import sys

from common import stage_main
from lexpilot.protocols.plain import PLAIN_STAGE as STAGE

if __name__ == "__main__":
    sys.exit(stage_main(STAGE, __doc__))
