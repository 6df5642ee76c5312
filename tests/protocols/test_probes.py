"""The probe study of the User Model (user_probes.py): template, probe-file validation, generation (what the
simulator and the DCG judge see), the blind sheet, and Table 13 on a hand-computed sheet."""

import csv
import json

import pytest

import user_probes
from lexpilot.benchmark import probe_file
from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.records import PROBE_DCG, PROBE_REPLIES
from lexpilot.errors import HarnessError
from lexpilot.files import read_sheet, write_sheet
from lexpilot.reporting.validation import probe_study
from lexpilot.scripted.kinds import between
from tests.helpers.paths import ROOT, SAMPLE
from tests.helpers.stages import Harness

PROBES = ROOT / "data" / "LexPilot_sample_probes.csv"


def test_the_template_samples_per_cause_reproducibly(tmp_path):
    many = tmp_path / "many.json"
    cases = json.loads(SAMPLE.read_text(encoding="utf-8"))
    clones = [dict(c, case_number=c["case_number"] + f"-{i}") for c in cases for i in range(3)]
    many.write_text(json.dumps(clones, ensure_ascii=False), encoding="utf-8")
    for seed in (0, 0, 1):
        assert (
            user_probes.main(
                [
                    "template",
                    "--dataset",
                    str(many),
                    "--out",
                    str(tmp_path / f"t{seed}.csv"),
                    "--seed",
                    str(seed),
                ]
            )
            == 0
        )
    rows = lambda p: [row for _, row in read_sheet(p, probe_file.PROBE_COLUMNS)]  # noqa: E731
    first = rows(tmp_path / "t0.csv")
    causes = [r["cause_of_action"] for r in first]
    assert len(first) == 24 and all(causes.count(c) == 2 for c in set(causes))
    assert first == rows(tmp_path / "t0.csv")
    assert [r["case_number"] for r in rows(tmp_path / "t1.csv")] != [r["case_number"] for r in first]
    assert first[0]["key_details"].startswith("1. ") and first[0]["A_question"] == ""


def edited(tmp_path, change):
    rows = [row for _, row in read_sheet(PROBES, probe_file.PROBE_COLUMNS)]
    change(rows)
    path = tmp_path / "probes.csv"
    write_sheet(path, probe_file.PROBE_COLUMNS, rows)
    return path


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda rows: rows[0].update(A_question=""), "A_question: empty"),
        (
            lambda rows: rows[1].update(D_removed="9"),
            "D_removed: '9' does not match the case's 3 key details",
        ),
        (lambda rows: rows[1].update(D_removed="x"), "D_removed: 'x' is not a list of key-detail numbers"),
        (lambda rows: rows[3].update(D_removed="1;2"), "removes every key detail"),
        (lambda rows: rows.append(dict(rows[0])), "a second row for this case (first at row 2)"),
        (lambda rows: rows[2].update(case_number="（2099）不存在"), "case_number: not a case of the dataset"),
    ],
)
def test_every_probe_file_problem_is_named_with_its_row(tmp_path, change, message):
    cases = {c.number: c for c in load_dataset(SAMPLE)[0]}
    with pytest.raises(HarnessError, match="problem") as error:
        probe_file.load_probes(edited(tmp_path, change), cases)
    assert message in str(error.value) and ".csv:" in str(error.value)


@pytest.fixture
def generated(tmp_path, provider, monkeypatch, capsys):
    h = Harness(tmp_path, provider, monkeypatch)
    argv = [
        "--run-id",
        "r1",
        "--model",
        "eval-model",
        "--dataset",
        str(SAMPLE),
        "--output-root",
        str(h.root),
        "--probes",
        str(PROBES),
    ]
    assert user_probes.STAGE and user_probes.main(["generate", *argv, "--dry-run"]) == 0
    assert not provider.requests
    from lexpilot.running.stage import stage_main

    assert stage_main(user_probes.STAGE, "test", argv=argv, clients=provider.in_memory_clients()) == 0
    # "The probe study counts cases probed, not cases" (the probe file has 4 of the 12)
    assert (
        "[probes] cases: 4 done, 8 not in the probe file (nothing to ask), 0 skipped"
        in capsys.readouterr().out
    )
    return h


def test_generate_gives_d_the_reduced_details_and_never_the_experts_answers(generated, provider):
    rows = {row["case_number"]: row for _, row in read_sheet(PROBES, probe_file.PROBE_COLUMNS)}
    user_prompts = provider.prompts("user")
    assert len(user_prompts) == 4 * 4 and len(provider.prompts("dcg_judge")) == 3 * 4
    for prompt in user_prompts:
        for row in rows.values():
            assert row["minimum_answer"] not in prompt
            assert not any(row[f"permitted_{c}"] in prompt for c in "ABCD" if row[f"permitted_{c}"] != "无")
    case = load_dataset(SAMPLE)[0][0]
    details = [d for ds in case.key_details.values() for d in ds]
    record = next(r for r in generated.records(PROBE_REPLIES) if r["case_number"] == case.number)
    assert record["replies"]["D"]["key_details_given"] == len(details) - 1
    d_prompt = next(
        p
        for p in user_prompts
        if details[0] not in between(p, "案件客观事实") and case.underspecified[0]["content"] in p
    )
    assert all(d in between(d_prompt, "案件客观事实") for d in details[1:])
    assert between(d_prompt, "对话历史").endswith("Assistant: " + rows[case.number]["A_question"])
    for prompt in provider.prompts("dcg_judge"):  # the judge never sees a simulator reply
        assert between(prompt, "AI提问内容") in {row[f"{c}_question"] for row in rows.values() for c in "ABC"}
    unprobed = [r for r in generated.records(PROBE_REPLIES) if not r["probed"]]
    assert len(unprobed) == 8 and all(not r["replies"] for r in unprobed)
    assert len(generated.records(PROBE_DCG)) == 12


