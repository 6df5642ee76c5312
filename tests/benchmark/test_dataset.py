"""Dataset schema, validation messages, statistics, categories."""

import json
import subprocess
import sys

import pytest

from categories import CAUSE_CLASSES, CAUSES, CLASS_LABELS, cause_class
from lexpilot.benchmark.dataset import (
    DEFAULT_DATASET,
    case_from_raw,
    dataset_problems,
    dataset_statistics,
    load_dataset,
)
from lexpilot.errors import HarnessError
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.messages import one_line
from tests.helpers.paths import ROOT, SAMPLE


def test_categories_match_appendix_d():
    assert len(CAUSES) == 36 and len(set(CAUSES)) == 36
    assert CLASS_LABELS == ("Family", "Real Rights", "Torts", "Service Contract", "Finance Contract", "Misc.")
    assert [len(c) for _, c in CAUSE_CLASSES.values()] == [5, 8, 4, 7, 7, 5]
    assert cause_class("离婚纠纷") == "Family"
    assert cause_class("执行异议之诉") == "Misc."
    assert cause_class("财产保险合同纠纷") == "Finance Contract"


def test_unknown_cause_names_the_cause():
    with pytest.raises(KeyError, match="合同诈骗纠纷"):
        cause_class("合同诈骗纠纷")


def test_sample_is_valid_and_covers_what_the_issue_asks():
    cases, _ = load_dataset(SAMPLE)
    assert len(cases) >= 12
    per_class = {label: sum(c.cause_class == label for c in cases) for label in CLASS_LABELS}
    assert min(per_class.values()) >= 2, per_class
    assert all(3 <= len(c.complete) <= 9 for c in cases)
    assert any(len(c.claims) > 1 for c in cases) and any(len(c.focal_points) > 1 for c in cases)
    assert {v for c in cases for v in c.verdicts} == {"支持", "部分支持", "驳回"}
    assert any(isinstance(c.key_details, dict) for c in cases)
    assert any(not isinstance(c.key_details, dict) for c in cases)


def test_claim_order_is_result_dict_insertion_order():
    raw = sample_cases()[9]
    case = case_from_raw(raw)
    assert list(case.claims) == list(raw["result_dict"]) and list(case.verdicts) == list(
        raw["result_dict"].values()
    )


def test_single_focal_point_string_means_one_item_list():
    raw = sample_cases()[1]
    assert isinstance(raw["focal_point"], str)
    assert case_from_raw(raw).focal_points == (raw["focal_point"],)


def _problems_for(tmp_path, mutate):
    cases = sample_cases()
    mutate(cases)
    _, problems = dataset_problems(write_dataset(tmp_path / "d.json", cases))
    return problems


BREAKAGES = {
    "duplicate": (lambda cs: cs[1].update(case_number=cs[0]["case_number"]), "duplicate of case #1"),
    "missing field": (lambda cs: cs[0].pop("key_details"), "key_details: missing"),
    "empty focal": (lambda cs: cs[0].update(focal_point=[]), "focal_point: missing, empty"),
    "empty case number": (lambda cs: cs[0].update(case_number=""), "case_number: missing or empty"),
    "unknown cause": (lambda cs: cs[0].update(cause_of_action="外星纠纷"), "unknown cause '外星纠纷'"),
    "plaintiff": (lambda cs: cs[0].update(plaintiff_type="法人"), "plaintiff_type: '法人'"),
    "verdict": (
        lambda cs: cs[0]["result_dict"].update({"判令被告赔礼道歉": "胜诉"}),
        "unknown verdict '胜诉'",
    ),
    "empty result": (lambda cs: cs[0].update(result_dict={}), "result_dict: missing or empty"),
    "role order": (lambda cs: cs[1]["complete_consultation"][1].update(role="user"), "expected 'assistant'"),
    "ends with assistant": (
        lambda cs: [
            c.update(
                complete_consultation=c["complete_consultation"][:2],
                underspecified_consultation=c["underspecified_consultation"][:2],
            )
            for c in cs[1:2]
        ],
        "must end with a user message",
    ),
    "unequal": (
        lambda cs: cs[1].update(underspecified_consultation=cs[1]["underspecified_consultation"][:1]),
        "they must be of equal length",
    ),
    "empty content": (
        lambda cs: cs[0]["underspecified_consultation"][0].update(content="  "),
        "content is empty",
    ),
    "mapping mismatch": (
        lambda cs: cs[0]["key_details"].pop("夫妻感情是否确已破裂"),
        "do not match focal_point",
    ),
}


@pytest.mark.parametrize("name", BREAKAGES)
def test_each_problem_is_reported_with_case_and_field(tmp_path, name):
    mutate, expected = BREAKAGES[name]
    problems = _problems_for(tmp_path, mutate)
    assert any(expected in p for p in problems), problems
    assert all("case " in p for p in problems)


def test_every_problem_is_listed_not_just_the_first(tmp_path):
    def mutate(cs):
        for mutate_one, _ in (BREAKAGES["unknown cause"], BREAKAGES["verdict"], BREAKAGES["empty content"]):
            mutate_one(cs)
        cs[5]["plaintiff_type"] = "?"

    problems = _problems_for(tmp_path, mutate)
    assert len(problems) == 4
    assert any("（2099）示例民初6号" in p and "plaintiff_type" in p for p in problems)


