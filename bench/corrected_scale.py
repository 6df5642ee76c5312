"""Benchmark of the judge-corrected report at the paper's scale: --models × --runs × --cases synthetic runs in the real
record format (bench/viewer.py writes them; no API), an expert label file exported from them by `judge_agreement.py
export --per-task N` and filled with the judge's labels but a share --disagreement read the other way, then
`show_results.py --rank --power --consistency --corrected LABELS` run twice as a user runs it (a fresh process each:
the second reads the score cache), with each call's wall time and peak memory. Issue 58's target: the second call
within 10 s and 500 MB.

    python -m bench.corrected_scale [--models 10] [--runs 5] [--cases 432] [--per-task 2000] [--disagreement 0.1]
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.viewer import grid_parser, write_grid
from lexpilot.files import key_file, read_sheet, write_sheet
from lexpilot.reporting.validation.agreement import ANNOTATION_COLUMNS, LABELS

ROOT = Path(__file__).resolve().parent.parent


def other(task: str, label: str, rng: random.Random) -> str:
    """A label of the task other than `label`."""
    return rng.choice([x for x in LABELS[task] if x != label])


def fill_labels(sheet: Path, disagreement: float, seed: int = 0) -> int:
    """The experts' labels: the judge's (from the key), a share `disagreement` of them the other way."""
    rng = random.Random(seed)
    key = {row["item_id"]: row for _, row in read_sheet(key_file(sheet), ["item_id", "llm_label"])}
    rows = []
    for _, row in read_sheet(sheet, ["item_id", "task"]):
        label = key[row["item_id"]]["llm_label"]
        if rng.random() < disagreement:
            label = other(row["task"], label, rng)
        rows.append(row | {"annotator_1": label, "annotator_2": label, "adjudicated": label})
    write_sheet(sheet, ANNOTATION_COLUMNS, rows)
    return len(rows)


def timed(command: list[str], env: dict) -> tuple[float, float, str]:
    """A command's wall time, the peak memory of the largest child so far (MB), and its stderr's last line."""
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])}…: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return time.monotonic() - start, peak, done.stdout


def main(argv=None) -> int:
    parser = grid_parser(__doc__)
    parser.add_argument("--per-task", type=int, default=2000)
    parser.add_argument("--disagreement", type=float, default=0.1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = write_grid(tmp, args.models, args.runs, args.cases, later=0, skill_step=0.05)
        env = os.environ | {"LEXPILOT_CACHE": str(tmp / "cache")}
        labels = tmp / "labels.csv"
        export = [sys.executable, "judge_agreement.py", "export", "--output-root", str(tmp / "out")]
        export += ["--dataset", str(dataset), "--per-task", str(args.per_task), "--out", str(labels)]
        seconds, _, _ = timed(export, env)
        print(
            f"{args.models} × {args.runs} × {args.cases}: {fill_labels(labels, args.disagreement)} labels "
            f"exported and filled in {seconds:.1f}s"
        )
        report = [
            sys.executable,
            "show_results.py",
            "--output-root",
            str(tmp / "out"),
            "--dataset",
            str(dataset),
        ]
        report += ["--rank", "--power", "--consistency", "--corrected", str(labels), "--format", "csv"]
        for call in ("first", "second"):
            seconds, peak, out = timed(report, env)
            print(
                f"{call} call: {seconds:.1f}s, peak memory so far {peak:.0f} MB, {out.count(chr(10))} lines"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
