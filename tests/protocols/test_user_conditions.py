"""Non-ideal users (Appendix E.5): one disruption on the first relevant new request, corrections, budget."""

import json

import pytest

import show_results
from lexpilot.benchmark.records import INTERACTION, LJP_INTERACTION
from lexpilot.scripted.kinds import between, kind_of
from lexpilot.scripted.replies import ASK, PREDICT, fault_record
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

CASE = sample_cases()[1]  # its underspecified history already holds one assistant question
UNDERSPECIFIED_TAIL = CASE["underspecified_consultation"][-1]["content"]
PRE_EXISTING_QUESTION = next(
    m["content"] for m in CASE["underspecified_consultation"] if m["role"] == "assistant"
)
USER_VARIANTS = (
    ("delayed", "迟疑、含糊地回应"),
    ("mistaken", "给出不完整或有误的回答"),
    ("correction", "主动更正"),
    ("standard", "事实命中"),
)


@pytest.fixture
def one_case(tmp_path, provider, monkeypatch):
    return Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "one.json", [CASE]))


def user_variant(prompt: str) -> str:
    return next(name for name, marker in USER_VARIANTS if marker in prompt)


def consultation(actions: list[str]):
    """The n-th new LexAwN turn does actions[n]: 'ask' (a relevant request), 'off' (an unrelated one), 'predict'.
    The DCG judge accepts exactly the relevant requests."""

    def script(kind, prompt, body):
        history = between(prompt, "对话历史")
        if kind == "lexawn":
            if UNDERSPECIFIED_TAIL not in history:
                return PREDICT + "完整咨询：支持。"
            n = history.count("Assistant:") - 1
            action = actions[min(n, len(actions) - 1)]
            return {
                "ask": ASK + f"关键问题{n + 1}：借条上约定的还款日期是哪天？",
                "off": ASK + f"无关问题{n + 1}：您平时做什么工作？",
                "predict": PREDICT + f"第{n + 1}次判断：支持。",
            }[action]
        if kind == "dcg_judge":
            return "是" if "关键问题" in between(prompt, "AI提问内容") else "否"
        if kind == "user":
            return f"用户回复（{user_variant(prompt)}）" + fault_record(prompt)
        return None

    return script


def run_interaction(one_case, provider, condition, actions):
    provider.script = consultation(actions)
    assert one_case.run("LexAwN", "--user-condition", condition) == 0
    (record,) = one_case.records(INTERACTION)
    users = [user_variant(p) for p in provider.prompts() if kind_of(p) == "user"]
    return record, users


def test_delayed_disclosure_only_on_the_first_relevant_new_request(one_case, provider):
    record, users = run_interaction(one_case, provider, "delayed", ["off", "ask", "ask"])
    assert users == ["standard", "delayed", "standard"]  # the follow-up on the same question is answered
    assert record["disrupted_round"] == 2 and record["corrected_round"] is None
    assert [r.get("relevance", {}).get("label") for r in record["rounds"]] == ["否", "是", None, None]
    assert [r.get("user_prompt") for r in record["rounds"][:3]] == [
        "user_standard",
        "user_delayed",
        "user_standard",
    ]
    judged_questions = [between(p, "AI提问内容") for p in provider.prompts("dcg_judge")]
    assert len(judged_questions) == 2 and PRE_EXISTING_QUESTION not in judged_questions
    assert record["stop_reason"] == "budget" and record["user_condition"] == "delayed"


def test_an_input_history_question_never_triggers_the_disruption(one_case, provider):
    # The pre-existing history question is relevant-looking; the model predicts at once: no new request, no disruption.
    record, users = run_interaction(one_case, provider, "delayed", ["predict"])
    assert users == [] and record["disrupted_round"] is None and not provider.prompts("dcg_judge")
    assert record["stop_reason"] == "judged" and len(record["rounds"]) == 1


