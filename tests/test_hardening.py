"""What an adversarial trial found on disk and in inputs (issue #14 items 3-6, 11-13): a lost manifest,
torn and unterminated lines, edited records, unanswered calls, formulas in CSV cells, and inputs that once
gave a traceback; each now a recovery or one line saying what and where."""

import csv
import errno
import io
import json
import os
import subprocess
import sys

import pytest

import judge_agreement
import show_results
from lexpilot.benchmark.records import A1, INTERACTION, LJP_GOLD
from lexpilot.files import NUMBER
from lexpilot.reporting.validation import agreement as agreement_kit
from lexpilot.scripted.provider import ScriptedProvider
from lexpilot.storage import checkpoints
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT, SAMPLE
from tests.helpers.stages import Harness


def run_folder(h):
    return next((h.root / "runs" / h.run_id).glob("*/"))


# ----------------------------------------------------------------------------- a lost manifest (3)


def test_a_lost_manifest_is_rebuilt_from_records_made_with_the_same_settings(harness, capsys):
    assert harness.run("gold", "--limit", "2") == 0
    manifest = run_folder(harness) / "manifest.json"
    saved = json.loads(manifest.read_text(encoding="utf-8"))
    manifest.unlink()
    assert harness.run("gold", "--limit", "3") == 0
    assert "was missing: rebuilt" in capsys.readouterr().err
    rebuilt = json.loads(manifest.read_text(encoding="utf-8"))
    assert rebuilt["generation"] == saved["generation"] and rebuilt["rebuilt_from_records"] is True


def test_a_lost_manifest_is_never_relabelled_with_other_settings(harness, provider, capsys):
    assert harness.run("gold", "--limit", "2") == 0
    (run_folder(harness) / "manifest.json").unlink()
    provider.requests = []
    assert harness.run("gold", "--limit", "3", "--temperature", "0.2", "--max-tokens", "100") == 2
    err = capsys.readouterr().err
    assert "manifest is missing and its saved records were made with other settings" in err
    assert not provider.requests and not (run_folder(harness) / "manifest.json").exists()


# ----------------------------------------------------------------------------- torn lines (4)


def tear(path, how):
    """Leave the file as a crash would: the last record cut inside a multi-byte character, or the last
    record complete but without its newline."""
    data = path.read_bytes()
    if how == "torn":
        last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        cut = last.index("示".encode()) + 1  # inside the three bytes of a Chinese character
        path.write_bytes(data[: len(data) - len(last) - 1] + last[:cut])
    else:
        path.write_bytes(data.rstrip(b"\n"))


@pytest.mark.parametrize("how", ["torn", "unterminated"])
def test_a_torn_or_unterminated_last_line_is_recovered_and_nothing_complete_is_lost(
    harness, provider, capsys, how
):
    assert harness.run("gold", "--limit", "4") == 0
    results = harness.file(LJP_GOLD)
    before = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    tear(results, how)
    journal = run_folder(harness) / "calls_journal.jsonl"
    journal.write_bytes(b'{"case_number": "\xe7\xa4", "st')  # a torn journal line too
    assert show_results.main(["--output-root", str(harness.root)]) == 0  # reads, reports, changes nothing
    err = capsys.readouterr().err
    if how == "torn":
        assert f"{results}:4: the last line was torn by an interrupted write; left out" in err
        assert "LJP gold" in err and "incomplete, 1 of 4 cases missing" in err
    provider.requests = []
    assert harness.run("gold", "--limit", "4") == 0
    err = capsys.readouterr().err
    after = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    if how == "torn":
        assert "set aside in LJP_gold.jsonl.torn-" in err and len(list(results.parent.glob("*.torn-*"))) == 1
        assert provider.kinds() == {"ljp_judge": 1}  # only the torn case is redone
        assert after[:3] == before[:3] and after[3]["case_number"] == before[3]["case_number"]
    else:
        assert "lost its newline; kept" in err and not provider.requests and after == before
    assert ("1 unreadable line(s) ignored" in err) == (how == "torn") and not journal.exists()
    assert harness.run("gold", "--limit", "4") == 0  # and the next run finds a clean file


def test_a_malformed_line_in_the_middle_still_stops_with_file_and_line(harness, capsys):
    assert harness.run("gold", "--limit", "3") == 0
    results = harness.file(LJP_GOLD)
    lines = results.read_text(encoding="utf-8").splitlines(keepends=True)
    results.write_text(lines[0] + "{broken\n" + lines[1] + lines[2], encoding="utf-8")
    assert harness.run("gold", "--limit", "3") == 2
    assert f"{results}:2: malformed or truncated record" in capsys.readouterr().err


