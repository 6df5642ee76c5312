"""Print the paper's tables from saved runs; never calls an API.

Reads runs/<run>/<model>/manifest.json and eval_results/<run>/<model>/*.jsonl under --output-root.
Metrics are computed within each run (overall and per cause-of-action class), then runs with identical
settings are grouped and reported as mean and sample SD (ddof=1). Writes only to stdout
(problems with the saved files go to stderr).
"""

from __future__ import annotations

import argparse
import os
import sys

from lexpilot.errors import OneLineParser, leave_quietly_on_interrupt, run_tool

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.errors import HarnessError, UsageError
from lexpilot.reporting.report import add_report_options, show
from lexpilot.reporting.scoring.results import add_run_options


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(parser)
    add_report_options(parser)
    args = parser.parse_args(argv)
    try:
        return show(args)
    except (UsageError, HarnessError) as e:
        print(f"show_results: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run_tool(main, "show_results"))
