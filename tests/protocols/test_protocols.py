"""The evaluation protocols: calls per role and their order, budgets, isolation, reuse rules."""

import json

import pytest

from lexpilot.benchmark.dataset import case_from_raw
from lexpilot.benchmark.prompts import render_claims
from lexpilot.benchmark.records import INTERACTION
from lexpilot.scripted.kinds import between, kind_of, stable
from lexpilot.scripted.replies import ASK, PREDICT
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

CASE = sample_cases()[1]  # 3 messages: one pre-existing assistant question
UNDERSPECIFIED_TAIL = CASE["underspecified_consultation"][-1]["content"]
PRE_EXISTING = 1


@pytest.fixture
def one_case(tmp_path, provider, monkeypatch):
    return Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "one.json", [CASE]))


def asks_then_predicts(questions: int):
    """LexAwN asks `questions` new questions on the underspecified history, then predicts."""

    def script(kind, prompt, body):
        history = between(prompt, "对话历史")
        if kind == "lexawn":
            if UNDERSPECIFIED_TAIL not in history:
                return PREDICT + "完整咨询：支持。"
            new_turns = history.count("Assistant:") - PRE_EXISTING
            return (
                PREDICT + f"第{new_turns + 1}次回复：支持。"
                if new_turns >= questions
                else ASK + f"第{new_turns + 1}次回复：请问还有什么证据？"
            )
        if kind == "user":
            return f"用户第{history.count('Assistant:') - PRE_EXISTING}次回答。"
        return None

    return script


def roles_of(provider):
    return [kind_of(p) for p in provider.prompts()]


@pytest.mark.parametrize(
    "questions,expected_round,stop",
    [(0, 1, "judged"), (1, 2, "judged"), (2, 3, "judged"), (3, 4, "budget"), (7, 4, "budget")],
)
def test_interaction_rounds_calls_and_order(one_case, provider, questions, expected_round, stop):
    provider.script = asks_then_predicts(questions)
    assert one_case.run("LexAwN", "--concurrency", "1") == 0
    kinds = roles_of(provider)
    asked = min(questions, 3)
    expected = ["lexawn", "lexawn", "lca_judge", "lca_judge"]
    for r in range(2, asked + 2):
        expected += ["user"]
        if r <= 3:
            expected += ["lexawn", "lca_judge"]
    if asked == 3:
        expected += ["force_judge"]
    assert kinds == expected
    (record,) = one_case.records(INTERACTION)
    assert record["stop_reason"] == stop and len(record["rounds"]) == expected_round
    new_assistant = [r for r in record["rounds"] if r.get("assistant")]
    assert len(new_assistant) <= 4
    assert record["continued_history"][:3] == CASE["underspecified_consultation"]
    assert len(record["continued_history"]) == 3 + 2 * asked + 1
    assert record["final_response"] == record["continued_history"][-1]["content"]
    if stop == "budget":
        assert record["rounds"][-1]["prompt"] == "force_judge" and record["rounds"][-1]["label"] is None
        assert all(r["label"] == "策略二" for r in record["rounds"][:3])
    else:
        assert record["rounds"][-1]["label"] == "策略一"


def test_first_interaction_round_reuses_a1_and_its_label(one_case, provider):
    provider.script = asks_then_predicts(1)
    assert one_case.run("LexAwN") == 0
    (a1,) = one_case.records("AwN_gen", "a1.jsonl")
    (interaction,) = one_case.records(INTERACTION)
    assert interaction["rounds"][0]["assistant"] == a1["responses"]["underspecified"]["response"]
    judged = [between(p, "待评估回复") for p in provider.prompts("lca_judge")]
    assert judged.count(a1["responses"]["underspecified"]["response"]) == 1  # not judged twice


def test_forced_prediction_sees_the_whole_accumulated_history(one_case, provider):
    provider.script = asks_then_predicts(3)
    assert one_case.run("LexAwN") == 0
    (forced,) = provider.prompts("force_judge")
    (record,) = one_case.records(INTERACTION)
    history = between(forced, "对话历史")
    for message in record["continued_history"][:-1]:
        assert message["content"] in history
    assert history.count("Assistant:") == PRE_EXISTING + 3 and history.count("User:") == PRE_EXISTING + 1 + 3