def test_a_record_is_never_glued_onto_a_fragment(harness, provider):
    assert harness.run("LexAwN", "--limit", "2") == 0
    a1 = harness.file(A1)
    interaction = harness.file(INTERACTION)
    lines = interaction.read_text(encoding="utf-8").splitlines(keepends=True)
    interaction.write_text(lines[0] + lines[1][:-40], encoding="utf-8")  # torn: the last step of its case
    a1.write_bytes(a1.read_bytes()[:-1])  # unterminated
    assert harness.run("LexAwN", "--limit", "3") == 2  # another --limit: refused, and nothing written
    assert harness.run("LexAwN", "--limit", "2") == 0
    for path in (a1, interaction):
        for line in path.read_text(encoding="utf-8").splitlines():
            json.loads(line)


@pytest.mark.slow
def test_a_kill_leaves_torn_files_and_the_rerun_recovers_every_complete_record(tmp_path):
    """A real process killed in the middle of a stage, then torn lines added as a full disk leaves them."""
    import signal
    import time

    with ScriptedProvider(latency=0.05) as p:
        env = {**os.environ, "OPENAI_BASE_URL": p.base_url, "OPENAI_API_KEY": "k", "LEXPILOT_MODEL": "m"}
        command = [
            sys.executable,
            "LexAwN_gen.py",
            "--run-id",
            "k",
            "--dataset",
            str(SAMPLE),
            "--output-root",
            str(tmp_path),
            "--concurrency",
            "4",
        ]
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        a1 = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = list(tmp_path.glob("AwN_gen/k/*/a1.jsonl"))
            if found and found[0].read_text(encoding="utf-8").count("\n") >= 3:
                a1 = found[0]
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        assert a1 is not None
        complete = [json.loads(line) for line in a1.read_bytes().split(b"\n")[:-1] if line.strip()]
        with a1.open("ab") as f:
            f.write('{"case_number": "（2099）示例'.encode()[:-1])  # torn inside a character
        journal = a1.parents[3] / "runs" / "k" / a1.parent.name / "calls_journal.jsonl"
        if journal.exists():
            with journal.open("ab") as f:
                f.write('{"reply": "示'.encode()[:-2])
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "set aside" in result.stderr
    final = {
        json.loads(line)["case_number"]: json.loads(line)
        for line in a1.read_text(encoding="utf-8").splitlines()
    }
    assert len(final) == 12 and all(final[r["case_number"]] == r for r in complete)


# ----------------------------------------------------------------------------- a full disk