def test_the_export_is_one_blind_sheet_per_expert_shuffled_and_reproducible(generated, tmp_path):
    """One sheet per expert (the reviews stay independent), each in its own order; no condition,
    no DCG label, and no column that differs by condition in form (C and D are not recognisable by layout)."""
    args = [
        "export",
        "--run-id",
        "r1",
        "--model",
        "eval-model",
        "--probes",
        str(PROBES),
        "--dataset",
        str(SAMPLE),
        "--output-root",
        str(generated.root),
    ]
    assert user_probes.main(args + ["--out", str(tmp_path / "a.csv")]) == 0
    assert user_probes.main(args + ["--out", str(tmp_path / "b.csv")]) == 0
    for expert in (1, 2):
        assert (tmp_path / f"a-expert{expert}.csv").read_bytes() == (
            tmp_path / f"b-expert{expert}.csv"
        ).read_bytes()
    one, two = (
        [row for _, row in read_sheet(tmp_path / f"a-expert{e}.csv", probe_study.EXPERT_SHEET_COLUMNS)]
        for e in (1, 2)
    )
    with (tmp_path / "a-expert1.csv").open(encoding="utf-8-sig") as f:
        header = next(csv.reader(f))
    assert (
        "condition" not in header and "dcg_label" not in header and not any("expert_2" in h for h in header)
    )
    assert [r["item_id"] for r in one] != [r["item_id"] for r in two]  # each expert's own order
    assert sorted(r["item_id"] for r in one) == sorted(r["item_id"] for r in two)
    keys = {
        row["item_id"]: row for _, row in read_sheet(tmp_path / "a.key.csv", probe_study.PROBE_KEY_COLUMNS)
    }
    assert len(keys) == 16 and [k["condition"] for k in keys.values()] != sorted(
        k["condition"] for k in keys.values()
    )
    rows = {r["item_id"]: r for r in one}
    for item, k in keys.items():  # the asked fact is the case's, whatever the condition; D knows fewer facts
        same_case = [rows[i] for i, kk in keys.items() if kk["case_number"] == k["case_number"]]
        assert len({r["asked_fact"] for r in same_case}) == 1
        if k["condition"] == "D":
            assert rows[item]["facts_known"].count("\n") < max(
                r["facts_known"].count("\n") for r in same_case
            )


def sheet_and_key(tmp_path, items):
    """items: (case, condition, dcg, expert 1 answer/od/error, expert 2 ..., adjudicated ...): the two experts'
    sheets (expert 2's in reverse order), the key, and the adjudication sheet; returns the two sheets' paths."""
    one, two, adjudication, keys = [], [], [], []
    for i, (case, condition, dcg, first, second, adj) in enumerate(items, 1):
        item = f"P-{i:04d}"
        base = {c: "" for c in probe_study.EXPERT_SHEET_COLUMNS} | {"item_id": item, "case_number": case}
        one.append(base | dict(zip(probe_study.EXPERT, first)))
        two.append(base | dict(zip(probe_study.EXPERT, second)))
        adjudication.append(
            {c: "" for c in probe_study.ADJUDICATION_COLUMNS}
            | {"item_id": item, "case_number": case}
            | {f"adjudicated_{c}": v for c, v in zip(probe_study.EXPERT, adj)}
        )
        keys.append({"item_id": item, "case_number": case, "condition": condition, "dcg_label": dcg})
    write_sheet(tmp_path / "s-expert1.csv", probe_study.EXPERT_SHEET_COLUMNS, one)
    write_sheet(tmp_path / "s-expert2.csv", probe_study.EXPERT_SHEET_COLUMNS, two[::-1])
    write_sheet(tmp_path / "s.key.csv", probe_study.PROBE_KEY_COLUMNS, keys)
    write_sheet(tmp_path / "s-adjudicated.csv", probe_study.ADJUDICATION_COLUMNS, adjudication)
    return [
        str(tmp_path / "s-expert1.csv"),
        str(tmp_path / "s-expert2.csv"),
        "--adjudicated",
        str(tmp_path / "s-adjudicated.csv"),
    ]


