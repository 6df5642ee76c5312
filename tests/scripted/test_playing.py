"""The scripted provider playing an abilities file: a request's run is what its base URL names; each reply carries
the truth the abilities drew and the judge reads it from its own prompt; an undeclared model or a history not in
the dataset is refused in one line. On runs the stage scripts wrote: the better model scores higher by its set
margin, the judge's confusion measured against the truth is the set one, and a resumed, rerun or batched run's
records are the same."""

import numpy as np
import pytest

from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.prompts import key_detail_lines, render_details_by_focal_point, render_history
from lexpilot.benchmark.records import A1, DCG, DIRECT_PREDICTION, FORCE_ASK, LCA, LJP_DIRECT
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.running.stage import stage_main
from lexpilot.scripted.abilities import parse_abilities
from lexpilot.scripted.expected import expected_metrics
from lexpilot.scripted.kinds import run_of_path, stable
from lexpilot.scripted.playing import CaseIndex, hits, playing, stated
from lexpilot.scripted.provider import ScriptedProvider
from lexpilot.scripted.truth import strategy, true_decisions
from tests.helpers.abilities import saved, stage_argv
from tests.helpers.batches import VOLATILE
from tests.helpers.paths import SAMPLE
from tests.helpers.stages import SECRET, STAGES

SURE = """
[models."sure"]
lca_complete = 1
lca_underspecified = 1
dcg = 1
ljp = 1
[models."never"]
lca_complete = 0
lca_underspecified = 0
dcg = 0
ljp = 0
"""
CASES, _ = load_dataset(SAMPLE)


def test_a_request_names_its_run_by_its_base_url():
    assert run_of_path("/run3/v1/chat/completions") == ("run3", "/v1/chat/completions")
    assert run_of_path("/v1/files/file-1/content") == ("", "/v1/files/file-1/content")
    assert run_of_path("/a/b/v1/batches") == ("a/b", "/v1/batches")


def test_a_prompt_history_is_found_as_the_case_and_history_it_continues():
    index, case = CaseIndex(CASES), CASES[3]
    underspecified = render_history(case.history("underspecified"))
    found = index.place(underspecified)
    assert (found.case.number, found.history_type, found.added_turns) == (case.number, "underspecified", 0)
    continued = index.place(underspecified + "\nAssistant: 请问？\nUser: 是的。")
    assert (continued.case.number, continued.added_turns) == (case.number, 1)
    assert index.place(render_history(case.history("complete"))).history_type == "complete"
    assert index.place("User: 不在数据集里的咨询") is None


def script(text: str = SURE):
    provider = ScriptedProvider()  # never started: its script is called directly, as its chat handler does
    return playing(provider, parse_abilities(text, "a.toml"), CASES, "sample.json")


def test_each_reply_carries_the_truth_the_abilities_drew():
    answer, case = script(), CASES[0]
    complete = f"<对话历史>{render_history(case.history('complete'))}\n</对话历史>"
    underspecified = f"<对话历史>{render_history(case.history('underspecified'))}\n</对话历史>"
    assert answer("lexawn", complete, {"model": "sure"}).startswith("【预测】")
    assert answer("lexawn", underspecified, {"model": "sure"}).startswith("【追问】")
    assert answer("lexawn", complete, {"model": "never"}).startswith("【追问】")
    assert hits(answer("force_ask", underspecified, {"model": "sure"}), "\n".join(key_detail_lines(case)))
    assert not hits(
        answer("force_ask", underspecified, {"model": "never"}), "\n".join(key_detail_lines(case))
    )
    direct = answer("force_judge", underspecified, {"model": "sure"})
    assert stated(direct, list(case.claims)) == list(case.verdicts)
    wrong = stated(answer("force_judge", underspecified, {"model": "never"}), list(case.claims))
    assert all(w != v for w, v in zip(wrong, case.verdicts))


def test_a_judge_of_recall_one_reads_the_truth_from_its_own_prompt():
    answer, case = script(), CASES[0]
    question = answer(
        "force_ask",
        f"<对话历史>{render_history(case.history('underspecified'))}</对话历史>",
        {"model": "sure"},
    )
    dcg = f"<AI提问内容>{question}</AI提问内容><争议焦点对应案件事实>{render_details_by_focal_point(case)}</争议焦点对应案件事实>"
    assert answer("dcg_judge", dcg, {"model": "judge"}) == "是"
    assert answer("lca_judge", "<待评估回复>【追问】请问？</待评估回复>", {"model": "judge"}) == "策略二"
    # the claims matched by their text: listed in another order (the order diagnostic's), read in that order
    reply = "【预测】\n第1项诉请「甲」：部分支持\n第2项诉请「乙」：驳回"
    ljp = f"<待提取回复>{reply}</待提取回复><正式诉请>乙\n甲</正式诉请>"
    assert answer("ljp_judge", ljp, {"model": "judge"}) == '{"results": ["驳回", "部分支持"]}'
    assert (
        answer("ljp_judge", "<待提取回复>无</待提取回复><正式诉请>甲</正式诉请>", {"model": "judge"}) is None
    )