def test_lca_records_label_and_true_type(one_case, provider):
    provider.script = asks_then_predicts(2)
    assert one_case.run("LexAwN") == 0
    (lca,) = one_case.records("eval_results", "LCA_results.jsonl")
    assert lca["judgments"]["complete"] | {"judge_raw": None} == {
        "label": "策略一",
        "true_type": "complete",
        "predicted_type": "complete",
        "judge_raw": None,
    }
    assert lca["judgments"]["underspecified"]["predicted_type"] == "underspecified"


def test_eval_lca_alone_needs_a1_and_completes_missing_labels(one_case, provider, capsys):
    assert one_case.run("LCA") == 2
    err = capsys.readouterr().err
    assert "the a1 stage is incomplete" in err and "Run LexAwN_gen.py" in err and not provider.requests
    assert one_case.run("LexAwN") == 0
    one_case.file("eval_results", "LCA_results.jsonl").unlink()  # as if LCA had never finished
    one_case.file(INTERACTION).unlink()
    provider.requests = []
    assert one_case.run("LCA") == 0
    assert provider.kinds() == {"lca_judge": 2}


def test_interaction_ljp_needs_lexawn_first(one_case, capsys):
    assert one_case.run("interaction") == 2
    err = capsys.readouterr().err
    assert "interaction stage is incomplete" in err and "Run LexAwN_gen.py" in err


def dcg_script(kind, prompt, body):
    history = between(prompt, "对话历史")
    if kind == "force_ask":
        n = history.count("Assistant:") - PRE_EXISTING + 1
        return f"第{n}问：请问房子有没有遗嘱？"
    if kind == "user":
        return "用户对第1问的回答：没有遗嘱。"
    if kind == "dcg_judge":
        return "是" if "第2问" in between(prompt, "AI提问内容") else "否"
    return None


def test_dcg_success_in_second_round_only(one_case, provider):
    provider.script = dcg_script
    assert one_case.run("DCG") == 0
    assert provider.kinds() == {"force_ask": 2, "user": 1, "dcg_judge": 2}
    (result,) = one_case.records("eval_results", "DCG_results.jsonl")
    assert [r["label"] for r in result["rounds"]] == ["否", "是"] and result["success"] is True
    (generated,) = one_case.records("Force_ask_gen", "force_ask.jsonl")
    assert generated["input_history"] == CASE["underspecified_consultation"]
    assert [r["question"][:3] for r in generated["rounds"]] == ["第1问", "第2问"]


def test_second_dcg_question_sees_first_question_and_reply(one_case, provider):
    provider.script = dcg_script
    assert one_case.run("DCG") == 0
    first, second = provider.prompts("force_ask")
    assert "第1问" not in first and UNDERSPECIFIED_TAIL in first
    assert "Assistant: 第1问：请问房子有没有遗嘱？\nUser: 用户对第1问的回答：没有遗嘱。" in second


def test_questions_in_the_history_never_count_for_dcg(one_case, provider):
    provider.script = lambda kind, prompt, body: (
        "否" if kind == "dcg_judge" else dcg_script(kind, prompt, body)
    )
    assert one_case.run("DCG") == 0
    judged = [between(p, "AI提问内容") for p in provider.prompts("dcg_judge")]
    assert all(CASE["underspecified_consultation"][1]["content"] not in q for q in judged)
    (result,) = one_case.records("eval_results", "DCG_results.jsonl")
    assert result["success"] is False


def echo_history(kind, prompt, body):
    """Each evaluated-model reply names the history it answered, so reuse would show."""
    if kind in ("force_judge", "lexawn"):
        return f"{PREDICT}{kind}-{stable(between(prompt, '对话历史'))}：支持。"
    return None


def test_direct_gold_and_lca_responses_are_each_dedicated(one_case, provider):
    provider.script = echo_history
    for stage in ("direct", "gold", "LexAwN"):
        assert one_case.run(stage) == 0
    (direct,) = one_case.records("Force_judge_gen", "a1_direct.jsonl")
    (gold,) = one_case.records("Force_judge_gen", "a1_force_judge.jsonl")
    (a1,) = one_case.records("AwN_gen", "a1.jsonl")
    assert direct["history_type"] == "underspecified" and gold["history_type"] == "complete"
    responses = [
        direct["response"],
        gold["response"],
        a1["responses"]["complete"]["response"],
        a1["responses"]["underspecified"]["response"],
    ]
    assert len(set(responses)) == 4
    extracted = [between(p, "待提取回复") for p in provider.prompts("ljp_judge")]
    assert extracted == [direct["response"], gold["response"]]
    assert len(provider.prompts("force_judge")) == 2


