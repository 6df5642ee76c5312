"""A grid whose judge asks for the flex tier, on runs run_grid.py wrote. OpenAI's flex tokens "are priced at Batch
API rates", and flex brings "occasional resource unavailability": the grid is billed at the flex price, to the cent,
as quote_grid.py quoted it; with 30 % of the flex requests refused as unavailable every cell completes, the judge's
window is never narrowed (a refusal is not a rate limit), and every request is processed exactly as often as in a
clean grid."""

import csv
import io
import json
import re
from collections import Counter

import pytest

import quote_grid
import run_grid
import show_results
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import SMALL_GRID_MODELS, grid_argv

# per million tokens: large, so that cents show; the judge's flex price given apart from its batch price
STANDARD = {"prompt": 2000, "completion": 8000, "batch_discount": 0.5}
JUDGE = STANDARD | {"flex_prompt": 700, "flex_completion": 2800}


@pytest.fixture
def files(tmp_path):
    prices = tmp_path / "prices.json"
    entries = {m: STANDARD for m in (*SMALL_GRID_MODELS, "DeepSeek-V4.1-Flash")} | {"DeepSeek-R1": JUDGE}
    prices.write_text(json.dumps(entries))
    return write_dataset(tmp_path / "three.json", sample_cases()[:3]), prices


def grid(root, dataset, run_id: str, *extra: str) -> list[str]:
    argv = grid_argv(root, dataset, *extra, models=SMALL_GRID_MODELS, runs=1)
    at = argv.index("--runs")
    return argv[:at] + ["--run-ids", run_id] + argv[at + 2 :]


def judge_cells(csv_text: str, table: str) -> dict[str, list[str]]:
    """A report's CSV rows of one table, by their first cell."""
    return {row[1]: row for row in csv.reader(io.StringIO(csv_text)) if row and row[0].startswith(table)}


@pytest.mark.slow
def test_a_flex_judge_is_billed_at_the_flex_price_as_quoted_and_unavailable_answers_cost_nothing_twice(
    tmp_path, http, files, capsys
):
    dataset, prices = files
    root = tmp_path / "out"
    # a clean grid at the standard tier: what the provider processes for it, and saved usage for the quote
    assert run_grid.main(grid(root, dataset, "standard")) == 0
    clean = Counter(http.processed)
    http.processed.clear()
    capsys.readouterr()

    flex = ("--judge-service-tier", "flex")
    quote = [*grid(root, dataset, "flex", *flex), "--prices", str(prices), "--format", "csv"]
    assert quote_grid.main(quote) == 0
    quoted = [
        float(row[7])  # the expected synchronous figure, from the saved runs' usage per case
        for row in csv.reader(io.StringIO(capsys.readouterr().out))
        if row and row[0].startswith("Calls at most") and row[2] == "judge"
    ]
    assert quoted

    http.flex_unavailable = 0.3
    assert run_grid.main(grid(root, dataset, "flex", *flex)) == 0
    said = capsys.readouterr()
    assert http.processed == clean  # every request of the grid, each once: the refused ones were not answered
    refused = http.statuses[429]
    assert refused >= 0.3 * sum(n for (_, tier), n in http.tiers.items() if tier == "flex") - 1
    line = next(x for x in said.err.splitlines() if "found no room" in x)
    # the judge's window was never narrowed: no refusal was taken for a rate limit
    assert f"{refused} flex requests found no room" in line and "0 rate limits (429)" in line
    assert re.search(r"window (\d+) of \1$", line)

    check_the_judge_is_billed_at_the_flex_price(root, prices, quoted, capsys)
    assert re.search(r"judge \d+ calls/\d+\+\d+ tokens \(\d+ served at the flex tier\)", said.err)


def check_the_judge_is_billed_at_the_flex_price(root, prices, quoted: list[float], capsys) -> None:
    """The report's judge cost is the flex price of the judge's tokens, summed by hand from the records, and the
    sum of the quote's expected figures."""
    assert (
        show_results.main(
            ["--output-root", str(root), "--run-id", "flex", "--prices", str(prices), "--format", "csv"]
        )
        == 0
    )
    report = capsys.readouterr().out
    judge = judge_cells(report, "Spent so far")["judge"]
    tokens = [
        json.loads(line)["usage"].get("judge", {})
        for path in root.glob("*/flex/*/*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    prompt = sum(u.get("prompt_tokens", 0) for u in tokens)
    completion = sum(u.get("completion_tokens", 0) for u in tokens)
    assert sum(u.get("flex:calls", 0) for u in tokens) == sum(u.get("calls", 0) for u in tokens) > 0
    # the flex price, neither the standard nor the batch one
    by_hand = (prompt * 700 + completion * 2800) / 1e6
    assert float(judge[-2].replace(",", "")) == pytest.approx(by_hand, abs=0.005)
    # each quoted figure rounded to the cent
    assert sum(quoted) == pytest.approx(by_hand, abs=0.01 * len(quoted))


@pytest.mark.slow
def test_a_grid_files_service_tier_is_asked_by_every_role_using_that_model(tmp_path, http, files):
    dataset, _ = files
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text('[limits."DeepSeek-R1"]\nservice_tier = "flex"\n', encoding="utf-8")
    argv = grid(tmp_path / "out", dataset, "r1", "--grid", str(grid_file), "--stages", "eval_DCG")
    assert run_grid.main(argv) == 0
    tiers = Counter((r["model"], r.get("service_tier")) for r in http.requests)
    assert {model for model, tier in tiers if tier == "flex"} == {"DeepSeek-R1"}
    assert tiers[("DeepSeek-R1", None)] == 0 and tiers[("DeepSeek-R1", "flex")] > 0


def test_a_grid_whose_judge_refuses_the_tier_stops_its_cells_in_one_line_paying_no_judge_call(
    tmp_path, http, files, capsys
):
    # "A 400 refusing the tier stops that role at once with one line naming the model and the option to drop."
    dataset, _ = files
    http.flex_refused = {"DeepSeek-R1"}
    argv = grid(tmp_path / "out", dataset, "r1", "--judge-service-tier", "flex", "--stages", "eval_DCG")
    status = run_grid.main(argv)
    err = capsys.readouterr().err
    (said,) = [line for line in err.splitlines() if line.startswith("[grid] 2 cells failed: ")]
    assert status != 0 and "Traceback" not in err, err
    assert "judge 'DeepSeek-R1'" in said and "does not take service tier 'flex'" in said
    assert "drop --judge-service-tier" in said and "(model-a r1 DCG, model-b r1 DCG)" in said
    assert not [r for r in http.requests if r["model"] == "DeepSeek-R1" and r.get("service_tier") != "flex"]
    assert http.tiers[("DeepSeek-R1", "flex")] == 0  # refused, never answered: no judge call paid
