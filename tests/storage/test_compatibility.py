"""A run saved by the harness before the redesign (schema version 1) is read, reported and resumed."""

import json
import shutil

import eval_LJP_gold
import show_results
from lexpilot.benchmark.records import LJP_GOLD
from lexpilot.reporting.tables.renderings import json_key
from lexpilot.running.stage import stage_main
from tests.helpers.paths import DATA

# made by commit b1ddf54 on 4 sample cases, model old-model
SAVED = DATA / "run_saved_by_v1"
SAVED_DATASET = SAVED / "LexPilot_sample.json"  # the sample as it was then (it has gained fields since)


def resume(stage, root, run_id, model, dataset, provider, *extra) -> int:
    """A stage rerun on a saved run (its 4 cases), in memory against the scripted provider."""
    argv = [
        "--run-id",
        run_id,
        "--model",
        model,
        "--dataset",
        str(dataset),
        "--output-root",
        str(root),
        "--limit",
        "4",
        *extra,
    ]
    return stage_main(stage, "test", argv=argv, clients=provider.in_memory_clients())


def in_todays_keys(metrics: dict) -> dict:
    """A saved report's metrics under today's JSON keys (one style, snake_case), each number kept:
    how a reader written against the first releases' keys (`LJP_gold`, `T4 cases`, `Overall`) reads today's."""
    return {
        json_key(task): {
            json_key(metric): {json_key(group): v for group, v in groups.items()}
            for metric, groups in by_metric.items()
        }
        for task, by_metric in metrics.items()
    }


def copy_of_saved_run(tmp_path):
    root = tmp_path / "out"
    shutil.copytree(SAVED, root)
    return root


def test_a_run_saved_before_the_redesign_reports_the_same_numbers(tmp_path, capsys):
    root = copy_of_saved_run(tmp_path)
    assert (
        show_results.main(["--output-root", str(root), "--dataset", str(SAVED_DATASET), "--format", "json"])
        == 0
    )
    captured = capsys.readouterr()
    expected = json.loads((SAVED / "expected_show_results.json").read_text(encoding="utf-8"))
    metrics = json.loads(captured.out)["groups"][0]["metrics"]
    for task, values in in_todays_keys(
        expected["groups"][0]["metrics"]
    ).items():  # every number the old harness
        # reported
        assert metrics[task] == values, task
    assert "not checked" not in captured.err  # every record was checked against the dataset


def test_a_run_saved_before_the_redesign_resumes_with_consent(tmp_path, monkeypatch, provider, capsys):
    root = copy_of_saved_run(tmp_path)
    gold = LJP_GOLD.path(root, "v1run", "old-model-d1ae042c")
    lines = gold.read_text(encoding="utf-8").splitlines(keepends=True)
    gold.write_text("".join(lines[:-1]), encoding="utf-8")  # the last case's verdicts were never extracted
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)

    def run(*extra):
        return resume(eval_LJP_gold.STAGE, root, "v1run", "old-model", SAVED_DATASET, provider, *extra)

    assert run() == 2
    assert "code_hash: run 3ad6ca5ca3c40406" in capsys.readouterr().err and not provider.requests
    assert run("--allow-code-change") == 0
    assert provider.kinds() == {"ljp_judge": 1}  # only the missing extraction; the saved prediction is reused
    redone = [json.loads(line) for line in gold.read_text(encoding="utf-8").splitlines()]
    assert redone[:-1] == [json.loads(line) for line in lines[:-1]]  # the saved records are kept as they were
    new_fields = {"settings_hash", "digest"}  # what records carry since they were given digests
    usage = redone[-1]["usage"]["judge"]
    # and since they count the model each reply says served it: the scripted provider answers with the id asked
    assert usage.pop("served:DeepSeek-R1") == usage["calls"]
    # and list what served each call (since records list them)
    assert redone[-1].pop("served_calls") == [{"role": "judge", "served": "DeepSeek-R1"}]
    assert {k: v for k, v in redone[-1].items() if k not in new_fields} == json.loads(lines[-1])


def test_show_results_leaves_out_a_record_of_another_schema_or_other_inputs(tmp_path, capsys):
    for field, value, message in (
        ("schema_version", 2, "schema version 2"),
        ("input_hash", "0000000000000000", "generated from different inputs"),
    ):
        root = copy_of_saved_run(tmp_path / field)
        dcg = root / "eval_results" / "v1run" / "old-model-d1ae042c" / "DCG_results.jsonl"
        records = [json.loads(line) for line in dcg.read_text(encoding="utf-8").splitlines()]
        records[1][field] = value
        dcg.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        assert (
            show_results.main(
                ["--output-root", str(root), "--dataset", str(SAVED_DATASET), "--format", "json"]
            )
            == 0
        )
        captured = capsys.readouterr()
        assert f"DCG: {dcg}:2: " in captured.err and message in captured.err
        metrics = json.loads(captured.out)["groups"][0]["metrics"]
        assert "dcg" not in metrics and "lca" in metrics  # only that task is left out


