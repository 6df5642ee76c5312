"""Benchmark of a plain report at the paper's scale, and of the same report again: --models × --runs × --cases
synthetic runs in the real record format (bench/viewer.py writes them; no API), then `show_results.py` run as a
user runs it, three times: scoring every run from its records (the cache empty), the same report of the unchanged
runs (from the cache of scored runs), and with the cache off. Issue 36's target: the second report within 3 s.

    python -m bench.reports [--models 10] [--runs 5] [--cases 432]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.viewer import grid_parser, write_grid

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = grid_parser(__doc__)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = write_grid(tmp, args.models, args.runs, args.cases, later=0)  # the main tasks only
        env = {**os.environ, "LEXPILOT_CACHE": str(tmp / "cache")}
        printed = set()
        for label, cache in (
            ("scored from the records", None),
            ("again, unchanged runs (cache)", None),
            ("cache off", "off"),
        ):
            start = time.monotonic()
            done = subprocess.run(
                [
                    sys.executable,
                    "show_results.py",
                    "--output-root",
                    str(tmp / "out"),
                    "--dataset",
                    str(dataset),
                ],
                cwd=ROOT,
                env={**env, **({"LEXPILOT_CACHE": cache} if cache else {})},
                capture_output=True,
                text=True,
            )
            printed.add(done.stdout)
            print(f"{label}: {time.monotonic() - start:.1f}s (exit {done.returncode})")
        print("the three reports print the same" if len(printed) == 1 else "the reports DIFFER")
    return 0


if __name__ == "__main__":
    sys.exit(main())
