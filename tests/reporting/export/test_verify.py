"""--verify recomputes Tables 2 and 3 from an export alone: on an export of a grid the stage scripts wrote it prints
show_results.py's tables digit for digit, and a value changed by hand in an exported file fails it, named."""

import json
import re

import pytest

import export_results
import show_results
from lexpilot.benchmark.records import DCG, model_folder
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.stages import Harness
from tests.reporting.export.conftest import CASES, MAIN_STAGES

pytestmark = pytest.mark.slow
pytest.importorskip(
    "every_eval_ever", reason="every-eval-ever is not installed (it needs Python 3.12 or later)"
)

TABLES = ("main", "lca_by_class", "dcg_by_class")


@pytest.fixture
def exported(grid, tmp_path):
    out = tmp_path / "export"
    assert export_results.main(["--output-root", str(grid), "--format", "eee", "--output", str(out)]) == 0
    return out


def test_verify_prints_show_results_tables_to_the_digit(grid, exported, capsys):
    """The tables --verify recomputes from the export equal show_results.py's Table 11 (Tables 2-3 overall) and
    Table 2 on the runs themselves, character for character, and it exits 0."""
    capsys.readouterr()
    assert show_results.main(["--output-root", str(grid), "--table", *TABLES]) == 0
    shown = capsys.readouterr().out
    # the grid's records are gone: the export alone is read
    import shutil

    shutil.rmtree(grid)
    assert export_results.main(["--verify", str(exported)]) == 0
    printed = capsys.readouterr().out
    tables = printed[: printed.rindex("export_results --verify:")]
    assert tables.strip() == shown.strip()
    assert "model-a" in tables and "model-c" in tables


def test_a_value_changed_by_hand_fails_verify_naming_table_model_and_value(exported, capsys):
    """One aggregate's DCG accuracy for one class edited by hand: --verify exits 1 naming Table 2, the model, the run,
    the value stated and the value its instances give."""
    aggregate = next(
        p
        for p in exported.glob("data/lexpilot/*/*/*.json")
        if json.loads(p.read_text(encoding="utf-8"))["source_metadata"]["additional_details"]["lexpilot_run"]
        == "r2"
        and json.loads(p.read_text(encoding="utf-8"))["model_info"]["id"] == "model-b"
    )
    record = json.loads(aggregate.read_text(encoding="utf-8"))
    result = next(
        r for r in record["evaluation_results"] if r["evaluation_result_id"] == "DCG.accuracy.Overall"
    )
    true_value = result["score_details"]["score"]
    result["score_details"]["score"] = 0.1234
    aggregate.write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
    capsys.readouterr()
    assert export_results.main(["--verify", str(exported)]) == 1
    err = capsys.readouterr().err
    assert (
        f"Table 2 (DCG), model model-b, run r2, Overall: the export states 0.1234, its instance records give "
        f"{true_value:.4f}" in err
    )


def test_a_label_changed_by_hand_in_the_instances_fails_verify(exported, capsys):
    """One judge's label changed in an instance file: the recomputed table differs from what the aggregate states, and
    the companion's checksum no longer holds."""
    samples = sorted(exported.glob("data/lexpilot/*/*/*_samples.jsonl"))[0]
    rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    lca = next(r for r in rows if r["evaluation_name"] == "lexpilot.LCA")
    first = lca["answer_attribution"][0]
    first["extracted_value"] = "underspecified" if first["extracted_value"] == "complete" else "complete"
    samples.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    capsys.readouterr()
    assert export_results.main(["--verify", str(exported)]) == 1
    err = capsys.readouterr().err
    assert "Table 2 (LCA)" in err and "does not match the checksum" in err


