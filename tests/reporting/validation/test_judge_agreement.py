"""judge_agreement.py: reproducible balanced export, Cohen's kappa, Table 12 scoring, clear annotation errors."""

import csv
import random
from collections import Counter

import pytest

import judge_agreement
from lexpilot.files import key_file
from lexpilot.reporting.scoring.metrics import cohen_kappa, label_agreement
from lexpilot.reporting.validation import agreement as agreement_kit
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.messages import one_line
from tests.helpers.paths import SAMPLE
from tests.helpers.stages import Harness


def test_cohen_kappa_by_hand_and_against_sklearn():
    from sklearn.metrics import cohen_kappa_score  # here: 1 s of every worker's collection otherwise

    assert cohen_kappa(["是", "是", "否", "否"], ["是", "否", "否", "否"]) == pytest.approx(0.5)
    assert cohen_kappa(["是"] * 4, ["是"] * 4) is None  # chance agreement 1: undefined
    assert cohen_kappa(["是", "否"], ["否", "是"]) == pytest.approx(-1.0)
    rng = random.Random(3)
    for _ in range(20):
        a = [rng.choice("ABC") for _ in range(30)]
        b = [x if rng.random() < 0.6 else rng.choice("ABC") for x in a]
        assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))
    assert label_agreement(["x", "y", "y"], ["x", "y", "x"])[0] == pytest.approx(2 / 3)


