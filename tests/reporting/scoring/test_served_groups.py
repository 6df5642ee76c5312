"""show_results.py never pools runs whose evaluated model, User Model or judge were served by other models than
asked without saying so (docs/results.md): such runs are a group of their own, and every table's label names what
served them where it is not the id asked for; the JSON report carries each run's served ids with their calls."""

import json

import pytest

import show_results

JUDGE = "DeepSeek-R1"
NEXT = "deepseek-r2-0901"


@pytest.mark.slow
def test_runs_whose_judge_answered_as_another_model_are_grouped_apart_and_labelled(harness, capsys):
    # r1: served as asked; r2: the judge answered as NEXT from its first call; r3: as r1
    assert harness.run("gold", "--limit", "2") == 0
    harness.run_id = "r2"
    harness.provider.served_as[JUDGE] = NEXT
    assert harness.run("gold", "--limit", "2") == 0
    harness.run_id = "r3"
    harness.provider.served_as.clear()
    assert harness.run("gold", "--limit", "2") == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "json", "--table", "runs"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row[0]: row for row in report["tables"][0]["rows"]}
    assert set(rows) == {"eval-model", f"eval-model · judge {JUDGE} (served: {NEXT})"}
    assert [g["run_ids"] for g in report["groups"]] == [["r1", "r3"], ["r2"]]
    assert [g["differs_from_first_group"] for g in report["groups"]] == [[], ["served.judge"]]
    # two calls per run and role: one per case
    assert report["groups"][1]["served_models"] == {"r2": {"eval": {"eval-model": 2}, "judge": {NEXT: 2}}}
    assert report["groups"][0]["served_models"]["r3"]["judge"] == {JUDGE: 2}
    # every table: the main one names the group as the runs table does
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    main = capsys.readouterr().out.split("Main results")[1]
    assert f"eval-model · judge {JUDGE} (served: {NEXT})" in main


def test_a_run_served_as_asked_and_one_whose_provider_does_not_say_are_one_group(harness, capsys):
    """A run whose replies say nothing of what served them (a provider that leaves `model` empty, or a run made
    before served ids were kept) is pooled with runs served as asked: nothing says otherwise."""
    assert harness.run("gold", "--limit", "2") == 0
    harness.run_id = "r2"
    harness.provider.served_as.update(
        {"eval-model": "", JUDGE: ""}
    )  # an empty id is no id (replies.served_of)
    assert harness.run("gold", "--limit", "2") == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "json", "--table", "runs"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [g["run_ids"] for g in report["groups"]] == [["r1", "r2"]]
    assert report["groups"][0]["served_models"]["r2"] == {}


def test_table_15_never_pools_a_non_ideal_run_served_apart_with_one_served_as_asked(tmp_path, capsys):
    """Table 15 pools the runs of one condition apart only in their code into one cell; a delayed-disclosure run
    whose judge answered as another model is a row of its own, not pooled with the one served as asked (hand-made
    runs: the Interaction-Based QWK is 1 when both cases are right, 0 when case A2's 驳回 is predicted 支持)."""
    from tests.helpers.saved_runs import make_run

    cases = {"A1": "离婚纠纷", "A2": "法定继承纠纷"}
    right = {"interaction": {"A1": [("支持", "支持")], "A2": [("驳回", "驳回")]}}
    wrong = {"interaction": {"A1": [("支持", "支持")], "A2": [("驳回", "支持")]}}
    models = {"eval": {"model": "m", "endpoint_host": "h"}, "user": {}, "judge": {"model": JUDGE}}
    apart = {"judge": {"calls": {NEXT: 2}, "accepted": [NEXT]}}
    make_run(tmp_path, "std", cases=cases, ljp=right, models=models)
    make_run(tmp_path, "del", cases=cases, ljp=right, models=models, user_condition="delayed")
    make_run(
        tmp_path, "del2", cases=cases, ljp=wrong, models=models, user_condition="delayed", served_models=apart
    )
    capsys.readouterr()
    assert (
        show_results.main(["--output-root", str(tmp_path), "--format", "json", "--table", "non_ideal"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)["tables"][0]["rows"]
    assert [(row[0], row[2]["mean"]) for row in rows] == [
        ("m", 1.0),
        (f"m (delayed user) · judge {JUDGE} (served: {NEXT})", 0.0),
    ]


def test_models_judged_by_a_judge_served_apart_are_not_ranked_against_each_other(tmp_path, capsys):
    """The rankings compare models judged by the same judge and simulated by the same User Model: a judge that
    answered as another model is another judge, and the pair is named with what keeps it apart."""
    from tests.helpers.saved_runs import make_run

    cases = {"A1": "离婚纠纷", "A2": "法定继承纠纷"}
    right = {"direct": {"A1": [("支持", "支持")], "A2": [("驳回", "驳回")]}}

    def models(model: str) -> dict:
        return {"eval": {"model": model, "endpoint_host": "h"}, "user": {}, "judge": {"model": JUDGE}}

    make_run(tmp_path, "r1", model="m", cases=cases, ljp=right, models=models("m"))
    apart = {"judge": {"calls": {NEXT: 2}, "accepted": [NEXT]}}
    make_run(tmp_path, "r1", model="n", cases=cases, ljp=right, models=models("n"), served_models=apart)
    capsys.readouterr()
    argv = ["--output-root", str(tmp_path), "--rank", "--format", "json", "--table", "not_comparable"]
    assert show_results.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["tables"][0]["rows"]
    assert rows == [[f"m (set 1) and n · judge {JUDGE} (served: {NEXT}) (set 2): served.judge differ"]]


@pytest.mark.slow  # every paper stage, twice, then re-judged
def test_a_rejudge_whose_judge_answered_as_another_model_is_no_test_retest_and_is_named(
    tmp_path, provider, monkeypatch, capsys
):
    """Re-judging a run with the same judge id measures the judge's own noise only when the same model answered:
    a re-judge served by another model is named so in the judge tables, and is not taken for a test-retest."""
    import rejudge
    from lexpilot.protocols.catalog import PAPER_GRID
    from lexpilot.running.stage import stage_main
    from tests.helpers.datasets import sample_cases, write_dataset
    from tests.helpers.reports import rows_of
    from tests.helpers.stages import SECRET

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    common = ["--model", "m", "--dataset", str(dataset), "--output-root", str(tmp_path / "out")]
    for run_id in ("r1", "r2"):
        provider.served_as.clear()
        for stage in (s for stages in PAPER_GRID.values() for s in stages):
            argv = ["--run-id", run_id, *common]
            assert stage_main(stage, "t", argv=argv, clients=provider.in_memory_clients()) == 0
        provider.served_as[JUDGE] = NEXT
        argv = ["--run-id", f"{run_id}-again", "--from-run", run_id, *common]
        assert stage_main(rejudge.STAGE, "t", argv=argv, clients=provider.in_memory_clients()) == 0
    capsys.readouterr()
    out_root = str(tmp_path / "out")
    assert show_results.main(["--output-root", out_root, "--consistency", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert not rows_of(out, "Judge noise")
    judges = {row[2] for row in rows_of(out, "Judge sensitivity: the two judges")}
    assert judges == {f"{JUDGE} / {JUDGE} (served: {NEXT})"}
