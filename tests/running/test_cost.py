"""Cost: the dry run's quote holds over a scripted run, and --max-cost stops before the call that would cross it."""

import json
import re

import pytest

from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.reports import json_table
from tests.helpers.stages import Harness


@pytest.fixture
def priced(tmp_path, provider, monkeypatch):
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps(
            {
                "eval-model": {"prompt": 1.0, "completion": 4.0},
                "DeepSeek-V4.1-Flash": {"prompt": 0.5, "completion": 2.0},
                "DeepSeek-R1": {"prompt": 2.0, "completion": 8.0},
            }
        ),
        encoding="utf-8",
    )
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4]))
    return h, prices


def spent(h, prices) -> float:
    table = json.loads(prices.read_text(encoding="utf-8"))
    models = {"eval": "eval-model", "user": "DeepSeek-V4.1-Flash", "judge": "DeepSeek-R1"}
    total = 0.0
    for path in h.root.rglob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            for role, used in json.loads(line).get("usage", {}).items():
                price = table[models[role]]
                total += (
                    used["prompt_tokens"] * price["prompt"] + used["completion_tokens"] * price["completion"]
                ) / 1e6
    return total


@pytest.mark.parametrize("stage", ["LexAwN", "DCG", "gold"])
def test_the_quote_bounds_hold_over_a_scripted_run(priced, capsys, stage):
    h, prices = priced
    assert h.run(stage, "--dry-run", "--prices", str(prices)) == 0
    out = capsys.readouterr().out
    low, high = map(
        lambda x: float(x.replace(",", "")),
        re.search(r"total: between ([\d.,]+) and ([\d.,]+)", out).groups(),
    )
    assert h.run(stage) == 0
    assert low <= spent(h, prices) <= high
    h.run_id = "again"
    # now an expected figure from the saved run
    assert h.run(stage, "--dry-run", "--prices", str(prices)) == 0
    expected = float(re.search(r"expected ~([\d.,]+)\n", capsys.readouterr().out).group(1).replace(",", ""))
    assert expected == pytest.approx(spent(h, prices), rel=0.01)