def test_an_undeclared_model_or_a_history_not_in_the_dataset_is_refused_in_one_line():
    answer = script()
    refused = answer("lexawn", "<对话历史>User: 你好</对话历史>", {"model": "other"})
    assert refused["status"] == 404 and refused["error"] == (
        "scripted provider: model 'other' is not in a.toml: declare its abilities there"
    )
    refused = answer("lexawn", "<对话历史>User: 你好</对话历史>", {"model": "sure"})
    assert refused["error"] == (
        "scripted provider: a lexawn prompt's history is not in sample.json: start the provider with the runs' dataset"
    )


# ----------------------------------------------------------------------------- runs the stage scripts wrote

CASE_COUNT, RUNS = 60, ("run1", "run2")


@pytest.fixture
def grid(abilities_grid):
    """The session's grid of set abilities (tests/conftest.py): CASE_COUNT cases, RUNS."""
    assert len(abilities_grid.cases) == CASE_COUNT
    return abilities_grid


def model_means(grid) -> dict[str, dict]:
    """Each model's metrics as the harness scores them, averaged over its runs."""
    runs = load_runs(grid.root, None, None, dataset=grid.dataset)
    return {
        model: {key: np.mean([r.metrics[key] for r in runs if r.model == model]) for key in runs[0].metrics}
        for model in grid.abilities.models
    }


@pytest.mark.slow
def test_the_better_model_scores_higher_by_its_set_margin(grid):
    """Each model's mean over two runs of a share over n decisions has a variance of at most p(1 − p)/n (runs that
    share draws only add to it less than independent runs take away: at most one run's), so the difference of two
    models is within 4 · √(Σ p(1 − p)/n) of its expectation, the judged one (the judge errs on both)."""
    expected = expected_metrics(grid.abilities, grid.cases, judged=True)
    measured = model_means(grid)
    claims = sum(len(c.claims) for c in grid.cases)
    for task, metric, n in [
        ("LCA", "acc_c", CASE_COUNT),
        ("LCA", "acc_u", CASE_COUNT),
        ("DCG", "accuracy", CASE_COUNT),
        ("LJP_direct", "accuracy", claims),
    ]:
        strong, weak = expected["m-strong"][(task, metric)], expected["m-weak"][(task, metric)]
        bound = 4 * np.sqrt((strong * (1 - strong) + weak * (1 - weak)) / n)
        difference = (
            measured["m-strong"][MetricKey(task, metric)] - measured["m-weak"][MetricKey(task, metric)]
        )
        assert abs(difference - (strong - weak)) < bound, (task, metric, difference, strong - weak, bound)
        assert difference > 0


def judge_pairs(grid):
    """(task, true label, the judge's label) of every LCA, DCG and Direct LJP decision of the runs."""
    pairs = []
    for model in grid.abilities.models:
        for run in RUNS:
            truth = true_decisions(grid.abilities, grid.cases, model, run)
            lca, dcg, ljp = (saved(grid.root, kind, run, model) for kind in (LCA, DCG, LJP_DIRECT))
            for number, case in truth.items():
                for history, right in case.lca.items():
                    pairs.append(
                        ("LCA", strategy(right, history), lca[number]["judgments"][history]["label"])
                    )
                for hit, judged in zip(case.dcg, dcg[number]["rounds"]):
                    pairs.append(("DCG", "是" if hit else "否", judged["label"]))
                pairs += [("LJP", v, p) for v, p in zip(case.verdicts["direct"], ljp[number]["predicted"])]
    return pairs


@pytest.mark.slow
def test_the_judges_confusion_against_the_truth_is_the_set_one(grid):
    """The share of a true label the judge keeps, over its n decisions, within 4 · √(r(1 − r)/n) of the recall r."""
    pairs = judge_pairs(grid)
    for task, recalls in grid.abilities.judge.items():
        for label, recall in recalls.items():
            given = [p for t, v, p in pairs if t == task and v == label]
            bound = 4 * np.sqrt(max(recall * (1 - recall), 0.01) / len(given))
            assert len(given) >= 30 and abs(np.mean([p == label for p in given]) - recall) < bound, (
                task,
                label,
            )


