"""Benchmark of the rankings at the paper's scale: --models × --runs × --cases synthetic runs in the real record
format (bench/viewer.py writes them; no API), then the all-pairs table with its ranking (`--rank`), the power
table and the consistency table timed, in process, each after the runs are loaded, with --resamples resamples
(the all-pairs table with the permutations its family needs), and the process's peak memory.
Issue 36's target: the three at 10 models × 5 runs × 432 cases within 10 s with the loading, under 400 MB.

    python -m bench.statistics [--models 10] [--runs 5] [--cases 432] [--resamples 1000] [--skill-step 0.1]

By default the models are alike (every answer drawn at random), so the ranking's tests stop early (Besag and
Clifford: docs/statistics.md); --skill-step S makes model m right on a share m · S of its answers, so that pairs
differ and their tests run to the end: the slow case.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

from bench.viewer import grid_parser, write_grid
from lexpilot.reporting.scoring.groups import group_runs
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.statistics.consistency import consistency_table
from lexpilot.reporting.statistics.rankings import power_table, ranking_tables


def main(argv=None) -> int:
    parser = grid_parser(__doc__)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--skill-step", type=float, default=0.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = write_grid(
            tmp,
            args.models,
            args.runs,
            args.cases,
            later=0,  # the main tasks only
            skill_step=args.skill_step,
        )
        start = time.monotonic()
        # as show_results.py loads them for --rank --power --consistency: the records themselves are not kept
        groups = group_runs(load_runs(tmp / "out", None, None, dataset=dataset, keep_outcomes=True))
        print(
            f"{args.models} models × {args.runs} runs × {args.cases} cases loaded and scored in "
            f"{time.monotonic() - start:.1f}s"
        )
        boot = Bootstrap(args.resamples, 0)
        timed = {
            "all pairs and ranking (--rank)": lambda: ranking_tables(groups, boot, 0.05),
            "power (--power, same resamples)": lambda: power_table(groups, boot),
            "consistency (--consistency)": lambda: consistency_table(groups),
        }
        for name, build in timed.items():
            start = time.monotonic()
            tables = build()
            rows = sum(len(t.rows) for t in (tables if isinstance(tables, list) else [tables]))
            print(f"{name}: {time.monotonic() - start:.2f}s ({rows} rows, {args.resamples} resamples)")
    print(f"peak memory of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
