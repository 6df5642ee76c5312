"""Cached prompt tokens: read from each provider's field, synchronously, streamed and in batch
output lines, kept per role in every record, priced at the cached-input price, and settled at that price by
--max-cost. A reply without a cached field is priced as before."""

import json
import threading

import pytest

import show_results
from lexpilot.models.calls import ModelCaller
from lexpilot.models.usage import Usage
from lexpilot.pricing import Budget, read_prices
from lexpilot.running.stage import Progress
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

OPENAI = lambda prompt: {"prompt_tokens_details": {"cached_tokens": 100}}  # noqa: E731
DEEPSEEK = lambda prompt: {"prompt_cache_hit_tokens": 100, "prompt_cache_miss_tokens": len(prompt) - 100}  # noqa: E731
PRICES = {"prompt": 2, "completion": 8, "cached_prompt": 0.5}


def price_file(tmp_path, entry=PRICES):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({m: entry for m in ("eval-model", "DeepSeek-R1", "DeepSeek-V4.1-Flash")}))
    return path


BATCH = ("--batch", "--batch-poll", "0.01")


@pytest.mark.parametrize(
    "report, extra, batch_discount",
    [
        (OPENAI, (), 0),
        (DEEPSEEK, (), 0),
        (OPENAI, ("--stream",), 0),
        (DEEPSEEK, ("--stream",), 0),
        (DEEPSEEK, BATCH, 0),
        (OPENAI, BATCH, 0),
        (OPENAI, BATCH, 0.5),
    ],
)
def test_cached_tokens_are_recorded_per_role_and_priced_at_the_cached_rate(
    tmp_path, provider, monkeypatch, capsys, report, extra, batch_discount
):
    provider.cache = report
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    assert h.run("gold", *extra) == 0
    records = h.records("Force_judge_gen", "a1_force_judge.jsonl") + h.records(
        "eval_results", "LJP_gold.jsonl"
    )
    for record in records:  # every call of this stage reported 100 cached prompt tokens
        assert all(u["cached_prompt_tokens"] == 100 * u["calls"] for u in record["usage"].values())
    totals = {}
    for record in records:
        for role, u in record["usage"].items():
            t = totals.setdefault(role, [0, 0, 0, 0])
            for i, k in enumerate(("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "calls")):
                t[i] += u[k]
    # by hand: a batch discount takes its share off every price, the cached one included (batched calls only)
    factor = 1 - batch_discount if extra == BATCH else 1
    expected = sum(((p - c) * 2 + c * 0.5 + o * 8) / 1e6 for p, o, c, _ in totals.values()) * factor
    capsys.readouterr()
    entry = {**PRICES, "batch_discount": batch_discount}
    assert (
        show_results.main(["--output-root", str(h.root), "--prices", str(price_file(tmp_path, entry))]) == 0
    )
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("eval-model  r1"))
    assert float(row.split()[-1]) == pytest.approx(expected, abs=1e-4)
    assert "prompt tokens cached" in row


def test_a_reply_without_a_cached_field_costs_the_prompt_price(tmp_path, provider, monkeypatch, capsys):
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    assert h.run("gold") == 0
    records = h.records("Force_judge_gen", "a1_force_judge.jsonl") + h.records(
        "eval_results", "LJP_gold.jsonl"
    )
    assert not any("cached_prompt_tokens" in u for r in records for u in r["usage"].values())
    expected = sum(
        (u["prompt_tokens"] * 2 + u["completion_tokens"] * 8) / 1e6
        for r in records
        for u in r["usage"].values()
    )
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--prices", str(price_file(tmp_path))]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("eval-model  r1"))
    assert float(row.split()[-1]) == pytest.approx(expected, abs=1e-4)


def test_a_price_file_without_a_cached_price_prices_cached_tokens_in_full(tmp_path):
    prices = read_prices(price_file(tmp_path, {"prompt": 2, "completion": 8}))
    from lexpilot.pricing import cost

    assert cost(prices["eval-model"], 1000, 10, cached_tokens=400) == pytest.approx((1000 * 2 + 10 * 8) / 1e6)
    discounted = read_prices(price_file(tmp_path, {"prompt": 2, "completion": 8, "cache_discount": 0.75}))
    assert cost(discounted["eval-model"], 1000, 10, cached_tokens=400) == pytest.approx(
        (600 * 2 + 400 * 0.5 + 10 * 8) / 1e6
    )


def test_max_cost_settles_a_cached_reply_at_its_real_cost(tmp_path, provider, monkeypatch):
    from lexpilot.settings import Settings, Spending, Transport, resolve_roles
    from tests.helpers.calls import role_args

    provider.cache = OPENAI
    prices = read_prices(price_file(tmp_path))
    roles = resolve_roles(
        role_args(model="eval-model", max_tokens=100),
        {"OPENAI_BASE_URL": provider.base_url, "OPENAI_API_KEY": "k"},
    )
    settings = Settings(
        run_id="r",
        dataset=None,
        output_root=None,
        limit=None,
        roles=roles,
        max_tokens=100,
        transport=Transport(retries=0, concurrency=1),
        spending=Spending(prices, 1.0),
    )
    caller = ModelCaller(
        settings,
        Progress("t", 1, stream=open("/dev/null", "w")),
        threading.Event(),
        provider.in_memory_clients(),
    )
    assert isinstance(caller.budget, Budget)
    reply = caller.chat("eval", "x" * 500, Usage())
    assert reply.cached_tokens == 100
    p, c = reply.prompt_tokens, reply.completion_tokens
    assert caller.budget.spent == pytest.approx(((p - 100) * 2 + 100 * 0.5 + c * 8) / 1e6)
    assert caller.budget.reserved == pytest.approx(0)


def test_a_prompt_the_case_alone_fixes_is_served_from_the_cache_in_the_next_run(
    tmp_path, provider, monkeypatch
):
    """ "Direct and Gold-Standard send the same prompt in every run", and "every interaction round
    resends the growing history": measured with the scripted provider playing a prefix cache (bench/caching.py)."""
    from bench.caching import cached_shares, run_grid
    from lexpilot.scripted.replies import PrefixCache

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    provider.cache = PrefixCache(minimum=64, step=64)  # DeepSeek-like: short prefixes count
    run_grid(tmp_path, provider, runs=2, limit=2)
    direct = {
        run: [
            json.loads(line)
            for line in next(tmp_path.glob(f"Force_judge_gen/{run}/*/a1_direct.jsonl"))
            .read_text(encoding="utf-8")
            .splitlines()
        ]
        for run in ("run1", "run2")
    }
    for record in direct["run2"]:  # the whole prompt was sent in run 1: cached to its last 64-token step
        used = record["usage"]["eval"]
        assert used["cached_prompt_tokens"] == used["prompt_tokens"] // 64 * 64
    shares = cached_shares(tmp_path)
    # a later round's prompt starts with the earlier round's: the interaction's evaluated model hits the cache within
    # a run, more than its first prompt (a1, the same instruction before another history) does across cases
    share = lambda key: shares[key]["cached"] / shares[key]["prompt"]  # noqa: E731
    assert share(("run1", "interaction.jsonl", "eval")) > share(("run1", "a1.jsonl", "eval"))
    assert share(("run2", "a1.jsonl", "eval")) > 0.9 > share(("run1", "a1.jsonl", "eval"))
