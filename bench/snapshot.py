"""What a refactoring must not change: every record and report a tree writes, gathered in one folder to compare.

    python -m bench.snapshot OUT [--tree DIR]

Runs, with DIR's scripts and package (default: this checkout) against one scripted provider on 127.0.0.1:
- every grid stage's own script on the sample, one after another (model-a, run1), synchronous and `--batch`;
- a 3-model × 2-run grid of every stage (`run_grid.py --stages all`), synchronous;
- the same grid with `--batch`.
Then `show_results.py` on each output root. OUT receives every record file, manifest and ledger (timing fields
blanked) and each report, so that `diff -r` of two snapshots is the change in behaviour:

    git worktree add /tmp/before COMMIT
    python -m bench.snapshot /tmp/snap-before --tree /tmp/before
    python -m bench.snapshot /tmp/snap-after
    diff -r /tmp/snap-before /tmp/snap-after
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lexpilot.scripted.provider import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]
STAGE_SCRIPTS = (  # the grid's stages (`--stages all`) in an order that runs each after what it reads
    "LexAwN_gen.py",
    "eval_DCG.py",
    "eval_LJP.py",
    "eval_plain.py",
    "eval_LJP_behaviour.py",
    "audit_simulator.py",
    "eval_focal_types.py",
    "eval_LJP_order.py",
)
PORT = 47615  # one port for every snapshot: the endpoint's host is part of a run's settings digest
# what says when or which invocation, not what was asked and answered: blanked before comparing (by exact name, so
# that no field of a record is ever caught by a prefix)
TIMING = re.compile(r'"(created_at|incarnation)":\s*"[^"]*"')
# the code's identity and where the checkout is: a refactoring changes them by definition (the dataset's sha256 stays)
CODE = ("code_hash", "code_files", "settings_digest", "code_hashes_resumed_with", "dataset_path")
INVOCATION = re.compile(
    r'"[0-9a-f]{12}-([0-9a-f]{32})"'
)  # a batch line's id: the invocation, then the request


def run(argv: list[str], tree: Path, env: dict, out: Path | None = None) -> None:
    done = subprocess.run(
        [sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(f"{' '.join(argv[:3])} failed ({done.returncode}): {done.stderr[-800:]}")
    if out is not None:
        out.write_text(done.stdout, encoding="utf-8")


def ledger_requests(text: str) -> str:
    """A batch ledger as what it asked for: the requests of all its batches, sorted, and its counts."""
    ledger = json.loads(text)
    requests = sorted(
        json.dumps(r, ensure_ascii=False, sort_keys=True)
        for b in ledger.pop("batches")
        for r in b["requests"].values()
    )
    return json.dumps(ledger | {"requests": requests}, ensure_ascii=False, indent=1, sort_keys=True)


def without_code(text: str) -> str:
    """A manifest without the code's identity, which any change to the code changes (the settings digest too)."""
    manifest = json.loads(text)
    for name in CODE:
        if name in manifest:
            manifest[name] = "-"
    return json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True)


def gather(root: Path, into: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".jsonl", ".json", ".csv"):
            target = into / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = INVOCATION.sub(r'"-\1"', TIMING.sub(r'"\1": "-"', path.read_text(encoding="utf-8")))
            if path.name == "batches.json":  # which batch a request went in depends on when its cell asked
                text = ledger_requests(text)
            if path.name == "manifest.json":
                text = without_code(text)
            if path.suffix == ".jsonl":  # cases finish in any order
                text = "".join(sorted(text.splitlines(keepends=True)))
            target.write_text(text, encoding="utf-8")


def snapshot(tree: Path, out: Path, port: int = PORT) -> None:
    dataset = str(tree / "data" / "LexPilot_sample.json")
    work = Path(tempfile.mkdtemp())
    provider = ScriptedProvider()
    provider.port = port
    with provider:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LEXPILOT_"))}
        env |= {"OPENAI_API_KEY": "snapshot", "OPENAI_BASE_URL": provider.base_url, "PYTHONPATH": str(tree)}
        common = ["--dataset", dataset]
        for script in STAGE_SCRIPTS:
            for root, mode in ((work / "scripts", []), (work / "scripts-batch", ["--batch"])):
                argv = [script, "--run-id", "run1", "--model", "model-a", *common, "--output-root", str(root)]
                run([*argv, *mode], tree, env)
        grid = ["run_grid.py", "--models", "model-a", "model-b", "model-c", "--runs", "2", "--stages", "all"]
        run([*grid, *common, "--output-root", str(work / "grid")], tree, env)
        run([*grid, *common, "--output-root", str(work / "batch"), "--batch"], tree, env)
        for name in ("scripts", "scripts-batch", "grid", "batch"):
            gather(work / name, out / name)
            report = ["show_results.py", "--output-root", str(work / name), *common]
            run(report, tree, env, out / f"{name}-report.txt")
    shutil.rmtree(work)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="the checkout whose scripts run (default: this)"
    )
    parser.add_argument(
        "--port", type=int, default=PORT, help="the scripted provider's: one port for snapshots compared"
    )
    args = parser.parse_args(argv)
    if args.out.exists():
        sys.exit(f"{args.out} exists: give a new folder")
    snapshot(args.tree.resolve(), args.out, args.port)
    print(f"{sum(1 for p in args.out.rglob('*') if p.is_file())} files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
