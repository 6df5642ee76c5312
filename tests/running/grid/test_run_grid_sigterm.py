"""SIGTERM as Slurm, Kubernetes and systemd send it (then SIGKILL after a grace period), on real processes against the
scripted provider on 127.0.0.1. A first SIGTERM lets no new call start, lets the calls in flight end and be saved or
journalled, says so in a line naming SIGTERM, and exits 143; a second leaves at once, as safe as kill -9. The same
command then completes, and the provider processed exactly a clean run's requests, compared per request (its kind and
the digest of what it asks): none twice after a drain, and beyond the clean run's only the calls in flight at a
second signal (paid, never answered: the journal counts them)."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import records
from tests.helpers.paths import ROOT
from tests.helpers.processes import process_environment, stage_command, wait_until, wait_until_said
from tests.helpers.warm import fresh, run

# kills, Ctrl-C, SIGTERM, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow

MODELS = ("model-a", "model-b")
SAVED = "every answered call is saved or journalled; rerun the same command to resume"  # the grid's last line


def grid_command(root, dataset, *extra: str) -> list[str]:
    return [sys.executable, "run_grid.py", "--models", *MODELS, "--runs", "1", "--dataset", str(dataset)] + [
        "--output-root",
        str(root),
        "--concurrency",
        "2",
        *extra,
    ]


def unanswered(root) -> int:
    return sum(sum(json.loads(p.read_text()).values()) for p in root.glob("runs/*/*/unanswered_calls.json"))


def clean_requests(warm, command: list[str], env, provider) -> Counter:
    """What a clean run of `command` made the provider process, per request; its count emptied for the next run."""
    clean = run(warm, command, ROOT, env)
    assert clean.returncode == 0, clean.stderr
    processed = Counter(provider.processed)
    provider.processed.clear()
    return processed


def signalled_after(warm, command, env, provider, calls: int, signals: int = 1):
    """The script started, and `signals` SIGTERMs once the provider has processed `calls` more requests (with
    `signals` 2: once it has received them, so that the second lands while they are in flight), each after the first
    once the grid has said the first's notice: two sent 50 ms apart reached a grid the busy machine had not run in
    between as one; (exit status, stderr), or None when it ended first."""
    count = (lambda: sum(provider.processed.values())) if signals == 1 else (lambda: len(provider.requests))
    before = count()
    process = warm.start(command, ROOT, env)
    deadline = time.monotonic() + 30
    while process.poll() is None and count() - before < calls:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    if process.poll() is not None:
        return None
    for n in range(signals):
        if n:
            assert wait_until_said(process, "no new call starts", deadline + 30), "the first SIGTERM unheard"
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    return process.returncode, err


def test_ten_sigterms_at_random_moments_then_a_rerun_pay_for_no_request_twice(tmp_path, warm):
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        clean_processed = clean_requests(warm, grid_command(tmp_path / "clean", dataset), env, provider)
        provider.latency = 0.02  # slow enough for the signals to land while calls are in flight
        command, rng, drained = grid_command(tmp_path / "out", dataset), random.Random(57), 0
        spread = max(2, sum(clean_processed.values()) // 15)  # ten moments that leave work for the next
        for _ in range(20):
            ended = signalled_after(warm, command, env, provider, rng.randint(1, spread))
            if ended is None:
                continue
            code, err = ended
            assert code == 143 and "Traceback" not in err and "Ctrl-C" not in err, err
            assert "[grid] SIGTERM: no new call starts; the calls in flight end" in err, err
            assert err.rstrip().endswith(f"[grid] stopped by SIGTERM: {SAVED}"), err
            drained += 1
            if drained == 10:
                break
        assert drained == 10
        # every call in flight at a drain ended and was journalled: none was asked twice, none left unanswered
        assert not Counter(provider.processed) - clean_processed and unanswered(tmp_path / "out") == 0
        provider.latency = (
            60.0  # the calls in flight are held: the first SIGTERM's drain still waits for them
        )
        code, err = signalled_after(warm, command, env, provider, 1, signals=2)
        assert code == 143 and "[grid] stopped by SIGTERM at once" in err and "Traceback" not in err, err
        provider.latency = 0.0
        done = fresh(command, ROOT, env)  # the completing run: a fresh interpreter
        assert done.returncode == 0, done.stderr
        processed = Counter(provider.processed)
    assert records(tmp_path / "out") == records(tmp_path / "clean")
    assert set(processed) == set(clean_processed) and all(
        processed[k] >= n for k, n in clean_processed.items()
    )
    extra = sum((processed - clean_processed).values())
    assert extra <= unanswered(tmp_path / "out"), extra  # only what the second SIGTERM left in flight


def test_a_stage_scripts_sigterm_drains_its_cases_and_a_second_leaves_at_once(tmp_path, warm):
    """A stage script's pool: the first SIGTERM starts no new call and lets the calls in flight end (the cases they
    belong to are left for the rerun, their replies journalled); a second leaves at once."""
    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])

    def stage(root) -> list[str]:
        return stage_command("LexAwN_gen.py", root, dataset, "--concurrency", "2", model="m1")

    with ScriptedProvider() as provider:
        env = process_environment(provider)
        clean = clean_requests(warm, stage(tmp_path / "clean"), env, provider)
        provider.latency = 0.05
        code, err = signalled_after(warm, stage(tmp_path / "out"), env, provider, 4)
        assert code == 143 and "Traceback" not in err, err
        assert "[LexAwN] SIGTERM: no new call starts" in err and "not finished (SIGTERM)" in err, err
        assert not Counter(provider.processed) - clean and unanswered(tmp_path / "out") == 0
        code, err = signalled_after(warm, stage(tmp_path / "out"), env, provider, 1, signals=2)
        assert code == 143 and "[LexAwN] stopped by SIGTERM: completed cases are saved" in err, err
        provider.latency = 0.0
        assert run(warm, stage(tmp_path / "out"), ROOT, env).returncode == 0
        processed = Counter(provider.processed)
    assert records(tmp_path / "out") == records(tmp_path / "clean")
    assert sum((processed - clean).values()) <= unanswered(tmp_path / "out") and set(processed) == set(clean)


# The program `script` (argv[4:]), but a SIGTERM reaches it once `callable` (argv[1], module:attribute[.attribute])
# has first returned and the file argv[2] exists (made by the test, e.g. once the provider has a call in flight)
SIGTERM_AFTER_FIRST = """
import importlib, os, runpy, signal, sys, time
where, go, script = sys.argv[1:4]
module, path = where.split(":")
owner = importlib.import_module(module)
*parents, name = path.split(".")
for parent in parents:
    owner = getattr(owner, parent)
