"""The tests' warm starts (tests/helpers/warm.py) against a fresh `python script.py`: what a forked start prints and
exits with is what a fresh start does, and what a fork cannot honour is refused rather than ignored."""

import os
import signal
import sys
import time

import pytest

from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.paths import ROOT
from tests.helpers.processes import process_environment
from tests.helpers.warm import fresh, run

# forked and fresh interpreters: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--models"],
        ["--models", "m", "--runs", "0"],
        ["--models", "m", "--dataset", "/nowhere.json"],
    ],
)
def test_a_forked_start_says_and_exits_what_a_fresh_one_does(warm, argv):
    command, env = [sys.executable, "run_grid.py", *argv], dict(os.environ)
    forked, started_fresh = run(warm, command, ROOT, env), fresh(command, ROOT, env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        started_fresh.returncode,
        started_fresh.stdout,
        started_fresh.stderr,
    )


def test_a_start_up_variable_a_fork_cannot_honour_is_refused(warm):
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    with pytest.raises(AssertionError, match="start this one fresh"):
        warm.start(
            [sys.executable, "run_grid.py", "--help"], ROOT, dict(os.environ) | {"PYTHONHASHSEED": seed}
        )


def test_a_poll_while_the_process_runs_asks_the_warm_interpreter_nothing(warm, tmp_path, monkeypatch):
    """The kill tests poll every 5 ms: while the process runs a poll reads whether it has ended from the kernel
    (a pidfd), without a word to the warm interpreter; once it has ended, one word gives its exit code."""
    with ScriptedProvider(latency=30) as provider:  # its first call is answered long after the test ends
        command = [sys.executable, "LexAwN_gen.py", "--run-id", "r", "--model", "m", "--limit", "1"]
        command += ["--dataset", "data/LexPilot_sample.json", "--output-root", str(tmp_path / "out")]
        started = warm.start(command, ROOT, process_environment(provider))
        deadline = time.monotonic() + 60
        while (
            not provider.requests and time.monotonic() < deadline
        ):  # until its first call waits for its reply
            time.sleep(0.01)
        assert provider.requests, started.communicate(1)[1]
        asked = []
        ask = warm.ask
        monkeypatch.setattr(warm, "ask", lambda request: asked.append(request) or ask(request))
        assert [started.poll() for _ in range(20)] == [None] * 20 and asked == []
        started.send_signal(signal.SIGKILL)
        assert started.wait(30) == -signal.SIGKILL
        assert [r["do"] for r in asked] == ["poll"]


def test_where_the_kernel_refuses_a_pidfd_every_poll_asks_the_warm_interpreter(warm, monkeypatch):
    """A kernel before 5.3, or a sandbox, refuses pidfd_open: a start still runs, and its polls ask instead."""

    def refused(pid):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refused)
    done = run(warm, [sys.executable, "run_grid.py", "--help"], ROOT, dict(os.environ))
    assert done.returncode == 0 and "usage" in done.stdout


# a script that ends each way a script can: its non-daemon thread and its atexit handler say when they ran, on a
# buffered stdout of its own (whatever PYTHONUNBUFFERED says), which only the process's end flushes
ENDINGS = """import atexit, sys, threading, time
sys.stdout = open(sys.stdout.fileno(), "w", closefd=False)
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread ended"))).start()
ending = sys.argv[1]
if ending == "raises":
    raise RuntimeError("boom")
if ending == "ctrl-c":
    raise KeyboardInterrupt
if ending == "says":
    sys.exit("said and left")
if ending == "closes":
    sys.stdout.close()
if ending.isdigit():
    sys.exit(int(ending))
"""


@pytest.mark.parametrize(
    "ending", ["returns", "0", "3", "1099511627776", "says", "raises", "ctrl-c", "closes"]
)
def test_a_forked_script_ends_as_a_fresh_one_threads_joined_and_atexit_run(warm, tmp_path, ending):
    """A forked start leaves as the interpreter leaves a fresh `python script.py`, with no private hook: its exit
    status (an uncaught Ctrl-C ends it by SIGINT; a status beyond a byte as Python makes it), its last word, and,
    after the script's end, its non-daemon threads joined, then its atexit handlers run, then its output flushed."""
    script = tmp_path / "ends.py"
    script.write_text(ENDINGS, encoding="utf-8")
    command, env = [sys.executable, str(script), ending], dict(os.environ)
    forked = warm.fork(command, tmp_path, env)  # Warm.start takes only the project's scripts
    out, err = forked.communicate(30)
    started_fresh = fresh(command, tmp_path, env)
    assert (forked.returncode, out) == (started_fresh.returncode, started_fresh.stdout)
    assert out == ("" if ending == "closes" else "thread ended\natexit ran\n")
    assert err.splitlines()[-1:] == started_fresh.stderr.splitlines()[-1:]
    assert err.count("Traceback") == started_fresh.stderr.count("Traceback")
    assert err.count("Exception ignored") == started_fresh.stderr.count("Exception ignored")
