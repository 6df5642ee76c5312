"""The paper's grid in one command: every evaluated model × run × stage, each stage run as its script runs it, many at
once, with each endpoint's limits (requests in flight, requests and tokens per minute, 429 pauses) shared by every
cell that uses it, and one budget. Rerunning the same command resumes; --dry-run prints the quote for what is left.
Every other option is a stage option (--dataset, --limit, --prices, --max-cost, --output-root, --concurrency,
--user-model, --judge-model, ...), passed to each stage as its script takes it.

  python run_grid.py --models GPT-5.6-Sol DeepSeek-V4.1 --runs 5 --grid grid.toml --limit DeepSeek-R1=rpm:1000

--limit MODEL=rpm:R,tpm:T,concurrency:C (repeat per model id) sets an endpoint's limits, over the grid file's;
--limit N, a number, is the stages' own (the first N cases).
"""

import argparse
import os
import sys

from lexpilot.errors import leave_quietly_on_interrupt

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.errors import HarnessError, own_interrupts, stop_of
from lexpilot.models.shared_limits import DEFAULT_AWAY
from lexpilot.options import number
from lexpilot.protocols.catalog import stages_named
from lexpilot.reporting.tables.quote_tables import print_quote
from lexpilot.reporting.tables.renderings import TEXT_WIDTH, add_format_option
from lexpilot.running.grid.file import split_limits
from lexpilot.running.grid.quote import Timing, grid_parser, grid_quote, grid_run_ids
from lexpilot.running.grid.run import start_grid, stopped_outside
from lexpilot.running.quote import SECONDS_PER_CALL


def command_line() -> argparse.ArgumentParser:
    parser = grid_parser(__doc__)
    parser.add_argument(
        "--grid",
        metavar="FILE",
        help="a TOML file: each evaluated model's endpoint and limits, other models' limits (docs/grid.md)",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="run shard K of N: whole (model, run) chains, split the same "
        "way on every machine (docs/grid.md)",
    )
    parser.add_argument(
        "--limits",
        dest="limits_url",
        metavar="redis://HOST:PORT/DB",
        help="share each endpoint's "
        "limits with every process and machine using it, through Redis (?lease=SECONDS, default 60)",
    )
    parser.add_argument(
        "--workers",
        metavar="redis://HOST:PORT/DB",
        help="be one worker of a fleet: take the grid's next (model, run) chain from Redis as this process frees "
        "up (?lease=SECONDS, default 60); implies --limits at the same URL unless given (docs/grid.md)",
    )
    parser.add_argument(
        "--chains",
        type=number(int, 1, 10**4),
        help="with --workers: at most N chains at once here (default: an equal share among the workers alive)",
    )
    parser.add_argument(
        "--status", action="store_true", help="with --workers: print the fleet of this grid, run nothing"
    )
    parser.add_argument(
        "--redis-wait",
        type=number(float, 1, 86400),
        default=DEFAULT_AWAY,
        metavar="SECONDS",
        help="with --limits or --workers: how long calls wait for a Redis out of reach before the grid stops as "
        "after a Ctrl-C (default %(default)g)",
    )
    add_format_option(parser, "of the --dry-run quote")
    parser.add_argument("--width", type=number(int, 0, 10**6), default=TEXT_WIDTH, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    args, options = command_line().parse_known_args(argv)
    limits, options = split_limits(options)
    own_interrupts()
    grid = None
    try:
        run_ids = grid_run_ids(args)
        grid = start_grid(
            stages_named(args.stages),
            args.models,
            run_ids,
            options,
            args.grid,
            limits,
            shard=args.shard,
            limits_url=args.limits_url,
            workers=args.workers,
            chains=args.chains,
        )
        grid.redis_wait = args.redis_wait
        if args.status:
            return status(grid)
        if "--dry-run" in options:
            return dry_run(grid, args, run_ids)
        return grid.run()
    except HarnessError as e:
        print(f"run_grid: {e}", file=sys.stderr)
        return 2
    except (
        KeyboardInterrupt
    ) as interrupt:  # one the grid's own handling did not meet (before it, or between two)
        print(f"\n[grid] {stopped_outside(interrupt, grid)}; rerun the same command.", file=sys.stderr)
        return stop_of(interrupt).status


def status(grid) -> int:
    """The fleet of this grid, from any machine, without running anything (--status --workers URL)."""
    if not grid.workers_url:
        raise HarnessError(
            "--status: give the fleet's --workers redis://HOST:PORT/DB (and the grid's arguments)"
        )
    from lexpilot.running.grid.fleet_status import fleet_status

    print("\n".join(fleet_status(grid)))
    return 0


def dry_run(grid, args, run_ids: list[str]) -> int:
    """The quote for what is left of the grid; a shard's lists its cells, then quotes them alone."""
    first = grid.settings_of(grid.stages[0], grid.models[0], run_ids[0])
    if args.shard:
        chains = grid.chains()
        print("\n".join(cell.label for chain in chains for cell in chain) or "(no cell)")
        if not chains:
            return 0
        print()
        parts = grid.quote_parts(chains)
    else:
        parts = grid.all_parts()
    timing = Timing(SECONDS_PER_CALL, first.transport.concurrency, 0, grid.rate_limits(first))
    return print_quote(grid_quote(parts, timing), args.format, args.width)


if __name__ == "__main__":
    sys.exit(main())
