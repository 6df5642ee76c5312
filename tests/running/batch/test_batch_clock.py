"""Off-peak holds in batch mode: with --batch and --off-peak judge, the judge's batches are submitted only once its
peak window has closed, the other roles' batches go at once, and the stage completes with a synchronous run's
records. Windows are written relative to now (tests/helpers/clock.py), sized from the time a clean run takes."""

import time

import pytest

import run_grid
from tests.helpers.batches import contents
from tests.helpers.clock import price_file, seconds_until_change, windows_from_now, windows_of
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import small_grid
from tests.helpers.stages import Harness

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