Y, N, E = "是", "否", ""
ITEMS = [  # two cases; case 2's B answer insufficient (adjudicated after a disagreement); one over-disclosure in C
    ("c1", "A", Y, (Y, N, N), (Y, N, N), (E, E, E)),
    ("c1", "B", Y, (Y, N, N), (Y, N, N), (E, E, E)),
    ("c1", "C", N, (E, Y, N), (E, Y, N), (E, E, E)),
    ("c1", "D", E, (Y, N, N), (Y, N, N), (E, E, E)),
    ("c2", "A", Y, (Y, N, N), (Y, N, N), (E, E, E)),
    ("c2", "B", N, (N, N, N), (Y, N, N), (N, E, E)),
    ("c2", "C", Y, (E, N, N), (E, N, N), (E, E, E)),
    ("c2", "D", E, (N, N, Y), (N, N, Y), (E, E, E)),
]


def test_table_13_hand_computed(tmp_path, capsys):
    assert user_probes.main(["score", *sheet_and_key(tmp_path, ITEMS)]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line[:2] in ("A:", "B:", "C:", "D:")
    }
    assert rows["A:"][2:] == ["2", "100.0%", "0.0%", "0.0%", "100.0%"]
    assert rows["B:"][2:] == ["2", "50.0%", "0.0%", "0.0%", "50.0%"]
    assert rows["C:"][2:] == ["2", "—", "50.0%", "0.0%", "50.0%"]
    assert rows["D:"][2:] == ["2", "50.0%", "0.0%", "50.0%", "—"]
    assert "-50.0 [" in out  # B − A on two paired cases: (1 + 0)/2 − (1 + 1)/2
    # D − A on the same two cases (E.3.3's paired A/D comparison): (1 + 0)/2 − (1 + 1)/2
    withheld = next(line for line in out.splitlines() if "withheld − direct (D − A)" in line)
    assert "-50.0 [" in withheld and "over 2 cases" in withheld
    # agreement before adjudication: answer 5/6 (C has none), over-disclosure 8/8, error 8/8
    agreement = {
        line.split("  ")[0]: line.split()[-1] for line in out.splitlines() if "Agreement before" in line
    }
    assert agreement == {
        "Agreement before adjudication: answer": "83.3%",
        "Agreement before adjudication: over_disclosure": "100.0%",
        "Agreement before adjudication: error": "100.0%",
    }
    # DCG-accepted A/B: c1 A, c1 B, c2 A, all recovered: 0 failures of 3
    assert "0/3 = 0.0%" in out


@pytest.mark.parametrize(
    "item,message",
    [
        (("c1", "A", Y, (Y, "也许", N), (Y, N, N), (E, E, E)), "every expert column must be 是 or 否"),
    ],
)
def test_every_invalid_annotation_names_its_row(tmp_path, capsys, item, message):
    assert user_probes.main(["score", *sheet_and_key(tmp_path, [ITEMS[0], item])]) == 2
    err = capsys.readouterr().err
    assert message in err and "(item P-0002)" in err


def test_a_disagreement_asks_for_adjudication_before_any_table(tmp_path, capsys):
    sheets = sheet_and_key(tmp_path, [ITEMS[0], ("c1", "A", Y, (Y, N, N), (N, N, N), (E, E, E))])[:2]
    assert user_probes.main(["score", *sheets]) == 2
    err = capsys.readouterr().err
    assert "1 item(s) where the experts disagree" in err and "s-adjudicate.csv" in err
    rows = read_sheet(tmp_path / "s-adjudicate.csv", probe_study.ADJUDICATION_COLUMNS)
    assert [(r["item_id"], r["expert_1_answer"], r["expert_2_answer"]) for _, r in rows] == [("P-0002", Y, N)]


def test_export_reads_the_model_from_lexpilot_model_as_generate_does(generated, tmp_path, monkeypatch):
    """`export` takes the evaluated model from $LEXPILOT_MODEL when --model is not given."""
    common = [
        "--run-id",
        "r1",
        "--probes",
        str(PROBES),
        "--dataset",
        str(SAMPLE),
        "--output-root",
        str(generated.root),
    ]
    assert (
        user_probes.main(["export", *common, "--model", "eval-model", "--out", str(tmp_path / "flag.csv")])
        == 0
    )
    monkeypatch.setenv("LEXPILOT_MODEL", "eval-model")
    assert user_probes.main(["export", *common, "--out", str(tmp_path / "env.csv")]) == 0
    assert (tmp_path / "flag-expert1.csv").read_bytes() == (tmp_path / "env-expert1.csv").read_bytes()


def test_the_export_reads_the_dataset_the_runs_manifest_names(generated, tmp_path, monkeypatch):
    """Like judge_agreement.py export and show_results.py, no --dataset needed (run elsewhere)."""
    args = [
        "export",
        "--run-id",
        "r1",
        "--model",
        "eval-model",
        "--probes",
        str(PROBES),
        "--output-root",
        str(generated.root),
    ]
    assert user_probes.main(args + ["--dataset", str(SAMPLE), "--out", str(tmp_path / "a.csv")]) == 0
    # the default dataset path, relative to the working folder, is not found from here
    monkeypatch.chdir(tmp_path)
    assert user_probes.main(args + ["--out", str(tmp_path / "b.csv")]) == 0
    assert (tmp_path / "a-expert1.csv").read_bytes() == (tmp_path / "b-expert1.csv").read_bytes()