real, sent = getattr(owner, name), []
def then_sigterm(*args, **kwargs):
    result = real(*args, **kwargs)
    if not sent:
        sent.append(True)
        while not os.path.exists(go):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
    return result
setattr(owner, name, then_sigterm)
sys.argv = [script, *sys.argv[4:]]
runpy.run_path(script, run_name="__main__")
"""


# where the SIGTERM comes: after the grid's first chain has started (the second next), or after a stage's first case
# is queued (the second next); what the process says of it
BETWEEN_WORKERS = [
    ("lexpilot.running.grid.cells:start_chain", "[grid] SIGTERM: no new call starts"),
    ("lexpilot.running.stage:ThreadPoolExecutor.submit", "[LexAwN] SIGTERM: no new call starts"),
]


@pytest.mark.parametrize("where, said", BETWEEN_WORKERS)
def test_a_sigterm_while_the_workers_start_drains_them_all(tmp_path, warm, where, said):
    """A SIGTERM after the grid started its first chain (or a stage queued its first case) and before the next, the
    first's call in flight. It was met outside the drain: the grid said it stopped "before any call" and a stage
    that it had stopped, and each went on at its exit with the calls already queued (24 of a clean run's 88, and 12
    of 24, measured before the fix). It drains: no call starts after it, the calls in flight end and are journalled,
    and the rerun makes each of a clean run's requests once."""
    dataset, go = write_dataset(tmp_path / "two.json", sample_cases()[:2]), tmp_path / "go"

    def command(root) -> list[str]:
        if "grid" in said:
            return grid_command(root, dataset)
        return stage_command("LexAwN_gen.py", root, dataset, "--concurrency", "2", model="m1")

    with ScriptedProvider() as provider:
        env = process_environment(provider)
        clean = clean_requests(warm, command(tmp_path / "clean"), env, provider)
        # the first calls are held in flight while the SIGTERM comes, on a busy machine too
        provider.latency = 2.0
        asked = len(provider.requests)
        wrapped = [sys.executable, "-c", SIGTERM_AFTER_FIRST, where, str(go), *command(tmp_path / "out")[1:]]
        process = subprocess.Popen(wrapped, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: len(provider.requests) > asked or process.poll() is not None)
        go.touch()
        try:
            _, err = process.communicate(timeout=60)
        finally:
            process.kill()  # one that hangs is not left behind (nothing, once it has ended)
        assert process.returncode == 143 and "Traceback" not in err, err
        assert said in err and "before any call" not in err, err
        # no call started after it: at most what two chains (or two cases) had in flight at --concurrency 2; and the
        # drain waited for them: the last display counts each answered, none in flight
        answered = re.findall(r"(\d+)(?: of at most \d+)? calls answered", err)[-1]
        assert 1 <= sum(provider.processed.values()) == int(answered) <= 4, (provider.processed, err)
        assert " 0 running" in err or "grid" not in said, err
        assert set(re.findall(r"(\d+) in flight", err)) == {"0"}, err
        provider.latency = 0.0
        rerun = run(warm, command(tmp_path / "out"), ROOT, env)
        assert rerun.returncode == 0, rerun.stderr
        assert provider.processed == clean and unanswered(tmp_path / "out") == 0
    assert records(tmp_path / "out") == records(tmp_path / "clean")


