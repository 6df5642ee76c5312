"""The cache of scored runs (speed at the grid's scale): "A second report of unchanged runs takes at
most 3 s. Use a cache of verified, parsed records keyed by each file's identity ..., invalidated by any change.
The cache is never trusted for a file that changed, and is tested so." On runs the stage scripts wrote."""

import os
import time
from pathlib import Path

import pytest

import show_results
from lexpilot.reporting.scoring import results
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness


@pytest.fixture
def report(tmp_path, provider, monkeypatch, capsys):
    """Runs of the main tasks on four cases, and a report that says what it printed and how many runs it scored
    from their records."""
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4]))
    for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
        assert h.run(stage) == 0
    scored = []
    real = results.score_run
    monkeypatch.setattr(
        results, "score_run", lambda run, *a, **k: (scored.append(run.run_id), real(run, *a, **k))
    )

    def show(*extra):
        capsys.readouterr()
        scored.clear()
        assert show_results.main(["--output-root", str(h.root), "--format", "csv", *extra]) == 0
        said = capsys.readouterr()
        return said.out + said.err, len(scored)

    return h, show


def test_a_second_report_of_unchanged_runs_comes_from_the_cache_and_says_the_same(report):
    h, show = report
    first, scored = show()
    assert scored == 1
    second, scored = show()
    assert scored == 0 and second == first
    os.utime(h.file("eval_results", "DCG_results.jsonl"))  # touched, not changed: still the same content
    assert show() == (first, 0)


def test_a_changed_byte_is_a_changed_run_even_with_its_size_and_time_kept(report):
    h, show = report
    first, _ = show()
    path = h.file("eval_results", "DCG_results.jsonl")
    data, stat = bytearray(path.read_bytes()), path.stat()
    middle = data.index(b'"success"')  # a byte in the first record, not the last line
    data[middle + 1] = ord("S")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    changed, scored = show()
    assert scored == 1 and changed != first and "DCG_results.jsonl" in changed  # said, as without a cache


def test_an_entry_not_signed_here_is_never_loaded(report):
    h, show = report
    first, _ = show()
    (entry,) = Path(os.environ["LEXPILOT_CACHE"]).glob("*.pickle")
    entry.write_bytes(b"\0" * 32 + entry.read_bytes()[32:])  # the body kept, the signature not this user's
    assert show() == (first, 1)


def test_an_entry_written_before_the_classes_moved_is_a_miss_not_a_traceback(report):
    """Found when reporting moved into subfolders: an entry signed here by the older code names
    `lexpilot.reporting.runs.Run`, which no longer exists. It is scored again from the records, as any miss is."""
    import hmac
    import pickle
    import sys
    import types

    from lexpilot.reporting.scoring import score_cache

    h, show = report
    first, _ = show()
    (entry,) = Path(os.environ["LEXPILOT_CACHE"]).glob("*.pickle")
    # a module of the older layout, there only while pickling
    gone = types.ModuleType("lexpilot.reporting.runs")
    gone.Run = type("Run", (), {"__module__": "lexpilot.reporting.runs"})
    sys.modules[gone.__name__] = gone
    try:
        body = pickle.dumps(("an older key", gone.Run()))
    finally:
        del sys.modules[gone.__name__]
    folder = entry.parent
    entry.write_bytes(hmac.digest(score_cache.signing_key(folder), body, "sha256") + body)
    assert show() == (first, 1)


def test_the_cache_can_be_turned_off_and_the_viewer_reads_the_records(report, monkeypatch, tmp_path):
    h, show = report
    monkeypatch.setenv("LEXPILOT_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # where it would go by default
    assert show()[1] == 1 and show()[1] == 1
    assert not (tmp_path / "xdg").exists()
    monkeypatch.setenv("LEXPILOT_CACHE", str(tmp_path / "scores"))
    show()
    assert show("--html", str(tmp_path / "site"))[1] == 1  # the site shows records: scored from them


def test_entries_unused_for_30_days_are_removed_and_a_read_keeps_one(report):
    """The cache grew without limit (a benchmark's temporary roots leave one entry per run). An
    entry neither read nor written for 30 days is removed when a report stores a score; a read keeps it in use."""
    from lexpilot.reporting.scoring import score_cache

    _, show = report
    folder = Path(os.environ["LEXPILOT_CACHE"])
    show()
    (entry,) = folder.glob("*.pickle")
    month = time.time() - 31 * 24 * 3600
    os.utime(entry, (month, month))
    assert show()[1] == 0 and entry.stat().st_mtime > month + 24 * 3600  # read from the cache: in use again
    stale, recent = folder / "stale.pickle", folder / "recent.pickle"
    for path, when in ((stale, month), (recent, time.time() - 29 * 24 * 3600)):
        path.write_bytes(b"x")
        os.utime(path, (when, when))
    score_cache.pruned.cache_clear()  # a new process
    entry.write_bytes(b"\0" * 32 + entry.read_bytes()[32:])  # a miss, so the report stores, and prunes
    assert show()[1] == 1
    assert not stale.exists() and recent.exists() and entry.exists()
