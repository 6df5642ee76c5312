"""Bad input to export_results.py is one line on stderr and a non-zero exit, with nothing half-written: a record file
with a torn last line, a run with no records, an output folder that is a file or cannot be made, an unknown format,
a --verify folder that holds no export, a format whose package is missing."""

import json
import sys

import pytest

import export_results


def one_line(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert export_results.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_an_unknown_format_is_one_line(tmp_path, capsys):
    """--format csv is refused by the command line, naming the formats there are."""
    with pytest.raises(SystemExit) as stop:
        export_results.main(["--format", "csv", "--output", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'csv'" in err[0] and "eee" in err[0]


def test_a_verify_folder_without_an_export_is_one_line(tmp_path, capsys):
    """A folder holding other files, and a file, are no export."""
    (tmp_path / "notes.json").write_text("{}", encoding="utf-8")
    line = one_line(capsys, ["--verify", str(tmp_path)])
    assert "no LexPilot export there" in line
    assert f"--output {tmp_path}" not in line  # a runs folder named by mistake is not offered as the export's
    assert "is not a folder" in one_line(capsys, ["--verify", str(tmp_path / "notes.json")])


@pytest.mark.parametrize(("fmt", "package"), [("eee", "every_eval_ever"), ("inspect", "inspect_ai")])
def test_a_missing_package_is_named_in_one_line(fmt, package, tmp_path, capsys, monkeypatch):
    """Without its package, a format names the package and how to install it, before anything is read or written."""
    monkeypatch.setitem(sys.modules, package, None)  # an import of it fails, as where it is not installed
    line = one_line(
        capsys, ["--output-root", str(tmp_path), "--format", fmt, "--output", str(tmp_path / "x")]
    )
    assert package.replace("_", "-") in line and "requirements-optional.txt" in line
    assert not (tmp_path / "x").exists()


needs_eee = pytest.mark.skipif(
    __import__("importlib").util.find_spec("every_eval_ever") is None,
    reason="every-eval-ever is not installed (it needs Python 3.12 or later)",
)


def export_argv(root, out) -> list[str]:
    return ["--output-root", str(root), "--format", "eee", "--output", str(out)]


@pytest.mark.slow
@needs_eee
def test_an_output_that_is_a_file_or_cannot_be_made_is_one_line(grid, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("", encoding="utf-8")
    assert "is a file, not a folder" in one_line(capsys, export_argv(grid, file))
    assert "is not writable" in one_line(capsys, export_argv(grid, file / "under" / "deeper"))
    assert not (tmp_path / ".export-check-").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "a-file",
        "out",
    ]


@pytest.mark.slow
@needs_eee
def test_a_torn_last_line_is_one_line_and_nothing_is_written(grid, tmp_path, capsys):
    """A verdict file whose last line an interrupted write tore: refused, naming the file, before any file is written."""
    (path,) = (grid / "eval_results" / "r2").glob("model-b-*/LJP_gold.jsonl")
    with path.open("ab") as f:
        f.write(b'{"case_number": "torn')
    out = tmp_path / "export"
    line = one_line(capsys, export_argv(grid, out))
    assert str(path) in line and "torn" in line
    assert not out.exists()  # not even an empty folder


@pytest.mark.slow
@needs_eee
def test_a_run_with_no_records_is_one_line(grid, tmp_path, capsys):
    """A run whose manifest was written but none of whose stages saved a record: refused, naming the run."""
    (manifest,) = (grid / "runs" / "r1").glob("model-a-*/manifest.json")
    empty = grid / "runs" / "r9" / manifest.parent.name
    empty.mkdir(parents=True)
    saved = json.loads(manifest.read_text(encoding="utf-8"))
    saved["run_id"] = "r9"
    (empty / "manifest.json").write_text(json.dumps(saved), encoding="utf-8")
    out = tmp_path / "export"
    line = one_line(capsys, export_argv(grid, out))
    assert "run r9, model model-a: no records" in line
    assert not out.exists()


def test_verify_with_export_options_is_refused_in_one_line(tmp_path, capsys):
    """--verify reads the export alone: an export option beside it, which it would ignore, is refused, named."""
    line = one_line(capsys, ["--verify", str(tmp_path), "--format", "eee", "--seed", "3"])
    assert "--format" in line and "--seed" in line and "--output-root" not in line


def test_both_packages_missing_are_both_named(tmp_path, capsys, monkeypatch):
    """Two formats asked for without either package: the one line names both."""
    monkeypatch.setitem(sys.modules, "every_eval_ever", None)
    monkeypatch.setitem(sys.modules, "inspect_ai", None)
    argv = ["--output-root", str(tmp_path), "--format", "eee", "inspect", "--output", str(tmp_path / "x")]
    line = one_line(capsys, argv)
    assert "every-eval-ever" in line and "inspect-ai" in line


@pytest.mark.parametrize(("version", "hint"), [((3, 11, 7), True), ((3, 12, 1), False)])
def test_the_eee_package_missing_below_3_12_says_it_needs_3_12(version, hint, tmp_path, capsys, monkeypatch):
    """Below Python 3.12, where pip cannot install every-eval-ever, the line says it needs 3.12 and names this
    version; on 3.12 it says to install it."""
    monkeypatch.setitem(sys.modules, "every_eval_ever", None)
    monkeypatch.setattr(sys, "version_info", version)
    argv = ["--output-root", str(tmp_path), "--format", "eee", "--output", str(tmp_path / "x")]
    line = one_line(capsys, argv)
    monkeypatch.undo()
    assert ("needs Python 3.12 or later" in line) is hint
    assert ("(this is 3.11)" in line) is hint
    assert "requirements-optional.txt" in line


@pytest.mark.slow
@needs_eee
@pytest.mark.parametrize("limit", [(), ("--limit", "2")], ids=["every case", "probed cases only"])
def test_a_probes_run_whose_judge_wrote_no_label_is_one_line(grid, tmp_path, capsys, monkeypatch, limit):
    """A run of the User Model probes alone whose judge was down (the replies saved, no case labelled: with every
    case, only the records of cases outside the probe file written; with the probed cases only, no label file at
    all): alone, refused in one line before anything is written; beside runs with labels, left out with a line
    naming it, the others exported."""
    import user_probes
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.paths import ROOT
    from tests.helpers.stages import Harness

    def judge_down(kind, prompt, body):
        return {"status": 500, "error": "judge down"} if body.get("model") == "DeepSeek-R1" else None

    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "0.001")
    with ScriptedProvider(judge_down) as provider, pytest.MonkeyPatch.context() as patch:
        h = Harness(tmp_path, provider, patch)
        h.run_id = f"probes-only-{len(limit)}"
        probes = ROOT / "data" / "LexPilot_sample_probes.csv"
        assert h.run_stage(user_probes.STAGE, "--model", "model-a", "--probes", str(probes), *limit) == 1
    assert h.root == grid
    out = tmp_path / "export"
    line = one_line(capsys, [*export_argv(grid, out), "--run-id", h.run_id])
    assert "has a complete task with labels" in line
    assert not out.exists()
    capsys.readouterr()
    assert export_results.main([*export_argv(grid, out), "--model", "model-a"]) == 0
    err = capsys.readouterr().err
    assert f"run {h.run_id}, model model-a: no stage with labels to export" in err
    assert "Traceback" not in err
    assert len(list(out.glob("data/lexpilot/*/*/*.json"))) == 2  # model-a's r1 and r2


@pytest.mark.slow
@needs_eee
def test_verify_into_a_reader_that_left_ends_quietly(grid, tmp_path):
    """export_results.py --verify D | head: the reader gone before the tables are printed, it ends without a word on
    stderr (no BrokenPipeError traceback), as a process killed by SIGPIPE does."""
    import subprocess

    from tests.helpers.paths import ROOT

    out = tmp_path / "export"
    assert export_results.main(export_argv(grid, out)) == 0
    command = [sys.executable, str(ROOT / "export_results.py"), "--verify", str(out)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # the reader leaves before a line is printed
    err = child.stderr.read().decode()
    assert child.wait() == 141, err
    assert err == ""
