"""Targeted / Off-target dialogues (eval_LJP_behaviour.py, Appendix E.7, Table 4): attempts and rejections,
unresolved cases, what the validator and the predictor see, resume inside the attempts, dry run, Table 4."""

import json

import pytest

import eval_LJP_behaviour
import show_results
from lexpilot.benchmark.records import BEHAVIOUR_DIALOGUE, LJP_BEHAVIOUR
from lexpilot.scripted.kinds import between
from lexpilot.scripted.replies import default_reply
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.metrics import quadratic_weighted_kappa
from tests.helpers.stages import Harness

CASES = sample_cases()[:3]


def run_behaviour(h, *extra):
    return h.run_stage(eval_LJP_behaviour.STAGE, *extra)


@pytest.fixture
def three(tmp_path, provider, monkeypatch):
    return Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "three.json", CASES))


def rejecting(times: dict):
    """The validator rejects the targeted dialogues of a case `times[case index]` times (fact 1 absent)."""
    seen: dict[int, int] = {}

    def script(kind, prompt, body):
        if kind == "behaviour_judge" and "【定向】" in between(prompt, "对话"):
            case = next(
                i for i, c in enumerate(CASES) if c["underspecified_consultation"][0]["content"] in prompt
            )
            seen[case] = seen.get(case, 0) + 1
            if seen[case] <= times.get(case, 0):
                reply = json.loads(default_reply(kind, prompt))
                reply["facts"][0]["status"] = "absent"
                reply["question_reveals_answer"] = True
                return json.dumps(reply)
        return None

    return script


def predicting(labels: dict, otherwise=lambda kind, prompt, body: None):
    """Predictions that say which dialogue they were made from (Targeted, Off-target, or none: Direct), and the
    verdicts given for each in `labels`."""

    def script(kind, prompt, body):
        if kind == "force_judge":
            history = between(prompt, "对话历史")
            return "【预测】" + next((m for m in ("【定向】", "【无关】") if m in history), "direct")
        if kind == "ljp_judge":
            marker = between(prompt, "待提取回复").removeprefix("【预测】")
            n = len(between(prompt, "正式诉请").split("\n"))
            return json.dumps({"results": labels[marker][:n]}, ensure_ascii=False)
        return otherwise(kind, prompt, body)

    return script


def test_attempts_rejections_and_unresolved_cases(three, provider, capsys):
    provider.script = rejecting({1: 2, 2: 99})
    assert run_behaviour(three) == 0  # an unresolved case is not an error
    records = {r["case_number"]: r for r in three.records(BEHAVIOUR_DIALOGUE["targeted"])}
    first, second, third = (records[c["case_number"]] for c in CASES)
    assert first["status"] == "accepted" and len(first["attempts"]) == 1
    assert second["status"] == "accepted" and len(second["attempts"]) == 3
    assert second["attempts"][0]["rejected"] == ["fact 1 absent", "a question reveals the answer"]
    # "rejection reasons and unresolved cases are retained": the last attempted dialogue is kept and predicted from
    assert third["status"] == "unresolved" and len(third["attempts"]) == 5
    assert (
        third["dialogue"][len(CASES[2]["underspecified_consultation"]) :] == third["attempts"][-1]["dialogue"]
    )
    ljp = {r["case_number"]: r for r in three.records(LJP_BEHAVIOUR["targeted"])}
    unresolved = ljp[CASES[2]["case_number"]]
    assert unresolved["status"] == "unresolved" and len(unresolved["predicted"]) == len(
        CASES[2]["result_dict"]
    )
    off = three.records(BEHAVIOUR_DIALOGUE["off_target"])
    assert all(r["status"] == "accepted" and len(r["attempts"]) == 1 for r in off)
    assert three.run("direct") == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(three.root), "--width", "0"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Interaction behaviour and LJP (Table 4)") :].splitlines()
    assert table[3].split()[:4] == ["eval-model", "3", "(1", "/"]  # every case; one unresolved (Targeted)
    sensitivity = out[out.index("Table 4, sensitivity") :].splitlines()
    assert sensitivity[3].split()[:2] == ["eval-model", "2"]  # two cases resolved in both conditions
    dialogues = out[out.index("Table 4 dialogues") :].splitlines()
    targeted = next(line for line in dialogues if "Targeted" in line)
    assert "1 / 0 / 1 / 0 / 0" in targeted and " 1 " in f" {targeted} "  # cases accepted at attempts 1..5
    assert "fact 1 absent (7)" in targeted