def test_a_sigterm_while_a_batch_grids_chains_start_drains_them_and_pays_nothing_twice(tmp_path, warm):
    """The same moment in a pooled batch grid (--batch), whose chains start as a synchronous grid's do: it was said
    as a stop "before any call". It is drained and said in its line, and the rerun has the provider process each of
    a clean grid's requests once."""
    dataset, go = write_dataset(tmp_path / "two.json", sample_cases()[:2]), tmp_path / "go"
    go.touch()  # at once: the first chain has started, the second not yet
    batch = ("--batch", "--batch-poll", "0.02")
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        clean = clean_requests(warm, grid_command(tmp_path / "clean", dataset, *batch), env, provider)
        wrapped = [
            sys.executable,
            "-c",
            SIGTERM_AFTER_FIRST,
            "lexpilot.running.grid.cells:start_chain",
            str(go),
        ]
        stopped = fresh([*wrapped, *grid_command(tmp_path / "out", dataset, *batch)[1:]], ROOT, env)
        assert stopped.returncode == 143 and "Traceback" not in stopped.stderr, stopped.stderr
        assert "[grid] SIGTERM: no new call starts" in stopped.stderr, stopped.stderr
        assert stopped.stderr.rstrip().endswith(f"[grid] stopped by SIGTERM: {SAVED}"), stopped.stderr
        assert not Counter(provider.processed) - clean
        rerun = run(warm, grid_command(tmp_path / "out", dataset, *batch), ROOT, env)
        assert rerun.returncode == 0, rerun.stderr
        assert provider.processed == clean
    assert records(tmp_path / "out") == records(tmp_path / "clean")