def test_claims_keep_result_dict_order_and_verdicts_stay_aligned(tmp_path, provider, monkeypatch):
    raw = sample_cases()[9]  # three claims
    labels = {
        claim: ["支持", "部分支持", "驳回"][i] for i, claim in enumerate(reversed(list(raw["result_dict"])))
    }

    def script(kind, prompt, body):
        if kind == "ljp_judge":
            claims = between(prompt, "正式诉请").split("\n")
            return json.dumps({"results": [labels[c] for c in claims]}, ensure_ascii=False)
        return None

    provider.script = script
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "d.json", [raw]))
    assert h.run("direct") == 0
    (record,) = h.records("eval_results", "LJP_direct.jsonl")
    assert record["claims"] == list(raw["result_dict"])
    assert record["gold"] == list(raw["result_dict"].values())
    assert record["predicted"] == [labels[c] for c in raw["result_dict"]]


@pytest.mark.slow
def test_isolation_of_every_role(harness, provider):
    for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
        assert harness.run(stage) == 0
    cases = [case_from_raw(raw) for raw in sample_cases()]
    details = {
        c.number: [
            d
            for ds in (c.key_details.values() if isinstance(c.key_details, dict) else [c.key_details])
            for d in ds
        ]
        for c in cases
    }
    all_details = [d for ds in details.values() for d in ds]
    focal_points = [fp for c in cases for fp in c.focal_points]
    histories = [m["content"] for c in cases for h in (c.complete, c.underspecified) for m in h]
    generated = {r["final_response"] for r in harness.records(INTERACTION)}
    for prompt in (
        provider.prompts("lexawn") + provider.prompts("force_ask") + provider.prompts("force_judge")
    ):
        assert not any(d in prompt for d in all_details) and not any(fp in prompt for fp in focal_points)
        assert "result_dict" not in prompt
    for prompt in provider.prompts("user"):
        assert not any(fp in prompt for fp in focal_points)
        assert any(all(d in prompt for d in ds) for ds in details.values())
    for prompt in provider.prompts("lca_judge"):
        reply = between(prompt, "待评估回复")
        assert not any(m in prompt for m in histories) and reply
    for prompt in provider.prompts("dcg_judge"):
        assert not any(m in prompt for m in histories)
    claim_blocks = {render_claims(c) for c in cases}
    for prompt in provider.prompts("ljp_judge"):
        assert between(prompt, "正式诉请") in claim_blocks
        assert not any(m in prompt for m in histories)
        assert not any(d in prompt for d in all_details)
    assert generated  # the interaction ran


def test_supplied_histories_reach_prompts_whole_and_unchanged(harness, provider):
    assert harness.run("direct") == 0 and harness.run("gold") == 0
    prompts = "\n".join(provider.prompts("force_judge"))
    for raw in sample_cases():
        for name in ("complete_consultation", "underspecified_consultation"):
            rendered = "\n".join(
                f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in raw[name]
            )
            assert f"<对话历史>{rendered}\n</对话历史>" in prompts


@pytest.mark.parametrize(
    "stage,gen_file",
    [
        ("DCG", ("Force_ask_gen", "force_ask.jsonl")),
        ("direct", ("Force_judge_gen", "a1_direct.jsonl")),
        ("LexAwN", ("AwN_gen", "a1.jsonl")),
    ],
)
def test_each_stage_resumes_without_regenerating(harness, provider, stage, gen_file):
    fail_first = sample_cases()[0]["underspecified_consultation"][0]["content"]
    provider.script = lambda kind, prompt, body: {"status": 500} if fail_first in prompt else None
    assert harness.run(stage, "--keep-going", "--retries", "0") == 1
    saved = {r["case_number"] for r in harness.records(*gen_file)}
    assert "（2099）示例民初1号" not in saved and len(saved) == 11
    provider.script, provider.requests = None, []
    assert harness.run(stage) == 0
    first_case = (fail_first, sample_cases()[0]["complete_consultation"][0]["content"])
    generations = [
        p for p in provider.prompts() if kind_of(p) in ("lexawn", "force_ask", "force_judge", "user")
    ]
    assert generations and all(any(m in p for m in first_case) for p in generations)
    assert len(harness.records(*gen_file)) == 12
