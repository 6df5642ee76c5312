"""The grid benchmark (issue 38): run_grid.py against the README's loop and docs/grid.md's GNU-parallel recipe, side
by side, on scripted providers on 127.0.0.1: each evaluated model on its own endpoint at --latency, the User Model
and the judge each limited to --rate requests/s (a 429 with Retry-After beyond it, as the provider counts).

    python -m bench.grid [--models 3] [--runs 2] [--cases 12] [--latency 0.3] [--rate 20] [--jobs 6]
    python -m bench.grid --scale --models 10 --runs 5 --cases 432 --limit 20 --latency 0
    python -m bench.grid --workers 3 [--cases 24]

`--workers N` runs run_grid.py in one process against N workers (`--workers redis://…`, a redis-server of its own
on 127.0.0.1) on the same grid and limits, and prints the workers' wall time ÷ one process's.

For each way it prints the wall time, the grid's bound (the larger of the busiest endpoint's calls ÷ its limit and
the longest chain of dependent calls × latency), wall ÷ bound, how busy each shared endpoint was while it had work
(its answered calls ÷ (limit × the time from its first request to its last)), and the share of requests answered
429. `--scale` runs only run_grid.py, at zero latency and no limit, and prints its client CPU per call and peak
memory (the grid process alone; the providers run in this one). Writes only to a temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.throughput import synthetic_dataset
from lexpilot.protocols.catalog import PAPER_GRID
from lexpilot.scripted.provider import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]
USER, JUDGE = "DeepSeek-V4.1-Flash", "DeepSeek-R1"
LOOP_SCRIPTS = [f"{name}.py" for name in PAPER_GRID]


def base_env(user: ScriptedProvider, judge: ScriptedProvider) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LEXPILOT_"))}
    return env | {
        "OPENAI_API_KEY": "bench",
        "LEXPILOT_USER_BASE_URL": user.base_url,
        "LEXPILOT_JUDGE_BASE_URL": judge.base_url,
    }


def run(argv: list[str], env: dict, lines: list | None = None) -> tuple[float, float, int]:
    """(CPU seconds, peak RSS in MB, exit status) of one process; its stderr lines added to `lines`."""
    # its messages go to a file, not a pipe: a pipe nobody reads until the end fills at 64 KB (a 10 × 5 × 432 grid's
    # closing lines are more) and stops the grid at its next line
    with tempfile.TemporaryFile() as said:
        process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=said)
        _, status, usage = os.wait4(process.pid, 0)
        said.seek(0)
        error = said.read().decode("utf-8", "replace")
    if lines is not None:
        lines += error.splitlines()
    code = os.waitstatus_to_exitcode(status)
    if code:
        sys.exit(f"{' '.join(argv[1:3])} failed ({code}): {error[-600:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, code


def stage_options(dataset: Path, root: Path, limit: int | None) -> list[str]:
    return ["--dataset", str(dataset), "--output-root", str(root)] + (
        ["--limit", str(limit)] if limit else []
    )


def grid_argv(models, runs, evaluated, dataset, root, args) -> list[str]:
    """run_grid.py's command for the grid: each evaluated model on its own endpoint, the User Model and the judge
    at --rate (none with --scale)."""
    grid_file = root.parent / f"{root.name}.toml"
    grid_file.write_text(
        "".join(f'[models."{m}"]\nbase_url = "{p.base_url}"\n\n' for m, p in zip(models, evaluated)),
        encoding="utf-8",
    )
    limits = (
        []
        if args.scale
        else ["--limit", f"{USER}=rpm:{args.rate * 60}", "--limit", f"{JUDGE}=rpm:{args.rate * 60}"]
    )
    return [
        sys.executable,
        "run_grid.py",
        "--grid",
        str(grid_file),
        "--runs",
        str(runs),
        *limits,
        "--concurrency",
        str(args.concurrency),
        *stage_options(dataset, root, args.limit),
    ]


def the_grid(models, runs, evaluated, env, dataset, root, args) -> dict:
    lines: list[str] = []
    cpu, memory, _ = run(grid_argv(models, runs, evaluated, dataset, root, args), env, lines)
    # the summary's "[grid] MODEL at HOST: N calls; P% of its rpm limit used while calls waited for it"
    waited = {
        m: re.search(rf"\[grid\] {m} at \S+ \d+ calls; (\d+)% of its rpm", "\n".join(lines))
        for m in (USER, JUDGE)
    }
    return {
        "cpu": cpu,
        "memory": memory,
        "waited": {m: int(w.group(1)) if w else None for m, w in waited.items()},
    }


def workers(n: int):
    """n processes started together, each `run_grid.py --workers redis://…` on one redis-server of the bench's own."""

    def way(models, runs, evaluated, env, dataset, root, args) -> dict:
        argv = grid_argv(models, runs, evaluated, dataset, root, args)
        with redis_server(root.parent) as url, ThreadPoolExecutor(n) as pool:
            for done in [pool.submit(run, [*argv, "--workers", url], env) for _ in range(n)]:
                done.result()
        return {}

    return way


@contextlib.contextmanager
def redis_server(folder: Path):
    """A redis-server on a free port of 127.0.0.1, nothing saved to disk; its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    try:
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).returncode:
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


def one_job(model, run_id, provider, env, dataset, root, args) -> None:
    """The README's loop for one (model, run): its three scripts one after another."""
    job_env = env | {"LEXPILOT_EVAL_BASE_URL": provider.base_url}
    for script in LOOP_SCRIPTS:
        run(
            [
                sys.executable,
                script,
                "--run-id",
                run_id,
                "--model",
                model,
                "--concurrency",
                str(args.concurrency),
                *stage_options(dataset, root, args.limit),
            ],
            job_env,
        )


