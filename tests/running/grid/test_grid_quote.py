"""The quote for a whole grid and the grid's spending so far, on a grid the stage scripts wrote with the scripted
provider.

The grid quote's call counts are "equal to the sum of each stage's `--dry-run` counts for the same grid, its
bounds bracketing what a scripted grid run then reports, and already-saved cases excluded"; "`show_results.py
--usage --prices` sums over every run and model shown, with the unanswered (paid, never answered) calls and the
batch share, so spent + quote for the rest = the grid's total".
"""

import csv
import io
import json
import math
import re

import pytest

import quote_grid
import show_results
from lexpilot.protocols.catalog import PAPER_GRID
from lexpilot.running.stage import stage_main
from lexpilot.scripted.replies import PrefixCache
from lexpilot.storage.code import CodeNow
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import SECRET

MODELS = ("model-a", "model-b")
RUNS = ("r1", "r2")
PAPER_STAGES = [stage for stages in PAPER_GRID.values() for stage in stages]
ENTRY = {"prompt": 2000, "completion": 8000, "cached_prompt": 500, "batch_discount": 0.5}  # large: cents show
ROLE_MODELS = {"user": "DeepSeek-V4.1-Flash", "judge": "DeepSeek-R1"}


def grid_files(grid, prices: bool = True) -> list[str]:
    """The grid fixture's dataset and output root (and price file) as options."""
    files = ["--dataset", str(grid["dataset"]), "--output-root", str(grid["root"])]
    return files + (["--prices", str(grid["prices"])] if prices else [])


@pytest.fixture
def grid(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never reached: clients are in memory
    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({m: ENTRY for m in (*MODELS, "model-c", *ROLE_MODELS.values())}))
    return {"dataset": dataset, "root": tmp_path / "out", "prices": prices}


def stage_argv(grid, model, run_id, *extra):
    return [
        "--run-id",
        run_id,
        "--model",
        model,
        *grid_files(grid, prices=False),
        *extra,
    ]


def run(grid, provider, stage, model, run_id, *extra) -> int:
    return stage_main(
        stage, "test", argv=stage_argv(grid, model, run_id, *extra), clients=provider.in_memory_clients()
    )


def quote(grid, capsys, *extra) -> tuple[dict, list[str]]:
    """(stage, role) -> {"calls", "sync": [low, high, expected], "batch": [...]} from the quote's CSV, and its
    closing lines (the grid's models and runs unless `extra` names others)."""
    capsys.readouterr()
    grid_names = [] if "--models" in extra else ["--models", *MODELS, "--run-ids", *RUNS]
    assert (
        quote_grid.main(
            [
                *grid_names,
                "--stages",
                "paper",
                *grid_files(grid),
                "--format",
                "csv",
                *extra,
            ]
        )
        == 0
    )
    rows, notes = {}, []
    for row in filter(None, csv.reader(io.StringIO(capsys.readouterr().out))):  # print() adds an empty line
        if row[0].startswith("Calls at most") and row[1] != "header":
            money = [None if v == "none" else float(v) for v in row[5:11]]
            rows[(row[1], row[2])] = {
                "calls": int(row[4].replace(",", "")),
                "sync": money[:3],
                "batch": money[3:],
            }
        elif row[0].startswith("Time, and what") and row[1] != "header":
            notes.append(row[1])
    return rows, notes


def dry_run_calls(grid, capsys, stage, model, run_id) -> dict:
    capsys.readouterr()
    assert stage_main(stage, "test", argv=stage_argv(grid, model, run_id, "--dry-run")) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("calls at most"))
    return {role: int(n) for role, n in re.findall(r"(eval|user|judge) (\d+)", line)}


def test_a_fresh_grid_is_every_case_at_its_most_calls(grid, capsys):
    rows, _ = quote(grid, capsys)
    # per case, by the protocol: LexAwN a1 on both histories (eval 2), LCA on both (judge 2), up to three
    # clarification rounds (eval 3, user 3, judge 2: each reply after the first is labelled); DCG two forced
    # questions (eval 2), the plaintiff's one answer between them (user 1), each judged (judge 2); Direct and
    # Gold-Standard one prediction and one extraction each; Interaction-Based one extraction
    per_case = {
        ("LexAwN", "eval"): 5,
        ("LexAwN", "user"): 3,
        ("LexAwN", "judge"): 4,
        ("DCG", "eval"): 2,
        ("DCG", "user"): 1,
        ("DCG", "judge"): 2,
        ("LJP direct", "eval"): 1,
        ("LJP direct", "judge"): 1,
        ("LJP gold", "eval"): 1,
        ("LJP gold", "judge"): 1,
        ("LJP interaction", "judge"): 1,
    }
    jobs_times_cases = len(MODELS) * len(RUNS) * 3
    assert {key: row["calls"] for key, row in rows.items() if key[0] != "total"} == {
        key: n * jobs_times_cases for key, n in per_case.items()
    }
    assert rows[("total", "")]["calls"] == 22 * jobs_times_cases
    # no saved run yet: no expected figure; the batch bounds are half the synchronous ones
    assert all(row["sync"][2] is None for row in rows.values())
    sync, batch = rows[("total", "")]["sync"][:2], rows[("total", "")]["batch"][:2]
    assert batch == pytest.approx([v / 2 for v in sync], abs=0.01)
    assert 0 < sync[0] < sync[1]


