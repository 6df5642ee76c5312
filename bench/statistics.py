"""Benchmark of the rankings at the paper's scale: --models × --runs × --cases synthetic runs in the real record
format (bench/viewer.py writes them; no API), then the all-pairs table with its ranking (`--rank`), the power
table and the consistency table timed, in process, each after the runs are loaded, with --resamples resamples
(the all-pairs table with the permutations its family needs), and the process's peak memory.
Issue 36's target: the three at 10 models × 5 runs × 432 cases within 10 s with the loading, under 400 MB
(issue 58's: 500 MB, with --corrected too: bench/corrected_scale.py).

    python -m bench.statistics [--models 10] [--runs 5] [--cases 432] [--resamples 1000] [--skill-step 0.0]
        [--seeds 1 2 3 4 5]

With --seeds, the ranking alone at each seed instead: its unsettled decisions, the tests that drew more
permutations, and every settled decision or unmarked letter that differs between two seeds (there must be none:
the sequential rule of docs/statistics.md).

By default the models are alike (every answer drawn at random), so the ranking's tests stop early (Besag and
Clifford: docs/statistics.md); --skill-step S makes model m right on a share m · S of its answers, so that pairs
differ and their tests run to the end: the slow case.
"""

from __future__ import annotations

import re
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
from lexpilot.reporting.statistics.letters import UNSETTLED_MARK
from lexpilot.reporting.statistics.rankings import power_table, ranking_tables


def main(argv=None) -> int:
    parser = grid_parser(__doc__)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--skill-step", type=float, default=0.0)
    parser.add_argument("--seeds", type=int, nargs="+", help="rank at each seed and compare the decisions")
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
        if args.seeds:
            return 1 if across_seeds(groups, args.seeds, args.resamples) else 0
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


def across_seeds(groups: list, seeds: list[int], resamples: int) -> int:
    """The ranking at each seed, timed; prints what the seeds disagree on among the settled decisions and the
    unmarked letters, and returns how many such disagreements there are."""
    seen: dict[tuple, dict[int, str]] = {}
    for seed in seeds:
        start = time.monotonic()
        pairs, ranking = ranking_tables(groups, Bootstrap(resamples, seed), 0.05)[:2]
        took = time.monotonic() - start
        decided = {("pair", r[0], r[1], r[2]): r[7] for r in pairs.rows}
        letters = {("letters", r[0], r[2]): r[6] for r in ranking.rows}
        unsettled = sum(v == "unsettled" for v in decided.values())
        marked = sum(v.endswith(UNSETTLED_MARK) for v in letters.values())
        print(
            f"seed {seed}: {took:.2f}s, {len(decided)} decisions, {unsettled} unsettled, {marked} letters marked; "
            f"{re.search(r'([0-9,]+) tests? did', pairs.title)[1]} tests drew more"  # type: ignore[index]
        )
        for key, value in (decided | letters).items():
            if value != "unsettled" and not value.endswith(UNSETTLED_MARK):
                seen.setdefault(key, {})[seed] = value
    changed = [(key, by_seed) for key, by_seed in seen.items() if len(set(by_seed.values())) > 1]
    for key, by_seed in changed:
        print(f"changed with the seed: {' '.join(key[1:])} ({key[0]}): {by_seed}")
    print(f"{len(changed)} settled decisions or unmarked letters changed across seeds {seeds}")
    return len(changed)


if __name__ == "__main__":
    sys.exit(main())
