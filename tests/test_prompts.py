"""Appendix F prompts: files, slots, safe filling, and what each rendering puts into them."""
import re

import pytest

from common import (PROMPT_FILES, fill, load_prompts, render_claims, render_details_by_focal_point, render_focal_points,
                    render_history, render_key_facts)
from dataset import case_from_raw
from tests.conftest import sample_cases

EXPECTED_SLOTS = {
    "lexawn": {"history"}, "force_ask": {"history"}, "force_judge": {"history"},
    "user_standard": {"history", "key_facts"}, "judge_lca": {"history"},
    "judge_dcg": {"ai_response", "focus_text", "key_facts"}, "judge_ljp": {"history", "claims"},
    "user_delayed": {"history", "key_facts"}, "user_self_correction": {"history", "key_facts"},
    "user_correction": {"history", "key_facts"},
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
    assert "1. 引导的正确性：<AI提问内容>所关注的问题，应属于解决<裁判文书争议焦点>所必需的法律要点" in prompts["judge_dcg"]


def test_non_ideal_user_prompts_share_the_standard_inputs_and_constraints():
    prompts = load_prompts()
    standard = prompts["user_standard"]
    inputs = standard[standard.index("# Input Data"):standard.index("# 逻辑与回复策略")]
    constraints = standard[standard.index("# Output Constraints"):]
    for name in ("user_delayed", "user_self_correction", "user_correction"):
        assert inputs in prompts[name] and prompts[name].endswith(constraints), name
    assert "不引入虚假事实" in prompts["user_delayed"]
    assert "不完整或有误" in prompts["user_self_correction"]
    assert "无论AI的最新回复是继续追问还是已经给出了判断" in prompts["user_correction"]


def test_fill_never_reexpands_inserted_text():
    text = fill("A {history} B {claims}", history="用户说 {claims} 和 {key_facts} {", claims="X")
    assert text == "A 用户说 {claims} 和 {key_facts} { B X"


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
