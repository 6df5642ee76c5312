"""Throughput benchmark: the real entry points against a simulated provider on 127.0.0.1.

    python -m bench.throughput [--cases 432] [--concurrency 8] [--latency 0.3] [--jitter 0] [--rate-limit R]

Builds a synthetic dataset by cloning the sample cases under new case numbers, starts a local
OpenAI-compatible server that plays the three roles and answers after --latency seconds, runs
LexAwN_gen.py, eval_DCG.py, eval_LJP.py and show_results.py as a user would for one fresh run id,
then reruns every stage of the finished run. For each stage it prints calls per role, wall time,
ideal time, efficiency = ideal / wall, client CPU per call and peak memory of the stage process.
Needs no credentials; writes only to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import eval_DCG
import eval_LJP
import LexAwN_gen
from lexpilot.scripted.kinds import kind_of
from lexpilot.scripted.provider import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]

ROLE_OF_KIND = {"lexawn": "eval", "force_ask": "eval", "force_judge": "eval", "user": "user"}
# Script -> the stages it runs one after the other, as each entry point declares them.
STAGES = {
    "LexAwN_gen.py": [LexAwN_gen.STAGE],
    "eval_DCG.py": [eval_DCG.STAGE],
    "eval_LJP.py": list(eval_LJP.STAGES),
}


def synthetic_dataset(n: int, path: Path) -> None:
    sample = json.loads((ROOT / "data" / "LexPilot_sample.json").read_text(encoding="utf-8"))
    cases = []
    for i in range(n):
        case = json.loads(json.dumps(sample[i % len(sample)]))
        case["case_number"] = f"（2099）基准民初{i + 1}号"
        # Vary the first message so that the simulated model's behaviour varies across clones too.
        case["underspecified_consultation"][0]["content"] += f"（编号{i + 1}）"
        case["complete_consultation"][0]["content"] += f"（编号{i + 1}）"
        cases.append(case)
    path.write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")


def run_process(argv: list[str], env: dict, stdout: list | None = None) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in MB, exit status) of one stage process."""
    start = time.monotonic()
    process = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode("utf-8", "replace")
    if stdout is not None:
        stdout.append(process.stdout.read().decode("utf-8", "replace"))
        process.stdout.close()
    process.stderr.close()
    if process.returncode != 0:
        print(f"{argv[1]} exited {process.returncode}:\n{error[-2000:]}", file=sys.stderr)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode


def ideal_seconds(out: Path, stages: list, latency: float, concurrency: int) -> float:
    """Σ over the stages of max(longest per-case chain × latency, calls × latency / C)."""
    total = 0.0
    for stage in stages:
        chain: Counter = Counter()
        for step in stage.steps:
            for path in out.glob(f"{step.kind.top}/*/*/{step.kind.file}"):
                for line in path.read_text(encoding="utf-8").splitlines():
                    record = json.loads(line)
                    chain[record["case_number"]] += sum(e["calls"] for e in record["usage"].values())
        calls = sum(chain.values())
        total += max(max(chain.values(), default=0) * latency, calls * latency / concurrency)
    return total


