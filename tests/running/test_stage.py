"""A stage's run (lexpilot/running/stage.py): its progress line, the calls an earlier process left in flight, a fatal
error that stops the entry point's later stages, and a Ctrl-C while the SDK loads."""

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

import show_results
from lexpilot.benchmark.records import LJP_GOLD
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT
from tests.helpers.runs import run_folder
from tests.helpers.stages import SECRET


def test_calls_in_flight_at_a_kill_are_counted_as_paid_but_never_answered(harness, capsys):
    assert harness.run("gold", "--limit", "2") == 0
    results = harness.file(LJP_GOLD)
    results.write_text(results.read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8")
    # as a process killed with two calls in flight left it
    journal = run_folder(harness) / "calls_journal.jsonl"
    journal.write_text(
        json.dumps({"t": "start", "id": "a", "role": "judge"})
        + "\n"
        + json.dumps({"t": "start", "id": "b", "role": "eval"})
        + "\n"
        + json.dumps({"t": "end", "id": "b"})
        + "\n",
        encoding="utf-8",
    )
    assert harness.run("gold", "--limit", "2") == 0
    err = capsys.readouterr().err
    assert "calls in flight when an earlier process stopped (paid, never answered): judge 1" in err
    assert show_results.main(["--output-root", str(harness.root), "--usage"]) == 0
    assert "(+1 unanswered)" in capsys.readouterr().out
    results.write_text(results.read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8")
    assert harness.run("gold", "--limit", "2") == 0  # counted once, not again
    assert json.loads((run_folder(harness) / "unanswered_calls.json").read_text()) == {"judge": 1}


def test_the_progress_line_counts_calls_answered_before_any_case_is_done(harness, capsys):
    """A stage of long cases shows progress while no case has finished; the summary's elapsed
    time is the progress line's."""
    from lexpilot.running.stage import Progress

    progress = Progress("LJP behaviour", 3)
    progress.update(in_flight=1)
    progress.update(in_flight=-1, answered=1)
    assert progress.line().startswith("[LJP behaviour] 0/3 done, 0 failed, 1 calls answered, 0 in flight")
    assert harness.run("gold", "--limit", "2") == 0
    captured = capsys.readouterr()
    assert "2/2 done, 0 failed, 4 calls answered" in captured.err  # a prediction and its extraction per case
    assert "elapsed" in captured.out.splitlines()[-1] and "wall" not in captured.out


@pytest.mark.slow
def test_eval_ljp_stops_after_a_fatal_error_in_direct(tmp_path, provider):
    """A 401 in Direct stops the whole of eval_LJP.py; Gold and Interaction make no call."""
    provider.script = lambda kind, prompt, body: {"status": 401, "error": "invalid key"}
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LEXPILOT_"))}
    env |= {"OPENAI_BASE_URL": provider.base_url, "OPENAI_API_KEY": SECRET}
    done = subprocess.run(
        [
            sys.executable,
            "eval_LJP.py",
            "--run-id",
            "r1",
            "--model",
            "m",
            "--dataset",
            str(dataset),
            "--output-root",
            str(tmp_path / "out"),
            "--retries",
            "0",
            "--concurrency",
            "1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "[LJP direct] stopped: evaluated model 'm'" in done.stderr and "HTTP 401" in done.stderr
    assert (
        "[LJP gold]" not in done.stderr + done.stdout and "[LJP interaction]" not in done.stderr + done.stdout
    )
    assert len(provider.requests) == 1 and "Traceback" not in done.stderr


CTRL_C_IN_IMPORT = """
import builtins, runpy, sys
real = builtins.__import__
def ctrl_c_in_openai(name, *args, **kwargs):
    if name == "openai":  # the user presses Ctrl-C while the SDK loads (the stage's first second)
        raise KeyboardInterrupt
    return real(name, *args, **kwargs)
builtins.__import__ = ctrl_c_in_openai
sys.argv = ["eval_LJP_gold.py", *sys.argv[1:]]
runpy.run_path("eval_LJP_gold.py", run_name="__main__")
"""


@pytest.mark.slow
def test_ctrl_c_while_the_sdk_loads_is_the_usual_interrupted_line(tmp_path):
    """ "A Ctrl-C during the first second of a stage, inside `import openai`, prints a 45-line
    traceback; it should print the usual "interrupted" line"."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CTRL_C_IN_IMPORT,
            "--run-id",
            "r1",
            "--model",
            "m",
            "--dataset",
            "data/LexPilot_sample.json",
            "--output-root",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 130, done.stderr
    assert err == ["[LJP gold] interrupted: completed cases are saved; rerun the same command to resume."]


def test_a_stages_progress_line_says_the_hold(tmp_path):
    """The progress line of a stage script says, per endpoint held: held for off-peak, N calls waiting, opens in ..."""
    from lexpilot.models.offpeak import Hold, Holds
    from lexpilot.pricing import read_prices
    from lexpilot.running.stage import Progress
    from tests.helpers.clock import price_file, windows_from_now

    entry = {"prompt": 1, "completion": 1, **windows_from_now((-60, 600)), "peak_multiplier": 2}
    windows = read_prices(price_file(tmp_path, {"judge-model": entry}))["judge-model"].windows
    hold = Hold("judge-model", windows)
    hold.waiting = 3
    progress = Progress("DCG", 2)
    progress.holds = Holds({"judge-model": hold})
    assert " | judge-model: held for off-peak, 3 calls waiting, opens in 9 min" in progress.line() or (
        " | judge-model: held for off-peak, 3 calls waiting, opens in 10 min" in progress.line()
    )
    hold.clock = lambda: datetime.now(timezone.utc) + timedelta(minutes=11)  # the window has closed
    assert "held" not in progress.line()