@pytest.mark.parametrize(
    "content,expected",
    [
        (None, "not found"),
        ('[{"case_number": "1",', "not valid JSON at line 1"),
        ('{"a": 1}', "must be a JSON array"),
        ("[]", "holds no cases"),
    ],
)
def test_file_level_problems(tmp_path, content, expected):
    path = tmp_path / "d.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    _, problems = dataset_problems(path)
    assert len(problems) == 1 and expected in problems[0]


def test_truncated_release_is_reported(tmp_path):
    text = SAMPLE.read_text(encoding="utf-8")
    path = tmp_path / "d.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(HarnessError, match="truncated"):
        load_dataset(path)


def test_extra_fields_are_kept_and_ignored(tmp_path):
    cases = sample_cases()
    cases[0]["court"] = "某法院"
    loaded, _ = load_dataset(write_dataset(tmp_path / "d.json", cases))
    assert len(loaded) == len(cases)


def test_statistics_table():
    cases, _ = load_dataset(SAMPLE)
    table = dataset_statistics(cases)
    n_claims = sum(len(c.claims) for c in cases)
    assert f"Total                      {2 * len(cases)}" in table
    assert f"Per case                   {n_claims / len(cases):.2f}" in table
    for label in CLASS_LABELS:
        assert label in table


def test_cli_validates_and_lists_every_problem(tmp_path):
    ok = subprocess.run(
        [sys.executable, str(ROOT / "common.py"), "--dataset", str(SAMPLE)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ok.returncode == 0 and "Verdict distribution" in ok.stdout
    cases = sample_cases()
    cases[0]["cause_of_action"] = "外星纠纷"
    cases[3]["result_dict"] = {"x": "赢"}
    bad = subprocess.run(
        [
            sys.executable,
            str(ROOT / "common.py"),
            "--dataset",
            str(write_dataset(tmp_path / "bad.json", cases)),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "2 problem(s)" in bad.stderr and "外星纠纷" in bad.stderr and "'赢'" in bad.stderr


def test_missing_default_release_names_the_sample():
    if DEFAULT_DATASET.exists():
        pytest.skip("the real release is present")
    _, problems = dataset_problems(DEFAULT_DATASET)
    assert "LexPilot_sample.json" in problems[0] and "\n" not in problems[0]


# ----------------------------------------------------------------------------- hostile datasets


def test_a_duplicated_claim_is_a_dataset_error(tmp_path, harness, capsys):
    case = sample_cases()[0]
    claim = next(iter(case["result_dict"]))
    text = json.dumps([case], ensure_ascii=False)
    duplicated = text.replace(
        '"result_dict": {', '"result_dict": {' + json.dumps(claim, ensure_ascii=False) + ': "驳回", ', 1
    )
    (tmp_path / "dup.json").write_text(duplicated, encoding="utf-8")
    harness.dataset = tmp_path / "dup.json"
    assert harness.run("gold") == 2
    err = capsys.readouterr().err
    assert "result_dict:" in err and "appears more than once" in err and case["case_number"] in err


def deep(tmp_path):
    return tmp_path / "deep.json", "[" * 100000 + "]" * 100000, "nested too deeply"


DATASETS = {
    "a folder": (lambda tmp: (tmp, None, "is a folder")),
    "nested too deeply": deep,
    "a 5,000-digit number": (
        lambda tmp: (tmp / "n.json", "[" + "9" * 5000 + "]", "not a usable JSON dataset")
    ),
    "a lone surrogate": (
        lambda tmp: (
            tmp / "s.json",
            json.dumps(sample_cases()[:1], ensure_ascii=False).replace(
                '"content": "', '"content": "\\ud800', 1
            ),
            "lone surrogate",
        )
    ),
}


@pytest.mark.parametrize("name", DATASETS)
def test_a_hostile_dataset_is_one_line(tmp_path, harness, capsys, name):
    path, text, message = DATASETS[name](tmp_path)
    if text is not None:
        path.write_text(text, encoding="utf-8")
    harness.dataset = path
    assert harness.run("gold") == 2
    assert message in one_line(capsys.readouterr().err) and not harness.root.exists()


@pytest.mark.parametrize(
    "raw, problem",
    [
        (
            '"cause_of_action": "民间借贷纠纷", "cause_of_action": "民间借贷纠纷"',
            "case: 'cause_of_action' appears more than once",
        ),
        ('"complexity": Infinity', "Infinity is not a number JSON allows"),
        ('"complexity": NaN', "NaN is not a number JSON allows"),
    ],
)
def test_duplicated_keys_anywhere_and_infinity_are_dataset_errors(harness, tmp_path, capsys, raw, problem):
    """A key given twice is an error wherever it is (the last value no longer wins silently); Infinity and NaN are
    not numbers."""
    text = json.dumps(sample_cases()[:1], ensure_ascii=False)
    path = tmp_path / "d.json"
    path.write_text(text.replace('{"case_number"', "{" + raw + ', "case_number"', 1), encoding="utf-8")
    assert harness.run("gold", "--dataset", str(path)) == 2
    assert problem in capsys.readouterr().err
