"""Every Eval Ever records of runs the stage scripts wrote: each passes the every-eval-ever package's own validation,
and says what the harness's records say (every message, the judge's labels, the tokens, the protocol)."""

import json
from pathlib import Path

import pytest

import export_results
from tests.helpers.runs import case_records as records
from tests.reporting.export.conftest import CASES, MAIN_STAGES, MODELS, RUNS

pytestmark = pytest.mark.slow
pytest.importorskip(
    "every_eval_ever", reason="every-eval-ever is not installed (it needs Python 3.12 or later)"
)


def export(root: Path, out: Path, *extra: str) -> int:
    return export_results.main(["--output-root", str(root), "--format", "eee", "--output", str(out), *extra])


def rows(out: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(out.glob("data/lexpilot/*/*/*_samples.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def test_every_record_passes_the_packages_own_validation(grid, tmp_path, capsys):
    """Each aggregate and each instance file passes every-eval-ever's validator, its datastore checks included (path,
    companion, score bounds, model deployment); one aggregate per model and run, one instance per case and stage."""
    from every_eval_ever.validator.validate import validate_file

    out = tmp_path / "export"
    assert export(grid, out) == 0
    # the datastore's tree (the export's ledger, .lexpilot-export/, is no record)
    files = sorted(str(p.relative_to(out)) for p in out.glob("data/**/*") if p.is_file())
    reader = lambda path: (out / path).read_text(encoding="utf-8")  # noqa: E731
    for name in files:
        report = validate_file(
            out / name,
            repo_path=name,
            available_files=set(files),
            read_repo_file=reader,
            run_semantic_checks=True,
        )
        assert report.valid, (name, report.errors)
    assert len([f for f in files if f.endswith(".json")]) == len(MODELS) * len(RUNS)
    # LCA's two histories are two consultations
    assert len(rows(out)) == len(MODELS) * len(RUNS) * CASES * (len(MAIN_STAGES) + 1)


def test_a_consultation_is_a_multi_turn_instance_with_every_message(grid, tmp_path):
    """The Interaction-Based case holds every message the records hold, the User Model's turns marked; its labels are
    the judge's (llm_judge), naming the judge asked for and the one that served; its tokens are the records' sums."""
    out = tmp_path / "export"
    assert export(grid, out, "--model", "model-b", "--run-id", "r2") == 0
    interactions = records(grid, "AwN_gen", "interaction.jsonl", "model-b", "r2")
    verdicts = records(grid, "eval_results", "LJP_interaction.jsonl", "model-b", "r2")
    for row in (r for r in rows(out) if r["evaluation_name"] == "lexpilot.LJP_interaction"):
        case = row["sample_id"]
        history = interactions[case]["continued_history"]
        assert row["interaction_type"] == "multi_turn"
        assert [(m["role"], m["content"]) for m in row["messages"]] == [
            (m["role"], m["content"]) for m in history
        ]
        given = len(interactions[case]["input_history"])
        assert row["metadata"]["user_model_turns"] == [
            i for i, m in enumerate(history) if i >= given and m["role"] == "user"
        ]
        assert [a["extracted_value"] for a in row["answer_attribution"]] == verdicts[case]["predicted"]
        assert {a["extraction_method"] for a in row["answer_attribution"]} == {"llm_judge"}
        assert row["input"]["reference"] == verdicts[case]["gold"]
        assert row["metadata"]["judge"] == {"requested": "DeepSeek-R1", "served": ["DeepSeek-R1"]}
        right = sum(p == g for p, g in zip(verdicts[case]["predicted"], verdicts[case]["gold"]))
        assert row["evaluation"]["score"] == right / len(verdicts[case]["gold"])
        eval_usage = interactions[case]["usage"].get("eval", {})
        if eval_usage:
            assert row["token_usage"]["input_tokens"] == eval_usage["prompt_tokens"]
            assert row["token_usage"]["output_tokens"] == eval_usage["completion_tokens"]


def test_each_lca_history_is_its_own_consultation(grid, tmp_path):
    """Each LCA case is two instances, one per history (complete and underspecified are sent apart): each holds its
    history as a1.jsonl keeps it and the evaluated model's reply to it, the judge's type of it against the true
    type; the a1 record's tokens are counted once, on the case's first history, which the other names."""
    out = tmp_path / "export"
    assert export(grid, out, "--model", "model-a", "--run-id", "r1") == 0
    a1 = records(grid, "AwN_gen", "a1.jsonl", "model-a", "r1")
    lca = records(grid, "eval_results", "LCA_results.jsonl", "model-a", "r1")
    found = {r["sample_id"]: r for r in rows(out) if r["evaluation_name"] == "lexpilot.LCA"}
    assert len(found) == 2 * len(lca)
    for case, verdict in lca.items():
        first, *others = verdict["judgments"]
        for history_type, judged in verdict["judgments"].items():
            row = found[f"{case}/{history_type}"]
            shown = a1[case]["responses"][history_type]
            assert [(m["role"], m["content"]) for m in row["messages"]] == [
                *((m["role"], m["content"]) for m in shown["history"]),
                ("assistant", shown["response"]),
            ]
            assert row["input"]["reference"] == [judged["true_type"]]
            assert [a["extracted_value"] for a in row["answer_attribution"]] == [judged["predicted_type"]]
            assert row["evaluation"]["score"] == float(judged["true_type"] == judged["predicted_type"])
        used = a1[case]["usage"]["eval"]
        assert found[f"{case}/{first}"]["token_usage"]["total_tokens"] == (
            used["prompt_tokens"] + used["completion_tokens"]
        )
        for other in others:
            assert "token_usage" not in found[f"{case}/{other}"]
            assert found[f"{case}/{other}"]["metadata"]["tokens_counted_with"] == f"{case}/{first}"


def test_a_run_off_the_papers_protocol_says_so(grid, tmp_path):
    """A --limit run of three cases says in its aggregate that it is no standard run, and why."""
    out = tmp_path / "export"
    assert export(grid, out, "--model", "model-c", "--run-id", "r1") == 0
    (aggregate,) = out.glob("data/lexpilot/*/*/*.json")
    details = json.loads(aggregate.read_text(encoding="utf-8"))["source_metadata"]["additional_details"]
    assert details["standard_run"] == "no"
    assert f"{CASES} cases (the paper's: 432" in details["protocol"]


def test_uncertainty_is_the_runs_bootstrap_over_cases(grid, tmp_path):
    """Each overall score carries the run's 95% bootstrap interval over cases, which holds the score, and the number of
    cases it rests on."""
    out = tmp_path / "export"
    assert export(grid, out, "--model", "model-a", "--run-id", "r1") == 0
    (aggregate,) = out.glob("data/lexpilot/*/*/*.json")
    for result in json.loads(aggregate.read_text(encoding="utf-8"))["evaluation_results"]:
        if result["evaluation_result_id"].endswith(".Overall"):
            spread = result["score_details"]["uncertainty"]
            assert spread["num_samples"] == CASES
            interval = spread.get("confidence_interval")
            if interval:
                assert (
                    interval["lower"] <= result["score_details"]["score"] + 1e-9 <= interval["upper"] + 2e-9
                )


def test_a_rerun_rewrites_only_what_changed(grid, tmp_path, capsys):
    """Exporting one run, then all: the first run's files are left as they were, the others written; a third export
    writes nothing."""
    out = tmp_path / "export"
    assert export(grid, out, "--run-id", "r1") == 0
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert export(grid, out) == 0
    assert "6 written, 6 unchanged" in capsys.readouterr().out
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())
    assert export(grid, out) == 0
    assert "0 written, 12 unchanged" in capsys.readouterr().out


def test_tokens_never_reported_are_left_out_not_zero(unreported_grid, tmp_path):
    """A case whose evaluated-model calls include one the provider reported no tokens for has no token_usage (its
    tokens are unknown; the metadata counts the unreported call); the run's other cases keep theirs."""
    root, case = unreported_grid
    out = tmp_path / "export"
    assert export(root, out, "--model", "model-a", "--run-id", "r1") == 0
    lca = {r["sample_id"]: r for r in rows(out) if r["evaluation_name"] == "lexpilot.LCA"}
    counted = {n: row for n, row in lca.items() if "tokens_counted_with" not in row["metadata"]}
    (unknown,) = [n for n in counted if n.startswith(f"{case}/")]
    assert "token_usage" not in counted[unknown]
    assert counted[unknown]["metadata"]["usage_by_role"]["eval"]["unreported_calls"] == 1
    assert all("token_usage" in row for n, row in counted.items() if n != unknown)


def test_an_interaction_instance_says_where_its_first_rounds_tokens_are(grid, tmp_path):
    """The Interaction-Based dialogue's round 1 is LCA's reply, whose tokens the case's first LCA history holds: each
    LJP_interaction instance names that instance; one judged in round 1 (its record holds no call of the evaluated
    model) has no token_usage and says its tokens are counted there, as LCA's second history does. Summed over LCA and
    the Interaction-Based instances, the evaluated model's tokens are those of a1.jsonl and interaction.jsonl."""
    out = tmp_path / "export"
    assert export(grid, out, "--model", "model-a", "--run-id", "r1") == 0
    a1 = records(grid, "AwN_gen", "a1.jsonl", "model-a", "r1")
    interactions = records(grid, "AwN_gen", "interaction.jsonl", "model-a", "r1")
    found = {(r["evaluation_name"], r["sample_id"]): r for r in rows(out)}
    in_round_1 = [c for c, r in interactions.items() if not r.get("usage", {}).get("eval")]
    assert in_round_1 and len(in_round_1) < len(interactions)
    for case in interactions:
        row = found["lexpilot.LJP_interaction", case]
        where = f"LCA {case}/complete"
        assert row["metadata"]["round_1_tokens_counted_with"] == where
        assert "token_usage" in found["lexpilot.LCA", f"{case}/complete"]
        if case in in_round_1:
            assert "token_usage" not in row and row["metadata"]["tokens_counted_with"] == where
        else:
            assert "token_usage" in row and "tokens_counted_with" not in row["metadata"]
    stated = sum(
        r["token_usage"]["input_tokens"]
        for (name, _), r in found.items()
        if name in ("lexpilot.LCA", "lexpilot.LJP_interaction") and "token_usage" in r
    )
    saved = sum(r["usage"]["eval"]["prompt_tokens"] for r in a1.values()) + sum(
        r["usage"]["eval"]["prompt_tokens"] for r in interactions.values() if r.get("usage", {}).get("eval")
    )
    assert stated == saved


def test_cached_prompt_and_reasoning_tokens_are_exported_where_the_records_keep_them(tmp_path):
    """A provider whose every reply reports 100 cached prompt tokens, and 7 reasoning tokens for the evaluated model:
    each DCG instance's token_usage carries the cached and reasoning tokens of its evaluated-model calls (two
    forced questions: 200 and 14), as the run's records sum them."""
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.stages import Harness

    def reasoning(kind, prompt, body):
        return {"reasoning_tokens": 7} if body.get("model") == "model-a" else None

    with ScriptedProvider(reasoning) as provider, pytest.MonkeyPatch.context() as monkeypatch:
        provider.cache = lambda prompt: {"prompt_tokens_details": {"cached_tokens": 100}}
        h = Harness(tmp_path, provider, monkeypatch)
        assert h.run("DCG", "--limit", str(CASES), "--model", "model-a") == 0
    out = tmp_path / "export"
    assert export(h.root, out) == 0
    asked = records(h.root, "Force_ask_gen", "force_ask.jsonl", "model-a", h.run_id)
    found = {r["sample_id"]: r for r in rows(out) if r["evaluation_name"] == "lexpilot.DCG"}
    assert set(found) == set(asked) and len(found) == CASES
    for case, row in found.items():
        used = asked[case]["usage"]["eval"]
        assert used["calls"] == 2  # the two forced questions
        assert row["token_usage"]["input_tokens_cache_read"] == 100 * 2 == used["cached_prompt_tokens"]
        assert row["token_usage"]["reasoning_tokens"] == 7 * 2 == used["reasoning_tokens"]