def test_a_full_disk_stops_the_stage_in_one_line_and_keeps_every_completed_record(
    harness, monkeypatch, capsys
):
    real_fsync, calls = os.fsync, {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(checkpoints.os, "fsync", fsync)
    assert harness.run("gold", "--concurrency", "1") == 2
    err = capsys.readouterr().err
    (line,) = [e for e in err.splitlines() if "stopped" in e]
    assert "no space left on device writing" in line and "every completed record is kept" in line
    assert "Traceback" not in err
    monkeypatch.setattr(checkpoints.os, "fsync", real_fsync)
    assert harness.run("gold", "--concurrency", "1") == 0  # and the rerun completes from what was kept
    assert len(harness.records(LJP_GOLD)) == 12


# ----------------------------------------------------------------------------- datasets and exports (5, 11)


def test_a_duplicated_claim_is_a_dataset_error(tmp_path, harness, capsys):
    case = sample_cases()[0]
    claim = next(iter(case["result_dict"]))
    text = json.dumps([case], ensure_ascii=False)
    duplicated = text.replace(
        '"result_dict": {', '"result_dict": {' + json.dumps(claim, ensure_ascii=False) + ': "驳回", ', 1
    )
    (tmp_path / "dup.json").write_text(duplicated, encoding="utf-8")
    harness.dataset = tmp_path / "dup.json"
    assert harness.run("gold") == 2
    err = capsys.readouterr().err
    assert "result_dict:" in err and "appears more than once" in err and case["case_number"] in err


def test_judge_agreement_refuses_a_duplicated_item_row(tmp_path, capsys):
    from tests.test_judge_agreement import annotation_files

    path = annotation_files(
        tmp_path, [("LCA", "策略一", "策略一", "", "策略一"), ("LCA", "策略二", "策略二", "", "策略二")]
    )
    lines = path.read_text(encoding="utf-8-sig").splitlines(keepends=True)
    path.write_text("".join(lines + [lines[1]]), encoding="utf-8-sig")
    assert judge_agreement.main(["score", str(path)]) == 2
    assert "a second row for this item (first at row 2)" in capsys.readouterr().err


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
        # a formula never starts a cell; a signed number is a number (issue 28, item 19)
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


# ----------------------------------------------------------------------------- unanswered calls (6)


def test_calls_in_flight_at_a_kill_are_counted_as_paid_but_never_answered(harness, capsys):
    assert harness.run("gold", "--limit", "2") == 0
    results = harness.file(LJP_GOLD)
    results.write_text(results.read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8")
    # as a process killed with two calls in flight left it
    journal = run_folder(harness) / "calls_journal.jsonl"
    journal.write_text(
        json.dumps({"t": "start", "id": "a", "role": "judge"})
        + "\n"
        + json.dumps({"t": "start", "id": "b", "role": "eval"})
        + "\n"
        + json.dumps({"t": "end", "id": "b"})
        + "\n",
        encoding="utf-8",
    )
    assert harness.run("gold", "--limit", "2") == 0
    err = capsys.readouterr().err
    assert "calls in flight when an earlier process stopped (paid, never answered): judge 1" in err
    assert show_results.main(["--output-root", str(harness.root), "--usage"]) == 0
    assert "(+1 unanswered)" in capsys.readouterr().out
    results.write_text(results.read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8")
    assert harness.run("gold", "--limit", "2") == 0  # counted once, not again
    assert json.loads((run_folder(harness) / "unanswered_calls.json").read_text()) == {"judge": 1}


# ----------------------------------------------------------------------------- one line, never a traceback (12)


def one_line(err: str) -> str:
    # progress lines and notes aside
    lines = [
        line for line in err.strip().splitlines() if "done, " not in line and not line.startswith("note:")
    ]
    assert "Traceback" not in err and 1 <= len(lines) <= 2, err
    return lines[-1]


def break_manifest(h):
    (run_folder(h) / "manifest.json").write_text("[]", encoding="utf-8")


def break_record(field, value):
    def edit(h):
        path = h.file(LJP_GOLD)
        record = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        record[field] = value
        path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")

    return edit


def lock_folder(h):
    lock = run_folder(h) / ".lock"
    lock.unlink()
    lock.mkdir()


STAGE_BREAKAGES = {
    "manifest not an object": (break_manifest, "the manifest is not a JSON object"),
    "case_number a list": (break_record("case_number", [1]), "malformed or truncated record"),
    "upstream_hash not an object": (break_record("upstream_hash", "x"), "malformed or truncated record"),
    "lock is a folder": (lock_folder, "the run's lock file is a folder"),
}


@pytest.mark.parametrize("name", STAGE_BREAKAGES)
def test_a_broken_run_folder_is_one_line(harness, capsys, name):
    breakage, message = STAGE_BREAKAGES[name]
    assert harness.run("gold", "--limit", "1") == 0
    breakage(harness)
    capsys.readouterr()
    assert harness.run("gold", "--limit", "1") == 2
    assert message in one_line(capsys.readouterr().err)


def deep(tmp_path):
    return tmp_path / "deep.json", "[" * 100000 + "]" * 100000, "nested too deeply"


DATASETS = {
    "a folder": (lambda tmp: (tmp, None, "is a folder")),
    "nested too deeply": deep,
    "a 5,000-digit number": (
        lambda tmp: (tmp / "n.json", "[" + "9" * 5000 + "]", "not a usable JSON dataset")
    ),
    "a lone surrogate": (
        lambda tmp: (
            tmp / "s.json",
            json.dumps(sample_cases()[:1], ensure_ascii=False).replace(
                '"content": "', '"content": "\\ud800', 1
            ),
            "lone surrogate",
        )
    ),
}


@pytest.mark.parametrize("name", DATASETS)
def test_a_hostile_dataset_is_one_line(tmp_path, harness, capsys, name):
    path, text, message = DATASETS[name](tmp_path)
    if text is not None:
        path.write_text(text, encoding="utf-8")
    harness.dataset = path
    assert harness.run("gold") == 2
    assert message in one_line(capsys.readouterr().err) and not harness.root.exists()


def test_bad_settings_are_one_line(tmp_path, harness, monkeypatch, capsys):
    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "abc")
    assert harness.run("gold") == 2
    assert "LEXPILOT_BACKOFF_BASE='abc': must be a number" in one_line(capsys.readouterr().err)
    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "0.001")
    harness.run_id = "x" * 300
    assert harness.run("gold") == 2
    assert "--run-id is 300 characters long; use at most 100" in one_line(capsys.readouterr().err)
    harness.run_id = "r1"
    harness.root = tmp_path / "a-file"
    harness.root.write_text("not a folder")
    assert harness.run("gold", "--limit", "1") == 2
    message = one_line(capsys.readouterr().err)
    assert "not a directory" in message and str(harness.root) in message


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished run of every stage on two sample cases, made once; tests work on copies of it."""
    tmp_path = tmp_path_factory.mktemp("finished")
    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp_path, provider, monkeypatch)
        for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
            assert h.run(stage, "--limit", "2") == 0
    return h.root


@pytest.fixture
def saved_run(finished_run, tmp_path, monkeypatch, provider):
    import shutil

    h = Harness(tmp_path, provider, monkeypatch)
    shutil.copytree(finished_run, h.root)
    return lambda *_: h


def manifest_edit(change):
    def edit(h):
        path = run_folder(h) / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        change(manifest)
        path.write_text(json.dumps(manifest), encoding="utf-8")

    return edit


REPORT_BREAKAGES = {
    # compared settings edited by hand: the manifest's settings digest says so first (issue 28, item 15)
    "manifest without models": (
        manifest_edit(lambda m: m.pop("models")),
        "settings were changed after it started",
    ),
    "manifest without selected_cases": (
        manifest_edit(lambda m: m.pop("selected_cases")),
        "settings were changed after it started",
    ),
    "integer run_id": (manifest_edit(lambda m: m.update(run_id=7)), "lacks models.eval.model"),
    "run_id outside the root": (
        manifest_edit(lambda m: m.update(run_id="../../../etc")),
        "do not match its folder",
    ),
    "unknown cause of action": (break_record("cause_of_action", "外星纠纷"), "unknown cause of action"),
}


@pytest.mark.parametrize("name", REPORT_BREAKAGES)
def test_show_results_reports_a_broken_run_in_one_line(saved_run, tmp_path, monkeypatch, capsys, name):
    h = saved_run(tmp_path, monkeypatch)
    breakage, message = REPORT_BREAKAGES[name]
    if name == "unknown cause of action":  # keep the digest right: the cause itself is the problem
        from lexpilot.benchmark.records import content_digest

        path = h.file(LJP_GOLD)
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        records[0]["cause_of_action"] = "外星纠纷"
        records[0]["digest"] = content_digest(records[0])
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    else:
        breakage(h)
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--usage"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err


def test_show_results_malformed_usage_and_an_unwritable_plot_folder(saved_run, tmp_path, monkeypatch, capsys):
    h = saved_run(tmp_path, monkeypatch)
    from lexpilot.benchmark.records import content_digest

    path = h.file(LJP_GOLD)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    records[0]["usage"] = {"judge": {"calls": "many"}}
    records[0]["digest"] = content_digest(records[0])
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--usage"]) == 0
    assert "malformed usage for case" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    (tmp_path / "plot-file").write_text("x")
    assert show_results.main(["--output-root", str(h.root), "--plot", str(tmp_path / "plot-file")]) == 2
    assert "--plot" in one_line(capsys.readouterr().err)


def test_judge_agreement_hostile_files_are_one_line(tmp_path, capsys):
    from tests.test_judge_agreement import annotation_files

    path = annotation_files(tmp_path, [("LCA", "策略一", "策略一", "", "策略一")])
    cases = {
        "a field over the CSV limit": lambda: path.write_text(
            path.read_text(encoding="utf-8-sig") + '"' + "x" * 200000 + '"\n', encoding="utf-8"
        ),
        "invalid UTF-8": lambda: path.write_bytes(path.read_bytes() + b"\xff\xfe\xfa\n"),
    }
    original = path.read_bytes()
    for name, breakage in cases.items():
        path.write_bytes(original)
        breakage()
        assert judge_agreement.main(["score", str(path)]) == 2, name
        one_line(capsys.readouterr().err)
    assert judge_agreement.main(["score", str(tmp_path)]) == 2
    assert "is a folder" in one_line(capsys.readouterr().err)


def test_judge_agreement_out_at_a_folder_is_one_line(saved_run, tmp_path, monkeypatch, capsys):
    h = saved_run(tmp_path, monkeypatch)
    capsys.readouterr()
    assert (
        judge_agreement.main(
            ["export", "--output-root", str(h.root), "--dataset", str(SAMPLE), "--out", str(tmp_path)]
        )
        == 2
    )
    assert "cannot be written" in one_line(capsys.readouterr().err)


def test_the_progress_line_counts_calls_answered_before_any_case_is_done(harness, capsys):
    """Issue 26 item 12: a stage of long cases shows progress while no case has finished; the summary's elapsed
    time is the progress line's."""
    from lexpilot.running.stage import Progress

    progress = Progress("LJP behaviour", 3)
    progress.update(in_flight=1)
    progress.update(in_flight=-1, answered=1)
    assert progress.line().startswith("[LJP behaviour] 0/3 done, 0 failed, 1 calls answered, 0 in flight")
    assert harness.run("gold", "--limit", "2") == 0
    captured = capsys.readouterr()
    assert "2/2 done, 0 failed, 4 calls answered" in captured.err  # a prediction and its extraction per case
    assert "elapsed" in captured.out.splitlines()[-1] and "wall" not in captured.out