def test_max_cost_stops_before_the_call_that_would_cross_it(priced, provider, capsys):
    h, prices = priced
    # the judge's worst case alone (8 per million at max-tokens 100, plus the prompt) fits several times
    assert (
        h.run(
            "gold",
            "--concurrency",
            "1",
            "--prices",
            str(prices),
            "--max-cost",
            "0.004",
            "--max-tokens",
            "100",
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--max-cost 0.004: the next call could cost up to" in err and "left" in err
    assert spent(h, prices) <= 0.004
    made = len(provider.requests)
    assert 0 < made < 8  # it started, and stopped before the end
    saved = len(h.records("eval_results", "LJP_gold.jsonl")) if list(h.root.rglob("LJP_gold.jsonl")) else 0
    assert saved >= 1
    assert (
        h.run("gold", "--concurrency", "1", "--prices", str(prices), "--max-cost", "1", "--max-tokens", "100")
        == 0
    )


def test_max_cost_caps_every_stage_script_run_on_one_root(priced, provider, capsys):
    # "--max-cost caps the grid's total across every shard, every rerun and every stage script run on the same root":
    # LJP gold spends S under a cap of 1; DCG then, given a cap of S + a little, counts S and stops before a call
    # whose worst case would pass the cap, so the root's two stages together never spend more than it
    h, prices = priced
    capped = ("--concurrency", "1", "--prices", str(prices), "--max-tokens", "100")
    assert h.run("gold", *capped, "--max-cost", "1") == 0
    gold = spent(h, prices)
    cap = round(gold + 0.003, 6)
    capsys.readouterr()
    assert h.run("DCG", *capped, "--max-cost", str(cap)) == 2
    err = capsys.readouterr().err
    said = re.search(r"with ([\d.]+) spent and", err)
    assert said and float(said.group(1)) >= round(gold, 4), err  # the earlier stage's spending counted
    assert spent(h, prices) <= cap


def test_max_cost_needs_prices_for_every_model(priced, capsys):
    h, prices = priced
    assert h.run("gold", "--max-cost", "1") == 2
    assert "--max-cost needs --prices" in capsys.readouterr().err
    assert h.run("gold", "--max-cost", "1", "--prices", str(prices), "--judge-model", "unpriced") == 2
    assert "has no price for unpriced" in capsys.readouterr().err


def test_a_cost_that_leaves_out_calls_without_token_counts_says_so(priced, capsys):
    """A reply without usage (llama.cpp's streamed replies) is kept and counted, but its tokens are not known, so a
    cost of its calls is a lower bound: every cost cell says how many calls it leaves out (seen on a real llama.cpp
    grid: 0.0000 beside fifteen calls, as if they were free)."""
    h, prices = priced
    h.provider.usage = False  # no reply reports its tokens
    assert h.run("direct") == 0
    rows = json_table(
        capsys, "--output-root", str(h.root), "--prices", str(prices), "--table", "usage_grid_total"
    )
    calls = {row[0]: row[1] for row in rows}
    assert calls["all"] == 8  # four cases: a prediction and its extraction each
    for row in rows:
        assert row[7] == f"0.0000 (+{calls[row[0]]} calls without token counts)", row


def test_a_reply_without_token_counts_costs_its_reserved_worst_case(tmp_path, monkeypatch, capsys):
    """A server that reports no usage (llama.cpp's streams): each such call is settled at its
    worst case (its prompt at one token per character, its completion at the output limit), so the budget
    stops exactly where those worst cases cross it."""
    prices = tmp_path / "p.json"
    prices.write_text(
        json.dumps(
            {m: {"prompt": 1, "completion": 4} for m in ("eval-model", "DeepSeek-R1", "DeepSeek-V4.1-Flash")}
        )
    )
    with ScriptedProvider(usage=False) as provider:
        h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
        common = ("--limit", "2", "--concurrency", "1", "--max-tokens", "1000", "--prices", str(prices))
        assert h.run("gold", *common) == 0
        worst = [(len(r["messages"][0]["content"]) * 1 + 1000 * 4) / 1e6 for r in provider.requests]
        assert len(worst) == 4  # per case: the prediction, then its verdicts
        provider.requests = []
        h.run_id = "budget"
        capsys.readouterr()
        assert h.run("gold", *common, "--max-cost", f"{worst[0] + worst[1] + worst[2] / 2:.9f}") == 2
        assert len(provider.requests) == 2  # the third call's worst case would cross the budget
        assert "--max-cost" in capsys.readouterr().err


def role_bounds(out: str) -> dict[str, float]:
    """Each role's high bound in a dry run's cost quote."""
    return {
        role: float(high.replace(",", ""))
        for role, high in re.findall(
            r"^  (eval|user|judge) \([^)]*\): between [\d.,]+ and ([\d.,]+)", out, re.M
        )
    }


def test_the_high_bound_carries_six_replies_at_the_output_limit_into_every_prompt(priced, capsys):
    """The quote's high bound is a worst case: a forced prediction carries three clarification questions and three
    answers (3 + 3 earlier replies), each up to the output limit. Raising the output limit by 1,000 tokens raises
    each role's high bound by its calls × (6 × 1,000 prompt tokens + 1,000 completion tokens) at its prices."""
    h, prices = priced
    highs, calls = [], {}
    for limit in ("1000", "2000"):
        assert h.run("gold", "--dry-run", "--prices", str(prices), "--max-tokens", limit) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if x.startswith("calls at most"))
        calls = {role: int(n) for role, n in re.findall(r"(eval|judge) (\d+)", line)}
        highs.append(role_bounds(out))
    # the price file's prices per million tokens: eval-model 1 and 4, DeepSeek-R1 2 and 8
    by_hand = {
        "eval": calls["eval"] * (6 * 1000 * 1.0 + 1000 * 4.0) / 1e6,
        "judge": calls["judge"] * (6 * 1000 * 2.0 + 1000 * 8.0) / 1e6,
    }
    assert calls == {"eval": 4, "judge": 4}  # one prediction and one extraction per case, four cases
    for role, step in by_hand.items():
        assert highs[1][role] - highs[0][role] == pytest.approx(step, abs=0.0002), role


def test_max_cost_in_batch_mode_settles_a_collected_reply_at_the_batch_price(priced, capsys):
    """A batch's reply costs the batch price: a budget that a synchronous price would cross lets a batched stage
    finish. Gold-Standard runs in two cycles (the predictions, then the extractions); before the second, the budget
    holds what the first spent plus the second's worst case, so a cap half the first cycle's cost above that lets
    it through, and one that settled the first cycle at the synchronous (double) price would stop it."""
    h, prices = priced
    table = json.loads(prices.read_text(encoding="utf-8"))
    prices.write_text(
        json.dumps({m: p | {"batch_discount": 0.5} for m, p in table.items()}), encoding="utf-8"
    )
    batch = ("--batch", "--batch-poll", "0.01", "--max-tokens", "50", "--prices", str(prices))
    h.run_id = "clean"
    assert h.run("gold", *batch) == 0
    predictions = h.records("Force_judge_gen", "a1_force_judge.jsonl")
    first = (
        sum(
            r["usage"]["eval"]["prompt_tokens"] * 0.5 + r["usage"]["eval"]["completion_tokens"] * 2.0
            for r in predictions
        )
        / 1e6
    )
    lines = [json.loads(x) for x in b"\n".join(h.provider.files.values()).splitlines() if x]
    judged = [
        x["body"]["messages"][0]["content"]
        for x in lines
        if "method" in x and x["body"]["model"] == "DeepSeek-R1"
    ]
    assert len(judged) == 4
    # DeepSeek-R1 at the batch price: prompt 1, completion 4 per million; a prompt counted a token per character
    second_worst = sum(len(prompt) * 1.0 + 50 * 4.0 for prompt in judged) / 1e6
    cap = first + second_worst + first / 2
    h.run_id = "capped"
    capsys.readouterr()
    assert h.run("gold", *batch, "--max-cost", f"{cap:.9f}") == 0, capsys.readouterr().err
    assert len(h.records("eval_results", "LJP_gold.jsonl")) == 4


@pytest.mark.parametrize("held", [False, True])
def test_a_models_high_bound_is_at_its_peak_price_unless_it_is_held_for_off_peak(
    priced, tmp_path, capsys, held
):
    """The judge priced by the clock, three times its price from 00:00 to 23:59 UTC: the quote's high bound is the
    worst case, so the judge's is its at-peak figure, three times the off-peak one; held for off-peak, its calls are
    never sent at peak, and its high bound is the off-peak one. The low bound is off-peak either way."""
    h, prices = priced
    table = json.loads(prices.read_text(encoding="utf-8"))
    table["DeepSeek-R1"] |= {"tz": "UTC", "peak": ["00:00-23:59"], "peak_multiplier": 3}
    prices.write_text(json.dumps(table), encoding="utf-8")
    assert (
        h.run("gold", "--dry-run", "--prices", str(prices), *(["--off-peak", "judge"] if held else [])) == 0
    )
    out = capsys.readouterr().out

    def bounds(label: str) -> tuple[float, float]:
        found = re.search(rf"{label}[^\n]*?: between ([\d.,]+) and ([\d.,]+)", out)
        return float(found[1].replace(",", "")), float(found[2].replace(",", ""))

    main, off, peak = bounds(r"  judge \(DeepSeek-R1\)"), bounds("    off-peak"), bounds("    at peak")
    assert peak[1] == pytest.approx(3 * off[1], rel=1e-3)
    assert main == (off[0], off[1] if held else peak[1])