@pytest.mark.parametrize("condition", ["delayed", "self-correction"])
def test_without_a_relevant_request_the_user_stays_standard(one_case, provider, condition):
    record, users = run_interaction(one_case, provider, condition, ["off"])
    assert users == ["standard"] * 3 and record["disrupted_round"] is None
    assert all(r["relevance"]["label"] == "否" for r in record["rounds"][:3])


def test_self_correction_after_an_early_judgment_continues_and_the_update_is_evaluated(one_case, provider):
    record, users = run_interaction(one_case, provider, "self-correction", ["ask", "predict"])
    assert users == ["mistaken", "correction"]
    assert record["disrupted_round"] == 1 and record["corrected_round"] == 2
    labels = [r["label"] for r in record["rounds"]]
    # the round-2 judgment is followed by a correction and updated
    assert labels == ["策略二", "策略一", "策略一"]
    assert record["stop_reason"] == "judged" and record["final_response"].startswith(PREDICT + "第3次判断")
    assert one_case.run("interaction", "--user-condition", "self-correction") == 0
    (ljp,) = one_case.records(LJP_INTERACTION)
    (extraction,) = provider.prompts("ljp_judge")
    assert between(extraction, "待提取回复") == PREDICT + "第3次判断：支持。"
    assert ljp["stop_reason"] == "judged"


def test_self_correction_after_a_judgment_in_the_last_round_ends_with_a_forced_update(one_case, provider):
    record, users = run_interaction(one_case, provider, "self-correction", ["off", "ask", "predict"])
    assert users == ["standard", "mistaken", "correction"]
    assert record["corrected_round"] == 3 and record["stop_reason"] == "budget"
    assert record["rounds"][-1]["prompt"] == "force_judge"
    (forced,) = provider.prompts("force_judge")
    assert "用户回复（correction）" in between(forced, "对话历史")


def test_self_correction_on_the_last_user_turn_has_no_room_to_correct(one_case, provider):
    record, users = run_interaction(one_case, provider, "self-correction", ["off", "off", "ask"])
    assert users == ["standard", "standard", "mistaken"]
    assert record["disrupted_round"] == 3 and record["corrected_round"] is None


@pytest.mark.parametrize("condition", ["standard", "delayed", "self-correction"])
@pytest.mark.parametrize(
    "actions", [["ask"], ["ask", "predict"], ["off", "ask", "predict"], ["ask", "ask", "predict"]]
)
def test_the_budget_is_never_exceeded(one_case, provider, condition, actions):
    record, users = run_interaction(one_case, provider, condition, actions)
    lexawn = [p for p in provider.prompts("lexawn") if UNDERSPECIFIED_TAIL in between(p, "对话历史")]
    assert len(users) <= 3 and len(lexawn) <= 3 and len(provider.prompts("force_judge")) <= 1
    assert sum(
        1
        for m in record["continued_history"][len(CASE["underspecified_consultation"]) :]
        if m["role"] == "user"
    ) == len(users)
    assert len(provider.prompts("dcg_judge")) == (
        0 if condition == "standard" else sum("relevance" in r for r in record["rounds"])
    )


def test_standard_user_never_asks_the_relevance_judge(one_case, provider):
    record, users = run_interaction(one_case, provider, "standard", ["ask"])
    assert users == ["standard"] * 3 and not provider.prompts("dcg_judge")
    assert all("relevance" not in r for r in record["rounds"]) and record["disrupted_round"] is None


def test_dry_run_counts_the_relevance_checks(one_case, provider, capsys):
    for condition, judge in (("standard", 2 + 2), ("delayed", 2 + 2 + 3)):
        one_case.run_id = condition
        assert one_case.run("LexAwN", "--user-condition", condition, "--dry-run") == 0
        assert f"judge {judge}" in capsys.readouterr().out
    assert not provider.requests