def jobs_at_once(at_once: int):
    def way(models, runs, evaluated, env, dataset, root, args) -> dict:
        jobs = [(m, f"run{r}", p) for r in range(1, runs + 1) for m, p in zip(models, evaluated)]
        with ThreadPoolExecutor(at_once) as pool:
            for done in [pool.submit(one_job, m, r, p, env, dataset, root, args) for m, r, p in jobs]:
                done.result()
        return {}

    return way


def measure(name: str, way, args, dataset: Path, folder: Path) -> dict:
    models = [f"bench-model-{i + 1}" for i in range(args.models)]
    latency = 0.0 if args.scale else args.latency
    evaluated = [ScriptedProvider(latency=latency) for _ in models]
    rate = None if args.scale else args.rate
    user, judge = (
        ScriptedProvider(latency=latency, rate_limit=rate),
        ScriptedProvider(latency=latency, rate_limit=rate),
    )
    for provider in (*evaluated, user, judge):
        provider.base_url = provider.start()
    try:
        start = time.monotonic()
        figures = way(models, args.runs, evaluated, base_env(user, judge), dataset, folder / name, args)
        wall = time.monotonic() - start
    finally:
        for provider in (*evaluated, user, judge):
            provider.stop()
    answered = {"user": user.statuses[200], "judge": judge.statuses[200]}
    refused = user.statuses[429] + judge.statuses[429]
    requests = sum(len(p.arrivals) for p in (*evaluated, user, judge))
    busy = {
        role: p.statuses[200] / (args.rate * (max(p.arrivals) - min(p.arrivals)))
        if rate and p.arrivals
        else None
        for role, p in (("user", user), ("judge", judge))
    }
    calls = sum(p.statuses[200] for p in (*evaluated, user, judge))
    return figures | {
        "way": name,
        "wall": wall,
        "calls": calls,
        "answered": answered,
        "refused": refused,
        "requests": requests,
        "busy": busy,
    }


def chain_bound(args, dataset: Path) -> float:
    """The longest chain of dependent calls × latency: a (model, run)'s stages one after another, each its
    longest chain of calls for one case (the quote's count)."""
    from lexpilot.benchmark.dataset import load_selection
    from lexpilot.protocols.catalog import stages_named
    from lexpilot.running.grid.quote import quote_grid, stage_settings

    stages = stages_named(["paper"])
    settings_of = stage_settings(stages, stage_options(dataset, Path(tempfile.mkdtemp()), args.limit))
    parts = quote_grid(stages, settings_of, ["m"], ["run1"], *load_selection(dataset, args.limit))
    return sum(p.chain for p in parts) * args.latency


def print_table(results: list[dict], args, dataset: Path) -> None:
    """The ways side by side against the bound the endpoints' limits and the longest chain set."""
    bound_calls = max(results[0]["answered"].values()) / args.rate
    bound = max(bound_calls, chain_bound(args, dataset))
    print(
        f"{args.models} models × {args.runs} runs × {args.limit or args.cases} cases, paper stages; evaluated models "
        f"at {args.latency:g} s; User Model and judge limited to {args.rate:g} requests/s"
    )
    print(
        f"bound: {bound:.1f} s (busiest endpoint {bound_calls:.1f} s; longest chain {chain_bound(args, dataset):.1f} s)"
    )
    print(
        "| way | wall s | wall ÷ bound | User Model busy | judge busy | busy while calls waited (User Model, judge) "
        "| answered 429 |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        busy = [f"{100 * b:.0f}%" if b is not None else "–" for b in r["busy"].values()]
        waited = ", ".join(f"{w}%" if w is not None else "–" for w in r.get("waited", {}).values()) or "–"
        print(
            f"| {r['way']} | {r['wall']:.1f} | {r['wall'] / bound:.2f} | {busy[0]} | {busy[1]} | {waited} | "
            f"{r['refused']} of {r['requests']} ({100 * r['refused'] / r['requests']:.1f}%) |"
        )
    if args.workers:
        print(
            f"{args.workers} workers ÷ one process: {results[1]['wall'] / results[0]['wall']:.2f} × the wall time"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cases", type=int, default=12, help="cases in the synthetic dataset")
    parser.add_argument("--limit", type=int, default=None, help="the stages' --limit (the first N cases)")
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument(
        "--rate", type=float, default=20.0, help="the User Model's and the judge's requests/s"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=6, help="the GNU-parallel recipe's -j")
    parser.add_argument("--scale", action="store_true", help="run_grid.py alone: CPU per call and memory")
    parser.add_argument(
        "--workers", type=int, default=0, help="one process against N workers through one Redis"
    )
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="lexpilot-grid-bench-"))
    dataset = folder / "dataset.json"
    synthetic_dataset(args.cases, dataset)
    ways = (
        {"run_grid.py": the_grid}
        if args.scale
        else {"run_grid.py": the_grid, f"{args.workers} workers (--workers)": workers(args.workers)}
        if args.workers
        else {
            "run_grid.py": the_grid,
            f"parallel -j {args.jobs}": jobs_at_once(args.jobs),
            "README loop": jobs_at_once(1),
        }
    )
    results = [measure(name, way, args, dataset, folder) for name, way in ways.items()]
    if args.scale:
        r = results[0]
        print(
            f"run_grid.py, {args.models} models × {args.runs} runs × {args.limit or args.cases} cases, zero latency: "
            f"{r['calls']} calls in {r['wall']:.1f} s, client CPU {1000 * r['cpu'] / r['calls']:.2f} ms per call, "
            f"peak memory {r['memory']:.0f} MB"
        )
        return 0
    print_table(results, args, dataset)
    print(json.dumps(results, default=str), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
