"""Benchmark of where a report's worker processes start to pay: synthetic runs of growing size (bench/viewer.py
writes them; no API) scored in this process and on every core, each twice, wall and CPU (this process and its
children), with the cache of scored runs off. `FORKED_FROM_CASES` (lexpilot/reporting/scoring/parallel.py) is read
from it: under that many cases the workers save at most a few hundredths of a second and cost more CPU.

    python -m bench.forking [--sizes 20,100,200,400,1000,2500]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench.viewer import write_grid
from lexpilot.reporting.scoring.parallel import FORKED_FROM_CASES
from lexpilot.reporting.scoring.results import load_runs, score_runs


def cpu_seconds() -> float:
    """This process's CPU and its children's (the workers, once ended), user and system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(root: Path, dataset: Path, processes: int) -> tuple[float, float]:
    """(wall, CPU) seconds of scoring every run under `root` in `processes` processes."""
    runs = load_runs(root, None, None, score=False, dataset=dataset)
    cpu, start = cpu_seconds(), time.perf_counter()
    score_runs(runs, root, processes=processes)
    return time.perf_counter() - start, cpu_seconds() - cpu


def main(argv=None) -> int:
    """Each size's runs written, then scored in one process and on every core, the better of two each."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="20,100,200,400,1000,2500", help="cases in all, comma-separated")
    args = parser.parse_args(argv)
    os.environ["LEXPILOT_CACHE"] = "off"  # each report scores from the records
    cores = os.cpu_count() or 1
    print(
        f"cases  one process: wall, CPU    {cores} processes: wall, CPU    (forked from {FORKED_FROM_CASES})"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            models = 2 if size < 200 else 4  # two runs a model, the cases split among them
            dataset = write_grid(Path(tmp), models, 2, max(1, size // (models * 2)), later=0)
            root = Path(tmp) / "out"
            one = min(timed(root, dataset, 1) for _ in range(2))
            every = min(timed(root, dataset, cores) for _ in range(2))
            print(f"{size:5d}  {one[0]:6.3f} s, {one[1]:6.3f} s      {every[0]:6.3f} s, {every[1]:6.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
