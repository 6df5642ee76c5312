"""Kills of a pooled batch grid on real processes: `kill -9` a pooled batch grid (run_grid.py --batch) while a shared
batch file is uploaded, while its batch is created, and at random moments; the same command then completes with a
clean grid's records, and the provider has processed exactly a clean grid's requests, compared per request (its kind
and the digest of what it asks), each custom id in one batch only ("The ledger keeps its guarantees per request")."""

import random
import re
import signal
import sys
import time
from collections import Counter

import pytest

from lexpilot.running.batch.api import request_digest
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import MODELS, records
from tests.helpers.paths import ROOT
from tests.helpers.processes import at_a_terminal, process_environment
from tests.helpers.warm import fresh
from tests.helpers.warm import run as warm_run

# kills, Ctrl-C, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow


def batch_grid(root, dataset, *stages) -> list[str]:
    return [sys.executable, "run_grid.py", "--models", *MODELS, "--runs", "2", "--dataset", str(dataset)] + [
        "--output-root",
        str(root),
        "--batch",
        "--batch-poll",
        "0.02",
        *(["--stages", *stages] if stages else []),
    ]


def paid(provider, since: int = 0) -> Counter:
    """Every request in a batch the provider created (each is paid, whether or not its output is ever read), by
    what it asks: its model, messages and settings."""
    return Counter(
        request_digest(line["body"])
        for batch in list(provider.batches.values())[since:]
        for line in batch["_lines"]
    )


def run(warm, command, env) -> None:
    """The grid run to its end: forked from `warm`, or None: in a fresh interpreter."""
    done = warm_run(warm, command, ROOT, env, timeout=180) if warm else fresh(command, ROOT, env, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]


def kill_when(warm, command, env, reached, deadline: float = 60) -> bool:
    """Start the grid, kill -9 it once `reached()` holds; whether the kill landed while it ran."""
    process = warm.start(command, ROOT, env)
    end = time.monotonic() + deadline
    while process.poll() is None and not reached() and time.monotonic() < end:
        time.sleep(0.002)
    landed = process.poll() is None
    process.send_signal(signal.SIGKILL) if landed else None
    process.wait(timeout=30)
    return landed


@pytest.mark.parametrize("phase", ["files", "batches"])
def test_a_kill_while_the_shared_file_is_uploaded_or_its_batch_created_pays_nothing_twice(
    tmp_path, phase, warm
):
    """The provider holds its answer to the grid's first upload (or create) after doing the work, and the grid is
    killed meanwhile: its cells' ledgers say `prepared` (nothing was created: asked again) or `uploaded` (the batch
    made from the file is found in the provider's list, and collected)."""
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        run(warm, batch_grid(tmp_path / "clean", dataset, "eval_LJP_gold"), env)
        clean, clean_paid, since = Counter(provider.processed), paid(provider), len(provider.batches)
        made = len(provider.files) if phase == "files" else since
        provider.processed.clear()
        provider.batch_stall[("POST", phase)] = 5
        command = batch_grid(tmp_path / "killed", dataset, "eval_LJP_gold")
        things = provider.files if phase == "files" else provider.batches
        assert kill_when(warm, command, env, lambda: len(things) > made)
        run(warm, command, env)
        assert paid(provider, since) == clean_paid  # every request of a clean grid in one batch, and no other
    assert records(tmp_path / "killed") == records(tmp_path / "clean")
    assert provider.processed == clean  # each answered once
    assert all(n == 1 for n in provider.submitted.values())


