"""A quote for a whole grid before any call: evaluated models × runs × stages.

Counts what each stage's --dry-run would count for every (model, run), with cases already saved under the
output root left out (so it also answers "what will finishing this grid cost?"), and prints the calls per stage,
role and endpoint, cost bounds and an expected figure (from saved runs) at synchronous and batch prices, and an
estimated wall time. Every other option is a stage option (--dataset, --limit, --prices, --output-root,
--concurrency, --user-model, --judge-model, --max-tokens, ...), passed to each stage as its script takes it.

  python quote_grid.py --models GPT-5.6-Sol DeepSeek-V4.1 --runs 5 --prices data/prices_illustrative.json
"""

import os
import sys

from lexpilot.errors import leave_quietly_on_interrupt, run_tool

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.errors import HarnessError
from lexpilot.options import number, rate_limits
from lexpilot.protocols.catalog import stages_named
from lexpilot.reporting.tables.quote_tables import print_quote
from lexpilot.reporting.tables.renderings import TEXT_WIDTH, add_format_option
from lexpilot.running.grid.file import split_limits
from lexpilot.running.grid.quote import (
    Timing,
    allowed_rates,
    check_rate_limits,
    grid_parser,
    grid_quote,
    grid_run_ids,
)
from lexpilot.running.grid.run import plan_grid
from lexpilot.running.quote import SECONDS_PER_CALL


def main(argv=None) -> int:
    parser = grid_parser(__doc__)
    parser.add_argument(
        "--rate-limit",
        action="append",
        default=[],
        metavar="MODEL=RPM",
        help="an endpoint's requests per minute (repeat per model id)",
    )
    parser.add_argument(
        "--grid",
        metavar="FILE",
        help="run_grid.py's grid file: each evaluated model's endpoint, "
        "and the limits (rpm, tpm) the wall time is estimated at (docs/grid.md)",
    )
    parser.add_argument(
        "--seconds-per-call",
        type=number(float, 0.001, 3600),
        default=SECONDS_PER_CALL,
        help=f"a call's time, for the wall-time estimate (default {SECONDS_PER_CALL:g})",
    )
    parser.add_argument(
        "--jobs",
        type=number(int, 0, 100000),
        default=0,
        help="(model, run) jobs run at once (default 0: all, as a job array)",
    )
    add_format_option(parser)
    parser.add_argument(
        "--width",
        type=number(int, 0, 10**6),
        default=TEXT_WIDTH,
        help="text tables wider than "
        f"this many terminal cells are printed in blocks of columns (default {TEXT_WIDTH}; 0: never)",
    )
    args, options = parser.parse_known_args(argv)
    endpoint_limits, options = split_limits(options)  # --limit MODEL=rpm:R,... as run_grid.py takes it
    try:
        run_ids = grid_run_ids(args)
        stages = stages_named(args.stages)
        grid = plan_grid(stages, args.models, run_ids, options, args.grid, endpoint_limits)
        first = grid.settings_of(stages[0], grid.models[0], run_ids[0])
        limits = allowed_rates(grid.limits, first) | rate_limits(args.rate_limit)
        parts = grid.all_parts()
        check_rate_limits(parts, limits)
        timing = Timing(args.seconds_per_call, first.transport.concurrency, args.jobs, limits)
    except HarnessError as e:
        print(f"quote_grid: {e}", file=sys.stderr)
        return 2
    return print_quote(grid_quote(parts, timing), args.format, args.width)


if __name__ == "__main__":
    sys.exit(run_tool(main, "quote_grid"))