def test_a_sigterm_after_every_chain_has_ended_is_said_as_such_and_loses_nothing(tmp_path, warm):
    """A SIGTERM once the grid's chains have all ended, while it gives back the money still reserved and says its
    summary: it was said as a stop "before any call". The summary is said whole, then one line says the stop came
    after every chain had ended, and the status is SIGTERM's; the rerun asks nothing."""
    dataset, go = write_dataset(tmp_path / "two.json", sample_cases()[:2]), tmp_path / "go"
    go.touch()  # at once: the summary's lines are made, not yet said
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        clean = clean_requests(warm, grid_command(tmp_path / "clean", dataset), env, provider)
        wrapped = [sys.executable, "-c", SIGTERM_AFTER_FIRST, "lexpilot.running.grid.run:summary", str(go)]
        late = fresh([*wrapped, *grid_command(tmp_path / "out", dataset)[1:]], ROOT, env)
        assert provider.processed == clean
        rerun = run(warm, grid_command(tmp_path / "out", dataset), ROOT, env)
        assert rerun.returncode == 0 and provider.processed == clean, rerun.stderr
    said = late.stderr.rstrip().splitlines()
    assert late.returncode == 143 and "Traceback" not in late.stderr, late.stderr
    assert said[-2].startswith("[grid] 10 cells: 10 done, 0 failed"), late.stderr  # the summary, whole
    assert said[-1] == "[grid] stopped by SIGTERM after every chain had ended: nothing was lost", late.stderr
    assert records(tmp_path / "out") == records(tmp_path / "clean")


SBATCH = """#!/bin/bash
#SBATCH --array=0-1
#SBATCH --signal=B:TERM@60
exec "$PY" run_grid.py --models model-a model-b --runs 1 --shard "$((SLURM_ARRAY_TASK_ID + 1))/2" \\
  --dataset "$DATASET" --output-root "$OUT" --batch --batch-poll 0.02
"""


def test_a_slurm_job_arrays_task_drains_on_sigterm_and_its_rerun_collects_its_batches(tmp_path, warm):
    """docs/grid.md's recipe as Slurm starts it: a batch script that execs python, started in the background (SIGINT
    ignored, as a shell starts a background job; SIGTERM is not). SIGTERM while the task's batches are in flight:
    one line naming it, exit 143, every batch recorded; the same script then collects them, paying nothing twice."""
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    script = tmp_path / "job.sh"
    script.write_text(SBATCH, encoding="utf-8")
    with ScriptedProvider() as provider:
        env = process_environment(provider)
        task = env | {"PY": sys.executable, "DATASET": str(dataset), "OUT": str(tmp_path / "out")}
        task["SLURM_ARRAY_TASK_ID"] = "1"  # the array's second task: shard 2/2
        shard = grid_command(tmp_path / "clean", dataset, "--shard", "2/2", "--batch", "--batch-poll", "0.02")
        clean, since = clean_requests(warm, shard, env, provider), len(provider.batches)
        provider.batch_delay = 20  # the first cycle's batch stays in flight
        job = subprocess.Popen(
            ["bash", str(script)],
            cwd=ROOT,
            env=task,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        deadline = time.monotonic() + 30
        while len(provider.batches) == since:
            assert time.monotonic() < deadline and job.poll() is None
            time.sleep(0.01)
        time.sleep(0.3)  # the task waits for its batch now
        os.kill(job.pid, signal.SIGTERM)  # bash exec'd python: the job's pid is python's
        _, err = job.communicate(timeout=10)
        assert job.returncode == 143 and "Traceback" not in err, err
        assert "[grid] SIGTERM: no new call starts" in err and " stopped by SIGTERM;" in err, err
        assert err.rstrip().endswith(f"[grid] stopped by SIGTERM: {SAVED}"), err
        provider.batch_delay = 0
        for batch in provider.batches.values():
            batch["_ready"] = 0
        done = subprocess.run(["bash", str(script)], cwd=ROOT, env=task, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert provider.processed == clean
    assert records(tmp_path / "out") == records(tmp_path / "clean")