def _parser() -> argparse.ArgumentParser:
    """The benchmark's flags (the module's docstring shows them)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=432)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per simulated call")
    parser.add_argument("--jitter", type=float, default=0.0, help="up to this many extra seconds per call")
    parser.add_argument(
        "--rate-limit", type=float, help="requests per second the server accepts (429 beyond)"
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="run every stage with --batch against the scripted "
        "batch API instead: cycles, harness CPU per request, peak memory, wall against cycles x delay",
    )
    parser.add_argument(
        "--batch-delay", type=float, default=1.0, help="seconds a scripted batch takes (default 1)"
    )
    return parser


def _stage_row(script: str, stages: list, provider, common: list[str], env: dict, out: Path, args) -> int:
    """Runs one entry point on the fresh run and prints its row: calls per role, wall and ideal time,
    efficiency, CPU per call, peak memory, 429s, calls per second; returns its exit status."""
    before, before_429 = len(provider.requests), provider.statuses[429]
    wall, cpu, rss, code = run_process([sys.executable, script, *common], env)
    kinds = Counter(
        ROLE_OF_KIND.get(kind_of(r["messages"][0]["content"]), "judge") for r in provider.requests[before:]
    )
    calls = sum(kinds.values())
    ideal = ideal_seconds(out, stages, args.latency, args.concurrency)
    print(
        f"{script:<16}{kinds['eval']:>7}{kinds['user']:>7}{kinds['judge']:>7}{wall:>9.2f}{ideal:>9.2f}"
        f"{(ideal / wall if ideal else 0):>7.2f}{1000 * cpu / max(calls, 1):>12.2f}{rss:>9.0f}"
        f"{provider.statuses[429] - before_429:>6}{calls / wall:>9.1f}"
    )
    return code


def bench_dataset_and_env(tmp: Path, cases: int, base_url: str) -> tuple[Path, dict]:
    """A synthetic dataset of `cases` cases under `tmp`, and the environment that points the stages at the
    scripted provider."""
    dataset = tmp / "bench.json"
    synthetic_dataset(cases, dataset)
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "bench",
        "LEXPILOT_MODEL": "bench-model",
    }
    return dataset, env


def main(argv=None) -> int:
    args = _parser().parse_args(argv)

    if args.batch:
        return batch_benchmark(args)
    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedProvider(latency=args.latency, jitter=args.jitter, rate_limit=args.rate_limit) as provider,
    ):
        tmp = Path(tmp)
        dataset, env = bench_dataset_and_env(tmp, args.cases, provider.base_url)
        common = [
            "--run-id",
            "bench",
            "--dataset",
            str(dataset),
            "--output-root",
            str(tmp / "out"),
            "--concurrency",
            str(args.concurrency),
        ]
        print(
            f"{args.cases} cases, concurrency {args.concurrency}, latency {args.latency}s"
            + (f" + up to {args.jitter}s" if args.jitter else "")
            + (f", rate limit {args.rate_limit}/s" if args.rate_limit else "")
        )
        header = (
            f"{'stage':<16}{'eval':>7}{'user':>7}{'judge':>7}{'wall s':>9}{'ideal s':>9}{'eff.':>7}"
            f"{'CPU ms/call':>12}{'peak MB':>9}{'429s':>6}{'calls/s':>9}"
        )
        print(header)
        status = 0
        for script, stages in STAGES.items():
            code = _stage_row(script, stages, provider, common, env, tmp / "out", args)
            status = status or code
        wall, cpu, rss, code = run_process(
            [sys.executable, "show_results.py", "--output-root", str(tmp / "out")], env
        )
        status = status or code
        print(f"{'show_results.py':<16}{'':>21}{wall:>9.2f}{'':>16}{'':>12}{rss:>9.0f}")
        before = len(provider.requests)
        rerun = sum(run_process([sys.executable, script, *common], env)[0] for script in STAGES)
        print(
            f"rerun of every stage of the finished run: {rerun:.2f}s, {len(provider.requests) - before} calls"
        )
    return status


def batch_benchmark(args) -> int:
    """Every stage in batch mode against the scripted batch API: cycles (LexAwN_gen needs no more than its
    longest per-case call chain), harness CPU per request, peak memory, wall against cycles x delay."""
    import re

    with tempfile.TemporaryDirectory() as tmp, ScriptedProvider() as provider:
        provider.batch_delay = args.batch_delay
        tmp = Path(tmp)
        dataset, env = bench_dataset_and_env(tmp, args.cases, provider.base_url)
        common = [
            "--run-id",
            "bench",
            "--dataset",
            str(dataset),
            "--output-root",
            str(tmp / "out"),
            "--batch",
            "--batch-poll",
            str(max(0.01, min(0.2, args.batch_delay / 4))),
        ]
        print(f"{args.cases} cases, batch mode, a batch takes {args.batch_delay}s")
        print(
            f"{'stage':<16}{'requests':>10}{'cycles':>8}{'wall s':>9}{'bound s':>9}{'CPU ms/req':>12}{'peak MB':>9}"
        )
        status = 0
        for script in STAGES:
            before = sum(provider.submitted.values())
            out: list = []
            wall, cpu, rss, code = run_process([sys.executable, script, *common], env, out)
            status = status or code
            cycles = sum(int(n) for n in re.findall(r"(\d+) cycles", out[0]))
            requests = sum(provider.submitted.values()) - before
            print(
                f"{script:<16}{requests:>10}{cycles:>8}{wall:>9.2f}{cycles * args.batch_delay:>9.2f}"
                f"{1000 * cpu / max(requests, 1):>12.2f}{rss:>9.0f}"
            )
    return status


if __name__ == "__main__":
    sys.exit(main())
