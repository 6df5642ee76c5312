"""The simulator audit (audit_simulator.py): a known leak, a known invented fact and a clean reply give the
expected rates, and the clean-case metrics leave the faulty cases out."""

import json

import pytest

import audit_simulator
import show_results
from lexpilot.benchmark.records import AUDIT
from lexpilot.running.stage import stage_main
from lexpilot.scripted.kinds import between
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

CASES = sample_cases()[:3]
MARK = {
    CASES[0]["case_number"]: "（顺便说一句，还有别的情况）",
    CASES[1]["case_number"]: "（其实他还欠我十万）",
}


def script(kind, prompt, body):
    if kind == "user":  # the first case's replies leak, the second's invent, the third's are clean
        for case in CASES:
            if case["underspecified_consultation"][0]["content"] in prompt:
                return "这个我记得。" + MARK.get(case["case_number"], "")
    if kind == "audit_judge":
        reply = between(prompt, "模拟原告回复")
        leak, invent = "顺便说一句" in reply, "欠我十万" in reply
        return json.dumps(
            {"超范围披露": [1] if leak else [], "不实陈述": "是" if invent else "否", "回答了问题": "是"},
            ensure_ascii=False,
        )
    return None


@pytest.fixture
def audited(tmp_path, provider, monkeypatch):
    provider.script = script
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "three.json", CASES))
    for stage in ("LexAwN", "DCG", "interaction"):
        assert h.run(stage) == 0
    provider.requests = []
    argv = [
        "--run-id",
        "r1",
        "--model",
        "eval-model",
        "--dataset",
        str(h.dataset),
        "--output-root",
        str(h.root),
    ]
    assert stage_main(audit_simulator.STAGE, "test", argv=argv, clients=provider.in_memory_clients()) == 0
    return h


def test_every_user_model_reply_is_audited_by_the_judge_alone(audited, provider):
    assert set(provider.kinds()) == {"audit_judge"}
    interaction = {r["case_number"]: r for r in audited.records("AwN_gen", "interaction.jsonl")}
    replies = sum(1 for r in interaction.values() for x in r["rounds"] if x.get("user_reply"))
    assert len(provider.requests) == replies + len(CASES)  # every interaction reply and every DCG reply
    first = audited.records(AUDIT["dcg"])
    leak = next(r for r in first if r["case_number"] == CASES[0]["case_number"])["replies"][0]
    detail = (
        next(iter(CASES[0]["key_details"].values()))[0]
        if isinstance(CASES[0]["key_details"], dict)
        else CASES[0]["key_details"][0]
    )
    assert leak["over_disclosed"] == [detail] and leak["error"] is False and leak["source"] == "DCG round 1"
    prompt = provider.prompts("audit_judge")[0]
    assert "1. " in between(prompt, "案件客观事实") and between(prompt, "AI最新追问")