def test_a_run_keeps_its_condition(one_case, provider, capsys):
    provider.script = consultation(["ask"])
    assert one_case.run("LexAwN", "--user-condition", "delayed") == 0
    provider.requests = []
    assert one_case.run("interaction") == 2  # standard by default
    assert one_case.run("DCG") == 2
    err = capsys.readouterr().err
    assert (
        "user condition is 'delayed'" in err and "--user-condition delayed" in err and not provider.requests
    )


def test_conditions_never_group_together_and_table_15_shows_them(tmp_path, provider, monkeypatch, capsys):
    provider.script = consultation(["ask", "predict"])
    harness = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "one.json", [CASE]))
    for run_id, condition in (
        ("std-1", "standard"),
        ("std-2", "standard"),
        ("del-1", "delayed"),
        ("sc-1", "self-correction"),
    ):
        harness.run_id = run_id
        assert harness.run("LexAwN", "--user-condition", condition) == 0
        assert harness.run("interaction", "--user-condition", condition) == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert sorted((g["settings"]["user_condition"], tuple(g["run_ids"])) for g in groups) == [
        ("delayed", ("del-1",)),
        ("self-correction", ("sc-1",)),
        ("standard", ("std-1", "std-2")),
    ]
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Non-ideal users (Table 15)") :]
    assert "Standard" in table and "Delayed Disclosure" in table and "Self-Correction" in table
    assert "eval-model" in table.splitlines()[3]
    main = out[out.index("Main results") : out.index("LCA detail")]
    assert main.count("eval-model") == 1  # the non-ideal runs stay out of the main tables


def test_the_prompts_a_non_ideal_user_receives_keep_the_rules_and_give_no_cue(one_case, provider):
    """A scripted User Model that reads its prompt: what it was told is what the tests check."""
    record, users = run_interaction(one_case, provider, "delayed", ["ask", "ask", "predict"])
    (delayed,) = [p for p in provider.prompts("user") if user_variant(p) == "delayed"]
    assert "不要披露<案件客观事实>中尚未在<对话历史>里出现的任何其他内容" in delayed
    assert "绝不能编造未提供的细节" in delayed and "关键事实" not in delayed


def test_the_self_correcting_users_fault_is_recorded_and_given_to_the_correction(one_case, provider):
    record, users = run_interaction(one_case, provider, "self-correction", ["ask", "ask", "predict"])
    assert users[:2] == ["mistaken", "correction"]
    detail = sample_cases()[1]["key_details"]
    first = (next(iter(detail.values()))[0] if isinstance(detail, dict) else detail[0]).strip()
    fault = {"kind": "incomplete", "detail": first}
    assert record["fault"] == fault and record["rounds"][0]["fault"] == fault
    assert "<故障记录>" not in record["rounds"][0]["user_reply"]  # the evaluated model never sees the record
    assert all("<故障记录>" not in between(p, "对话历史") for p in provider.prompts("lexawn"))
    (correction,) = [p for p in provider.prompts("user") if user_variant(p) == "correction"]
    assert between(correction, "上次回复的问题") == f"类型：不完整\n涉及的事实：{first}"


@pytest.mark.parametrize(
    "bad",
    [
        "没有记录的回复",
        '回复\n<故障记录>{"类型": "说谎", "涉及": "x"}</故障记录>',
        '回复\n<故障记录>{"类型": "有误", "涉及": "不在案件事实里的话"}</故障记录>',
    ],
)
def test_a_faulty_reply_without_a_valid_record_is_asked_again(one_case, provider, bad):
    script = consultation(["ask", "predict"])
    attempts = []

    def first_bad(kind, prompt, body):
        if kind == "user" and user_variant(prompt) == "mistaken" and not attempts:
            attempts.append(1)
            return bad
        return script(kind, prompt, body)

    provider.script = first_bad
    assert one_case.run("LexAwN", "--user-condition", "self-correction") == 0
    (record,) = one_case.records(INTERACTION)
    assert record["fault"]["kind"] == "incomplete"
    assert sum(user_variant(p) == "mistaken" for p in provider.prompts("user")) == 2


