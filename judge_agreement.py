"""Judge agreement with legal experts (Appendix E.3.1, Table 12); never calls an API.

export  reads the saved runs under --output-root and the dataset, and writes a seeded, stratified random
        sample of LCA, DCG and LJP judge decisions (--per-task each, balanced across evaluated models):
        OUT (for the annotators: the item, empty annotator_1 / annotator_2 / adjudicated columns, no
        model names, no judge labels) and OUT with .key.csv (the judge's label and where each item came from).
score   reads the filled OUT and its key and prints, per task and on average, human-human agreement
        and Cohen's kappa, and LLM-human agreement and kappa against the adjudicated human label.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lexpilot.errors import OneLineParser, leave_quietly_on_interrupt, run_tool

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.errors import HarnessError
from lexpilot.options import number
from lexpilot.reporting.scoring.results import add_run_options
from lexpilot.reporting.validation.agreement import export, score
from lexpilot.reporting.validation.label_plan import DISAGREEMENT, plan


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    e = commands.add_parser("export", help="write the annotation sample")
    add_run_options(e)
    e.add_argument("--per-task", type=int, default=100, help="items per task (default 100)")
    e.add_argument(
        "--seed", type=number(int, 0, 10**9), default=0, help="sampling seed, 0 or more (default 0)"
    )
    e.add_argument("--out", type=Path, default=Path("judge_agreement.csv"), help="default: %(default)s")
    e.add_argument(
        "--plan",
        action="store_true",
        help="print how many expert labels each model needs for the corrected metrics, and write nothing",
    )
    e.add_argument(
        "--disagreement",
        type=number(float, 0.0, 1.0),
        default=DISAGREEMENT,
        help="with --plan: the share of decisions the experts are taken to read otherwise than the judge "
        "(default %(default)s)",
    )
    e.add_argument(
        "--alpha",
        type=number(float, 0.0, 1.0),
        default=0.05,
        help="with --plan: the tests' level (default 0.05)",
    )
    s = commands.add_parser("score", help="score a filled annotation file")
    s.add_argument("annotations", type=Path)
    s.add_argument("--key", type=Path, help="default: the .key.csv next to the annotation file")
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            return plan(args) if args.plan else export(args)
        return score(args)
    except HarnessError as e:
        print(f"[judge_agreement] error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run_tool(main, "judge_agreement"))
