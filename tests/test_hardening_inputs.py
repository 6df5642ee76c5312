"""Hardening, round three (issue 28, items 10-21): the paper's reasoning model under concurrency, a Retry-After
beyond the cap, API keys, special files, bounds, digests, duplicated keys, missing runs and reports' output."""

import json
import time
from collections import Counter

import pytest

from lexpilot.models.calls import Usage
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.calls import make_caller, script_of
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT
from tests.helpers.replies import MAX_TOKENS_REFUSED
from tests.helpers.stages import SECRET, Harness


def test_a_reasoning_model_at_the_default_concurrency_switches_every_refused_request(tmp_path, monkeypatch):
    """Item 10: eight requests go out at once with max_tokens; every refusal of the field the request carried is
    repeated with max_completion_tokens, whichever worker switched the role first."""
    dataset = write_dataset(tmp_path / "eight.json", sample_cases()[:8])

    def slow_refusal(kind, prompt, body):
        if "max_tokens" in body:
            time.sleep(0.2)  # every worker's first request is out before the first refusal comes back
            return MAX_TOKENS_REFUSED
        return None

    with ScriptedProvider() as provider:
        provider.script = slow_refusal
        h = Harness(tmp_path, provider, monkeypatch, dataset)
        assert h.run("gold") == 0  # the default --concurrency 8
        refused = [r for r in provider.requests if "max_tokens" in r]
        assert len(refused) > 2  # several were in flight when the first refusal arrived
        answered = Counter(r["messages"][0]["content"] for r in provider.requests if "max_tokens" not in r)
        assert len(answered) == 16 and set(answered.values()) == {1}  # each request answered once
        assert len(h.records("eval_results", "LJP_gold.jsonl")) == 8


@pytest.mark.parametrize("retry_after, shown", [("100000", "27.8 h"), ("Fri, 31 Dec 2099 23:59:59 GMT", "h")])
def test_a_retry_after_beyond_the_cap_is_a_transient_failure_without_a_stage_pause(retry_after, shown):
    """Item 11: normal backoff for that call, no stage-wide pause; the case fails saying how long the provider
    asks to wait, so that the user can rerun later."""
    with ScriptedProvider(script_of(*[{"status": 429, "headers": {"Retry-After": retry_after}}] * 10)) as p:
        caller = make_caller(p, retries=2)
        started = time.monotonic()
        with pytest.raises(Exception, match=rf"provider asks to wait [\d.]+ {shown.split()[-1]}"):
            caller.chat("eval", "x", Usage())
        assert time.monotonic() - started < 3 and len(p.requests) == 3  # retries 2: three attempts, no more
        assert caller.endpoints.limiters[(p.base_url,)].resume_at <= time.monotonic()  # no worker was paused


@pytest.mark.parametrize(
    "key, problem",
    [
        (SECRET + "\n", "ends with a line break"),
        (SECRET + "\r\n", "ends with a line break"),
        ("sk-ключ-0123456789", "non-ASCII"),
        (" " + SECRET, "spaces"),
    ],
)
def test_a_malformed_api_key_is_named_before_any_call_and_never_printed(
    harness, provider, monkeypatch, capsys, key, problem
):
    """Item 12."""
    monkeypatch.setenv("OPENAI_API_KEY", key)
    assert harness.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and problem in err and key.strip() not in err and err.count("\n") == 1
    assert not provider.requests