def test_what_the_validator_and_the_predictor_see(three, provider):
    assert run_behaviour(three, "--limit", "1") == 0
    case = CASES[0]
    details = [d for ds in case["key_details"].values() for d in ds]
    for prompt in provider.prompts("behaviour_judge"):  # never a verdict or a claim
        assert (
            not any(c in prompt for c in case["result_dict"])
            and "驳回" not in prompt
            and "部分支持" not in prompt
        )
    (dialogue,) = three.records(BEHAVIOUR_DIALOGUE["targeted"])
    predictions = provider.prompts("force_judge")
    assert len(predictions) == 2
    rendered = "\n".join(
        f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in dialogue["dialogue"]
    )
    targeted = next(p for p in predictions if "【定向】" in p)
    assert between(targeted, "对话历史") == rendered  # the Table 21 prompt on exactly the validated dialogue
    for prompt in predictions:
        assert not any(d in prompt for d in details) and "案件关键事实" not in prompt


def test_resume_inside_the_attempts_rebuys_nothing_accepted(three, provider):
    calls = {"n": 0}

    def third_validation_fails(kind, prompt, body):
        if kind == "behaviour_judge" and "【定向】" in between(prompt, "对话"):
            calls["n"] += 1
            if calls["n"] == 3:
                return {"status": 500}
        return rejecting({0: 2})(kind, prompt, body)

    provider.script = third_validation_fails
    assert run_behaviour(three, "--limit", "1", "--retries", "0") == 1
    paid = provider.kinds()
    provider.requests, provider.script = [], None  # now the third targeted dialogue is accepted
    assert run_behaviour(three, "--limit", "1") == 0
    again = provider.kinds()
    # the targeted attempts' questions and replies were journaled: only what failed and what follows is bought
    assert again["targeted"] == 0 and again["user"] == 3  # off-target's three rounds, never bought before
    assert again["behaviour_judge"] == 2 and paid["targeted"] == 9
    (record,) = three.records(BEHAVIOUR_DIALOGUE["targeted"])
    assert record["status"] == "accepted" and len(record["attempts"]) == 3


def test_the_dry_run_counts_the_worst_case(three, provider, capsys):
    assert run_behaviour(three, "--dry-run") == 0
    assert "eval 96, user 90, judge 36" in capsys.readouterr().out and not provider.requests


def test_table_4_hand_computed(three, provider, capsys):
    labels = {
        "【定向】": ["支持", "驳回", "部分支持"],
        "【无关】": ["驳回", "驳回", "驳回"],
        "direct": ["支持", "支持", "支持"],
    }
    provider.script = predicting(labels)
    assert run_behaviour(three) == 0 and three.run("direct") == 0
    gold = [v for c in CASES for v in c["result_dict"].values()]
    predicted = {m: [x for c in CASES for x in labels[m][: len(c["result_dict"])]] for m in labels}
    expected = [quadratic_weighted_kappa(gold, predicted[m]) for m in ("direct", "【定向】", "【无关】")]
    capsys.readouterr()
    assert show_results.main(["--output-root", str(three.root), "--format", "json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["groups"][0]["metrics"]
    got = [
        metrics[t]["qwk"]["overall"]["mean"]
        for t in ("table_4_direct", "table_4_targeted", "table_4_off_target")
    ]
    assert got == pytest.approx([e if e is not None else None for e in expected])


def test_a_run_without_direct_ljp_is_told_which_command_to_run(three, capsys):
    assert run_behaviour(three, "--limit", "1") == 0
    assert "run eval_LJP_direct.py --run-id r1" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(three.root), "--width", "0"]) == 0
    err = capsys.readouterr().err
    assert "Table 4:" in err and "run eval_LJP_direct.py for this run" in err


