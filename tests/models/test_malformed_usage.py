"""Malformed usage: "A reply whose `usage` is negative, null, a float, a string or not an object"
is kept. "Record its usage as unreported, settled at the worst case for the budget, as a usage-less reply is. Say
so once per stage, and never ask again." In synchronous, streamed and batch modes, the provider processes exactly
what a clean run processes."""

import json
from collections import Counter

import pytest

from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.replies import USAGES
from tests.helpers.stages import Harness

MODES = {"sync": (), "stream": ("--stream",), "batch": ("--batch", "--batch-poll", "1")}


@pytest.fixture
def dataset(tmp_path):
    return write_dataset(tmp_path / "four.json", sample_cases()[:4])


@pytest.fixture
def prices(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                m: {"prompt": 1, "completion": 4, "batch_discount": 0.5}
                for m in ("eval-model", "DeepSeek-V4.1-Flash", "DeepSeek-R1")
            }
        )
    )
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("usage", USAGES)
def test_a_reply_with_malformed_usage_is_kept_and_never_bought_again(
    tmp_path, provider, monkeypatch, capsys, dataset, prices, mode, usage
):
    clean = Harness(tmp_path / "clean", provider, monkeypatch, dataset)
    assert clean.run("gold") == 0
    expected = Counter(provider.processed)
    provider.processed.clear()
    capsys.readouterr()
    provider.usage_as = USAGES[usage]
    h = Harness(tmp_path / "malformed", provider, monkeypatch, dataset)
    assert h.run("gold", *MODES[mode], "--prices", str(prices), "--max-cost", "100") == 0
    assert provider.processed == expected  # 4 eval and 4 judge requests, once each
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "a reply's usage" in line]
    # once per stage and role: the evaluated model's and the judge's
    assert len(said) == 2 and all(
        "kept, their tokens counted as unreported and settled at the worst case" in line for line in said
    ), said
    assert "malformed reply" not in err
    for name in ("a1_force_judge.jsonl",):
        for record in h.records("Force_judge_gen", name):
            assert record["usage"]["eval"]["unreported_calls"] == record["usage"]["eval"]["calls"] == 1
    for record in h.records("eval_results", "LJP_gold.jsonl"):
        assert record["usage"]["judge"]["unreported_calls"] == record["usage"]["judge"]["calls"] == 1


def test_a_reply_with_malformed_usage_is_settled_at_its_worst_case(
    tmp_path, provider, monkeypatch, dataset, prices
):
    """The budget counts such a reply at the worst case its request could cost (prompt at one token per character,
    the whole output limit), as it counts a reply without usage: a budget that fits 8 worst cases and not 9 passes,
    one that fits 7 stops before the eighth call."""
    h = Harness(tmp_path / "a", provider, monkeypatch, dataset)
    provider.usage_as = USAGES["negative"]
    assert h.run("gold", "--max-tokens", "100") == 0
    # by hand: a prompt of n characters at 1 per million tokens, 100 output tokens at 4 per million
    worst = sorted((len(r["messages"][0]["content"]) * 1 + 100 * 4) / 1e6 for r in provider.requests)
    assert len(worst) == 8
    provider.requests.clear()
    enough = Harness(tmp_path / "b", provider, monkeypatch, dataset)
    assert (
        enough.run(
            "gold", "--max-tokens", "100", "--prices", str(prices), "--max-cost", f"{sum(worst) * 1.0001:.8f}"
        )
        == 0
    )
    short = Harness(tmp_path / "c", provider, monkeypatch, dataset)
    assert (
        short.run(
            "gold",
            "--max-tokens",
            "100",
            "--prices",
            str(prices),
            "--max-cost",
            f"{sum(worst[:7]) * 0.999:.8f}",
            "--concurrency",
            "1",
        )
        != 0
    )
