"""The plain consultation (Pilot Study II, Appendix C.2, Table 6): the history sent as an ordinary chat, the
four response types, Table 6 and its cross-tabulation against LexAwN, resume and dry run."""

import json

import pytest

import eval_plain
import judge_agreement
import show_results
from lexpilot.benchmark.records import PLAIN, PLAIN_TYPES
from lexpilot.reporting.validation import agreement as agreement_kit
from lexpilot.scripted.kinds import between, request_kind
from lexpilot.scripted.replies import PLAIN_STYLES
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

CASES = sample_cases()[:4]
STYLE = {name: text for name, text in PLAIN_STYLES}


def run_plain(h, *extra):
    return h.run_stage(eval_plain.STAGE, *extra)


@pytest.fixture
def four(tmp_path, provider, monkeypatch):
    return Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", CASES))


def answers(by_case: dict):
    """The n-th case's plain response is the style given for it; the judge reads the style back."""

    def script(kind, prompt, body):
        if kind == "plain":
            first = body["messages"][0]["content"]
            case = next(
                i
                for i, c in enumerate(CASES)
                if c["underspecified_consultation"][0]["content"] == first
                or c["complete_consultation"][0]["content"] == first
            )
            return STYLE[by_case[case]]
        return None

    return script


def test_the_history_is_sent_as_its_own_messages_in_order_and_nothing_else(four, provider):
    assert run_plain(four) == 0
    plain = [r for r in provider.requests if request_kind(r) == "plain"]
    sent = sorted((r["messages"] for r in plain), key=json.dumps)
    assert sent == sorted((c["underspecified_consultation"] for c in CASES), key=json.dumps)
    details = [
        d
        for c in CASES
        for ds in (c["key_details"].values() if isinstance(c["key_details"], dict) else [c["key_details"]])
        for d in ds
    ]
    for r in plain:
        text = json.dumps(r["messages"], ensure_ascii=False)
        assert not any(d in text for d in details) and "<对话历史>" not in text and "你是" not in text
    record = four.records(PLAIN["underspecified"])[0]
    assert record["sent_as"] == "messages" and record["messages"] in [
        c["underspecified_consultation"] for c in CASES
    ]


def test_each_response_type_is_judged_with_the_consultation_and_its_missing_details(four, provider):
    """The judge cannot judge "discussing various scenarios corresponding to the absent details"
    from the response alone; it gets the consultation and the key details beside it (Tables 7-8 pair
    "Consultation & Missing Details" with each response). Deficiency Recognition is "explicitly stating that the
    provided information is inadequate": naming what is missing is not required."""
    provider.script = answers(["缺失识别", "条件性一般建议", "无条件一般建议", "过早预测"])
    assert run_plain(four) == 0
    types = {r["case_number"]: r["type"] for r in four.records(PLAIN_TYPES["underspecified"])}
    assert [types[c["case_number"]] for c in CASES] == [
        "deficiency_recognition",
        "conditional_advice",
        "unconditional_advice",
        "premature_prediction",
    ]
    prompts = provider.prompts("type_judge")
    assert len(prompts) == len(CASES)
    for case in CASES:
        prompt = next(p for p in prompts if case["underspecified_consultation"][0]["content"] in p)
        assert between(prompt, "待评估回复") in STYLE.values()
        history = "\n".join(
            f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}"
            for m in case["underspecified_consultation"]
        )
        assert between(prompt, "咨询对话") == history
        details = (
            case["key_details"].values() if isinstance(case["key_details"], dict) else [case["key_details"]]
        )
        assert all(d in between(prompt, "案件关键细节") for ds in details for d in ds)
    assert "不要求具体说出缺少哪些事实" in prompts[0]


def test_an_invalid_type_is_asked_again_then_the_case_fails_clearly(four, provider, capsys):
    provider.script = lambda kind, prompt, body: "可能是过早预测吧" if kind == "type_judge" else None
    assert run_plain(four, "--limit", "1") == 1
    err = capsys.readouterr().err
    assert (
        "judge_response_type output invalid after 3 attempts" in err
        and len(provider.prompts("type_judge")) == 3
    )
    assert four.records(PLAIN["underspecified"])  # the paid plain response is kept