def qwk_of(records: list[dict]) -> float:
    """Claim-level QWK of one run by hand (scikit-learn on the paper's 3-label scale)."""
    from sklearn.metrics import cohen_kappa_score

    gold = [v for r in records for v in r["gold"]]
    predicted = [v for r in records for v in r["predicted"]]
    return cohen_kappa_score(gold, predicted, weights="quadratic", labels=["支持", "部分支持", "驳回"])


def table_15_rows(harness, capsys) -> list[str]:
    """Table 15's text rows, as the report prints them at any width."""
    capsys.readouterr()
    assert (
        show_results.main(["--output-root", str(harness.root), "--width", "0", "--table", "non_ideal"]) == 0
    )
    out = capsys.readouterr().out
    return out[out.index("Non-ideal users (Table 15)") :].split("\n\n")[0].splitlines()[3:]


def test_table_15_pairs_real_runs_the_stages_wrote(tmp_path, provider, monkeypatch, capsys):
    """Two standard runs, one per non-ideal user, made by the stages: a non-ideal run's manifest
    lists its extra user prompt file, and Table 15 still takes its Standard column from the standard runs of the
    same model ("Standard" beside "Delayed Disclosure" and "Self-Correction", Table 15), with the paired declines."""
    harness = Harness(
        tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4])
    )
    qwk = {}
    for run_id, condition in (
        ("run1", "standard"),
        ("run2", "standard"),
        ("delayed1", "delayed"),
        ("selfcorr1", "self-correction"),
    ):
        harness.run_id = run_id
        assert harness.run("LexAwN", "--user-condition", condition) == 0
        assert harness.run("interaction", "--user-condition", condition) == 0
        qwk[run_id] = qwk_of(harness.records("eval_results", "LJP_interaction.jsonl"))
    standard = (qwk["run1"] + qwk["run2"]) / 2
    capsys.readouterr()
    args = ["--output-root", str(harness.root)] + [x for r in qwk for x in ("--run-id", r)]
    assert show_results.main(args + ["--ci", "--width", "0"]) == 0  # one line per row, however wide
    out = capsys.readouterr().out
    rows = out[out.index("Non-ideal users (Table 15)") :].split("\n\n")[0].splitlines()[3:]
    assert len(rows) == 1 and rows[0].startswith("eval-model")  # one row per model
    cells = [c.strip() for c in rows[0].split("  ") if c.strip()]
    # at Table 15's 4 decimals
    assert cells[1].startswith(f"{standard:.4f} ± ") and cells[2].startswith(f"{qwk['delayed1']:.4f} [")
    assert cells[3].startswith(f"{qwk['selfcorr1']:.4f} [")
    assert cells[4].startswith(f"{qwk['delayed1'] - standard:+.4f} [")  # Delayed − Standard, paired
    assert cells[5].startswith(f"{qwk['selfcorr1'] - standard:+.4f} [")


def test_table_15_pairs_runs_whose_code_differs_and_says_so(tmp_path, provider, monkeypatch, capsys):
    """ "A comment added to audit.py splits the delayed run into its own row". Table 15 pairs as the
    rankings do, ignoring the code hash, and says when the code differs. The delayed run is made by a harness whose
    code hash differs (the stages write it so); it stays in the standard runs' row."""
    import lexpilot.storage.manifest as manifest

    harness = Harness(
        tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4])
    )
    qwk, real = {}, manifest.code_hash
    # two delayed runs apart only in code are one Delayed cell (it kept the last one alone)
    for run_id, condition in (("run1", "standard"), ("delayed1", "delayed"), ("delayed2", "delayed")):
        harness.run_id = run_id
        monkeypatch.setattr(
            manifest, "code_hash", (lambda files: "0123456789abcdef") if run_id == "delayed1" else real
        )
        assert harness.run("LexAwN", "--user-condition", condition) == 0
        assert harness.run("interaction", "--user-condition", condition) == 0
        qwk[run_id] = qwk_of(harness.records("eval_results", "LJP_interaction.jsonl"))
    rows = table_15_rows(harness, capsys)
    assert len(rows) == 1, rows  # one row: the code hash does not keep the conditions apart
    cells = [c.strip() for c in rows[0].split("  ") if c.strip()]
    assert cells[0] == "eval-model (its conditions' runs differ in code)"
    delayed = [qwk["delayed1"], qwk["delayed2"]]
    mean, sd = sum(delayed) / 2, abs(delayed[0] - delayed[1]) / 2**0.5  # the sample SD of two values
    assert cells[1] == f"{qwk['run1']:.4f}" and cells[2] == f"{mean:.4f} ± {sd:.4f}"