def test_no_api_key_at_all_is_said_with_the_variables_read(harness, provider, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY")
    provider.script = lambda kind, prompt, body: {"status": 401, "error": "Incorrect API key provided"}
    assert harness.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "no API key is set" in err and "LEXPILOT_EVAL_API_KEY" in err and "OPENAI_API_KEY" in err


def test_a_stage_file_replaced_by_a_folder_is_a_problem_not_a_traceback(harness, capsys):
    """Item 13."""
    import show_results

    assert harness.run("gold", "--limit", "2") == 0
    path = harness.file("eval_results", "LJP_gold.jsonl")
    path.unlink()
    path.mkdir()
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    err = capsys.readouterr().err
    assert f"{path}: is a folder, not a file" in err and "Traceback" not in err
    assert harness.run("gold", "--limit", "2") == 2
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "huge"])
def test_a_dataset_that_is_not_a_regular_file_or_too_big_is_refused_at_once(
    harness, provider, tmp_path, capsys, monkeypatch, special
):
    import os

    from lexpilot import files

    path = special
    if special == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)  # no writer: reading it would block for ever
    elif special == "huge":
        path = tmp_path / "big.json"
        path.write_text("[" + " " * 2000 + "]", encoding="utf-8")
        monkeypatch.setattr(files, "MAX_INPUT_BYTES", 1000)
    started = time.monotonic()
    assert harness.run("gold", "--dataset", str(path)) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err if special != "huge" else "over the harness's limit of 1,000" in err
    assert time.monotonic() - started < 5 and err.count("\n") == 1 and not provider.requests


def test_resamples_are_bounded(capsys):
    """Item 14."""
    import show_results

    assert show_results.main(["--ci", "--resamples", "1000000000"]) == 2
    assert "--resamples must be from 1 to 100,000" in capsys.readouterr().err


@pytest.mark.parametrize(
    "raw, problem",
    [
        (
            '"cause_of_action": "民间借贷纠纷", "cause_of_action": "民间借贷纠纷"',
            "case: 'cause_of_action' appears more than once",
        ),
        ('"complexity": Infinity', "Infinity is not a number JSON allows"),
        ('"complexity": NaN', "NaN is not a number JSON allows"),
    ],
)
def test_duplicated_keys_anywhere_and_infinity_are_dataset_errors(harness, tmp_path, capsys, raw, problem):
    """Item 16: the last value no longer wins silently; Infinity and NaN are not numbers."""
    text = json.dumps(sample_cases()[:1], ensure_ascii=False)
    path = tmp_path / "d.json"
    path.write_text(text.replace('{"case_number"', "{" + raw + ', "case_number"', 1), encoding="utf-8")
    assert harness.run("gold", "--dataset", str(path)) == 2
    assert problem in capsys.readouterr().err


def test_complexity_csv_refuses_infinity(tmp_path, capsys):
    import show_results

    path = tmp_path / "c.csv"
    path.write_text("cause_of_action,complexity\n离婚纠纷,inf\n", encoding="utf-8")
    assert show_results.main(["--complexity", str(path)]) == 2
    assert "'inf' is not a non-negative number" in capsys.readouterr().err


def test_signed_numbers_are_numbers_in_csv_and_formulas_are_not():
    """Item 19."""
    from lexpilot.files import spreadsheet_safe

    assert [
        spreadsheet_safe(c) for c in ("-0.308", "+0.641", "-12", "1e-3", "-model", "=1+1", "+0.6 [0.1, 0.9]")
    ] == ["-0.308", "+0.641", "-12", "1e-3", "'-model", "'=1+1", "'+0.6 [0.1, 0.9]"]


def test_markdown_escapes_html_in_a_model_id(harness, capsys):
    """Item 21."""
    import show_results

    assert harness.run("gold", "--limit", "1", "--model", "<img src=x onerror=alert(1)>") == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "<img" not in out and "&lt;img src=x onerror=alert(1)&gt;" in out


@pytest.mark.parametrize("model", ["gpt-x ", " gpt-x", "gpt-x\t"])
def test_a_model_id_with_surrounding_spaces_is_refused(harness, provider, capsys, model):
    assert harness.run("gold", "--limit", "1", "--model", model) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "spaces" in err and not provider.requests


def test_the_price_file_message_has_no_stray_brace(tmp_path, capsys):
    import show_results

    path = tmp_path / "p.json"
    path.write_text('{"m": {"prompt": "x"}}', encoding="utf-8")
    assert show_results.main(["--prices", str(path)]) == 2
    err = capsys.readouterr().err
    assert '{"prompt": number, "completion": number} (price' in err and "}}" not in err


