"""Appendix F prompts: files, slots, safe filling, and what each rendering puts into them."""

import json
import re

import pytest

from lexpilot.benchmark.dataset import case_from_raw
from lexpilot.benchmark.prompts import (
    PROMPT_FILES,
    fill,
    load_prompts,
    render_claims,
    render_details_by_focal_point,
    render_focal_points,
    render_history,
    render_key_facts,
)
from tests.helpers.datasets import sample_cases
from tests.helpers.paths import DATA

EXPECTED_SLOTS = {
    "lexawn": {"history"},
    "force_ask": {"history"},
    "force_judge": {"history"},
    "user_standard": {"history", "key_facts"},
    "judge_lca": {"history"},
    "judge_dcg": {"ai_response", "focus_text", "key_facts"},
    "judge_ljp": {"history", "claims"},
    "user_delayed": {"history", "key_facts"},
    "user_self_correction": {"history", "key_facts"},
    "user_correction": {"history", "key_facts", "fault"},
    "judge_response_type": {"history", "key_facts", "ai_response"},
    "judge_simulator_audit": {"history", "ai_response", "reply", "key_facts"},
    "behaviour_targeted": {"history", "key_facts"},
    "behaviour_off_target": {"history", "key_facts"},
    "behaviour_validation": {"history", "key_facts"},
    "judge_focal_type": {"focus_text"},
}


def test_every_prompt_has_exactly_its_slots_and_no_latex_leftovers():
    prompts = load_prompts()
    assert set(prompts) == set(EXPECTED_SLOTS) == set(PROMPT_FILES)
    for name, text in prompts.items():
        assert set(re.findall(r"\{(\w+)\}", text)) == EXPECTED_SLOTS[name], name
        assert "gkai" not in text and "‘‘‘" not in text and "\\" not in text, name


def test_prompts_keep_the_original_wording():
    prompts = load_prompts()
    assert "# Input Data\n<对话历史>{history}\n</对话历史>\n# Output Constraints\n" in prompts["lexawn"]
    assert "\n【策略二】：存在法律要件缺失导致难以推演，则按需提问 (Ask-when-Needed)\n" in prompts["lexawn"]
    assert "本次不进行进一步问答，请勿向用户提出补充问题。" in prompts["force_judge"]
    assert "（如 ```json ）" in prompts["judge_ljp"]
    assert '{ "results": ["驳回", "支持", "部分支持"] }' in prompts["judge_ljp"]
    assert prompts["judge_lca"].rstrip().endswith("Markdown标记或换行符。")
    assert (
        "1. 引导的正确性：<AI提问内容>所关注的问题，应属于解决<裁判文书争议焦点>所必需的法律要点"
        in prompts["judge_dcg"]
    )


APPENDIX_F = json.loads((DATA / "appendix_f.json").read_text(encoding="utf-8"))["prompts"]


def paper_form(text: str) -> str:
    """The prompt as the paper prints it, compared whitespace aside: the LaTeX font leftover `gkai`, the
    table's closing bar and the typeset code fence (‘‘‘) are the transcription's only edits."""
    text = text.replace("gkai", "").replace("‘‘‘", "```")
    return re.sub(r"\s+", "", text).removesuffix("|")


@pytest.mark.parametrize("name", sorted(APPENDIX_F))
def test_every_appendix_f_prompt_is_the_papers_text(name):
    assert paper_form(load_prompts()[name]) == paper_form(APPENDIX_F[name]["text"]), APPENDIX_F[name][
        "paper_title"
    ]


# Rules of the Standard User Model (Table 22) that every prompt written for the harness keeps, apart from the
# one disruption it describes; and phrases that would tell the evaluated model its question was on target.
STANDARD_RULES = {
    "no assumptions as facts": "不要把AI的假设或推测当作已确认事实",
    "no invention": "绝不能编造未提供的细节",
    "no denial of what was not mentioned": "不要把未提及的事情说成没有发生",
    "no other hidden details": "不要披露",
}
CUES = ("关键事实", "关键情况", "关键点", "争议焦点")


