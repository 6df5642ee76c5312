"""Faults and kills on real processes: `kill -9` the grid at random moments under provider faults, then rerun
the same command: it completes with a clean run's records, and the provider processed exactly a clean run's
requests, compared per request (its kind and the digest of what it asks), beyond the calls in flight at the kills
(paid, never answered: the journal counts them). A first Ctrl-C starts no new call and loses none in flight; a
second leaves at once."""

import itertools
import random
import re
import signal
import sys
import time
from collections import Counter

import pytest

from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import records
from tests.helpers.paths import ROOT
from tests.helpers.processes import at_a_terminal, process_environment, wait_until_said
from tests.helpers.warm import fresh, run

# kills, Ctrl-C, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow

MODELS = ("model-a", "model-b", "model-c")


class Faults:
    """Every 6th request answered 500, every 9th 429 with a short Retry-After: retried, never processed."""

    def __init__(self):
        self.count = itertools.count(1)

    def __call__(self, kind, prompt, body):
        n = next(self.count)
        if n % 6 == 0:
            return {"status": 500}
        if n % 9 == 0:
            return {"status": 429, "headers": {"Retry-After": "0.05"}}
        return None


def grid_command(root, dataset) -> list[str]:
    return [
        sys.executable,
        "run_grid.py",
        "--models",
        *MODELS,
        "--runs",
        "2",
        "--dataset",
        str(dataset),
        "--output-root",
        str(root),
        "--concurrency",
        "2",
        "--retries",
        "8",
    ]


def unanswered(root) -> int:
    import json

    return sum(sum(json.loads(p.read_text()).values()) for p in root.glob("runs/*/*/unanswered_calls.json"))


def test_twenty_kills_at_random_moments_then_a_rerun_pay_for_exactly_a_clean_runs_requests(tmp_path, warm):
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    with ScriptedProvider(script=Faults()) as provider:
        env = process_environment(provider)
        clean = run(warm, grid_command(tmp_path / "clean", dataset), ROOT, env)
        assert clean.returncode == 0, clean.stderr
        clean_processed = Counter(provider.processed)
        provider.processed.clear()
        provider.latency = 0.03  # slow enough for 20 kills to land; the clean grid and the rerun need not be
        rng, killed, started = random.Random(38), 0, 0
        command = grid_command(tmp_path / "killed", dataset)
        # a random moment is a random number of requests into the grid's calls, spread so that 20 kills leave work
        # for the next (a sleep of a random time let a quiet machine finish the grid before most kills: 8 of 20)
        spread = max(2, sum(clean_processed.values()) // 30)
        while killed < 20 and started < 40:  # "at least 20 kills at random moments through a 3 × 2 grid"
            started += 1
            before = sum(provider.processed.values())
            process = warm.start(command, ROOT, env)
            moment, deadline = rng.randint(1, spread), time.monotonic() + 60
            while (
                process.poll() is None
                and sum(provider.processed.values()) - before < moment
                and time.monotonic() < deadline
            ):
                time.sleep(0.005)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                killed += 1
            process.wait(timeout=30)
        provider.latency = 0.0
        done = fresh(command, ROOT, env)  # the completing run: a fresh interpreter
        assert done.returncode == 0, done.stderr
        processed = Counter(provider.processed)
    assert killed == 20  # each landed while the grid ran (a run that finished first is not counted)
    assert records(tmp_path / "killed") == records(tmp_path / "clean")
    assert set(processed) == set(clean_processed)  # every request of a clean run, and no other
    assert all(processed[k] >= n for k, n in clean_processed.items())
    extra = sum((processed - clean_processed).values())
    assert extra <= unanswered(tmp_path / "killed"), (extra, unanswered(tmp_path / "killed"))


def a_second_ctrl_c_leaves_at_once(warm, command, env, provider, calls: int, deadline: float) -> None:
    """The grid started again and, once the provider has processed `calls`, two Ctrl-Cs: the second, while the
    first drains, leaves at once. The calls asked from then on are held a minute, so that the first Ctrl-C's drain
    still waits for them when the second comes; and the second is sent once the grid has said the first's notice:
    two sent 50 ms apart reached a process the busy machine had not run meanwhile as one Ctrl-C."""
    process = at_a_terminal(warm, command, env)
    while sum(provider.processed.values()) < calls and time.monotonic() < deadline:
        time.sleep(0.05)
    provider.latency, asked = 60.0, len(provider.requests)
    while len(provider.requests) == asked and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    assert wait_until_said(process, "no new call starts", deadline), "the first Ctrl-C unheard"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=10)
    assert process.returncode == 130 and "Traceback" not in err and "interrupted at once" in err, err


def check_every_cell_is_counted_once(err: str) -> None:
    """The drained grid's last line counts every cell once: done (a stage that saved every case before the Ctrl-C,
    as DCG's often did), or stopped by it, or still waiting (the stopped ones were once counted nowhere)."""
    heads = re.findall(
        r"\[grid\] cells: (\d+) done, (\d+) running, (\d+) waiting, (\d+) failed or held back"
        r"(?:, (\d+) stopped by Ctrl-C)?;",
        err,
    )
    assert heads and sum(int(n or 0) for n in heads[-1]) == 30 and int(heads[-1][4] or 0) > 0, heads[-1:]
    assert (
        int(heads[-1][1]) == 0
        and "elapsed" in err
        and re.search(r"remaining 0s\n(?:  .*\n)*\[grid\] 30 cells", err)
    )


def test_a_first_ctrl_c_drains_the_grid_and_a_second_leaves_at_once(tmp_path, warm):
    """ "The first Ctrl-C starts no new call, finishes or journals the calls in flight, and exits. A second
    Ctrl-C exits at once. Nothing saved is lost either way.\""""
    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])
    # the calls are slow only while the Ctrl-Cs land: the clean grid and the rerun need no time to stop in
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        clean = run(warm, grid_command(tmp_path / "clean", dataset), ROOT, env)
        assert clean.returncode == 0, clean.stderr
        clean_processed = Counter(provider.processed)
        provider.processed.clear()
        provider.latency = 0.3
        command = grid_command(tmp_path / "out", dataset)
        process = at_a_terminal(warm, command, env)
        deadline = time.monotonic() + 30
        while len(provider.processed) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        # counted once the grid has said it starts no new call: on a busy machine the signal takes a while to be
        # handled, and calls answered meanwhile start others; whenever it is handled, at most a call per chain and
        # case is in flight
        wait_until_said(process, "no new call starts", deadline + 30)
        at_signal = sum(provider.processed.values())
        _, err = process.communicate(timeout=60)
        assert process.returncode == 130, err
        assert "Traceback" not in err and "Ctrl-C: no new call starts" in err and "interrupted:" in err, err
        in_flight_then = sum(provider.processed.values())
        # only the calls in flight then were answered: 6 chains, 2 cases at once each, a call each at most
        assert in_flight_then - at_signal <= 6 * 2 < sum(clean_processed.values()) - in_flight_then
        assert unanswered(tmp_path / "out") == 0  # none was left in flight
        check_every_cell_is_counted_once(err)
        a_second_ctrl_c_leaves_at_once(warm, command, env, provider, in_flight_then + 10, deadline + 30)
        provider.latency = 0.0
        done = run(warm, command, ROOT, env)
        assert done.returncode == 0, done.stderr
        processed = Counter(provider.processed)
    assert records(tmp_path / "out") == records(tmp_path / "clean")
    assert set(processed) == set(clean_processed)
    extra = sum((processed - clean_processed).values())
    assert extra <= unanswered(tmp_path / "out")  # only what the second Ctrl-C left in flight
