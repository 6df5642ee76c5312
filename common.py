"""What every stage script uses, in one place: history rendering (the prompts and how a case fills their
slots), model calls for the three roles, the checkpoints a run keeps, and running a stage. The code lives in
the `lexpilot` package (see docs/architecture.md); this module only hands it on.

Run as a script, it validates a dataset and prints its statistics (the paper's Table 1):
    python common.py [--dataset PATH]
"""

import os
import sys

from lexpilot.errors import leave_quietly_on_interrupt

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.benchmark.prompts import (
    fill,
    load_prompts,
    render_claims,
    render_details_by_focal_point,
    render_focal_points,
    render_history,
    render_key_facts,
)
from lexpilot.errors import STOPPED
from lexpilot.models.calls import ModelCaller, Usage
from lexpilot.running.stage import run_stage, stage_main
from lexpilot.storage.checkpoints import CallJournal, CheckpointWriter, read_checkpoint

__all__ = [
    "fill",
    "load_prompts",
    "render_claims",
    "render_details_by_focal_point",
    "render_focal_points",
    "render_history",
    "render_key_facts",
    "ModelCaller",
    "Usage",
    "run_stage",
    "stage_main",
    "STOPPED",
    "CallJournal",
    "CheckpointWriter",
    "read_checkpoint",
]

if __name__ == "__main__":
    from lexpilot.benchmark.dataset import main

    sys.exit(main())