def test_a_journal_reply_edited_by_hand_is_never_replayed(harness, provider, capsys):
    """Item 15: journal entries carry a digest like records do."""
    provider.script = lambda kind, prompt, body: {"status": 500} if kind == "user" else None
    # the first question is paid, the reply fails
    assert harness.run("DCG", "--limit", "1", "--retries", "0") == 1
    journal = next((harness.root / "runs").glob("*/*/calls_journal.jsonl"))
    entries = [json.loads(x) for x in journal.read_text(encoding="utf-8").splitlines()]
    reply = next(e for e in entries if "reply" in e)
    journal.write_text(
        journal.read_text(encoding="utf-8").replace(
            json.dumps(reply["reply"], ensure_ascii=False)[1:-1], "篡改的回复"
        ),
        encoding="utf-8",
    )
    provider.script, provider.requests = None, []
    capsys.readouterr()
    assert harness.run("DCG", "--limit", "1") == 0
    assert "1 repl(ies) changed after they were saved" in capsys.readouterr().err
    # both questions asked: the edited one is not taken from the line
    assert provider.kinds()["force_ask"] == 2
    assert "篡改的回复" not in harness.file("Force_ask_gen", "force_ask.jsonl").read_text(encoding="utf-8")


def test_an_edited_manifest_setting_is_noticed_by_stages_and_reports(harness, capsys):
    """Item 15: temperature 0.7 -> 0.9 in manifest.json by hand."""
    import show_results

    assert harness.run("gold", "--limit", "2") == 0
    manifest = next((harness.root / "runs").glob("*/*/manifest.json"))
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace('"temperature": 0.7', '"temperature": 0.9'),
        encoding="utf-8",
    )
    capsys.readouterr()
    assert harness.run("gold", "--limit", "2") == 2
    assert "settings were changed after it started" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    captured = capsys.readouterr()
    assert "settings were changed after it started" in captured.err and "0.9" not in captured.out


def test_records_made_with_other_settings_than_the_manifest_are_left_out(harness, capsys):
    """Item 15: a manifest with a valid digest but other settings (swapped in) than its records."""
    import show_results
    from lexpilot.storage.manifest import settings_digest

    assert harness.run("gold", "--limit", "2") == 0
    path = next((harness.root / "runs").glob("*/*/manifest.json"))
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["generation"]["temperature"] = 0.9
    manifest["settings_digest"] = settings_digest(manifest)
    path.write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    assert "was made with other settings than the run's manifest says" in capsys.readouterr().err


def test_what_was_asked_for_and_is_not_there_is_said_with_a_non_zero_status(harness, tmp_path, capsys):
    """Item 17."""
    import show_results

    assert harness.run("gold", "--limit", "1") == 0
    root = str(harness.root)
    capsys.readouterr()
    assert show_results.main(["--output-root", root, "--run-id", "nope"]) == 2
    assert "--run-id nope: no such run" in capsys.readouterr().err
    assert show_results.main(["--output-root", root, "--model", "other"]) == 2
    assert "--model other: no such run" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    next((harness.root / "runs").glob("*/*/manifest.json")).unlink()
    assert show_results.main(["--output-root", root]) == 2
    err = capsys.readouterr().err
    assert "records of run(s) r1" in err and "but no manifest" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert show_results.main(["--output-root", str(empty)]) == 0  # nothing run yet is not an error


def test_from_run_is_checked_like_a_run_id(harness, provider, capsys):
    """Item 18."""
    import rejudge

    for bad in ("../../x", "a/b", ".hidden"):
        assert harness.run_stage(rejudge.STAGE, "--from-run", bad) == 2
        assert "--from-run" in capsys.readouterr().err
    assert not provider.requests