@pytest.mark.slow
def test_the_replies_are_the_decisions_the_abilities_drew(grid):
    for model in grid.abilities.models:
        for run in RUNS:
            truth = true_decisions(grid.abilities, grid.cases, model, run)
            a1, asked, direct = (
                saved(grid.root, kind, run, model) for kind in (A1, FORCE_ASK, DIRECT_PREDICTION)
            )
            by_number = {c.number: c for c in grid.cases}
            for number, case in truth.items():
                for history, right in case.lca.items():
                    said = a1[number]["responses"][history]["response"]
                    assert said.startswith("【预测】" if strategy(right, history) == "策略一" else "【追问】")
                details = render_details_by_focal_point(by_number[number])
                assert [hits(r["question"], details) for r in asked[number]["rounds"]] == list(case.dcg)
                claims = list(by_number[number].claims)
                assert stated(direct[number]["response"], claims) == case.verdicts["direct"]


def contents(records: dict) -> dict:
    return {n: {k: v for k, v in r.items() if k not in VOLATILE} for n, r in records.items()}


def refusing_some_judgments(script):
    """The script, with a third of the DCG judge's requests failing (a 500, not retried: the case fails): the cases
    whose eval calls were paid for and not judged are resumed."""

    def answer(kind, prompt, body):
        if kind == "dcg_judge" and stable(prompt) % 3 == 0:
            return {"status": 500, "error": "scripted failure"}
        return script(kind, prompt, body)

    return answer


def run_dcg(provider, dataset, root, *extra) -> int:
    argv = stage_argv("run2", "m-weak", dataset, root, "--keep-going", "--retries", "0", *extra)
    return stage_main(STAGES["DCG"], "test", argv=argv, clients=provider.in_memory_clients("run2"))


@pytest.mark.slow
def test_a_resumed_and_a_batched_run_save_the_records_of_an_uninterrupted_one(
    grid, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with ScriptedProvider() as provider:
        plain = playing(provider, grid.abilities, grid.cases)
        provider.script = refusing_some_judgments(plain)
        assert run_dcg(provider, grid.dataset, tmp_path / "resumed") != 0
        provider.script = plain
        capsys.readouterr()
        assert run_dcg(provider, grid.dataset, tmp_path / "resumed") == 0
        resumed = capsys.readouterr().out
        assert run_dcg(provider, grid.dataset, tmp_path / "batched", "--batch", "--batch-poll", "0.1") == 0
    skipped = int(resumed.split(" skipped (already saved)")[0].rsplit(" ", 1)[1])
    assert 0 < skipped < CASE_COUNT and "paid in an earlier run replayed" in resumed, resumed
    for kind in (FORCE_ASK, DCG):
        first = contents(saved(grid.root, kind, "run2", "m-weak"))
        assert contents(saved(tmp_path / "resumed", kind, "run2", "m-weak")) == first
        assert contents(saved(tmp_path / "batched", kind, "run2", "m-weak")) == first


def true_label(truth, source: str) -> str:
    """The true label of an exported item, from the truth of its run and where the key's source says it is."""
    place = source.rsplit(" ", 2)[1:]  # ["complete"], ["round", "2"], ["claim", "1"] and what precedes
    if place[-1] in ("complete", "underspecified"):
        return strategy(truth.lca[place[-1]], place[-1])
    if place[0] == "round":
        return "是" if truth.dcg[int(place[1]) - 1] else "否"
    setup = "direct" if "LJP_direct" in source else "gold" if "LJP_gold" in source else "interaction"
    return truth.verdicts[setup][int(place[1]) - 1]


@pytest.mark.slow
def test_expert_labels_from_the_scripted_truth_are_the_drawn_truth_and_let_the_judge_be_corrected(
    grid, tmp_path, capsys
):
    import judge_agreement
    import show_results
    from bench import scripted_experts
    from lexpilot.files import key_file, read_sheet

    labels = tmp_path / "labels.csv"
    export = ["export", "--output-root", str(grid.root), "--per-task", "200", "--out", str(labels)]
    assert judge_agreement.main(export) == 0
    assert scripted_experts.main([str(labels)]) == 0
    key = {row["item_id"]: row for _, row in read_sheet(key_file(labels), ["item_id"])}
    truths = {
        (m, r): true_decisions(grid.abilities, grid.cases, m, r) for m in grid.abilities.models for r in RUNS
    }
    rows = [row for _, row in read_sheet(labels, ["item_id"])]
    assert {row["task"] for row in rows} == {"LCA", "DCG", "LJP"} and len(rows) >= 590
    for row in rows:
        item = key[row["item_id"]]
        truth = truths[(item["model"], item["run_id"])][item["case_number"]]
        assert (
            row["annotator_1"]
            == row["annotator_2"]
            == row["adjudicated"]
            == true_label(truth, item["source"])
        )
    assert judge_agreement.main(["score", str(labels)]) == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(grid.root), "--corrected", str(labels)]) == 0
    corrected = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("DCG Acc.")]
    assert {row[2] for row in corrected} == set(grid.abilities.models)
    assert not any("refused" in row for row in corrected)