def test_rates_and_clean_case_metrics_hand_computed(audited, capsys):
    interaction = {r["case_number"]: r for r in audited.records("AwN_gen", "interaction.jsonl")}
    dcg = {r["case_number"]: r["success"] for r in audited.records("eval_results", "DCG_results.jsonl")}
    counts = {n: 1 + sum(1 for x in r["rounds"] if x.get("user_reply")) for n, r in interaction.items()}
    # DCG: one reply per case, one leak and one invention among three
    capsys.readouterr()
    assert show_results.main(["--output-root", str(audited.root)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Simulator audit") :].splitlines()
    dcg_row = next(line for line in table if " DCG " in f" {line} ").split()
    assert dcg_row[-4:] == ["3", "33.3%", "33.3%", "0.0%"]  # in percent, as Table 13 prints its rates
    replies = sum(counts.values()) - len(CASES)
    leaked = counts[CASES[0]["case_number"]] - 1
    invented = counts[CASES[1]["case_number"]] - 1
    inter_row = next(line for line in table if " interaction " in f" {line} ").split()
    assert inter_row[-4:] == [
        str(replies),
        f"{100 * leaked / replies:.1f}%",
        f"{100 * invented / replies:.1f}%",
        "0.0%",
    ]
    clean = out[out.index("Task metrics on all cases and on the cases whose simulator") :].splitlines()
    dcg_clean = next(line for line in clean if "DCG accuracy" in line).split()
    assert dcg_clean[-2:] == [f"{float(dcg[CASES[2]['case_number']]):.3f}", "1"]  # only the clean case


def test_the_self_correcting_users_injected_fault_is_no_simulator_error(
    tmp_path, provider, monkeypatch, capsys
):
    """The deliberate fault of the Self-Correcting user is labelled as injected and left out of
    the error rates; the other replies are judged as any."""
    from lexpilot.scripted.replies import fault_record

    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "three.json", CASES))
    h.run_id = "sc"
    replies = iter(range(1000))
    # every reply its own text
    provider.script = lambda kind, prompt, body: (
        f"第{next(replies)}次回答：记不太清了。" + fault_record(prompt) if kind == "user" else None
    )
    assert h.run("LexAwN", "--user-condition", "self-correction") == 0
    interactions = h.records("AwN_gen", "interaction.jsonl")
    faulty = {
        e["user_reply"]
        for r in interactions
        for e in r["rounds"]
        if e.get("user_prompt") == "user_self_correction"
    }
    assert faulty  # the scripted simulator injected its fault in at least one case
    total = sum(1 for r in interactions for e in r["rounds"] if e.get("user_reply"))

    def judge(kind, prompt, body):  # the judge flags exactly the injected replies, as it should
        if kind == "audit_judge":
            wrong = between(prompt, "模拟原告回复") in faulty
            return json.dumps(
                {"超范围披露": [], "不实陈述": "是" if wrong else "否", "回答了问题": "是"},
                ensure_ascii=False,
            )
        return None

    provider.script = judge
    assert h.run_stage(audit_simulator.STAGE, "--user-condition", "self-correction") == 0
    replies = [x for r in h.records(AUDIT["interaction"]) for x in r["replies"]]
    # labelled, verdict kept
    assert sorted(x["injected"] for x in replies) == sorted(x["error"] for x in replies)
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--format", "json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["groups"][0]["metrics"]
    # 0 of the total - injected replies
    assert metrics["audit_interaction"]["error"]["overall"]["mean"] == 0.0
    assert sum(x["injected"] for x in replies) == len(faulty) and total > len(faulty)


def test_the_correction_turn_is_a_protocol_turn_too(tmp_path, provider, monkeypatch, capsys):
    """The correction reply was once audited as an ordinary reply, where "did it answer the question"
    fails. It is labelled `correction`, kept with its verdict, and left out of the rates as the fault is."""
    from lexpilot.scripted.replies import fault_record

    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "three.json", CASES))
    h.run_id = "sc"
    replies = iter(range(1000))
    provider.script = lambda kind, prompt, body: (
        f"第{next(replies)}次回答：记不太清了。" + fault_record(prompt) if kind == "user" else None
    )
    assert h.run("LexAwN", "--user-condition", "self-correction") == 0
    rounds = [
        e for r in h.records("AwN_gen", "interaction.jsonl") for e in r["rounds"] if e.get("user_reply")
    ]
    corrections = {e["user_reply"] for e in rounds if e.get("user_prompt") == "user_correction"}
    assert corrections and len(rounds) > len(corrections)

    def judge(kind, prompt, body):  # a correction answers no question: the judge says so
        if kind == "audit_judge":
            said = "否" if between(prompt, "模拟原告回复") in corrections else "是"
            return json.dumps({"超范围披露": [], "不实陈述": "否", "回答了问题": said}, ensure_ascii=False)
        return None

    provider.script = judge
    assert h.run_stage(audit_simulator.STAGE, "--user-condition", "self-correction") == 0
    audited = [x for r in h.records(AUDIT["interaction"]) for x in r["replies"]]
    assert sorted(x["correction"] for x in audited) == sorted(not x["answered"] for x in audited)
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--format", "json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["groups"][0]["metrics"]
    # by hand: every non-answer left out
    assert metrics["audit_interaction"]["non_answer"]["overall"]["mean"] == 0.0
