"""Hardening, round four (issue 34): files that were accepted but wrong, and the one-liners (items 5-7, 10-12, 15).
Each refusal is one line naming the file and entry, before any call."""

import json
import os
import subprocess
import sys

import pytest

import quote_grid
import show_results
import user_probes
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT
from tests.helpers.processes import as_at_a_terminal
from tests.helpers.stages import SECRET

MODELS = ("eval-model", "DeepSeek-V4.1-Flash", "DeepSeek-R1")


def price_file(tmp_path, text: str):
    path = tmp_path / "prices.json"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = '{"prompt": 1, "completion": 4}'
BAD_PRICES = {
    # item 5: the last key would win silently (judge cost 0.0016 instead of 0.0162)
    "a price given twice": (
        '{"DeepSeek-R1": {"prompt": 10, "completion": 40, "prompt": 1}}',
        "entry 'DeepSeek-R1' gives 'prompt' twice (JSON keeps only the last)",
    ),
    "a model given twice": (
        '{"DeepSeek-R1": %s, "DeepSeek-R1": {"prompt": 2, "completion": 8}}' % GOOD,
        "model 'DeepSeek-R1' is given twice",
    ),
    # item 5: sums overflow to nan
    "a huge price": (
        '{"DeepSeek-R1": {"prompt": 1e308, "completion": 4}}',
        "prompt must be a number from 0 to 10000",
    ),
    "above the bound": (
        '{"DeepSeek-R1": {"prompt": 10001, "completion": 4}}',
        "prompt must be a number from 0 to 10000",
    ),
    # item 15
    "a negative discount": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "batch_discount": -0.5}}',
        "batch_discount must be a number from 0 to 1",
    ),
    "a discount above 1": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "cache_discount": 1.5}}',
        "cache_discount must be a number from 0 to 1",
    ),
    "prompt true": (
        '{"DeepSeek-R1": {"prompt": true, "completion": 4}}',
        "prompt must be a number from 0 to 10000",
    ),
    # review: a misspelt key priced nothing; two ways to give one price left a guess
    "a misspelt key": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "cached_promt": 0.5}}',
        "'cached_promt' is not a price key",
    ),
    "a discount and a price": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "batch_discount": 0.5, "batch_prompt": 0.4}}',
        "give batch_prompt or batch_discount, not both",
    ),
}