@pytest.mark.slow
def test_a_table_15_cell_opens_its_own_conditions_runs(tmp_path, provider, monkeypatch, open_page):
    """The Delayed Disclosure and Self-Correction cells open their own runs, not the standard ones."""
    from urllib.parse import parse_qs, urlparse

    harness = Harness(
        tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2])
    )
    for run_id, condition in (
        ("run1", "standard"),
        ("delayed1", "delayed"),
        ("selfcorr1", "self-correction"),
    ):
        harness.run_id = run_id
        assert harness.run("LexAwN", "--user-condition", condition) == 0
        assert harness.run("interaction", "--user-condition", condition) == 0
    assert show_results.main(["--output-root", str(harness.root), "--html", str(tmp_path / "site")]) == 0
    page = open_page()
    page.goto((tmp_path / "site" / "index.html").as_uri())
    table = page.locator("h3:has-text('Non-ideal users (Table 15)') + table")
    headers = table.locator("tr").first.locator("th").all_inner_texts()
    row = table.locator("tr").nth(1)
    for column, run_id in (
        ("Standard", "run1"),
        ("Delayed Disclosure", "delayed1"),
        ("Self-Correction", "selfcorr1"),
    ):
        href = row.locator("td").nth(headers.index(column)).locator("a").get_attribute("href")
        page.goto((tmp_path / "site" / "cases.html").as_uri() + "#" + urlparse(href).fragment)
        runs = {t.split(" · ")[-1] for t in page.locator("#rows tr td:nth-child(4)").all_inner_texts()}
        assert runs == {run_id}, (column, parse_qs(urlparse(href).fragment))
        page.goto((tmp_path / "site" / "index.html").as_uri())


def test_table_15_pairs_a_run_made_after_a_prompt_file_was_added(tmp_path, provider, monkeypatch, capsys):
    """A prompt file added to the harness (a new stage's) made every older run
    "not comparable"; Table 15 pairs on the prompt files both runs record. The standard run is made before the
    harness gains judge_demo.txt, the delayed run after: one row, its cells the records' QWK by hand."""
    from tests.helpers.stages import prompts_in

    harness = Harness(
        tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4])
    )
    qwk = {}
    for run_id, condition in (("run1", "standard"), ("delayed1", "delayed")):
        harness.run_id = run_id
        if condition == "delayed":  # the harness gains a prompt file
            prompts_in(tmp_path / "prompts", monkeypatch, judge_demo="你是一个新的评审员。\n{history}\n")
        assert harness.run("LexAwN", "--user-condition", condition) == 0
        assert harness.run("interaction", "--user-condition", condition) == 0
        qwk[run_id] = qwk_of(harness.records("eval_results", "LJP_interaction.jsonl"))
    rows = table_15_rows(harness, capsys)
    assert len(rows) == 1, rows  # one row: the added prompt file does not keep the conditions apart
    cells = [c.strip() for c in rows[0].split("  ") if c.strip()]
    assert cells[1] == f"{qwk['run1']:.4f}" and cells[2] == f"{qwk['delayed1']:.4f}", cells
