"""What every stage script uses, in one place: running a stage (`stage_main`, to which each script hands its
declared Stage or Stages) and the exit status of a stopped stage (`STOPPED`). The code lives in the `lexpilot`
package (see docs/architecture.md); this module only hands it on, and hands on only what a script imports from it
(tests/test_declared_once.py): a step's own code imports the package directly.

Run as a script, it validates a dataset and prints its statistics (the paper's Table 1):
    python common.py [--dataset PATH]
"""

import os
import sys

from lexpilot.errors import leave_quietly_on_interrupt

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.errors import STOPPED
from lexpilot.running.stage import stage_main

__all__ = ["stage_main", "STOPPED"]

if __name__ == "__main__":
    from lexpilot.benchmark.dataset import main

    sys.exit(main())
