"""Coverage of the judge-corrected metrics on runs the stage scripts write against the scripted provider playing
models of set abilities and a judge of set confusion (data/abilities_example.toml), replicated: each replicate draws
a new grid (the abilities file's seed changed), exports the expert sample (`judge_agreement.py export --per-task`),
fills it with the scripted truth (bench/scripted_experts.py) and reads `show_results.py --corrected`'s table. The
truth is what the abilities make expected (lexpilot/scripted/expected.py). Prints, per metric, the corrected and raw
estimates' mean error and how often each 95% interval holds the truth. Issue 58: corrected at least 93%, raw under
50% (bench/corrected.py and bench/corrected_confusion.py run the same at the paper's design, simulated directly).

    python -m bench.corrected_scripted [--replicates 20] [--cases 100] [--runs 2] [--per-task 800]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import judge_agreement
import show_results
from bench import scripted_experts
from bench.throughput import synthetic_dataset
from lexpilot.benchmark.dataset import load_dataset
from lexpilot.protocols.catalog import BY_HAND, ENTRY_POINTS
from lexpilot.running.stage import stage_main
from lexpilot.scripted.abilities import parse_abilities
from lexpilot.scripted.expected import expected_metrics
from lexpilot.scripted.playing import playing
from lexpilot.scripted.provider import ScriptedProvider

ROOT = Path(__file__).resolve().parent.parent
STAGES = {s.name: s for entry, stages in ENTRY_POINTS.items() if entry not in BY_HAND for s in stages}
PLAYED = ("LexAwN", "DCG", "LJP direct")
METRICS = {
    "LCA Macro-F1": ("LCA", "macro_f1"),
    "LCA Acc_C": ("LCA", "acc_c"),
    "LCA Acc_U": ("LCA", "acc_u"),
    "DCG Acc.": ("DCG", "accuracy"),
    "LJP Direct QWK": ("LJP_direct", "qwk"),
}


def replicate(folder: Path, text: str, args) -> list[list[str]]:
    """One grid written, labelled and reported: the corrected table's mean-over-runs rows."""
    dataset = folder / "cases.json"
    synthetic_dataset(args.cases, dataset)
    cases, _ = load_dataset(dataset)
    abilities = parse_abilities(text, "abilities.toml")
    runs = [f"run{i + 1}" for i in range(args.runs)]
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with ScriptedProvider() as provider, quiet[0], quiet[1]:
        provider.script = playing(provider, abilities, cases)
        for model in abilities.models:
            for run in runs:
                for stage in PLAYED:
                    argv = ["--run-id", run, "--model", model, "--dataset", str(dataset)]
                    argv += ["--output-root", str(folder / "out")]
                    assert stage_main(STAGES[stage], "bench", argv, provider.in_memory_clients(run)) == 0
        labels = folder / "labels.csv"
        export = ["export", "--output-root", str(folder / "out"), "--per-task", str(args.per_task)]
        assert judge_agreement.main([*export, "--out", str(labels)]) == 0
        assert scripted_experts.main([str(labels)]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        report = ["--output-root", str(folder / "out"), "--corrected", str(labels), "--format", "csv"]
        assert show_results.main([*report, "--table", "corrected"]) == 0
    truth = expected_metrics(abilities, cases)
    rows = [
        r[1:] for r in csv.reader(io.StringIO(out.getvalue())) if r and r[0].startswith("Judge-corrected")
    ]
    return [r + [str(truth[r[1]][METRICS[r[0]]])] for r in rows if r[2].startswith("mean of")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--per-task", type=int, default=800)
    args = parser.parse_args(argv)
    base = (ROOT / "data" / "abilities_example.toml").read_text(encoding="utf-8")
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    tally: dict[tuple, list] = defaultdict(list)
    start = time.monotonic()
    for i in range(args.replicates):
        text = base.replace("seed = 0", f"seed = {i + 1}", 1)
        with tempfile.TemporaryDirectory() as tmp:
            for metric, model, _, raw, raw_low, raw_high, value, low, high, _, truth in replicate(
                Path(tmp), text, args
            ):
                t = float(truth)
                tally[(metric, model)].append(
                    (
                        float(raw) - t,
                        float(raw_low) <= t <= float(raw_high),
                        float(value) - t,
                        float(low) <= t <= float(high),
                    )
                )
    print(
        f"{args.replicates} replicates of 2 models × {args.runs} runs × {args.cases} cases, --per-task "
        f"{args.per_task}, in {time.monotonic() - start:.0f}s"
    )
    print(
        f"{'metric':<16}{'model':<10}{'raw error':>10}{'raw cover':>10}{'corr. error':>12}{'corr. cover':>12}"
    )
    for (metric, model), values in sorted(tally.items()):
        mean = lambda k: sum(v[k] for v in values) / len(values)  # noqa: E731
        print(
            f"{metric:<16}{model:<10}{mean(0):>+10.3f}{100 * mean(1):>9.0f}%{mean(2):>+12.3f}{100 * mean(3):>11.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