@pytest.mark.parametrize("name", ["user_delayed", "user_self_correction", "user_correction"])
def test_every_prompt_written_for_the_harness_keeps_the_standard_rules_and_gives_no_cue(name):
    prompts = load_prompts()
    standard, text = prompts["user_standard"], prompts[name]
    inputs = standard[standard.index("# Input Data") : standard.index("# 逻辑与回复策略")]
    constraints = standard[standard.index("# Output Constraints") :]
    assert inputs in text
    expected = (
        constraints.replace("仅输出你作为用户的回复文本", "仅输出你作为用户的回复文本和最后的<故障记录>")
        if name == "user_self_correction"
        else constraints
    )
    assert text.endswith(expected)
    for rule, phrase in STANDARD_RULES.items():
        assert phrase in text, f"{name}: {rule}"
    assert not any(cue in text for cue in CUES), name


def test_the_disruptions_are_what_appendix_e5_describes_and_no_easier_than_standard():
    prompts = load_prompts()
    delayed = prompts["user_delayed"]
    assert "暂不提供所需信息" in delayed and "不引入虚假事实" in delayed
    # a vague reply may only restate the history: it can never hand over another focal point's facts
    assert "不要披露<案件客观事实>中尚未在<对话历史>里出现的任何其他内容" in delayed
    assert "与所问事实关系不大的经过" not in delayed
    mistaken = prompts["user_self_correction"]
    assert "不完整或有误" in mistaken and "<故障记录>" in mistaken and "逐字照抄" in mistaken
    correction = prompts["user_correction"]
    assert "{fault}" in correction and "无论AI的最新回复是继续追问还是已经给出了判断" in correction
    assert "回答有依据的部分，并明确说明其余部分不清楚" in correction
    # it is told what was wrong, not told it was wrong
    assert "上一次回复的信息不完整或有误" not in correction
    # correct what was wrong, within the scope of the question that led to it (a key-detail line
    # may bundle several facts: the correction never discloses the parts that question did not ask)
    assert "完整地给出" not in correction and "限于引出上一次回复的那个问题所问的范围" in correction


def test_fill_never_reexpands_inserted_text():
    text = fill("A {history} B {claims}", history="用户说 {claims} 和 {key_facts} {", claims="X")
    assert text == "A 用户说 {claims} 和 {key_facts} { B X"


def test_fill_refuses_a_slot_no_prompt_may_hold():
    """A new stage's {question} was sent as written, its value dropped, because
    the slot was not declared; `fill` now says so."""
    with pytest.raises(KeyError, match=r"\{question\} is not declared in benchmark/prompts.py's SLOTS"):
        fill("{history} {question}", history="h", question="q")


def test_fill_refuses_a_missing_slot():
    with pytest.raises(KeyError, match="claims"):
        fill("{history} {claims}", history="h")


def test_rendered_prompt_contains_history_verbatim_with_every_message():
    raw = sample_cases()[4]
    history = raw["underspecified_consultation"]
    history[2]["content"] = "第一行\n第二行 {history} 末尾"
    rendered = render_history(history)
    assert rendered.splitlines()[0].startswith("User: ") and "\nAssistant: " in rendered
    assert rendered.count("User: ") == 4 and rendered.count("Assistant: ") == 3
    prompt = fill(load_prompts()["lexawn"], history=rendered)
    assert rendered in prompt
    for message in history:
        assert message["content"] in prompt


def test_claims_render_one_per_line_in_order():
    raw = sample_cases()[9]
    raw["result_dict"] = {"第一项\n续行": "支持", **raw["result_dict"]}
    lines = render_claims(case_from_raw(raw)).split("\n")
    assert lines[0] == "第一项 续行" and lines[1:] == list(raw["result_dict"])[1:]


def test_user_model_key_facts_hold_details_alone():
    case = case_from_raw(sample_cases()[0])
    facts = render_key_facts(case)
    for fp in case.focal_points:
        assert fp not in facts
    for details in case.key_details.values():
        for d in details:
            assert d in facts


def test_dcg_judge_keeps_each_focal_point_next_to_its_details():
    case = case_from_raw(sample_cases()[0])
    text = render_details_by_focal_point(case)
    for fp, details in case.key_details.items():
        block = text.split(f"【{fp}】\n", 1)[1]
        assert block.startswith("\n".join(details))
    assert render_focal_points(case).split("\n") == list(case.focal_points)
