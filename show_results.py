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
from pathlib import Path

from lexpilot.errors import OneLineParser, leave_quietly_on_interrupt, run_tool

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.errors import HarnessError
from lexpilot.reporting.report import show
from lexpilot.reporting.scoring.results import add_run_options
from lexpilot.reporting.statistics.randomization import MAX_PERMUTATIONS
from lexpilot.reporting.tables.analyses import UsageError
from lexpilot.reporting.tables.renderings import TEXT_WIDTH
from lexpilot.settings import number


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(parser)
    parser.add_argument("--format", choices=("text", "markdown", "csv", "json", "latex"), default="text")
    parser.add_argument("--ci", action="store_true", help="add 95%% bootstrap intervals over cases, and paired "
                        "Interaction − Direct and Gold − Interaction differences")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=number(int, 0, 10 ** 9), default=0,
                        help="bootstrap seed, 0 or more (default 0: the same numbers every time)")
    parser.add_argument("--compare", nargs=2, metavar=("MODEL_A", "MODEL_B"),
                        help="paired bootstrap difference A − B on every metric (implies --ci)")
    parser.add_argument("--width", type=number(int, 0, 10**6), default=TEXT_WIDTH, help="text tables wider than this many terminal "
                        f"cells are printed in blocks of columns (default {TEXT_WIDTH}; 0: never)")
    parser.add_argument("--decimals", type=number(int, 0, 12), metavar="N", help="metrics at N decimals in the text, "
                        "Markdown and LaTeX tables (default: each table at its paper table's precision, "
                        "docs/results.md; CSV and JSON keep every digit)")
    parser.add_argument("--table", nargs="+", metavar="ID", help="print only these tables, by identity (main, "
                        "lca_by_class, table_4, ...: docs/results.md lists them; an unknown one is refused with the "
                        "report's names); with --format json, those tables ride along with the metrics")
    parser.add_argument("--include-rejudged", action="store_true", help="the paper's tables show re-judged copies "
                        "of runs too (by default only the judge tables do, unless --run-id names one)")
    parser.add_argument("--rank", action="store_true", help="every comparable pair of models on each headline "
                        "metric (paired bootstrap interval, randomization-test p, Holm-adjusted) and a ranking with letter groups")
    parser.add_argument("--permutations", type=number(int, 1, MAX_PERMUTATIONS), default=None,
                        help="permutations of --rank's randomization test (default: as many as the pairs need at "
                        "--alpha, (B + 1) ≥ 20 · pairs / alpha; fewer is refused)")
    parser.add_argument("--by-class", action="store_true", help="with --rank: per cause-of-action class too")
    parser.add_argument("--alpha", type=number(float, 0.0001, 0.5), default=0.05,
                        help="significance level of --rank and --power, from 0.0001 to 0.5 (default 0.05)")
    parser.add_argument("--power", action="store_true", help="the smallest difference detectable at --alpha with "
                        "power 0.8, for the design in hand and others (docs/statistics.md)")
    parser.add_argument("--consistency", action="store_true", help="consistency over runs per model, and the "
                        "judge's share of the run-to-run variance where runs were re-judged with the same judge")
    parser.add_argument("--usage", action="store_true", help="add token usage per run, role and stage file")
    parser.add_argument("--prices", type=Path, help='JSON {"model id": {"prompt": P, "completion": C}} in money '
                        "per million tokens: adds cost to the usage tables (implies --usage)")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="also write PNG figures there (needs matplotlib)")
    parser.add_argument("--complexity", type=Path, metavar="FILE", help="Figure 3: a CSV of cause_of_action,"
                        "complexity (the average number of legal provisions cited per cause); default: the cases' "
                        "complexity field, where the dataset has one")
    parser.add_argument("--html", type=Path, metavar="DIR", help="also write the transcript viewer there: a static "
                        "site (index.html) that opens from the file system; see docs/viewer.md")
    args = parser.parse_args(argv)
    try:
        return show(args)
    except (UsageError, HarnessError) as e:
        print(f"show_results: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run_tool(main, "show_results"))
