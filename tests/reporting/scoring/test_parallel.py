"""`fork_map`, the reports' use of every core: the same results as one process, in the items' order; a child's
exception raised in the parent as it was raised; a child that dies is one line, not a hang."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring import results
from lexpilot.reporting.scoring.parallel import FORKED_FROM_CASES, fork_map, workers
from tests.helpers.paths import ROOT
from tests.helpers.saved_runs import CASES, make_run


@pytest.mark.slow
def test_results_come_back_in_the_items_order_from_every_process():
    items = list(range(23))
    for processes in (1, 2, 3, 30):
        assert fork_map(lambda x: (x * x, os.getpid()), items, processes)[5][0] == 25
        assert [r[0] for r in fork_map(lambda x: (x * x, os.getpid()), items, processes)] == [
            x * x for x in items
        ]
    # each child's first item waits for the other two to have taken one: all three work, however late a loaded
    # machine starts them (a child started after the others had taken every item failed this)
    started, seen = multiprocessing.Barrier(3), set()

    def work(x):
        if os.getpid() not in seen:  # this child's own copy of the set
            seen.add(os.getpid())
            started.wait(30)
        return x * x, os.getpid()

    pids = {pid for _, pid in fork_map(work, items, 3)}
    assert len(pids) == 3 and os.getpid() not in pids  # three children work, the parent gathers


def test_a_free_child_takes_the_next_item():
    """The items go to whichever child is free: one slow item does not hold back a share of the others."""
    slow, quick_done = 0, multiprocessing.Value("i", 0)

    def work(x):
        if (
            x == slow
        ):  # until the eleven quick ones are done (a fixed second was too short on a loaded machine)
            deadline = time.monotonic() + 20
            while quick_done.value < 11 and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            with quick_done.get_lock():
                quick_done.value += 1
        return os.getpid()

    pids = fork_map(work, list(range(12)), 2)
    assert pids.count(pids[slow]) == 1  # the other child did the eleven quick ones


def test_a_childs_exception_is_raised_in_the_parent():
    def fail_on_seven(x):
        if x == 7:
            raise HarnessError(f"item {x}: no")
        return x

    for processes in (1, 2):
        with pytest.raises(HarnessError, match="item 7: no"):
            fork_map(fail_on_seven, list(range(10)), processes)


def test_a_child_that_dies_is_one_line():
    parent = os.getpid()

    def die_in_a_child(x):
        if x == 1 and os.getpid() != parent:
            os._exit(3)
        return x

    with pytest.raises(HarnessError, match=r"a worker process ended without its results \(exit code 3\)"):
        fork_map(die_in_a_child, [0, 1, 2, 3], 2)


def test_workers_never_exceed_the_items_or_the_cores():
    assert workers(1) == 1 and workers(0) == 1 and workers(10**6) == (os.cpu_count() or 1)


def test_workers_start_only_from_forked_from_cases():
    """Under FORKED_FROM_CASES cases only this process works; from it, and where the cases are not known, one
    process per core."""
    cores = os.cpu_count() or 1
    assert workers(10, FORKED_FROM_CASES - 1) == 1
    assert workers(10, FORKED_FROM_CASES) == workers(10, None) == min(10, cores)


def test_a_report_of_few_cases_is_scored_in_this_process_and_of_many_on_every_core(tmp_path, monkeypatch):
    """A report's workers start only where they pay (bench/forking.py): the runs' cases, as their manifests select
    them, counted in all."""
    asked, real = [], results.fork_map
    monkeypatch.setattr(
        results, "fork_map", lambda fn, items, processes: asked.append(processes) or real(fn, items, 1)
    )
    lca = {n: ("complete", "underspecified") for n in CASES}
    for model in ("a", "b"):
        make_run(tmp_path, "r1", model, lca=lca)
    assert [r.model for r in results.load_runs(tmp_path, None, None)] == ["a", "b"] and asked == [1]
    many = [
        f"X{i}" for i in range(FORKED_FROM_CASES - 2 * len(CASES))
    ]  # with the two runs', as many as it takes
    make_run(tmp_path, "r1", "c", lca=lca, selected_cases=many)
    assert len(results.load_runs(tmp_path, None, None)) == 3 and asked[1:] == [min(3, os.cpu_count() or 1)]


@pytest.mark.slow
def test_when_a_child_raises_the_other_children_are_stopped(tmp_path):
    """The parent raises the first child's exception, and no other child goes on writing after it."""
    import time

    def work(x):
        if x == 1:
            raise HarnessError("stop")
        if x == 2:
            time.sleep(2)
            (tmp_path / "late").write_text("still running")
        return x

    with pytest.raises(HarnessError, match="stop"):
        fork_map(work, [0, 1, 2], 3)
    time.sleep(2.5)
    assert not (tmp_path / "late").exists()