def test_table_4_covers_every_case_and_claim_with_a_resolved_only_sensitivity_view(three, provider, capsys):
    """The paper: QWK "over all 657 equally weighted claims per run", "Direct results are reused
    from Table 3", "rejection reasons and unresolved cases are retained". Case 3's Targeted dialogue is never
    accepted: it is predicted from its last attempted dialogue and counted in the main table; the sensitivity view
    keeps the two cases resolved in both conditions, Direct on the same two."""
    labels = {
        "【定向】": ["支持", "驳回", "部分支持"],
        "【无关】": ["驳回", "驳回", "驳回"],
        "direct": ["部分支持", "支持", "驳回"],
    }
    provider.script = predicting(labels, otherwise=rejecting({2: 99}))
    assert run_behaviour(three) == 0 and three.run("direct") == 0

    def qwk(marker, cases):
        gold = [v for c in cases for v in c["result_dict"].values()]
        return quadratic_weighted_kappa(
            gold, [x for c in cases for x in labels[marker][: len(c["result_dict"])]]
        )

    capsys.readouterr()
    assert show_results.main(["--output-root", str(three.root), "--format", "json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["groups"][0]["metrics"]
    got = {
        t: metrics[t]["qwk"]["overall"]["mean"]
        for t in (
            "ljp_direct",
            "table_4_direct",
            "table_4_targeted",
            "table_4_off_target",
            "table_4_resolved_direct",
            "table_4_resolved_targeted",
            "table_4_resolved_off_target",
        )
    }
    assert got == pytest.approx(
        {
            "ljp_direct": qwk("direct", CASES),
            "table_4_direct": qwk("direct", CASES),
            "table_4_targeted": qwk("【定向】", CASES),
            "table_4_off_target": qwk("【无关】", CASES),
            "table_4_resolved_direct": qwk("direct", CASES[:2]),
            "table_4_resolved_targeted": qwk("【定向】", CASES[:2]),
            "table_4_resolved_off_target": qwk("【无关】", CASES[:2]),
        }
    )
    assert got["table_4_direct"] == got["ljp_direct"]  # reused from Table 3
    assert metrics["table_4_unresolved"]["targeted"]["overall"]["mean"] == 1


def test_only_missing_facts_decide_acceptance_and_a_question_may_seek_several(three, provider):
    """The validator sees the initial history apart from the constructed turns and marks a
    key detail the history already states as "given": only the missing facts decide ("Targeted requires complete,
    accurate recovery; Off-target requires no disclosure"). A Targeted question may seek several missing facts, so a
    case with more missing facts than rounds is not impossible by construction."""

    def script(kind, prompt, body):
        if kind == "behaviour_judge":
            reply = json.loads(default_reply(kind, prompt))
            # fact 1 is in the initial history's turn 1
            reply["facts"][0] |= {"status": "given", "turns": [1]}
            return json.dumps(reply)
        return None

    provider.script = script
    assert run_behaviour(three, "--limit", "1") == 0
    for condition in ("targeted", "off_target"):
        (record,) = three.records(BEHAVIOUR_DIALOGUE[condition])
        assert record["status"] == "accepted" and len(record["attempts"]) == 1, condition
        assert record["attempts"][0]["validation"]["facts"][0]["status"] == "given"
    initial = CASES[0]["underspecified_consultation"]
    for prompt in provider.prompts("behaviour_judge"):
        dialogue = between(prompt, "对话")
        before, after = dialogue.split("\n【以下为新增的提问与回答】\n")
        assert all(m["content"] in before for m in initial) and before.count("\n") == len(initial) - 1
    assert "一条或几条尚未说明的关键事实" in provider.prompts("targeted")[0]


def test_a_recovered_fact_must_cite_a_new_user_turn(three, provider):
    """The paper: the validator marks each missing fact "citing supporting user turns". The user turns are
    numbered for it, and a recovery citing no turn of the constructed part (or one of the initial history) is
    a rejection reason."""

    def script(kind, prompt, body):
        if kind == "behaviour_judge" and "【定向】" in between(prompt, "对话"):
            reply = json.loads(default_reply(kind, prompt))
            reply["facts"][0]["turns"] = [1]  # a turn of the initial history
            return json.dumps(reply)
        return None

    provider.script = script
    assert run_behaviour(three, "--limit", "1") == 0
    (record,) = three.records(BEHAVIOUR_DIALOGUE["targeted"])
    assert record["status"] == "unresolved"
    assert record["attempts"][0]["rejected"] == ["fact 1 recovered without a cited new user turn"]
    prompt = provider.prompts("behaviour_judge")[0]
    assert "User（第1次发言）" in between(prompt, "对话") and "User（第4次发言）" in between(prompt, "对话")


def test_table_4s_direct_column_takes_the_runs_table_3_takes(three, provider, capsys):
    """ "Direct results are reused from Table 3". Run r1 has the dialogues and Direct, run r2 only
    Direct, with other verdicts: Table 4's Direct cell is the mean ± SD over both runs, as Table 3's (by hand)."""
    from statistics import mean, stdev

    labels = {
        "【定向】": ["支持", "驳回", "部分支持"],
        "【无关】": ["驳回", "驳回", "驳回"],
        "direct": ["部分支持", "支持", "驳回"],
    }
    provider.script = predicting(labels)
    assert run_behaviour(three) == 0 and three.run("direct") == 0
    three.run_id = "r2"
    provider.script = predicting({**labels, "direct": ["支持", "支持", "支持"]})
    assert three.run("direct") == 0

    def qwk(direct):
        gold = [v for c in CASES for v in c["result_dict"].values()]
        return quadratic_weighted_kappa(gold, [x for c in CASES for x in direct[: len(c["result_dict"])]])

    runs = [qwk(["部分支持", "支持", "驳回"]), qwk(["支持", "支持", "支持"])]
    assert runs[0] != runs[1]
    capsys.readouterr()
    assert (
        show_results.main(
            ["--output-root", str(three.root), "--table", "main", "table_4", "--format", "markdown"]
        )
        == 0
    )
    rows = [
        line.split("|")[1:-1]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| eval-model")
    ]
    main, table_4 = [[c.strip() for c in r] for r in rows]
    expected = f"{mean(runs):.3f} ± {stdev(runs):.3f}"
    assert main[3] == expected and table_4[2] == expected


def validating(status: str, turns):
    """The validator marks fact 1 of every dialogue with this status and these cited turns (a callable: of the
    dialogue's user-turn count), the other facts as the scripted provider does."""

    def script(kind, prompt, body):
        if kind == "behaviour_judge":
            reply = json.loads(default_reply(kind, prompt))
            last = between(prompt, "对话").count("次发言）")
            reply["facts"][0] |= {"status": status, "turns": turns(last)}
            return json.dumps(reply)
        return None

    return script


@pytest.mark.parametrize(
    "status,turns,targeted,off_target",
    [
        # the history states fact 1 in part (sample case 民初3号's kind): Off-target can pass, Targeted must complete it
        ("partly_given", lambda last: [1], "unresolved", "accepted"),
        # the history states it whole, citing its own first user turn: not a missing fact in either condition
        ("given", lambda last: [1], "accepted", "accepted"),
        # "given", citing a new user turn: a fact leaked in the dialogue, labelled given, passes neither condition
        ("given", lambda last: [last], "unresolved", "unresolved"),
        ("partly_given", lambda last: [last], "unresolved", "unresolved"),
        ("given", lambda last: [], "unresolved", "unresolved"),
    ],
)
def test_a_fact_the_history_states_in_part_or_whole_is_checked_against_the_turns_it_cites(
    three, provider, status, turns, targeted, off_target
):
    """ "Targeted requires complete, accurate recovery; Off-target requires no disclosure" (E.7). A
    key detail the history states only in part is "partly_given": left so, Off-target passes and Targeted does not;
    a fact marked given or partly given must cite the initial history's user turns, as a recovered one must cite
    new ones."""
    provider.script = validating(status, turns)
    assert run_behaviour(three, "--limit", "1") == 0
    for condition, expected in (("targeted", targeted), ("off_target", off_target)):
        (record,) = three.records(BEHAVIOUR_DIALOGUE[condition])
        assert record["status"] == expected, condition
        assert len(record["attempts"]) == (1 if expected == "accepted" else 5)
        if expected == "unresolved":
            reason = record["attempts"][0]["rejected"][0]
            assert reason.startswith("fact 1 ") and (
                "partly given" in reason or "initial history" in reason
            ), reason


def test_rejection_rule_of_given_facts_by_hand():
    from lexpilot.protocols.behaviour import rejection

    flags = {"unsupported_assertion": False, "question_reveals_answer": False, "beyond_scope": False}
    leaked = {"facts": [{"id": 1, "status": "given", "turns": [5]}], **flags}
    assert rejection(leaked, "off_target", 2) == [
        "fact 1 given without citing only the initial history's user turns"
    ]
    assert rejection({"facts": [{"id": 1, "status": "given", "turns": [2]}], **flags}, "off_target", 2) == []
    partly = {"facts": [{"id": 1, "status": "partly_given", "turns": [1]}], **flags}
    assert rejection(partly, "off_target", 2) == [] and rejection(partly, "targeted", 2) == [
        "fact 1 partly given"
    ]