@pytest.mark.parametrize("name", BAD_PRICES)
@pytest.mark.parametrize("reader", ["--dry-run", "quote_grid.py", "--usage"])
def test_a_wrong_price_file_is_refused_in_one_line_by_every_reader(
    harness, provider, tmp_path, capsys, name, reader
):
    text, message = BAD_PRICES[name]
    path = price_file(tmp_path, text)
    if reader == "--dry-run":
        status = harness.run("gold", "--limit", "1", "--dry-run", "--prices", str(path))
    elif reader == "quote_grid.py":
        status = quote_grid.main(
            [
                "--models",
                "eval-model",
                "--runs",
                "1",
                "--stages",
                "eval_LJP_gold",
                "--limit",
                "1",
                "--dataset",
                str(harness.dataset),
                "--prices",
                str(path),
                "--output-root",
                str(harness.root),
            ]
        )
    else:
        assert harness.run("gold", "--limit", "1") == 0
        capsys.readouterr()
        status = show_results.main(["--output-root", str(harness.root), "--usage", "--prices", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert str(path) in err[0] and message in err[0] and "nan" not in err[0]
    assert not provider.requests or reader == "--usage"


def test_a_good_price_file_still_reads(harness, tmp_path, capsys):
    path = price_file(
        tmp_path,
        json.dumps(
            {m: {"prompt": 1, "completion": 4, "batch_discount": 0.5, "cache_discount": 0} for m in MODELS}
        ),
    )
    assert harness.run("gold", "--limit", "1", "--dry-run", "--prices", str(path)) == 0


@pytest.mark.parametrize("flag,values", [("--models", ["m", "m"]), ("--run-ids", ["r9", "r9"])])
def test_quote_grid_refuses_an_id_given_twice(tmp_path, capsys, flag, values):
    """Item 7: --models m m counted 1,056 calls against 528."""
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


@pytest.mark.parametrize(
    "script,argv,said",
    [
        (show_results.main, ["--ci", "--seed", "-1"], "argument --seed: -1 is outside 0 to 1000000000"),
        (
            user_probes.main,
            ["template", "--per-cause", "-1", "--dataset", "data/LexPilot_sample.json"],
            "argument --per-cause: -1 is outside 1 to 1000000",
        ),
    ],
)
def test_a_negative_seed_or_sample_size_is_one_line(script, argv, said, capsys):
    """Item 10: numpy's SeedSequence refused a negative seed with a traceback, and random.sample a negative
    --per-cause (review)."""
    with pytest.raises(SystemExit) as stop:
        script(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and "Traceback" not in err


def cells(row: str) -> list[str]:
    """A GitHub-flavoured Markdown table row split as cmark-gfm splits it: a backslash escapes the next character,
    and every other `|` ends a cell."""
    out, cell, i = [], "", 0
    row = row.strip()[1:-1] if row.strip().startswith("|") else row
    while i < len(row):
        if row[i] == "\\" and i + 1 < len(row):
            cell, i = cell + row[i : i + 2], i + 2
            continue
        if row[i] == "|":
            out.append(cell)
            cell = ""
        else:
            cell += row[i]
        i += 1
    return out + [cell]


def test_a_model_id_with_a_backslash_and_a_bar_stays_in_its_markdown_cell(harness, capsys):
    """Item 11: `a\\|b` was written `a\\\\|b`, which ends the cell after the escaped backslash."""
    model = "vendor\\|model"
    assert harness.run("gold", "--limit", "1", "--model", model) == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| vendor")]
    assert rows
    for i in rows:
        header = next(
            lines[j] for j in range(i, -1, -1) if lines[j].startswith("|") and lines[j + 1].startswith("|---")
        )
        assert len(cells(lines[i])) == len(cells(header)), lines[i]
        assert cells(lines[i])[0].strip() == "vendor\\\\\\|model"  # renders as vendor\|model


@pytest.mark.slow
def test_eval_ljp_stops_after_a_fatal_error_in_direct(tmp_path, provider):
    """Item 12: a 401 in Direct stops the whole script; Gold and Interaction make no call."""
    provider.script = lambda kind, prompt, body: {"status": 401, "error": "invalid key"}
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LEXPILOT_"))}
    env |= {"OPENAI_BASE_URL": provider.base_url, "OPENAI_API_KEY": SECRET}
    done = subprocess.run(
        [
            sys.executable,
            "eval_LJP.py",
            "--run-id",
            "r1",
            "--model",
            "m",
            "--dataset",
            str(dataset),
            "--output-root",
            str(tmp_path / "out"),
            "--retries",
            "0",
            "--concurrency",
            "1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "[LJP direct] stopped: evaluated model 'm'" in done.stderr and "HTTP 401" in done.stderr
    assert (
        "[LJP gold]" not in done.stderr + done.stdout and "[LJP interaction]" not in done.stderr + done.stdout
    )
    assert len(provider.requests) == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize("temperature,replayed", [("0.7", True), ("0.2", False)])
def test_a_journal_is_replayed_only_under_the_settings_it_was_made_with(
    harness, provider, capsys, temperature, replayed
):
    """Item 8: with the manifest deleted, a rerun at another temperature replayed the journal's replies made at 0.7
    into the 0.2 run. Journal entries carry the run's settings hash; the same settings still replay them."""
    provider.script = lambda kind, prompt, body: {"status": 500} if kind == "user" else None
    # the first question is paid, the reply fails
    assert harness.run("DCG", "--limit", "1", "--retries", "0") == 1
    next((harness.root / "runs").glob("*/*/manifest.json")).unlink()
    provider.script, provider.requests = None, []
    capsys.readouterr()
    assert harness.run("DCG", "--limit", "1", "--temperature", temperature) == 0
    err = capsys.readouterr().err
    # by hand: DCG asks two forced questions; the first was paid at 0.7
    assert provider.kinds()["force_ask"] == (1 if replayed else 2)
    assert ("1 repl(ies) were made with other settings than this run's" in err) is not replayed


CTRL_C_IN_IMPORT = """
import builtins, runpy, sys
real = builtins.__import__
def ctrl_c_in_openai(name, *args, **kwargs):
    if name == "openai":  # the user presses Ctrl-C while the SDK loads (the stage's first second)
        raise KeyboardInterrupt
    return real(name, *args, **kwargs)
builtins.__import__ = ctrl_c_in_openai
sys.argv = ["eval_LJP_gold.py", *sys.argv[1:]]
runpy.run_path("eval_LJP_gold.py", run_name="__main__")
"""


@pytest.mark.slow
def test_ctrl_c_while_the_sdk_loads_is_the_usual_interrupted_line(tmp_path):
    """Issue 35 item 15: "A Ctrl-C during the first second of a stage, inside `import openai`, prints a 45-line
    traceback; it should print the usual "interrupted" line"."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CTRL_C_IN_IMPORT,
            "--run-id",
            "r1",
            "--model",
            "m",
            "--dataset",
            "data/LexPilot_sample.json",
            "--output-root",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 130, done.stderr
    assert err == ["[LJP gold] interrupted: completed cases are saved; rerun the same command to resume."]


def test_counts_in_messages_and_titles_agree_with_their_nouns(tmp_path, provider, monkeypatch, capsys):
    """Issue 35 item 15: "Fix the grammar: "1 more calls", "1 cycles", "(1 runs …)"" — on a batch run of one case
    of the gold stage (a prediction, then its extraction: two cycles) and its report."""
    from tests.helpers.stages import Harness

    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "one.json", sample_cases()[:1]))
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    said = capsys.readouterr()
    assert "cycle 1: 1 request in 1 batch; 1 case pending, at most 2 more calls in the longest" in said.err
    assert "cycle 2: 1 request in 1 batch; 1 case pending, at most 1 more call in the longest" in said.err
    assert "2 cycles in this run" in said.out
    assert show_results.main(["--output-root", str(h.root), "--usage"]) == 0
    assert "Spent so far: every run and model shown (1 run, saved records)" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--models", "--run-ids"])
def test_quote_grid_adds_a_repeated_flag_to_the_first(tmp_path, capsys, flag):
    """Second review of item 7: `--models a --models b` quoted only b, in silence. Each flag adds to the list."""
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


CTRL_C_AT = """
import builtins, importlib, os, runpy, signal, sys
real, script, where = builtins.__import__, sys.argv[1], sys.argv[2]
def ctrl_c():  # the user presses Ctrl-C: a real SIGINT
    os.kill(os.getpid(), signal.SIGINT)
def ctrl_c_at(name, *args, **kwargs):
    if name == where:  # while this module is imported
        ctrl_c()
    return real(name, *args, **kwargs)
builtins.__import__ = ctrl_c_at
if ":" in where:  # while this function runs
    module, function = where.split(":")
    module = importlib.import_module(module)
    setattr(module, function, lambda *args, **kwargs: ctrl_c())
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize(
    "script, module, said",
    [
        # inside the script's own `from common import stage_main`, before the stage's handling exists
        (
            "eval_LJP_gold.py",
            "lexpilot.models.calls",
            "[eval_LJP_gold] interrupted while starting: nothing was done",
        ),
        (
            "show_results.py",
            "lexpilot.reporting.tables.complexity",
            "[show_results] interrupted while starting: nothing was done",
        ),
        # while the report reads the runs
        (
            "show_results.py",
            "lexpilot.reporting.scoring.results:load_runs",
            "[show_results] interrupted: nothing was written",
        ),
    ],
)
def test_ctrl_c_at_any_moment_of_an_entry_point_is_one_line(tmp_path, script, module, said):
    """Issue 35 item 15 and the guide: "Every error a user can meet is one or two lines ... Never a traceback" —
    Ctrl-C while an entry point imports the harness, and while a report runs, is one line and status 130."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    flags = (
        ["--run-id", "r1", "--model", "m", "--dataset", "data/LexPilot_sample.json"]
        if script != "show_results.py"
        else ["--usage"]
    )
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_AT, script, module, *flags, "--output-root", str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=as_at_a_terminal,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 130, done.stderr
    assert len(err) == 1 and err[0].startswith(said), done.stderr