@pytest.mark.slow
def test_a_quote_and_a_stage_opening_each_read_the_projects_code_once(grid, provider, capsys, monkeypatch):
    """The code a manifest records and the code it is compared on are one reading of the project (its files' times
    and sizes): once for a whole quote (12 parts here), once as a stage opens (its manifest built, then checked)."""
    reads, read = [], CodeNow.read.__func__
    monkeypatch.setattr(
        CodeNow, "read", classmethod(lambda cls, root=None: reads.append(root) or read(cls, root))
    )
    quote(grid, capsys)
    assert len(reads) == 1
    for opening in (2, 3):  # the run's first opening, then its rerun (the saved manifest compared)
        assert run(grid, provider, PAPER_STAGES[0], "model-a", "r1") == 0
        assert len(reads) == opening


@pytest.mark.slow
def test_the_quote_sums_the_dry_runs_brackets_the_grid_run_and_leaves_saved_cases_out(grid, provider, capsys):
    # a provider that caches short prefixes: the bill shrinks
    provider.cache = PrefixCache(minimum=64, step=64)
    for model in MODELS:  # LexAwN done everywhere, so that every stage's own dry run can count
        for run_id in RUNS:
            assert run(grid, provider, PAPER_STAGES[0], model, run_id) == 0
    # DCG done for one job, its last judging lost
    assert run(grid, provider, PAPER_STAGES[1], "model-a", "r1") == 0
    dcg = next((grid["root"] / "eval_results" / "r1").glob("*/DCG_results.jsonl"))
    dcg.write_text("".join(dcg.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")
    capsys.readouterr()
    assert (
        show_results.main(
            ["--output-root", str(grid["root"]), "--prices", str(grid["prices"]), "--format", "csv"]
        )
        == 0
    )
    spent_before = grid_cost(capsys.readouterr().out)

    rows, notes = quote(grid, capsys)
    assert {key: row["calls"] for key, row in rows.items() if key[0] != "total"} == dry_runs_summed(
        grid, capsys
    )
    # three jobs of three cases, and one lost record (2 questions)
    assert rows[("DCG", "judge")]["calls"] == 3 * 3 * 2 + 2
    # the lost record's two questions are saved: not bought again
    assert rows[("DCG", "eval")]["calls"] == 3 * 3 * 2
    assert ("LexAwN", "eval") not in rows  # saved everywhere: nothing to quote
    assert rows[("LJP gold", "eval")]["sync"][2] is None  # no saved run of Gold-Standard yet

    processed = sum(provider.processed.values())
    for stage in PAPER_STAGES[1:]:
        for model in MODELS:
            for run_id in RUNS:
                assert run(grid, provider, stage, model, run_id) == 0
    made = sum(provider.processed.values()) - processed
    assert made <= rows[("total", "")]["calls"]
    capsys.readouterr()
    assert (
        show_results.main(
            ["--output-root", str(grid["root"]), "--prices", str(grid["prices"]), "--format", "csv"]
        )
        == 0
    )
    spent = grid_cost(capsys.readouterr().out) - spent_before
    low, high, _ = rows[("total", "")]["sync"]
    assert low <= spent <= high

    rows, _ = quote(grid, capsys)  # finished: nothing left to quote
    assert rows[("total", "")]["calls"] == 0

    check_a_new_models_cases_cost_a_saved_cases_average(grid, capsys)


def check_a_new_models_cases_cost_a_saved_cases_average(grid, capsys) -> None:
    """A new model's three cases are expected to cost what a saved case cost on average (every run and model)."""
    rows, _ = quote(grid, capsys, "--models", "model-c", "--run-ids", "r3")
    gold = [
        json.loads(line)
        for path in grid["root"].glob("eval_results/*/*/LJP_gold.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    assert len(gold) == 12
    prompt = sum(r["usage"]["judge"]["prompt_tokens"] for r in gold) / 12
    cached = sum(r["usage"]["judge"]["cached_prompt_tokens"] for r in gold) / 12
    completion = sum(r["usage"]["judge"]["completion_tokens"] for r in gold) / 12
    assert cached > 0  # the cached share the saved runs were served is part of the expected figure
    by_hand = 3 * ((prompt - cached) * 2000 + cached * 500 + completion * 8000) / 1e6
    assert rows[("LJP gold", "judge")]["sync"][2] == pytest.approx(by_hand, abs=0.006)
    assert rows[("LJP gold", "judge")]["batch"][2] == pytest.approx(by_hand / 2, abs=0.006)


def dry_runs_summed(grid, capsys) -> dict[tuple[str, str], int]:
    """(stage, role) -> the calls every stage's own dry run counts, summed over the grid's models and runs."""
    expected = {}
    for stage in PAPER_STAGES:
        for model in MODELS:
            for run_id in RUNS:
                for role, n in dry_run_calls(grid, capsys, stage, model, run_id).items():
                    if n:
                        expected[(stage.name, role)] = expected.get((stage.name, role), 0) + n
    return expected


def grid_cost(csv_text: str) -> float:
    """The 'all' row's cost in the grid total of show_results' CSV."""
    for row in csv.reader(io.StringIO(csv_text)):
        if row[0].startswith("Spent so far") and row[1] == "all":
            return float(row[-2].replace(",", ""))
    raise AssertionError("no grid total in the report")


def test_the_wall_time_follows_the_chains_the_concurrency_and_each_endpoints_rate_limit(grid, capsys):
    # a job's calls in a row per case: LexAwN 5 + 3 + 4 = 12, DCG 5, Direct 2, Gold-Standard 2, Interaction-Based 1
    _, notes = quote(grid, capsys, "--seconds-per-call", "10")
    # 22 calls × 10 s = 220 s
    assert any("4 of 4 (model, run) jobs at once: 3.7 min" in line for line in notes)
    # in batch mode a cycle per call in a row; run_grid.py runs a run's stages side by side, and only
    # Interaction-Based LJP reads another's records (LexAwN's): 12 + 1 = 13 (test_run_grid_batch.py counts them)
    assert any(
        "batch mode: at most 13 cycles for the slowest job with run_grid.py --batch, 22 with its stages one after "
        "another (stage scripts)" in line
        for line in notes
    ), notes
    _, notes = quote(grid, capsys, "--seconds-per-call", "10", "--concurrency", "2", "--jobs", "1")
    # three cases two at a time: two waves per stage, 440 s per job, four jobs one after another: 1,760 s
    assert any("estimated: 29.3 min" in line and "1 of 4" in line for line in notes)
    _, notes = quote(grid, capsys, "--seconds-per-call", "10", "--rate-limit", "DeepSeek-R1=6")
    # the judge serves every job: 9 calls per case × 12 = 108 calls at 6 a minute = 18 min, longer than the chains
    assert any(
        "estimated: 18.0 min" in line and "DeepSeek-R1 at 6 requests/min: 18.0 min" in line for line in notes
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stages", "eval_nothing"], "unknown stage 'eval_nothing'"),
        (
            ["--rate-limit", "DeepSeek-R1=fast"],
            "--rate-limit 'DeepSeek-R1=fast': must be MODEL=REQUESTS_PER_MINUTE",
        ),
        (["--no-such-flag"], "--no-such-flag: not an option of any chosen stage"),
        (["--run-id", "x"], "--run-id: a grid names its runs and models with --run-ids/--runs and --models"),
        (["--mod", "x"], "--mod x: not an option of any chosen stage"),  # no abbreviation stands for --model
        (["--limit", "-1"], "argument --limit: -1 is outside 1 to"),
        (["--rate-limit", "Nobody=5"], "--rate-limit Nobody: no role of this grid uses that model id"),
    ],
)
def test_a_wrong_quote_command_is_one_line(grid, capsys, args, message):
    assert quote_grid.main(["--models", "m", "--dataset", str(grid["dataset"]), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_grid_total_sums_every_run_with_unanswered_calls_and_the_batch_share(grid, provider, capsys):
    provider.cache = lambda prompt: {"prompt_tokens_details": {"cached_tokens": 100}}
    gold = PAPER_STAGES[3]
    assert run(grid, provider, gold, "model-a", "r1") == 0
    assert run(grid, provider, gold, "model-b", "r1", "--batch", "--batch-poll", "0.01") == 0
    folder = next(
        (grid["root"] / "runs" / "r1").glob("*/manifest.json")
    ).parent  # a kill left a call in flight
    (folder / "unanswered_calls.json").write_text(json.dumps({"judge": 1}))
    records = [
        (path, json.loads(line))
        for top in ("Force_judge_gen", "eval_results")
        for path in grid["root"].glob(f"{top}/r1/*/*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert len(records) == 12
    calls = sum(u["calls"] for _, r in records for u in r["usage"].values())
    batched = sum(u.get("batched_calls", 0) for _, r in records for u in r["usage"].values())
    assert batched == calls / 2  # model-b's six records were answered through the batch API
    by_hand = sum(
        (
            (u["prompt_tokens"] - u["cached_prompt_tokens"]) * 2000
            + u["cached_prompt_tokens"] * 500
            + u["completion_tokens"] * 8000
        )
        / 1e6
        * (0.5 if u.get("batched_calls") else 1)
        for _, r in records
        for u in r["usage"].values()
    )
    capsys.readouterr()
    assert (
        show_results.main(
            ["--output-root", str(grid["root"]), "--prices", str(grid["prices"]), "--format", "csv"]
        )
        == 0
    )
    out = capsys.readouterr().out
    row = next(r for r in csv.reader(io.StringIO(out)) if r[0].startswith("Spent so far") and r[1] == "all")
    assert row[2:5] == [str(calls), "1", "50.0"]  # the batch share, in percent, every digit in the CSV
    assert float(row[-2]) == pytest.approx(by_hand, abs=0.006)
    assert grid_cost(out) == pytest.approx(by_hand, abs=0.006)
    # every call reported 100 cached prompt tokens: each saved (2000 − 500) per million, half that when batched
    assert float(row[-1]) == pytest.approx(
        sum(
            100 * u["calls"] * 1500 / 1e6 * (0.5 if u.get("batched_calls") else 1)
            for _, r in records
            for u in r["usage"].values()
        ),
        abs=0.006,
    )


def test_a_stage_that_would_refuse_is_named_and_the_quote_says_so_in_its_status(grid, provider, capsys):
    # other settings
    assert run(grid, provider, PAPER_STAGES[3], "model-a", "r1", "--temperature", "0.2") == 0
    capsys.readouterr()
    status = quote_grid.main(
        [
            "--models",
            *MODELS,
            "--run-ids",
            *RUNS,
            "--stages",
            "eval_LJP_gold",
            *grid_files(grid, prices=False),
            "--format",
            "csv",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "not counted: LJP gold, model 'model-a', run r1" in out and "temperature" in out
    total = next(
        r for r in csv.reader(io.StringIO(out)) if r and r[0].startswith("Calls at most") and r[1] == "total"
    )
    assert total[4] == str(3 * 3 * 2)  # the three other jobs' three cases, two calls each


def test_the_batch_columns_send_only_the_roles_batch_roles_names(grid, capsys):
    rows, _ = quote(grid, capsys, "--models", "model-a", "--run-ids", "r1", "--batch-roles", "eval")
    eval_row, judge_row = rows[("LJP gold", "eval")], rows[("LJP gold", "judge")]
    assert eval_row["batch"][:2] == pytest.approx([v / 2 for v in eval_row["sync"][:2]], abs=0.01)
    assert judge_row["batch"][:2] == judge_row["sync"][:2]  # the judge stays synchronous, at its own price


def test_one_reason_refusing_every_cell_is_one_line_over_no_table(grid, provider, capsys):
    """ "A stage refused for the same reason in every cell is one line with a count, not 32 copies
    of a 420-character line over an empty table"."""
    for model in MODELS:
        for run_id in RUNS:
            assert run(grid, provider, PAPER_STAGES[3], model, run_id, "--temperature", "0.2") == 0
    capsys.readouterr()
    status = quote_grid.main(
        [
            "--models",
            *MODELS,
            "--run-ids",
            *RUNS,
            "--stages",
            "eval_LJP_gold",
            *grid_files(grid, prices=False),
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "Calls at most" not in out and "Per evaluated model" not in out  # no empty table
    refused = [line for line in out.splitlines() if "not counted" in line]
    assert len(refused) == 1 and "not counted: 4 of 4 parts (LJP gold), for one reason" in refused[0]
    assert "temperature" in out and "nothing counted" in out


def test_money_has_the_decimals_its_smallest_amount_needs(grid, capsys, tmp_path):
    """ "Money has as many decimals as the smallest amount needs (`0.00` hides the sample's
    quote)": two significant digits of the smallest amount, every amount at that precision, the CSV whole."""
    cheap = tmp_path / "cheap.json"
    cheap.write_text(
        json.dumps({m: {"prompt": 0.01, "completion": 0.04} for m in (*MODELS, *ROLE_MODELS.values())})
    )
    rows, _ = quote(grid, capsys, "--prices", str(cheap))
    amounts = [v for row in rows.values() for mode in ("sync", "batch") for v in row[mode] if v]
    smallest = min(amounts)
    digits = max(2, 1 - math.floor(math.log10(smallest)))  # by hand: 0.0016 needs 4, 0.000123 needs 5
    assert smallest < 0.005 and digits > 2  # at 2 decimals the smallest would print as 0.00
    capsys.readouterr()
    assert (
        quote_grid.main(
            [
                "--models",
                *MODELS,
                "--run-ids",
                *RUNS,
                "--stages",
                "paper",
                *grid_files(grid, prices=False),
                "--prices",
                str(cheap),
                "--width",
                "0",
            ]
        )
        == 0
    )
    total = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("total"))
    low, high = rows[("total", "")]["sync"][:2]
    assert total.split()[2:4] == [f"{low:.{digits}f}", f"{high:.{digits}f}"]


def test_the_quote_takes_width_as_show_results_does(grid, capsys):
    capsys.readouterr()
    assert (
        quote_grid.main(
            [
                "--models",
                *MODELS,
                "--run-ids",
                *RUNS,
                "--stages",
                "paper",
                *grid_files(grid),
                "--width",
                "80",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("Calls at most")))
    blocks = [i for i in range(first, len(lines)) if re.fullmatch(r"\(\d/\d\)", lines[i])][:2]
    assert len(blocks) == 2
    assert all(lines[i + 1].split()[:2] == ["Stage", "Role"] for i in blocks)  # the key columns in each block


def test_a_grid_of_non_ideal_users_quotes_only_the_stages_that_take_them(grid, capsys):
    """`--user-condition delayed` once counted DCG, LJP direct and gold and the analyses for new run
    ids, stages that refuse a run with a non-ideal user. Only LexAwN, the Interaction-Based LJP and the audit are
    counted; the rest is one line."""
    capsys.readouterr()
    status = quote_grid.main(
        [
            "--models",
            *MODELS,
            "--run-ids",
            *RUNS,
            "--stages",
            "all",
            "--user-condition",
            "delayed",
            *grid_files(grid, prices=False),
            "--format",
            "csv",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1  # some chosen stages are not counted
    counted = {
        r[1]
        for r in csv.reader(io.StringIO(out))
        if r and r[0].startswith("Calls at most") and r[1] not in ("header", "total")
    }
    assert counted == {"LexAwN", "LJP interaction", "audit"}
    refused = [line for line in out.splitlines() if "not counted: " in line]
    assert (
        len(refused) == 1
        and "takes only LexAwN_gen.py, eval_LJP_interaction.py, audit_simulator.py" in refused[0]
    )


# ----------------------------------------------------------------------------- ids given twice


@pytest.mark.parametrize("flag,values", [("--models", ["m", "m"]), ("--run-ids", ["r9", "r9"])])
def test_quote_grid_refuses_an_id_given_twice(tmp_path, capsys, flag, values):
    """An id given twice is refused in one line (--models m m counted 1,056 calls against 528)."""
    argv = [
        "--models",
        "m",
        "--run-ids",
        "r1",
        "--stages",
        "eval_LJP_gold",
        "--limit",
        "1",
        "--output-root",
        str(tmp_path),
    ]
    argv[argv.index(flag) + 1 : argv.index(flag) + 2] = values
    assert quote_grid.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"quote_grid: {flag}: {values[0]!r} is given twice; name each once"]


@pytest.mark.parametrize("flag", ["--models", "--run-ids"])
def test_quote_grid_adds_a_repeated_flag_to_the_first(tmp_path, capsys, flag):
    """`--models a --models b` quoted only b, in silence: each flag adds to the list."""
    values = {"--models": ["a", "b"], "--run-ids": ["r1", "r2"]}[flag]
    other = ["--run-ids", "r1"] if flag == "--models" else ["--models", "a"]
    argv = [
        flag,
        values[0],
        flag,
        values[1],
        *other,
        "--stages",
        "eval_LJP_gold",
        "--limit",
        "1",
        "--dataset",
        "data/LexPilot_sample.json",
        "--output-root",
        str(tmp_path),
        "--format",
        "csv",
    ]
    assert quote_grid.main(argv) == 0
    out = capsys.readouterr().out
    import csv
    import io

    total = next(
        r for r in csv.reader(io.StringIO(out)) if r and r[0].startswith("Calls at most") and r[1] == "total"
    )
    assert total[4] == str(2 * 2)  # two parts of one case, two calls each (prediction, extraction)
