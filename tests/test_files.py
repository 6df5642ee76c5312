"""The files the harness reads and writes (lexpilot/files.py): an input that is not a regular file, or too big, is
refused at once; a record file replaced by a folder is one line; no CSV cell starts a formula, and a signed number
stays a number."""

import csv
import io
import time

import pytest

import judge_agreement
import show_results
from lexpilot.files import NUMBER
from lexpilot.reporting.validation import agreement as agreement_kit
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness


def test_formula_cells_are_neutralised_in_every_csv_and_recoverable(tmp_path, monkeypatch, capsys):
    hostile = '=HYPERLINK("http://x","点我")'
    provider = ScriptedProvider(
        lambda kind, prompt, body: hostile if kind in ("lexawn", "force_ask", "force_judge") else None
    )
    with provider:
        h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "d.json", sample_cases()[:2]))
        for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
            h.run(stage, "--model=-model")  # a model id that starts with a minus sign as well
    out = tmp_path / "sheet.csv"
    assert (
        judge_agreement.main(
            [
                "export",
                "--output-root",
                str(h.root),
                "--dataset",
                str(h.dataset),
                "--out",
                str(out),
                "--per-task",
                "3",
            ]
        )
        == 0
    )
    for path in (out, agreement_kit.key_file(out)):
        with path.open(encoding="utf-8-sig", newline="") as f:
            cells = [c for row in csv.reader(f) for c in row]
        # a formula never starts a cell; a signed number is a number
        assert not any(
            c.startswith(("=", "+", "-", "@", "\t", "\r")) and not NUMBER.fullmatch(c) for c in cells
        )
    assert any(c == "'" + hostile for c in cells) or "'-model" in cells
    rows = agreement_kit.read_sheet(out, agreement_kit.ANNOTATION_COLUMNS)
    assert any(row["reply"] == hostile for _, row in rows)  # the original text is recovered on reading
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--format", "csv"]) == 0
    cells = [c for row in csv.reader(io.StringIO(capsys.readouterr().out)) for c in row]
    # a lone dash marks an empty cell: no formula
    assert "'-model" in cells and not any(
        c.startswith(("=", "+", "-", "@")) and not NUMBER.fullmatch(c) and c != "-" for c in cells
    )


def test_a_stage_file_replaced_by_a_folder_is_a_problem_not_a_traceback(harness, capsys):
    """A record file replaced by a folder is one line naming it, for a report and for a stage."""
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


def test_signed_numbers_are_numbers_in_csv_and_formulas_are_not():
    """A signed number stays a number in a CSV cell; a cell that would start a formula is quoted."""
    from lexpilot.files import spreadsheet_safe

    assert [
        spreadsheet_safe(c) for c in ("-0.308", "+0.641", "-12", "1e-3", "-model", "=1+1", "+0.6 [0.1, 0.9]")
    ] == ["-0.308", "+0.641", "-12", "1e-3", "'-model", "'=1+1", "'+0.6 [0.1, 0.9]"]