def test_table_6_and_the_cross_tabulation_hand_computed(four, provider, capsys):
    provider.script = answers(["缺失识别", "过早预测", "过早预测", "无条件一般建议"])
    assert run_plain(four) == 0
    assert four.run("LexAwN") == 0  # LCA labels on the same underspecified histories
    lca = {
        r["case_number"]: r["judgments"]["underspecified"]["label"]
        for r in four.records("eval_results", "LCA_results.jsonl")
    }
    premature = [CASES[1]["case_number"], CASES[2]["case_number"]]
    asked_share = sum(lca[n] == "策略二" for n in premature) / 2
    capsys.readouterr()
    assert show_results.main(["--output-root", str(four.root), "--width", "0"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Plain consultation (Table 6)") :].splitlines()
    # in percent at 1 decimal, as the paper's Table 6 prints its rates (1 of 4, 0, 1 of 4, 2 of 4 cases)
    assert table[3].split() == ["eval-model", "25.0%", "0.0%", "25.0%", "50.0%"]
    cross = out[out.index("Plain response type against the LexAwN label") :].splitlines()
    assert cross[3].split()[-1] == f"{asked_share:.3f}"


def test_resume_dry_run_and_the_complete_control(four, provider, capsys):
    assert run_plain(four, "--dry-run", "--histories", "underspecified,complete") == 0
    assert "eval 8, user 0, judge 8" in capsys.readouterr().out and not provider.requests
    assert run_plain(four, "--limit", "2") == 0
    provider.requests = []
    assert run_plain(four) == 2  # another --limit: refused
    capsys.readouterr()
    four.run_id = "r2"
    assert run_plain(four, "--histories", "underspecified,complete") == 0
    assert len(four.records(PLAIN["complete"])) == 4
    provider.requests = []
    assert run_plain(four, "--histories", "underspecified,complete") == 0 and not provider.requests
    assert show_results.main(["--output-root", str(four.root), "--run-id", "r2", "--width", "0"]) == 0
    assert "control: response types on complete histories" in capsys.readouterr().out


def test_response_types_go_to_the_judge_agreement_kit(four, provider, tmp_path):
    assert run_plain(four) == 0
    out = tmp_path / "kit.csv"
    assert (
        judge_agreement.main(
            [
                "export",
                "--output-root",
                str(four.root),
                "--dataset",
                str(four.dataset),
                "--out",
                str(out),
                "--per-task",
                "4",
            ]
        )
        == 0
    )
    rows = [row for _, row in agreement_kit.read_sheet(out, agreement_kit.ANNOTATION_COLUMNS)]
    typed = [row for row in rows if row["task"] == "TYPE"]
    assert len(typed) == 4 and all(row["reply"] in STYLE.values() for row in typed)
    guidelines = agreement_kit.guidelines_path(out).read_text(encoding="utf-8")
    assert "=== TYPE" in guidelines
    # "Give the experts what the judge gets": the consultation and the key details it read beside
    # the reply (its prompt's own slots, as sent), and the criteria from "结合咨询对话和关键细节" on
    judged = {
        (between(p, "咨询对话"), between(p, "案件关键细节"), between(p, "待评估回复"))
        for p in provider.prompts("type_judge")
    }
    assert {(row["consultation"], row["key_details"], row["reply"]) for row in typed} <= judged
    assert all(row["consultation"] and row["key_details"] for row in typed)
    type_part = guidelines[guidelines.index("=== TYPE") :]
    assert (
        "请先阅读咨询对话和关键细节" in type_part
        and "结合咨询对话和关键细节判断回复如何对待缺失的细节" in type_part
    )


def test_the_complete_control_sends_and_judges_the_complete_history(four, provider):
    """The control of Table 6 really is the complete history, sent as messages and shown to the
    response-type judge."""
    assert run_plain(four, "--histories", "underspecified,complete") == 0
    sent = [r["messages"] for r in provider.requests if request_kind(r) == "plain"]
    for case in CASES:
        assert case["complete_consultation"] in sent and case["underspecified_consultation"] in sent
    for record in four.records(PLAIN["complete"]):
        case = next(c for c in CASES if c["case_number"] == record["case_number"])
        assert record["messages"] == case["complete_consultation"] and record["history_type"] == "complete"
    complete_histories = [
        "\n".join(
            f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}"
            for m in c["complete_consultation"]
        )
        for c in CASES
    ]
    judged = [between(p, "咨询对话") for p in provider.prompts("type_judge")]
    assert all(h in judged for h in complete_histories) and len(judged) == 2 * len(CASES)