def test_a_run_is_compared_on_the_prompts_its_user_condition_sends(tmp_path, monkeypatch, provider, capsys):
    """The v1 manifest hashed all ten prompts together; since then the non-ideal users' prompts were rewritten.
    A standard run resumes (its prompts are unchanged, as above); a delayed-disclosure run does not."""
    root = copy_of_saved_run(tmp_path)
    manifest_path = root / "runs" / "v1run" / "old-model-d1ae042c" / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["user_condition"] = "delayed"
    manifest_path.write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    import LexAwN_gen

    argv = [
        "--run-id",
        "v1run",
        "--model",
        "old-model",
        "--dataset",
        str(SAVED_DATASET),
        "--output-root",
        str(root),
        "--limit",
        "4",
        "--user-condition",
        "delayed",
        "--allow-code-change",
    ]
    assert stage_main(LexAwN_gen.STAGE, "test", argv=argv, clients=provider.in_memory_clients()) == 2
    err = capsys.readouterr().err
    assert "prompt_hash.user_delayed.txt: run fb05dda110120af5, now" in err and "user_standard" not in err
    assert not provider.requests


# made by commit 7a25040 (before the package): every stage but the probe study on 4 sample cases, model v2-model;
# expected_show_results.json is what that commit reported
SAVED_V2 = DATA / "run_saved_by_v2"


def test_a_run_saved_before_the_package_reports_the_same_numbers(tmp_path, capsys):
    root = tmp_path / "out"
    shutil.copytree(SAVED_V2, root)
    dataset = root / "LexPilot_sample.json"
    assert show_results.main(["--output-root", str(root), "--dataset", str(dataset), "--format", "json"]) == 0
    captured = capsys.readouterr()
    expected = json.loads((SAVED_V2 / "expected_show_results.json").read_text(encoding="utf-8"))["groups"][0]
    group = json.loads(captured.out)["groups"][0]
    # Table 4 was redefined since (over every case, attempts as counts, a resolved-only view); every
    # case of this run was resolved, so its QWK over every case is what it was over the resolved ones
    redefined = {
        "table_4_attempts",
        "table_4_cases",
        "table_4_resolved_direct",
        "table_4_resolved_targeted",
        "table_4_resolved_off_target",
    }
    saved = in_todays_keys(expected["metrics"])
    assert {k: v for k, v in group["metrics"].items() if k not in redefined} == {
        k: v for k, v in saved.items() if k not in redefined
    }
    assert (
        group["metrics"]["table_4_cases"]["all"]
        == group["metrics"]["table_4_cases"]["resolved"]
        == saved["table_4_cases"]["resolved"]
    )
    assert group["settings"] == expected["settings"] and not group["problems"]


def test_a_run_saved_before_the_package_resumes_with_consent(tmp_path, provider, monkeypatch, capsys):
    """(The Table 4 stage itself cannot resume such a run: its prompts were rewritten since, and a run is compared
    on the prompt files it sends.)"""
    root = tmp_path / "out"
    shutil.copytree(SAVED_V2, root)
    dataset = root / "LexPilot_sample.json"
    extraction = root / "eval_results" / "v2run" / "v2-model-6bc9124b" / "LJP_gold.jsonl"
    lines = extraction.read_text(encoding="utf-8").splitlines(keepends=True)
    # the last case's verdicts were never extracted
    extraction.write_text("".join(lines[:-1]), encoding="utf-8")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)

    def run(*extra):
        return resume(eval_LJP_gold.STAGE, root, "v2run", "v2-model", dataset, provider, *extra)

    assert run() == 2
    assert "code_hash: run 985398f8be1f56db, now" in capsys.readouterr().err and not provider.requests
    assert run("--allow-code-change") == 0
    assert provider.kinds() == {"ljp_judge": 1}  # only the missing extraction
    redone = extraction.read_text(encoding="utf-8").splitlines(keepends=True)
    assert redone[:-1] == lines[:-1]
    assert json.loads(redone[-1])["predicted"] == json.loads(lines[-1])["predicted"]