def write_rows(path, columns, rows):
    with path.open("w", encoding="utf-8-sig", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def annotation_files(tmp_path, items):
    """items: (task, annotator_1, annotator_2, adjudicated, llm_label)."""
    rows, keys = [], []
    for i, (task, a1, a2, adj, llm) in enumerate(items):
        rows.append(
            {c: "" for c in agreement_kit.ANNOTATION_COLUMNS}
            | {
                "item_id": f"{task}-{i:03d}",
                "task": task,
                "annotator_1": a1,
                "annotator_2": a2,
                "adjudicated": adj,
            }
        )
        keys.append(
            {c: "" for c in agreement_kit.ANNOTATION_KEY_COLUMNS}
            | {"item_id": f"{task}-{i:03d}", "task": task, "llm_label": llm}
        )
    path = tmp_path / "ann.csv"
    write_rows(path, agreement_kit.ANNOTATION_COLUMNS, rows)
    write_rows(key_file(path), agreement_kit.ANNOTATION_KEY_COLUMNS, keys)
    return path


def test_score_prints_table_12_from_a_hand_computed_annotation_table(tmp_path, capsys):
    items = [  # LCA: humans agree 3/4 (kappa 0.5), the second item adjudicated 策略二; judge matches 3/4 finals
        ("LCA", "策略一", "策略一", "", "策略一"),
        ("LCA", "策略一", "策略二", "策略二", "策略二"),
        ("LCA", "策略二", "策略二", "", "策略二"),
        ("LCA", "策略二", "策略二", "", "策略一"),
        # DCG: humans agree 2/2 on different labels (kappa 1); judge 1/2 (kappa 0)
        ("DCG", "是", "是", "", "是"),
        ("DCG", "否", "否", "", "是"),
        # LJP: all 支持 everywhere: agreement 100%, kappa undefined
        ("LJP", "支持", "支持", "", "支持"),
        ("LJP", "支持", "支持", "", "支持"),
    ]
    path = annotation_files(tmp_path, items)
    assert judge_agreement.main(["score", str(path)]) == 0
    table_12 = capsys.readouterr().out.split("κ with its")[0]  # the interval table follows
    lines = {line.split()[0]: line.split() for line in table_12.splitlines() if line.strip()}
    # κ at 2 decimals, as the paper's Table 12 prints it ("LCA 96.0% 0.92 93.0% 0.86")
    assert lines["LCA"][1:] == ["4", "75.0%", "0.50", "75.0%", "0.50"]
    assert lines["DCG"][1:] == ["2", "100.0%", "1.00", "50.0%", "0.00"]
    assert lines["LJP"][1:] == ["2", "100.0%", "undefined", "100.0%", "undefined"]
    # Average over tasks (Table 12 style); an undefined kappa is left out of the kappa mean.
    assert lines["Average"][1:] == ["8", "91.7%", "0.75", "75.0%", "0.25"]


@pytest.mark.parametrize(
    "item,message",
    [
        (("LCA", "策略一", "", "", "策略一"), "annotator_2 '' is not one of 策略一, 策略二"),
        (("DCG", "是", "maybe", "", "是"), "annotator_2 'maybe' is not one of 是, 否"),
        (("LJP", "支持", "驳回", "", "支持"), "the annotators disagree; fill adjudicated"),
        (
            ("LJP", "支持", "支持", "驳回", "支持"),
            "adjudicated '驳回' differs from the label both annotators gave",
        ),
    ],
)
def test_invalid_annotations_name_the_row(tmp_path, capsys, item, message):
    good = ("LCA", "策略一", "策略一", "", "策略一")
    path = annotation_files(tmp_path, [good, item])
    assert judge_agreement.main(["score", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3 (item {item[0]}-001)" in err and message in err


def test_missing_columns_and_unknown_items_are_errors(tmp_path, capsys):
    path = annotation_files(tmp_path, [("LCA", "策略一", "策略一", "", "策略一")])
    write_rows(key_file(path), agreement_kit.ANNOTATION_KEY_COLUMNS, [])
    assert judge_agreement.main(["score", str(path)]) == 2
    assert "not in ann.key.csv" in capsys.readouterr().err
    path.write_text("item_id,task\nLCA-000,LCA\n", encoding="utf-8")
    assert judge_agreement.main(["score", str(path)]) == 2
    assert "columns missing: case_number" in capsys.readouterr().err


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Complete runs of two models on four sample cases, and a third model on one case only; made once for
    the module (the tests only read them)."""
    tmp_path = tmp_path_factory.mktemp("two_models")
    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        harness = Harness(
            tmp_path, provider, monkeypatch, write_dataset(tmp_path / "d.json", sample_cases()[:4])
        )
        for model, limit in (("model-a", "4"), ("model-b", "4"), ("model-c", "1")):
            for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
                assert harness.run(stage, "--model", model, "--limit", limit) == 0
    return harness


def export(harness, out, *extra):
    return judge_agreement.main(
        [
            "export",
            "--output-root",
            str(harness.root),
            "--dataset",
            str(harness.dataset),
            "--out",
            str(out),
            *extra,
        ]
    )


def read(path):
    with path.open(encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_export_is_reproducible_balanced_and_blind(two_models, tmp_path):
    assert export(two_models, tmp_path / "a.csv", "--per-task", "7", "--seed", "5") == 0
    assert export(two_models, tmp_path / "b.csv", "--per-task", "7", "--seed", "5") == 0
    assert export(two_models, tmp_path / "c.csv", "--per-task", "7", "--seed", "6") == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert key_file(tmp_path / "a.csv").read_bytes() == key_file(tmp_path / "b.csv").read_bytes()
    assert key_file(tmp_path / "a.csv").read_bytes() != key_file(tmp_path / "c.csv").read_bytes()
    rows, keys = read(tmp_path / "a.csv"), read(key_file(tmp_path / "a.csv"))
    assert [r["item_id"] for r in rows] == [k["item_id"] for k in keys]
    for task in ("LCA", "LJP"):
        models = sorted(k["model"] for k in keys if k["task"] == task)
        # model-c has 2 LCA decisions (one per history) and a few claims: the others fill its share
        assert len(models) == 7 and abs(models.count("model-a") - models.count("model-b")) <= 1
        assert models.count("model-c") >= 2 if task != "LJP" else models.count("model-c") >= 1
    # LCA balanced over each model's two histories too (Acc_C and Acc_U are corrected apart): 7 over 6 strata, 2 and
    # then 1 each, so a model's histories differ by at most one
    for model in ("model-a", "model-b", "model-c"):
        histories = [
            k["source"].rsplit(" ", 1)[1] for k in keys if k["task"] == "LCA" and k["model"] == model
        ]
        assert abs(histories.count("complete") - histories.count("underspecified")) <= 1, (model, histories)
    # DCG drawn by case, its 2 rounds together: 7 rounds are 3.5 cases, drawn as 4 (8 rounds), 2 for the first
    # model in order, then 1 each; every case drawn is whole
    cases = Counter((k["model"], k["run_id"], k["case_number"]) for k in keys if k["task"] == "DCG")
    assert sorted(cases.values()) == [2, 2, 2, 2]
    assert sorted(Counter(model for model, _, _ in cases).values()) == [1, 1, 2]
    header = (tmp_path / "a.csv").read_text(encoding="utf-8-sig").splitlines()[0]
    assert "model" not in header.split(",") and "llm_label" not in header
    for row in rows:
        assert row["reply"] and not row["annotator_1"] and not row["annotator_2"]
        if row["task"] == "DCG":
            assert row["focal_points"] and row["key_details"]
        if row["task"] == "LJP":
            assert row["claim"] and row["claim"] in row["all_claims"]


@pytest.mark.slow
def test_exported_labels_match_the_saved_judge_decisions(two_models, tmp_path):
    assert export(two_models, tmp_path / "a.csv", "--per-task", "1000") == 0
    keys = read(key_file(tmp_path / "a.csv"))
    # 4+4+1 cases: 2 LCA decisions and 2 DCG rounds per case; every claim of the three LJP setups
    claims = sum(len(c["result_dict"]) for c in sample_cases()[:4]) * 2 + len(
        sample_cases()[0]["result_dict"]
    )
    counts = {t: sum(k["task"] == t for k in keys) for t in ("LCA", "DCG", "LJP")}
    assert counts == {"LCA": 18, "DCG": 18, "LJP": 3 * claims}
    rows = {r["item_id"]: r for r in read(tmp_path / "a.csv")}
    for k in keys:  # a filled copy with the judge's labels scores 100% LLM-human agreement
        rows[k["item_id"]]["annotator_1"] = rows[k["item_id"]]["annotator_2"] = k["llm_label"]
    write_rows(tmp_path / "a.csv", agreement_kit.ANNOTATION_COLUMNS, list(rows.values()))
    assert judge_agreement.main(["score", str(tmp_path / "a.csv")]) == 0


def test_export_refuses_another_dataset(two_models, tmp_path, capsys):
    assert (
        judge_agreement.main(
            [
                "export",
                "--output-root",
                str(two_models.root),
                "--dataset",
                str(SAMPLE),
                "--out",
                str(tmp_path / "x.csv"),
            ]
        )
        == 2
    )
    assert "is not the dataset of runs" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


def test_the_guidelines_are_the_judges_own_criteria_in_chinese(two_models, tmp_path):
    out = tmp_path / "g.csv"
    assert export(two_models, out, "--per-task", "3") == 0
    text = agreement_kit.guidelines_path(out).read_text(encoding="utf-8")
    for phrase in (
        "【背景与策略定义】",
        "【特殊情况处理】（混合特征）",
        "若“明确的预测结论”占主导地位",  # LCA, mixed replies
        "引导的正确性",
        "引导的可答性",  # DCG, Table 24
        "# 分类标准",
        "诉讼费处理",
        "将“被驳回”等同义表述统一为“驳回”",  # LJP, Table 25
    ):
        assert phrase in text, phrase
    assert "{" not in text and "<待评估回复>" not in text  # criteria only: no input slots, no output format
    rows = read(out)
    assert all(row["instruction"].startswith("按标注说明") for row in rows)


def test_kappa_intervals_come_from_whole_cases(tmp_path, capsys):
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    from lexpilot.reporting.scoring.metrics import kappa_from_confusion

    rng = np.random.default_rng(0)
    for _ in range(20):  # the vectorised kappa of the bootstrap equals scikit-learn's, weights included
        a = list(rng.choice(["支持", "部分支持", "驳回"], size=30))
        b = [x if rng.random() < 0.6 else str(rng.choice(["支持", "驳回"])) for x in a]
        w = rng.integers(0, 3, size=30)
        labels = sorted(set(a) | set(b))
        conf = np.zeros((len(labels), len(labels)))
        for x, y, k in zip(a, b, w):
            conf[labels.index(x), labels.index(y)] += k
        assert kappa_from_confusion(conf) == pytest.approx(cohen_kappa_score(a, b, sample_weight=w))
    same = agreement_kit.kappa_interval(["是", "否"] * 5, ["是", "否"] * 5, [f"c{i}" for i in range(10)])
    assert same == (1.0, 1.0)
    # Two cases, each with items the raters split on: resampling items alone would give other intervals.
    a, b = ["是", "否", "是", "否"], ["是", "是", "否", "否"]
    whole = agreement_kit.kappa_interval(a, b, ["c1", "c1", "c2", "c2"], resamples=400)
    assert whole == agreement_kit.kappa_interval(a, b, ["c1", "c1", "c2", "c2"], resamples=400)  # seeded
    items = agreement_kit.kappa_interval(a, b, ["c1", "c2", "c3", "c4"], resamples=400)
    assert whole != items
    path = annotation_files(
        tmp_path, [("LCA", "策略一", "策略一", "", "策略一"), ("LCA", "策略二", "策略二", "", "策略一")]
    )
    assert judge_agreement.main(["score", str(path)]) == 0
    assert "κ with its 95% interval from a bootstrap over cases" in capsys.readouterr().out


@pytest.mark.slow
def test_export_reads_the_dataset_each_runs_manifest_names(two_models, tmp_path):
    """Without --dataset, export uses the runs' own dataset, as show_results.py does."""
    assert export(two_models, tmp_path / "given.csv") == 0
    assert (
        judge_agreement.main(
            ["export", "--output-root", str(two_models.root), "--out", str(tmp_path / "named.csv")]
        )
        == 0
    )
    assert (tmp_path / "given.csv").read_bytes() == (tmp_path / "named.csv").read_bytes()


# ----------------------------------------------------------------------------- hostile sheets


def test_judge_agreement_refuses_a_duplicated_item_row(tmp_path, capsys):
    path = annotation_files(
        tmp_path, [("LCA", "策略一", "策略一", "", "策略一"), ("LCA", "策略二", "策略二", "", "策略二")]
    )
    lines = path.read_text(encoding="utf-8-sig").splitlines(keepends=True)
    path.write_text("".join(lines + [lines[1]]), encoding="utf-8-sig")
    assert judge_agreement.main(["score", str(path)]) == 2
    assert "a second row for this item (first at row 2)" in capsys.readouterr().err


def test_judge_agreement_hostile_files_are_one_line(tmp_path, capsys):
    path = annotation_files(tmp_path, [("LCA", "策略一", "策略一", "", "策略一")])
    cases = {
        "a field over the CSV limit": lambda: path.write_text(
            path.read_text(encoding="utf-8-sig") + '"' + "x" * 200000 + '"\n', encoding="utf-8"
        ),
        "invalid UTF-8": lambda: path.write_bytes(path.read_bytes() + b"\xff\xfe\xfa\n"),
    }
    original = path.read_bytes()
    for name, breakage in cases.items():
        path.write_bytes(original)
        breakage()
        assert judge_agreement.main(["score", str(path)]) == 2, name
        one_line(capsys.readouterr().err)
    assert judge_agreement.main(["score", str(tmp_path)]) == 2
    assert "is a folder" in one_line(capsys.readouterr().err)


def test_judge_agreement_out_at_a_folder_is_one_line(saved_run, tmp_path, monkeypatch, capsys):
    h = saved_run(tmp_path, monkeypatch)
    capsys.readouterr()
    assert (
        judge_agreement.main(
            ["export", "--output-root", str(h.root), "--dataset", str(SAMPLE), "--out", str(tmp_path)]
        )
        == 2
    )
    assert "cannot be written" in one_line(capsys.readouterr().err)


@pytest.mark.slow
def test_a_huge_reply_fits_the_sheet_and_the_key_is_read_back(harness, provider, tmp_path, capsys):
    """A 300,000-character reply: the people's sheet cuts it with a marker (spreadsheets hold 32,767
    characters a cell), the key keeps it whole, and score reads both."""
    import csv

    import judge_agreement
    from lexpilot.files import read_sheet
    from lexpilot.reporting.validation import agreement

    huge = "很长的回复。" * 50_000
    provider.script = lambda kind, prompt, body: huge if kind == "lexawn" else None
    assert harness.run("LexAwN", "--limit", "2") == 0
    out = tmp_path / "sheet.csv"
    assert (
        judge_agreement.main(
            [
                "export",
                "--output-root",
                str(harness.root),
                "--dataset",
                str(harness.dataset),
                "--out",
                str(out),
                "--per-task",
                "2",
            ]
        )
        == 0
    )
    with out.open(encoding="utf-8-sig", newline="") as f:
        csv.field_size_limit(10**9)
        cells = [c for row in csv.reader(f) for c in row]
    assert max(map(len, cells)) <= 32_767 and any("the whole text is in sheet.key.csv" in c for c in cells)
    keys = read_sheet(agreement.key_file(out), agreement.ANNOTATION_KEY_COLUMNS)
    assert any(row["reply"] == huge for _, row in keys)
    rows = read_sheet(out, agreement.ANNOTATION_COLUMNS)
    with out.open("w", encoding="utf-8-sig", newline="") as f:  # the experts' labels, then score
        writer = csv.DictWriter(f, fieldnames=agreement.ANNOTATION_COLUMNS)
        writer.writeheader()
        for _, row in rows:
            label = row["labels"].split(" | ")[0]
            writer.writerow(row | {"annotator_1": label, "annotator_2": label, "adjudicated": label})
    capsys.readouterr()
    assert judge_agreement.main(["score", str(out)]) == 0
    assert "Judge agreement (Table 12)" in capsys.readouterr().out