def test_ten_kills_at_random_moments_under_faults_then_a_rerun_pay_for_exactly_a_clean_grids_requests(
    tmp_path, warm
):
    """Kills at random moments, in batch mode and under provider faults: transient errors on the files and batches
    endpoints, a create whose reply is lost (the batch made all the same), and one in four of the User Model's
    calls (left synchronous) failing once; a run's stages side by side, the pooled batches shared by every run."""
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    roles = ("--batch-roles", "eval,judge")
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        run(warm, batch_grid(tmp_path / "clean", dataset) + list(roles), env)
        clean, files = Counter(provider.processed), len(provider.files)
        clean_paid, since = paid(provider), len(provider.batches)
        provider.processed.clear()
        rng, killed, started = random.Random(9), 0, 0
        provider.batch_errors = [
            (rng.choice(["GET", "POST"]), rng.choice(["files", "batches"]), rng.choice([0, 429, 500, 503]))
            for _ in range(12)
        ]
        provider.batch_lost_create = True
        user_calls = Counter()

        def flaky(kind, prompt, body):  # each user call's first try fails, one prompt in four: asked again
            user_calls[prompt] += kind == "user"
            return (
                {"status": 502}
                if kind == "user" and user_calls[prompt] == 1 and len(prompt) % 4 == 0
                else None
            )

        provider.script = flaky
        command = batch_grid(tmp_path / "killed", dataset) + list(roles)
        # a random moment is a random number of the provider's files (inputs and outputs) into the grid's run
        spread = max(2, files // 12)
        while killed < 10 and started < 25:
            started += 1
            before, moment = len(provider.files), rng.randint(1, spread)
            killed += kill_when(warm, command, env, lambda: len(provider.files) - before >= moment)
        run(None, command, env)  # the completing run: a fresh interpreter
        assert paid(provider, since) == clean_paid
        assert not provider.batch_errors and not provider.batch_lost_create and provider.statuses[502]
    assert killed == 10
    assert records(tmp_path / "killed") == records(tmp_path / "clean")
    assert provider.processed == clean
    assert all(n == 1 for n in provider.submitted.values())


def test_a_ctrl_c_leaves_the_pooled_batches_in_flight_and_the_rerun_collects_them(tmp_path, warm):
    """Ctrl-C in batch mode: the first Ctrl-C makes no new batch; the cells waiting for theirs, or for the other
    chains, leave at once with every batch recorded; the same command collects them and pays nothing twice."""
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        run(warm, batch_grid(tmp_path / "clean", dataset), env)
        clean, clean_paid, since = Counter(provider.processed), paid(provider), len(provider.batches)
        provider.processed.clear()
        provider.batch_delay = 20  # the first cycle's batches stay in flight
        command = batch_grid(tmp_path / "out", dataset)
        process = at_a_terminal(warm, command, env)
        deadline = time.monotonic() + 30
        while len(provider.batches) < since + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # every cell waits for its batch now
        process.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        _, err = process.communicate(timeout=30)
        assert process.returncode == 130 and time.monotonic() - signalled < 3, err  # not 20 s
        assert "Traceback" not in err and "Ctrl-C: no new call starts" in err and "interrupted:" in err, err
        assert len(provider.batches) == since + 3  # one per evaluated model, and none after the Ctrl-C
        provider.batch_delay = 0
        for batch in provider.batches.values():
            batch["_ready"] = 0
        run(warm, command, env)
        assert paid(provider, since) == clean_paid
    assert records(tmp_path / "out") == records(tmp_path / "clean")
    assert provider.processed == clean


def test_a_ctrl_c_while_a_role_left_synchronous_is_asked_interrupts_its_cells_and_the_rerun_pays_nothing_twice(
    tmp_path, warm
):
    """Ctrl-C with --batch-roles: the first Ctrl-C comes while the User Model (left synchronous) answers; the calls
    in flight end and are journalled, the next ones are not started, and the cells say they were stopped by Ctrl-C
    (not failed with "internal error Aborted", with the stages reading them not run). The same
    command then completes, the provider answering each request once."""
    from lexpilot.scripted.kinds import request_kind

    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        command = batch_grid(tmp_path / "clean", dataset) + ["--batch-roles", "eval,judge"]
        run(warm, command, env)
        clean = Counter(provider.processed)
        provider.processed.clear()
        provider.script = lambda kind, prompt, body: {"sleep": 1.0} if kind == "user" else None
        command = batch_grid(tmp_path / "out", dataset) + ["--batch-roles", "eval,judge"]
        since = len(provider.requests)  # the synchronous requests, the clean grid's first
        process = at_a_terminal(warm, command, env)
        deadline = time.monotonic() + 30
        while not any(request_kind(r) == "user" for r in provider.requests[since:]):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 130 and "Traceback" not in err, err
        assert " stopped by Ctrl-C" in err and "internal error" not in err, err
        assert re.search(r"\[grid\] 30 cells: \d+ done, 0 failed, 0 not run", err), err
        provider.script = None
        run(warm, command, env)
    assert records(tmp_path / "out") == records(tmp_path / "clean")
    assert provider.processed == clean
