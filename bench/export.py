"""Benchmark of export_results.py at the paper's scale: --models × --runs × --cases synthetic runs in the real record
format (bench/viewer.py writes them; no API), then `export_results.py --format eee inspect` run as a user runs it,
timed, with its peak memory (the child's maximum resident set): first into an empty folder, then again over the
unchanged runs (nothing to rewrite), then `--verify` of the export. Issue 59's target: at most 60 s and 1 GB.

    python -m bench.export [--models 10] [--runs 5] [--cases 432] [--formats eee inspect]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.viewer import grid_parser, size, write_grid

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, the peak resident memory in MB of this child alone, and its result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.monotonic()
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far (KB)
    return seconds, max(peak, before) / 1024, done


def main(argv=None) -> int:
    parser = grid_parser(__doc__)
    parser.add_argument("--formats", nargs="+", default=["eee", "inspect"])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = write_grid(tmp, args.models, args.runs, args.cases, later=0)  # the main tasks only
        env = {**os.environ, "LEXPILOT_CACHE": str(tmp / "cache")}
        export = ["export_results.py", "--output-root", str(tmp / "out"), "--dataset", str(dataset)]
        export += ["--format", *args.formats, "--output", str(tmp / "export")]
        print(
            f"{args.models} models × {args.runs} runs × {args.cases} cases, formats {' '.join(args.formats)}"
        )
        for label, command in (
            ("export, empty folder", export),
            ("export again, unchanged runs", export),
            ("--verify of the export", ["export_results.py", "--verify", str(tmp / "export")]),
        ):
            seconds, peak, done = timed(command, env)
            last = (done.stdout.strip().splitlines() or [""])[-1]
            print(
                f"{label}: {seconds:.1f} s, peak memory {peak:.0f} MB (exit {done.returncode}) {last[:120]}"
            )
            if done.returncode:
                print(done.stderr[-2000:])
        print(
            f"the export: {size(tmp / 'export', '*') / 1e6:.0f} MB; the records: {size(tmp / 'out', '*.jsonl') / 1e6:.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