@pytest.mark.slow
def test_a_huge_reply_fits_the_sheet_and_the_key_is_read_back(harness, provider, tmp_path, capsys):
    """Item 20: a 300,000-character reply: the people's sheet cuts it with a marker (spreadsheets hold 32,767
    characters a cell), the key keeps it whole, and score reads both."""
    import csv

    import judge_agreement
    from lexpilot.files import read_sheet
    from lexpilot.reporting.validation import agreement

    huge = "很长的回复。" * 50_000
    provider.script = lambda kind, prompt, body: huge if kind == "lexawn" else None
    assert harness.run("LexAwN", "--limit", "2") == 0
    out = tmp_path / "sheet.csv"
    assert (
        judge_agreement.main(
            [
                "export",
                "--output-root",
                str(harness.root),
                "--dataset",
                str(harness.dataset),
                "--out",
                str(out),
                "--per-task",
                "2",
            ]
        )
        == 0
    )
    with out.open(encoding="utf-8-sig", newline="") as f:
        csv.field_size_limit(10**9)
        cells = [c for row in csv.reader(f) for c in row]
    assert max(map(len, cells)) <= 32_767 and any("the whole text is in sheet.key.csv" in c for c in cells)
    keys = read_sheet(agreement.key_file(out), agreement.ANNOTATION_KEY_COLUMNS)
    assert any(row["reply"] == huge for _, row in keys)
    rows = read_sheet(out, agreement.ANNOTATION_COLUMNS)
    with out.open("w", encoding="utf-8-sig", newline="") as f:  # the experts' labels, then score
        writer = csv.DictWriter(f, fieldnames=agreement.ANNOTATION_COLUMNS)
        writer.writeheader()
        for _, row in rows:
            label = row["labels"].split(" | ")[0]
            writer.writerow(row | {"annotator_1": label, "annotator_2": label, "adjudicated": label})
    capsys.readouterr()
    assert judge_agreement.main(["score", str(out)]) == 0
    assert "Judge agreement (Table 12)" in capsys.readouterr().out


def test_a_reply_without_token_counts_costs_its_reserved_worst_case(tmp_path, monkeypatch, capsys):
    """Issue 25, item 11: a server that reports no usage (llama.cpp's streams): each such call is settled at its
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


def test_review_leftovers_of_the_hardening(harness, provider, tmp_path, capsys):
    """A model id with an invisible character; a LaTeX cell with braces; a signed Unicode-digit string is text;
    1e999 (infinite once read) as a complexity; --dataset a folder for show_results."""
    import show_results
    from lexpilot.files import spreadsheet_safe
    from lexpilot.reporting.tables.renderings import render_latex
    from lexpilot.reporting.tables.table import Table

    for model in ("gpt\u200b4", "gpt\n4"):
        assert harness.run("gold", "--limit", "1", "--model", model) == 2
        assert "invisible characters" in capsys.readouterr().err
    assert render_latex([Table("t", "a{b}", ["x_{1}"], [["\\\\cmd{y}"]])]).count(r"\{") == 3
    assert spreadsheet_safe("-١٢") == "'-١٢"
    text = json.dumps(sample_cases()[:1], ensure_ascii=False).replace(
        '{"case_number"', '{"complexity": 1e999, "case_number"', 1
    )
    path = tmp_path / "d.json"
    path.write_text(text, encoding="utf-8")
    assert harness.run("gold", "--dataset", str(path)) == 2
    assert "complexity: 'inf' is not a non-negative number" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(tmp_path), "--dataset", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    # review of issue 35: a file that is no dataset is refused in one line, before any report (it printed eight
    # warnings and the report, and exited 0); a site or figure folder that cannot be written, before the report too
    assert show_results.main(["--output-root", str(tmp_path), "--dataset", str(ROOT / "README.md")]) == 2
    said = capsys.readouterr()
    assert said.out == "" and len(said.err.strip().splitlines()) == 1 and "README.md" in said.err, said.err
    for flag in ("--html", "--plot"):
        assert show_results.main(["--output-root", str(tmp_path), flag, str(ROOT / "README.md")]) == 2
        said = capsys.readouterr()
        assert said.out == "" and said.err.startswith(f"show_results: {flag} ") and "cannot write" in said.err


@pytest.mark.slow
def test_a_zero_or_past_retry_after_is_the_usual_backoff_not_a_burst():
    with ScriptedProvider(script_of(*[{"status": 429, "headers": {"Retry-After": "0"}}] * 40)) as p:
        caller = make_caller(p, retries=2)
        with pytest.raises(Exception, match="HTTP 429"):
            caller.chat("eval", "x", Usage())
        assert len(p.requests) == 3  # three attempts, not thirty rate-limited repeats
