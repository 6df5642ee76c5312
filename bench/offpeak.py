"""What holding a role for off-peak costs while it waits: `eval_DCG.py --off-peak judge` run as a process against
the tests' scripted provider, the judge's peak window open for `--seconds` more once the other roles' calls are
made; the process's CPU time over the hold (read from /proc, Linux) against the hold's length. A held call sleeps
until its window closes (models/offpeak.py), so the figure is about nothing; a poll would show as a share of a core.

    python -m bench.offpeak [--seconds 10] [--cases 8]

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
from datetime import datetime, timedelta, timezone
from pathlib import Path

from lexpilot.benchmark.dataset import load_dataset
from lexpilot.scripted.kinds import request_kind
from lexpilot.scripted.provider import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "LexPilot_sample.json"
JUDGE = "DeepSeek-R1"


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time so far (Linux: /proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def judge_window(seconds: float) -> dict:
    """The judge's price entry with a peak window open now and for `seconds` more, in a fixed-offset zone whose
    local time is near noon (a window of minutes never crosses midnight there)."""
    now = datetime.now(timezone.utc)
    offset = 12 - now.hour
    local = now + timedelta(hours=offset)
    zone = "Etc/GMT" if offset == 0 else f"Etc/GMT{-offset:+d}"
    span = [(local + timedelta(seconds=s)).strftime("%H:%M:%S") for s in (-60, seconds)]
    return {"prompt": 2, "completion": 8, "tz": zone, "peak": ["-".join(span)], "peak_multiplier": 2}


def write_inputs(folder: Path, cases: int, seconds: float) -> tuple[Path, Path]:
    data = json.loads(SAMPLE.read_text(encoding="utf-8"))
    dataset = folder / "cases.json"
    dataset.write_text(json.dumps(data[:cases], ensure_ascii=False), encoding="utf-8")
    flat = {"prompt": 1, "completion": 4}
    prices = folder / "prices.json"
    entries = {JUDGE: judge_window(seconds), "DeepSeek-V4.1-Flash": flat, "bench-model": flat}
    prices.write_text(json.dumps(entries), encoding="utf-8")
    return dataset, prices


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the hold lasts (default 10)")
    parser.add_argument(
        "--cases", type=int, default=8, help="sample cases, each a judge call held (default 8)"
    )
    args = parser.parse_args(argv)
    if not Path("/proc/self/stat").exists():
        print("bench.offpeak reads a process's CPU time from /proc: Linux only", file=sys.stderr)
        return 2
    cases = min(args.cases, len(load_dataset(SAMPLE)[0]))
    with tempfile.TemporaryDirectory() as tmp, ScriptedProvider() as provider:
        # the other roles' calls are made within a few seconds; the hold is measured from then on
        dataset, prices = write_inputs(Path(tmp), cases, args.seconds + 5)
        env = os.environ | {"OPENAI_BASE_URL": provider.base_url, "OPENAI_API_KEY": "sk-bench-not-a-key"}
        command = [sys.executable, "eval_DCG.py", "--run-id", "bench", "--model", "bench-model"]
        command += ["--dataset", str(dataset), "--output-root", str(Path(tmp) / "out")]
        command += ["--prices", str(prices), "--off-peak", "judge"]
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        held = measure(provider, process.pid, cases)
        _, err = process.communicate(timeout=args.seconds + 120)
    if process.returncode != 0 or held is None:
        print(f"the stage did not hold and complete as expected: {err.decode()[-400:]}", file=sys.stderr)
        return 1
    wall, cpu = held
    print(
        f"held {cases} judge calls for {wall:.1f} s: the process used {cpu * 1000:.0f} ms of CPU meanwhile "
        f"({cpu / wall:.2%} of one core)"
    )
    return 0


def measure(provider: ScriptedProvider, pid: int, cases: int) -> tuple[float, float] | None:
    """(seconds held, CPU seconds the process used meanwhile): from the moment every case's questions and replies
    are made (two questions and a reply a case) until the first judge call arrives; None if no hold was seen."""

    def judged() -> bool:
        with provider.lock:
            return any(request_kind(body) == "dcg_judge" for body in provider.requests)

    deadline = time.monotonic() + 120
    while len(provider.requests) < 3 * cases and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # the last replies saved, the cases asleep in the hold
    if judged():
        return None
    start, cpu = time.monotonic(), cpu_seconds(pid)
    last = (start, cpu)
    while not judged() and time.monotonic() < deadline:
        last = (time.monotonic(), cpu_seconds(pid))  # the last look before the hold ended
        time.sleep(0.05)
    return last[0] - start, last[1] - cpu


if __name__ == "__main__":
    sys.exit(main())