def test_a_task_with_a_case_missing_is_left_out_and_the_export_verifies(grid, tmp_path, capsys):
    """One case's DCG record removed from one run: show_results.py does not report that run's DCG, so the export
    carries neither its DCG instances nor its DCG results, says so on stderr naming run, model and task, and --verify
    of the fresh export passes, printing show_results.py's tables."""
    path = DCG.path(grid, "r1", model_folder("model-a"))
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]), encoding="utf-8")
    out = tmp_path / "export"
    capsys.readouterr()
    assert export_results.main(["--output-root", str(grid), "--format", "eee", "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "run r1, model model-a: DCG: " in err and "left out of the export" in err
    assert len(err.strip().splitlines()) == 1
    aggregate, samples = exported_files(out, "model-a", "r1")
    assert not any(r["evaluation_result_id"].startswith("DCG.") for r in aggregate["evaluation_results"])
    assert any(r["evaluation_result_id"].startswith("LCA.") for r in aggregate["evaluation_results"])
    assert {row["evaluation_name"] for row in samples} == {
        "lexpilot.LCA",
        "lexpilot.LJP_direct",
        "lexpilot.LJP_gold",
        "lexpilot.LJP_interaction",
    }
    assert show_results.main(["--output-root", str(grid), "--table", *TABLES]) == 0
    shown = capsys.readouterr().out
    assert export_results.main(["--verify", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed[: printed.rindex("export_results --verify:")].strip() == shown.strip()


def exported_files(out, model: str, run_id: str) -> tuple[dict, list[dict]]:
    """A model and run's aggregate record and its instance records, as the export wrote them."""
    for path in out.glob("data/lexpilot/*/*/*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["model_info"]["id"] == model and record["evaluation_id"].endswith(f"/{run_id}"):
            samples = out / record["detailed_evaluation_results"]["file_path"]
            rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
            return record, rows
    raise AssertionError(f"no aggregate of {model}, run {run_id}")


def test_instance_records_whose_aggregate_was_deleted_fail_verify(exported, capsys):
    """Two runs' aggregate records deleted: --verify names each orphaned instance-record file in one line and exits
    1; with every aggregate deleted it still names each and exits 1."""
    aggregates = sorted(exported.glob("data/lexpilot/*/*/*.json"))
    for path in aggregates[:2]:
        path.unlink()
    capsys.readouterr()
    assert export_results.main(["--verify", str(exported)]) == 1
    err = capsys.readouterr().err
    for path in aggregates[:2]:
        orphan = path.with_name(path.stem + "_samples.jsonl").relative_to(exported)
        assert len([line for line in err.splitlines() if str(orphan) in line]) == 1
    assert err.count("without the aggregate record") == 2
    for path in aggregates[2:]:
        path.unlink()
    assert export_results.main(["--verify", str(exported)]) == 1
    assert capsys.readouterr().err.count("without the aggregate record") == len(aggregates)


def test_runs_exported_apart_are_grouped_by_their_settings_not_their_label(
    grid, tmp_path, monkeypatch, capsys
):
    """Model-a's run r0 judged by another judge (first by run id: show_results.py labels it plain "model-a" and the
    paper's runs r1 and r2 by their judge), exported alone, then r1 and r2 into the same folder; and the three
    exported together, and in the other order: each run carries the same label every time, the paper-protocol runs
    the plain model name and r0 its judge; --verify keeps r0 apart from r1 and r2, its rows giving show_results.py's
    values."""
    with ScriptedProvider() as provider:
        h = Harness(grid.parent, provider, monkeypatch)
        h.run_id = "r0"
        for stage in MAIN_STAGES:
            assert h.run(stage, "--limit", str(CASES), "--model", "model-a", "--judge-model", "judge-b") == 0
    want = {"r0": "model-a · judge judge-b", "r1": "model-a", "r2": "model-a"}
    orders = {
        "apart": (["r0"], ["r1", "r2"]),
        "reversed": (["r1", "r2"], ["r0"]),
        "together": (["r0", "r1", "r2"],),
    }
    for name, order in orders.items():
        out = tmp_path / name
        base = ["--output-root", str(grid), "--format", "eee", "--output", str(out), "--model", "model-a"]
        for runs in order:
            assert export_results.main([*base, "--run-id", *runs]) == 0
        assert labels_stated(out) == want, name
    capsys.readouterr()
    assert show_results.main(["--output-root", str(grid), "--table", "main", "--model", "model-a"]) == 0
    shown = rows_of(capsys.readouterr().out)
    assert set(shown) == {"model-a", "model-a · judge DeepSeek-R1"}  # labelled against the first run, r0
    assert export_results.main(["--verify", str(tmp_path / "apart")]) == 0
    printed = rows_of(capsys.readouterr().out)
    assert len(shown) == 2 and sorted(printed.values()) == sorted(shown.values())
    assert set(printed) == {"model-a", "model-a · judge judge-b"}
    assert printed["model-a"] == shown["model-a · judge DeepSeek-R1"]


def labels_stated(out) -> dict[str, str]:
    """Run id -> the group label its aggregate states."""
    found = {}
    for path in out.glob("data/lexpilot/*/*/*.json"):
        details = json.loads(path.read_text(encoding="utf-8"))["source_metadata"]["additional_details"]
        found[details["lexpilot_run"]] = details["group"]
    return found


def rows_of(text: str) -> dict[str, list[str]]:
    """The first table's rows of model-a: label -> its cells (the columns after the label)."""
    table = text.split("\n\n")[0]
    cells = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines() if line.startswith("model-a")]
    return {row[0]: row[1:] for row in cells}
