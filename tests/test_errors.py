"""What a user meets when something goes wrong (lexpilot/errors.py) is one line and a status, never a traceback: a
Ctrl-C at any moment of an entry point included."""

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.processes import as_at_a_terminal

CTRL_C_AT = """
import builtins, importlib, os, runpy, signal, sys
real, script, where = builtins.__import__, sys.argv[1], sys.argv[2]
def ctrl_c():  # the user presses Ctrl-C: a real SIGINT
    os.kill(os.getpid(), signal.SIGINT)
def ctrl_c_at(name, *args, **kwargs):
    if name == where:  # while this module is imported
        ctrl_c()
    return real(name, *args, **kwargs)
builtins.__import__ = ctrl_c_at
if ":" in where:  # while this function runs
    module, function = where.split(":")
    module = importlib.import_module(module)
    setattr(module, function, lambda *args, **kwargs: ctrl_c())
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize(
    "script, module, said",
    [
        # inside the script's own `from common import stage_main`, before the stage's handling exists
        (
            "eval_LJP_gold.py",
            "lexpilot.models.calls",
            "[eval_LJP_gold] interrupted while starting: nothing was done",
        ),
        (
            "show_results.py",
            "lexpilot.reporting.tables.complexity",
            "[show_results] interrupted while starting: nothing was done",
        ),
        # while the report reads the runs
        (
            "show_results.py",
            "lexpilot.reporting.scoring.results:load_runs",
            "[show_results] interrupted: any file written so far is whole; rerun the same command.",
        ),
    ],
)
def test_ctrl_c_at_any_moment_of_an_entry_point_is_one_line(tmp_path, script, module, said):
    """The guide: "Every error a user can meet is one or two lines ... Never a traceback" —
    Ctrl-C while an entry point imports the harness, and while a report runs, is one line and status 130."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    flags = (
        ["--run-id", "r1", "--model", "m", "--dataset", "data/LexPilot_sample.json"]
        if script != "show_results.py"
        else ["--usage"]
    )
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_AT, script, module, *flags, "--output-root", str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=as_at_a_terminal,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 130, done.stderr
    assert len(err) == 1 and err[0].startswith(said), done.stderr


def program(script: str, *args: str) -> subprocess.CompletedProcess:
    """`script` run as a program of its own, its Ctrl-C as at a terminal: what it printed, and its status."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=as_at_a_terminal,
    )


STOP_WHILE_HELD = """
import os, signal, sys
from lexpilot.errors import HarnessError, own_interrupts, stop_of, stops_held
own_interrupts()
said = []
try:
    with stops_held():
        os.kill(os.getpid(), int(sys.argv[1]))
        said.append("went on")
        if sys.argv[2] == "raises":  # an error within, a stop held: the error is what the user must see
            raise HarnessError("the spending file cannot be written")
    said.append("not stopped")
except HarnessError as error:
    said.append(type(error).__name__)
except KeyboardInterrupt as interrupt:
    said.append(stop_of(interrupt).name)
print(*said, signal.getsignal(int(sys.argv[1])).__name__)  # the handler after the hold
"""


@pytest.mark.parametrize(
    "signum, within, said",
    [
        (2, "returns", "Ctrl-C default_int_handler"),
        (15, "returns", "SIGTERM _terminated"),
        (15, "raises", "HarnessError _terminated"),
    ],
)
def test_a_stop_while_held_is_handled_as_the_hold_ends_by_its_own_handler(signum, within, said):
    """stops_held (lexpilot/errors.py): a Ctrl-C or SIGTERM that comes while a grid starts its chains, or a stage
    queues its cases, waits until all have started, then meets the handler it would have met, which is back; an
    error raised within goes on (it hid under the stop)."""
    done = program(STOP_WHILE_HELD, str(signum), within)
    assert (done.stdout, done.stderr) == (f"went on {said}\n", ""), done.stdout + done.stderr


CTRL_C_AS_THE_HANDLERS_ARE_PUT_BACK = """
import os, signal, time
from lexpilot.errors import own_interrupts, stop_of, stops_held
own_interrupts()
real, said = signal.signal, []
def put_back(signum, handler):  # a Ctrl-C just after its own handler is back, before SIGTERM's is
    before = real(signum, handler)
    if signum == signal.SIGINT and handler is signal.default_int_handler:
        os.kill(os.getpid(), signal.SIGINT)
    return before
try:
    with stops_held():
        signal.signal = put_back
except KeyboardInterrupt as interrupt:
    said.append(stop_of(interrupt).name)
signal.signal = real
try:
    os.kill(os.getpid(), signal.SIGTERM)  # Slurm's, later: it still stops the program
    time.sleep(1)
except KeyboardInterrupt as interrupt:
    said.append(stop_of(interrupt).name)
print(*said)
"""


def test_a_stop_met_while_the_handlers_are_put_back_leaves_no_signal_held():
    """A Ctrl-C between putting back Ctrl-C's handler and SIGTERM's: it stops the program there, and a SIGTERM
    after it still does (it was held for good, a program no SIGTERM could stop)."""
    done = program(CTRL_C_AS_THE_HANDLERS_ARE_PUT_BACK)
    assert (done.stdout, done.stderr) == ("Ctrl-C SIGTERM\n", ""), done.stdout + done.stderr
