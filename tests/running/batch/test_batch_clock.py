"""Off-peak holds in batch mode: with --batch and --off-peak judge, the judge's batches are submitted only once its
peak window has closed, the other roles' batches go at once, and the stage completes with a synchronous run's
records; a kill -9 during the hold and a rerun pay for nothing twice. Windows are written relative to now (tests/helpers/clock.py), sized from the time a clean run takes."""

import signal
import time
from collections import Counter
from datetime import datetime, timezone

import pytest

import run_grid
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.batches import contents
from tests.helpers.clock import price_file, seconds_until_change, windows_from_now, windows_of
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import records, small_grid
from tests.helpers.paths import ROOT
from tests.helpers.processes import process_environment, stage_command
from tests.helpers.stages import Harness, judge_kinds
from tests.helpers.warm import run

pytestmark = pytest.mark.slow  # each waits for a window to close

FLAT = {"prompt": 1, "completion": 4}


def judge_window(tmp_path, seconds: float, *models: str):
    judge = {"prompt": 2, "completion": 8, **windows_from_now((-60, seconds)), "peak_multiplier": 2}
    return price_file(
        tmp_path, {"DeepSeek-R1": judge, "DeepSeek-V4.1-Flash": FLAT, **dict.fromkeys(models, FLAT)}
    )


def created(provider) -> list[tuple[str, float]]:
    """(model, when it was created: time.monotonic) of every batch the provider was given."""
    return [
        (b["_lines"][0]["body"]["model"], b["_ready"] - provider.batch_delay)
        for b in provider.batches.values()
    ]


def test_a_held_roles_batches_are_submitted_after_its_window_closes(tmp_path, provider, monkeypatch):
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    sync = Harness(tmp_path / "sync", provider, monkeypatch, dataset)
    assert sync.run("DCG") == 0
    clean = Harness(tmp_path / "clean", provider, monkeypatch, dataset)
    start = time.monotonic()
    assert clean.run("DCG", "--batch", "--batch-poll", "0.05") == 0
    took = time.monotonic() - start
    provider.batches.clear()
    prices = judge_window(tmp_path, 2 * took + 2, "eval-model")
    closes = time.monotonic() + seconds_until_change(windows_of(prices, "DeepSeek-R1"))
    held = Harness(tmp_path / "held", provider, monkeypatch, dataset)
    assert (
        held.run(
            "DCG", "--batch", "--batch-poll", "0.05", "--prices", str(prices), "--off-peak", "DeepSeek-R1"
        )
        == 0
    )
    batches = created(provider)
    assert {m for m, _ in batches} == {"eval-model", "DeepSeek-V4.1-Flash", "DeepSeek-R1"}
    assert all(at >= closes - 0.05 for m, at in batches if m == "DeepSeek-R1"), (batches, closes)
    assert any(at < closes for m, at in batches if m != "DeepSeek-R1")  # the others did not wait
    for top, name in [("Force_ask_gen", "force_ask.jsonl"), ("eval_results", "DCG_results.jsonl")]:
        assert contents(held, top, name) == contents(sync, top, name), name


def test_a_grids_cycle_with_a_held_roles_requests_waits_for_its_window(tmp_path, http):
    """run_grid.py --batch --off-peak judge: the pooled judge batches are made after the window closes."""
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    options = ("--stages", "eval_DCG", "--batch", "--batch-poll", "0.05")
    start = time.monotonic()
    assert run_grid.main(small_grid(tmp_path / "clean", dataset, *options)) == 0
    took = time.monotonic() - start
    http.batches.clear()
    prices = judge_window(tmp_path, 2 * took + 2, "model-a", "model-b")
    closes = time.monotonic() + seconds_until_change(windows_of(prices, "DeepSeek-R1"))
    argv = small_grid(tmp_path / "held", dataset, *options, "--prices", str(prices), "--off-peak", "judge")
    assert run_grid.main(argv) == 0
    batches = created(http)
    assert any(m == "DeepSeek-R1" for m, _ in batches)
    assert all(at >= closes - 0.05 for m, at in batches if m == "DeepSeek-R1"), (batches, closes)
    assert any(at < closes for m, at in batches if m != "DeepSeek-R1")


def test_a_kill_during_a_batch_hold_then_a_rerun_pays_for_nothing_twice(tmp_path, warm):
    """eval_DCG.py --batch --off-peak judge, killed (-9) while the judge's batch waits for its window, then the same
    command: it completes, the provider having processed exactly what a clean batch run processes, each request once,
    and no judge batch submitted before the window closed."""
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])

    def command(root, *extra):
        return stage_command("eval_DCG.py", root, dataset, "--batch", "--batch-poll", "0.05", *extra)

    with ScriptedProvider() as provider:
        env = process_environment(provider)
        start = time.monotonic()
        clean = run(warm, command(tmp_path / "clean"), ROOT, env)
        took = time.monotonic() - start
        assert clean.returncode == 0, clean.stderr
        clean_processed = Counter(provider.processed)
        provider.processed.clear()
        provider.batches.clear()
        others = sum(n for (kind, _), n in clean_processed.items() if kind not in judge_kinds())
        prices = judge_window(tmp_path, 3 * took + 4, "eval-model")
        windows = windows_of(prices, "DeepSeek-R1")
        killed = command(tmp_path / "killed", "--prices", str(prices), "--off-peak", "judge")
        process = warm.start(killed, ROOT, env)
        deadline = time.monotonic() + 60
        while sum(provider.processed.values()) < others and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert process.poll() is None and windows.at(datetime.now(timezone.utc)) == "peak"
        assert all(m != "DeepSeek-R1" for m, _ in created(provider))  # held: no judge batch yet
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        rerun = run(warm, killed, ROOT, env)
        assert rerun.returncode == 0, rerun.stderr
        assert Counter(provider.processed) == clean_processed
    assert records(tmp_path / "killed") == records(tmp_path / "clean")
