"""Which calls can hit a provider's prefix cache: the paper's stages run on the sample for two runs of one model
against the tests' scripted provider playing a prefix cache (OpenAI's rule by default: prompts of 1,024 tokens or
more, hits in steps of 128 tokens), then the share of prompt tokens it reported cached, per stage file and role,
and per run.

    python -m bench.caching [--runs 2] [--minimum 1024] [--step 128] [--limit N]

The scripted provider counts a token a character (about right for Chinese) and never evicts: the figures are what
the prompts allow at best, not what a provider will serve. Needs no credentials; writes only to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from lexpilot.protocols.catalog import PAPER_GRID
from lexpilot.running.stage import stage_main
from lexpilot.scripted.provider import ScriptedProvider
from lexpilot.scripted.replies import PrefixCache, default_reply

ROOT = Path(__file__).resolve().parents[1]


# the evaluated model's and the User Model's replies
GENERATED = ("lexawn", "force_ask", "force_judge", "user")


def run_grid(root: Path, provider: ScriptedProvider, runs: int, limit: int | None) -> None:
    """Every paper stage for runs run1..runN; the evaluated model and the User Model word their replies apart in
    each run (sampled at temperature 0.7, they would), so a later run's prompts repeat only what the case fixes."""
    # never sent anywhere: the clients are in memory
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-key")
    common = [
        "--model",
        "bench-model",
        "--dataset",
        str(ROOT / "data" / "LexPilot_sample.json"),
        "--output-root",
        str(root),
        *(["--limit", str(limit)] if limit else []),
    ]
    for i in range(1, runs + 1):
        provider.script = lambda kind, prompt, body, i=i: (
            f"{default_reply(kind, prompt)}（第{i}次）" if kind in GENERATED else None
        )
        for stages in PAPER_GRID.values():
            for stage in stages:
                status = stage_main(
                    stage,
                    "bench",
                    argv=["--run-id", f"run{i}", *common],
                    clients=provider.in_memory_clients(),
                )
                if status:
                    sys.exit(f"bench.caching: {stage.name} failed (status {status})")


def cached_shares(root: Path) -> dict[tuple[str, str, str], Counter]:
    """(run, stage file, role) -> prompt and cached prompt tokens, from the saved records."""
    shares: dict = {}
    for path in sorted(root.glob("*/run*/*/*.jsonl")):
        if path.parent.parent.parent.name == "runs":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            for role, used in json.loads(line)["usage"].items():
                entry = shares.setdefault((path.parent.parent.name, path.name, role), Counter())
                entry["prompt"] += used["prompt_tokens"]
                entry["cached"] += used.get("cached_prompt_tokens", 0)
    return shares


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--minimum", type=int, default=1024, help="the fewest prompt tokens a provider caches"
    )
    parser.add_argument(
        "--step", type=int, default=128, help="cache hits counted in steps of this many tokens"
    )
    parser.add_argument("--limit", type=int, help="the first N cases of the sample")
    args = parser.parse_args(argv)
    with ScriptedProvider() as provider, tempfile.TemporaryDirectory() as tmp:
        provider.cache = PrefixCache(args.minimum, args.step)
        with open(os.devnull, "w") as quiet, redirect_stdout(quiet), redirect_stderr(quiet):
            run_grid(Path(tmp), provider, args.runs, args.limit)  # the stages' own lines are not the result
        shares = cached_shares(Path(tmp))
    print(f"{'run':6} {'stage file':24} {'role':6} {'prompt tokens':>14} {'cached':>10} {'share':>6}")
    for (run, name, role), used in sorted(shares.items()):
        print(
            f"{run:6} {name:24} {role:6} {used['prompt']:>14,} {used['cached']:>10,} "
            f"{used['cached'] / max(used['prompt'], 1):>6.0%}"
        )
    total = sum(shares.values(), Counter())
    print(
        f"all: {total['cached']:,} of {total['prompt']:,} prompt tokens cached ({total['cached'] / max(total['prompt'], 1):.0%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
