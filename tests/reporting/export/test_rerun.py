"""Rerunning the export: a rerun over unchanged runs writes nothing and reads no record; a run whose records changed
is made again; and an export killed at any moment leaves, for each run, its previous files or none, so that
--verify passes on what is left and a rerun makes it whole, as an export into an empty folder would."""

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import export_results
from lexpilot.benchmark.records import content_digest, record_line
from tests.helpers.paths import ROOT
from tests.reporting.export.conftest import MODELS, RUNS

pytestmark = pytest.mark.slow
pytest.importorskip(
    "every_eval_ever", reason="every-eval-ever is not installed (it needs Python 3.12 or later)"
)
pytest.importorskip(
    "inspect_ai", reason="inspect-ai is not installed (pip install -r requirements-optional.txt)"
)

LEDGER = ".lexpilot-export"


def argv(grid: Path, out: Path) -> list[str]:
    return ["--output-root", str(grid), "--format", "eee", "inspect", "--output", str(out)]


def tree(folder: Path) -> dict[str, bytes]:
    """The export's files and their bytes, its ledger aside (which holds the files' times)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and LEDGER not in p.parts
    }


def rejudged(path: Path, cases: int | None = None) -> None:
    """The judge's raw answers of a verdict file's first `cases` records (all: None) changed, each record sealed
    again as a stage writes it: the instance records and logs of that stage change, and no score does."""
    lines = path.read_bytes().splitlines(keepends=True)
    for i, line in enumerate(lines[:cases]):
        record = json.loads(line)
        record["judge_raw"] = [*record["judge_raw"], "（改）"]
        record["digest"] = content_digest(record)
        lines[i] = record_line(record)
    path.write_bytes(b"".join(lines))


def test_a_rerun_writes_only_what_changed(grid, tmp_path, capsys, monkeypatch):
    """Over unchanged runs nothing is written and no record is read; after one run's records change, that run's
    files alone are written again, and the export equals one made into an empty folder."""
    out = tmp_path / "export"
    assert export_results.main(argv(grid, out)) == 0
    first = tree(out)
    capsys.readouterr()
    assert export_results.main(argv(grid, out)) == 0
    assert capsys.readouterr().out.strip().endswith(f"0 written, {len(first)} unchanged under {out}")

    (path,) = grid.glob("eval_results/r2/model-b-*/LJP_direct.jsonl")
    rejudged(path, cases=1)
    later = path.stat().st_mtime + 60  # judged again a minute later: its log's name has another time
    os.utime(path, (later, later))
    assert export_results.main(argv(grid, out)) == 0
    now = tree(out)
    changed = {name for name, data in now.items() if first.get(name) != data}
    # model-b's run r2 alone: its instance file, its aggregate (their time is its last verdict file's, which changed)
    # and the LJP Direct log, named by its own verdict file's time (the old name removed); its other logs untouched
    assert all("model-b" in name and ("r2" in name or "data/" in name) for name in changed)
    assert len(changed) == 2 + 1 and any(name.endswith("_samples.jsonl") for name in changed)
    (log,) = [name for name in changed if name.startswith("inspect/")]
    assert "_lexpilot-LJP-direct_" in log and log not in first
    assert len([name for name in first if name not in now]) == 1  # the old LJP Direct log, removed
    fresh = tmp_path / "fresh"
    assert export_results.main(argv(grid, fresh)) == 0
    assert tree(out) == tree(fresh)


def exporting(grid: Path, out: Path) -> subprocess.Popen:
    command = [sys.executable, str(ROOT / "export_results.py"), *argv(grid, out)]
    # its own process group: the kill reaches the processes it forked, as a kill of the command would
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def verify(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "export_results.py"), "--verify", str(out)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


def test_a_kill_at_any_moment_leaves_an_export_that_holds(grid, tmp_path):
    """The export is killed (SIGKILL, its worker processes with it) at random moments while it writes changed runs
    over a previous export: each time --verify passes on what is left (every aggregate there states the instance
    records beside it), and a rerun leaves the export a fresh one would be."""
    out = tmp_path / "export"
    started = time.monotonic()
    done = exporting(grid, out)
    assert done.wait(120) == 0, done.stderr.read().decode()[-500:]
    whole = time.monotonic() - started
    for path in grid.glob("eval_results/*/*/LJP_direct.jsonl"):
        rejudged(path)
    fresh = tmp_path / "fresh"
    assert export_results.main(argv(grid, fresh)) == 0
    seed = int.from_bytes(os.urandom(4), "big")
    moments = sorted(random.Random(seed).uniform(0.2, 1.0) * whole for _ in range(3))
    for moment in moments:
        killed = exporting(grid, out)
        time.sleep(moment)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        killed.stderr.close()
        checked = verify(out)
        where = f"killed after {moment:.2f} s of a {whole:.2f} s export (seed {seed})"
        assert checked.returncode == 0, f"{where}: {checked.stderr[-800:]}"
    done = exporting(grid, out)
    assert done.wait(120) == 0, done.stderr.read().decode()[-500:]
    done.stderr.close()
    assert verify(out).returncode == 0
    assert tree(out) == tree(fresh), f"moments {moments} (seed {seed})"
    aggregates = list(out.glob("data/lexpilot/*/*/*.json"))
    assert len(aggregates) == len(MODELS) * len(RUNS)


class Killed(BaseException):
    """The export stopped where it stood, as a kill stops it (no handler of the export's runs)."""


def test_an_export_stopped_before_any_of_its_writes_leaves_an_export_that_holds(grid, tmp_path, monkeypatch):
    """A changed run exported over its previous export (beside an unchanged one), stopped before its first, second,
    … last file write (each file is replaced whole, so these are all the states a kill can leave): --verify passes
    on every one, and a rerun then leaves what an export into an empty folder leaves."""
    from lexpilot.reporting.export import command, ledger, writing
    from lexpilot.reporting.export.verify import verify_export

    model_a = ["--model", "model-a"]
    previous = tmp_path / "previous"
    assert export_results.main([*argv(grid, previous), *model_a]) == 0
    (path,) = grid.glob("eval_results/r1/model-a-*/LJP_direct.jsonl")
    rejudged(path)
    fresh = tmp_path / "fresh"
    assert export_results.main([*argv(grid, fresh), *model_a]) == 0
    monkeypatch.setattr(command, "workers", lambda count: 1)  # the writes in this process, counted
    real = writing.write_atomic
    for stop_at in itertools.count():
        out = tmp_path / f"stopped-{stop_at}"
        shutil.copytree(previous, out)
        writes = itertools.count()

        def write(path, data):
            if next(writes) == stop_at:
                raise Killed
            real(path, data)

        for module in (writing, ledger):
            monkeypatch.setattr(module, "write_atomic", write)
        try:
            export_results.main([*argv(grid, out), *model_a])
            break  # it wrote all it had to
        except Killed:
            pass
        finally:
            for module in (writing, ledger):
                monkeypatch.setattr(module, "write_atomic", real)
        assert verify_export(out) == 0, f"stopped before write {stop_at + 1}"
        assert export_results.main([*argv(grid, out), *model_a]) == 0
        assert tree(out) == tree(fresh), f"stopped before write {stop_at + 1}, then run again"
    assert (
        stop_at == 2 + 1 + 2
    )  # run r1's EEE files, its LJP Direct log, its two ledger entries; r2 unchanged


def test_a_run_no_longer_exported_loses_the_files_the_ledger_lists_and_no_other(grid, tmp_path, capsys):
    """A run deleted from the output root, then exported over: its files (those the ledger lists, EEE and Inspect)
    are removed, each named in one line on stderr, and --verify passes on what is left; a file placed by hand beside
    them stays, and so do the files of a run the options leave out (exported by another command)."""
    from lexpilot.reporting.export.verify import verify_export

    out = tmp_path / "export"
    assert export_results.main(argv(grid, out)) == 0
    before = tree(out)
    (folder,) = grid.glob("runs/r1/model-a-*")
    logs = out / "inspect" / folder.name / "r1"
    hand = [out / "notes.txt", logs / "notes.txt"]
    for path in hand:
        path.write_text("mine", encoding="utf-8")
    dropped = {name for name in before if f"/{folder.name}/r1/" in name}
    (aggregate,) = [
        name
        for name, data in before.items()
        if name.endswith(".json") and b'"lexpilot_run": "r1"' in data and b"model-a" in data
    ]
    dropped |= {aggregate, aggregate.replace(".json", "_samples.jsonl")}
    for path in grid.glob(f"*/r1/{folder.name}"):
        shutil.rmtree(path)
    capsys.readouterr()
    assert export_results.main([*argv(grid, out), "--model", "model-b"]) == 0  # model-a's runs left out: kept
    assert tree(out).keys() >= set(before) and "removed" not in capsys.readouterr().err
    assert export_results.main(argv(grid, out)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert sorted(line.split(" removed ")[1].split(" (run ")[0] for line in err) == sorted(dropped)
    assert len(dropped) == 2 + 5
    assert set(tree(out)) == (set(before) - dropped) | {str(p.relative_to(out)) for p in hand}
    assert all(path.read_text(encoding="utf-8") == "mine" for path in hand)
    assert verify_export(out) == 0