CHILD_STOPPED = """
import signal
from lexpilot.errors import own_interrupts
from lexpilot.reporting.scoring.parallel import fork_map

def handler(item):
    return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

own_interrupts()  # what a reporting tool installs: SIGTERM raises in the parent
print(fork_map(handler, [0, 1], 2), signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def test_a_forked_child_ends_quietly_when_its_parent_stops_it():
    # the parent stops a child it no longer needs with SIGTERM (after another's failure, or after the child's
    # "done"); the child had the parent's handler by the fork, raised a KeyboardInterrupt, and printed a traceback
    # on the report's stderr, now and then. A child takes SIGTERM's default: it ends, saying nothing
    done = subprocess.run(
        [sys.executable, "-c", CHILD_STOPPED], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.stdout.split() == ["[True,", "True]", "False"], done.stdout + done.stderr


CHILD_STOPPED_WHILE_STARTING = """
import os, signal, sys, time
from lexpilot.errors import HarnessError, own_interrupts
from lexpilot.reporting.scoring.parallel import fork_map

forks = []
def starting():  # in a child, before its own handlers: the second and third stay long enough to be stopped here
    if len(forks) > 1:
        time.sleep(1)
os.register_at_fork(before=lambda: forks.append(1), after_in_child=starting)

def first_stops(item):
    if sys.argv[1] == "ctrl-c":  # at a terminal, Ctrl-C reaches the whole process group
        os.killpg(0, signal.SIGINT)
        time.sleep(5)
    raise HarnessError(f"item {item} failed")  # the parent stops the other children with SIGTERM

own_interrupts()  # what a reporting tool installs: SIGTERM and Ctrl-C raise KeyboardInterrupt
parent = os.getpid()
try:
    fork_map(first_stops, [0, 1, 2], 3)
except HarnessError as e:
    print(e, "in the parent" if os.getpid() == parent else "in a child")
except KeyboardInterrupt:
    print("interrupted", "in the parent" if os.getpid() == parent else "in a child")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "stop, said", [("fail", "item 0 failed in the parent"), ("ctrl-c", "interrupted in the parent")]
)
def test_a_child_stopped_while_it_starts_runs_none_of_its_parents_handlers(stop, said):
    """A child runs the parent's code from the fork until its own handlers are set (the at-fork hooks,
    multiprocessing's start). Stopped there (by its parent's SIGTERM after another child failed, or by a Ctrl-C at
    the terminal, which reaches every process of the group), it ran the parent's handler: a KeyboardInterrupt that
    printed a traceback, or left the child's start and went on in the caller's code as a second copy of the program
    (a test worker's copy said the whole suite was interrupted). Stops are held back until the child's own handlers
    are set: SIGTERM's default, and Ctrl-C left to the parent, which stops its children."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD_STOPPED_WHILE_STARTING, stop],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,  # its own process group, for its Ctrl-C
    )
    assert (done.stdout, done.stderr) == (said + "\n", ""), done.stdout + done.stderr


PARENT_KILLED = """
import os, sys, time
from lexpilot.reporting.scoring.parallel import fork_map

def large(item):  # each result larger than a pipe holds: a child waits for its reader
    os.write(1, f"{os.getpid()}\\n".encode())  # one write: the children's lines never interleave
    time.sleep(0.2)
    return b"x" * 200_000

os.write(1, f"parent {os.getpid()}\\n".encode())
fork_map(large, list(range(40)), 2)
"""


@pytest.mark.slow
def test_the_children_of_a_parent_killed_with_kill_9_end_within_an_item():
    """A report killed with kill -9 (or by the OOM killer) stops no child. Each child held the reading ends of its
    own pipe and its elder sibling's since the fork, so a result larger than a pipe holds waited for a reader
    forever: every child of the report stayed asleep, a copy of the report's memory each. A child keeps no reading
    end: its next result finds no reader and it ends, saying nothing."""
    process = subprocess.Popen(
        [sys.executable, "-c", PARENT_KILLED],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    parent, children = int(process.stdout.readline().split()[1]), set()
    while len(children) < 2:  # each child says its id at each item it takes
        children.add(int(process.stdout.readline()))
    os.kill(parent, signal.SIGKILL)
    process.wait(timeout=10)
    deadline = time.monotonic() + 10  # each child ends after the item it is on (0.2 s)
    while time.monotonic() < deadline and any(alive(pid) for pid in children):
        time.sleep(0.05)
    left = [pid for pid in children if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert len(children) == 2 and not left and process.stderr.read() == "", left


def alive(pid: int) -> bool:
    """Whether the process of that id runs: not ended, nor ended and not yet reaped (an orphan's reaper is init)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


CTRL_C_IN_A_CHILD = """
import os, signal
from lexpilot.errors import own_interrupts
from lexpilot.reporting.scoring.parallel import fork_map

class Result:  # the child pickles it as it sends it: there its share of a Ctrl-C reaches it
    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGINT)
        return (int, (7,))

own_interrupts()  # what a reporting tool installs: Ctrl-C raises KeyboardInterrupt
print(fork_map(lambda item: Result(), [0, 1], 2))
"""


def test_a_ctrl_c_that_reaches_a_child_is_left_to_its_parent():
    """A Ctrl-C at the terminal reaches every process of the group; the parent's share stops the report and its
    children. A child's share, met while it sends a result (outside the item's own handling), raised the parent's
    KeyboardInterrupt there: a traceback on the report's stderr. A child ignores it and goes on, silent."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_A_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert (done.stdout, done.stderr) == ("[7, 7]\n", ""), done.stdout + done.stderr
