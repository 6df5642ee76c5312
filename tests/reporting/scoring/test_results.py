"""show_results.py: the paper's metrics on hand-computed cases, grouping, validation, output formats."""

import csv
import io
import json

import numpy as np
import pytest

import show_results
from lexpilot.benchmark.records import LJP_GOLD
from lexpilot.benchmark.records import model_folder as model_dirname
from lexpilot.reporting.scoring.groups import group_runs
from lexpilot.reporting.scoring.metrics import (
    confusion,
    lca_counts,
    lca_from_counts,
    ljp_from_counts,
    plain,
)
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.reporting.tables import paper as tables
from tests.helpers.metrics import quadratic_weighted_kappa
from tests.helpers.runs import break_record, run_folder
from tests.helpers.saved_runs import CASES, SETTINGS, C, U, make_run


def lca_metrics(labels: list[tuple[str, str]]) -> dict:
    """The LCA metrics of (true type, predicted type) pairs, through the harness's count functions."""
    return plain(lca_from_counts(lca_counts(labels)))


def test_always_asking_and_always_answering_score_one_third():
    paired = [(C, None), (U, None)] * 216
    for prediction in (C, U):
        m = lca_metrics([(t, prediction) for t, _ in paired])
        assert m["macro_f1"] == pytest.approx(1 / 3)
    assert lca_metrics([(t, U) for t, _ in paired])["acc_u"] == 1.0
    assert lca_metrics([(t, C) for t, _ in paired])["acc_c"] == 1.0


def test_macro_f1_hand_computed_and_with_a_class_never_right():
    # TP=3, FN=1, FP=2, TN=2 -> F1_U = 6/9, F1_C = 4/7
    labels = [(U, U)] * 3 + [(U, C)] + [(C, U)] * 2 + [(C, C)] * 2
    m = lca_metrics(labels)
    assert m["f1_u"] == pytest.approx(6 / 9) and m["f1_c"] == pytest.approx(4 / 7)
    assert m["macro_f1"] == pytest.approx((6 / 9 + 4 / 7) / 2)
    assert (m["acc_c"], m["acc_u"]) == (0.5, 0.75)
    # complete histories never judged complete: F1_C = 0, F1_U = 2*2/(4+2+0)
    m = lca_metrics([(U, U)] * 2 + [(C, U)] * 2)
    assert m["f1_c"] == 0 and m["f1_u"] == pytest.approx(4 / 6) and m["macro_f1"] == pytest.approx(1 / 3)


def test_qwk_hand_computed_matches_sklearn_and_keeps_absent_labels():
    from sklearn.metrics import cohen_kappa_score  # here: 1 s of every worker's collection otherwise

    gold = ["支持", "支持", "部分支持", "驳回", "驳回"]
    pred = ["支持", "部分支持", "部分支持", "驳回", "支持"]
    ordinal = {"支持": 0, "部分支持": 1, "驳回": 2}
    expected = cohen_kappa_score([ordinal[g] for g in gold], [ordinal[p] for p in pred], weights="quadratic")
    assert quadratic_weighted_kappa(gold, pred) == pytest.approx(expected)
    # 部分支持 absent from both: the 0..2 scale still sets the weights (支持 vs 驳回 is distance 2, not 1)
    gold, pred = ["支持", "支持", "驳回", "驳回"], ["支持", "驳回", "驳回", "驳回"]
    # O = [[1,0,1],[0,0,0],[0,0,2]], E = outer([2,0,2],[1,0,3])/4, w = d^2/4
    observed = 1 * 1.0
    expected_dis = (2 * 3 / 4) * 1.0 + (2 * 1 / 4) * 1.0
    assert quadratic_weighted_kappa(gold, pred) == pytest.approx(1 - observed / expected_dis)


# Section 5.3: the ordinal scale of the verdicts, written out here on purpose
PAPER_SCALE = ["支持", "部分支持", "驳回"]


@pytest.mark.parametrize("seed", range(20))
def test_qwk_and_accuracy_equal_sklearn_on_random_three_label_samples(seed):
    """Any other label order (or weighting) than the paper's moves QWK on samples like these."""
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 700))
    gold = list(rng.choice(PAPER_SCALE, size=n, p=[0.5, 0.3, 0.2]))
    noise = rng.random(n) < rng.uniform(0.2, 0.8)
    pred = [str(rng.choice(PAPER_SCALE)) if flip else g for g, flip in zip(gold, noise)]
    expected = cohen_kappa_score(gold, pred, weights="quadratic", labels=PAPER_SCALE)
    m = plain(ljp_from_counts(confusion(zip(gold, pred))))
    assert m["qwk"] == pytest.approx(expected, abs=1e-12)
    assert m["accuracy"] == pytest.approx(accuracy_score(gold, pred))


@pytest.mark.parametrize("seed", range(20))
def test_lca_metrics_equal_sklearn_on_random_samples(seed):
    from sklearn.metrics import f1_score, recall_score

    rng = np.random.default_rng(seed)
    true = list(rng.choice([C, U], size=int(rng.integers(4, 300))))
    pred = [t if keep else str(rng.choice([C, U])) for t, keep in zip(true, rng.random(len(true)) < 0.6)]
    m = lca_metrics(list(zip(true, pred)))
    assert m["macro_f1"] == pytest.approx(
        f1_score(true, pred, average="macro", labels=[C, U], zero_division=0)
    )
    assert m["f1_u"] == pytest.approx(f1_score(true, pred, pos_label=U, zero_division=0))
    assert m["acc_c"] == pytest.approx(recall_score(true, pred, pos_label=C, zero_division=0))
    assert m["acc_u"] == pytest.approx(recall_score(true, pred, pos_label=U, zero_division=0))


def test_qwk_undefined_when_expected_disagreement_is_zero():
    assert quadratic_weighted_kappa(["支持"] * 4, ["支持"] * 4) is None
    assert quadratic_weighted_kappa([], []) is None


def stat(groups, key, model="m"):
    (group,) = [g for g in groups if g.model == model]
    return group.stat(key)


def test_per_class_breakdown(tmp_path):
    make_run(
        tmp_path,
        "r1",
        lca={"A1": (C, U), "A2": (C, U), "B1": (U, U), "B2": (U, C)},
        dcg={"A1": True, "A2": False, "B1": False, "B2": False},
        ljp={
            "direct": {
                "A1": [("支持", "支持")],
                "A2": [("驳回", "驳回"), ("部分支持", "支持")],
                "B1": [("支持", "驳回")],
                "B2": [("驳回", "支持")],
            }
        },
    )
    groups = group_runs(load_runs(tmp_path, None, None))
    assert stat(groups, ("LCA", "macro_f1", "Family"))["mean"] == 1.0
    assert stat(groups, ("LCA", "macro_f1", "Real Rights"))["mean"] == pytest.approx(
        lca_metrics([(C, U), (U, U), (C, U), (U, C)])["macro_f1"]
    )
    assert stat(groups, ("DCG", "accuracy", "Family"))["mean"] == 0.5
    assert stat(groups, ("DCG", "accuracy", "Overall"))["mean"] == 0.25
    assert stat(groups, ("LJP_direct", "accuracy", "Family"))["mean"] == pytest.approx(2 / 3)
    assert stat(groups, ("LJP_direct", "qwk", "Real Rights"))["mean"] == pytest.approx(
        quadratic_weighted_kappa(["支持", "驳回"], ["驳回", "支持"])
    )
    assert stat(groups, ("LJP_direct", "qwk", "Torts")) is None  # a class with no cases is not shown


def test_grouping_sd_ddof1_and_a_differing_run_split_off(tmp_path, capsys):
    values = {"r1": 1.0, "r2": 0.5, "r3": 0.0}
    for run_id, v in values.items():
        dcg = {"A1": v >= 0.5, "A2": v == 1.0, "B1": False, "B2": False}
        make_run(tmp_path, run_id, dcg=dcg)
    make_run(
        tmp_path,
        "r4",
        dcg={n: True for n in CASES},
        generation={**SETTINGS["generation"], "temperature": 0.2},
    )
    groups = group_runs(load_runs(tmp_path, None, None))
    assert [g.run_ids for g in groups] == [["r1", "r2", "r3"], ["r4"]]
    assert groups[1].differs == ["generation"]
    s = groups[0].stat(("DCG", "accuracy", "Overall"))
    assert s["runs"] == [0.5, 0.25, 0.0]
    assert s["mean"] == pytest.approx(0.25) and s["sd"] == pytest.approx(np.std([0.5, 0.25, 0.0], ddof=1))
    show_results.main(["--output-root", str(tmp_path)])
    out = capsys.readouterr().out
    # the second group is labelled by what differs, not "#2"
    assert (
        "0.250 ± 0.250" in out
        and "m · temperature 0.2" in out
        and "generation" in out
        and "r1, r2, r3" in out
    )
    show_results.main(["--output-root", str(tmp_path), "--run-id", "r4"])
    blocks = capsys.readouterr().out.split("\n\n")
    runs_table = next(b for b in blocks if b.startswith("Runs"))
    main_table = next(b for b in blocks if b.startswith("Main results"))
    assert runs_table.splitlines()[-1].split() == ["m", "1", "r4", "-"]
    assert main_table.splitlines()[-1].split()[:3] == ["m", "n/a", "1.000"]


def test_undefined_qwk_mean_over_defined_runs(tmp_path, capsys):
    make_run(tmp_path, "r1", ljp={"gold": {n: [("支持", "支持")] for n in CASES}})
    make_run(
        tmp_path,
        "r2",
        ljp={
            "gold": {
                "A1": [("支持", "支持")],
                "A2": [("驳回", "驳回")],
                "B1": [("支持", "驳回")],
                "B2": [("驳回", "驳回")],
            }
        },
    )
    groups = group_runs(load_runs(tmp_path, None, None))
    s = stat(groups, ("LJP_gold", "qwk", "Overall"))
    assert s["runs"][0] is None and s["undefined"] == 1 and s["n"] == 1
    show_results.main(["--output-root", str(tmp_path)])
    assert "(1 undefined)" in capsys.readouterr().out


def test_incomplete_and_misaligned_tasks_are_reported_not_scored(tmp_path, capsys):
    make_run(
        tmp_path,
        "r1",
        dcg={"A1": True, "A2": True, "B1": True},
        lca={n: (C, U) for n in CASES},
        ljp={
            "direct": {
                "A1": [("支持", "支持")],
                "A2": [("驳回", "驳回")],
                "B1": [("支持", "驳回")],
                "B2": [("驳回", "驳回")],
            }
        },
    )
    path = tmp_path / "eval_results" / "r1" / model_dirname("m") / "LJP_direct.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[1])
    broken["predicted"] = []
    path.write_text("\n".join([lines[0], json.dumps(broken)] + lines[2:]) + "\n", encoding="utf-8")
    show_results.main(["--output-root", str(tmp_path)])
    captured = capsys.readouterr()
    assert "DCG" in captured.err and "1 of 4 cases missing: B2" in captured.err
    assert "misaligned for case A2" in captured.err
    groups = group_runs(load_runs(tmp_path, None, None))
    assert stat(groups, ("DCG", "accuracy", "Overall")) is None
    assert stat(groups, ("LCA", "macro_f1", "Overall"))["mean"] == 1.0  # the other tasks still are


def test_interaction_gain_and_relative_change(tmp_path, capsys):
    pairs = {
        "direct": [("支持", "驳回"), ("驳回", "驳回")],
        "interaction": [("支持", "部分支持"), ("驳回", "驳回")],
        "gold": [("支持", "支持"), ("驳回", "驳回")],
    }
    make_run(tmp_path, "r1", cases={"A1": "离婚纠纷"}, ljp={s: {"A1": p} for s, p in pairs.items()})
    groups = group_runs(load_runs(tmp_path, None, None))
    table = tables.interaction_gain_table(groups)
    q = {s: quadratic_weighted_kappa(*zip(*p)) for s, p in pairs.items()}
    assert table.rows[0] == [
        "m",
        f"{q['interaction'] - q['direct']:+.3f}",
        f"{100 * (q['interaction'] - q['gold']) / q['gold']:+.2f}%",  # as the paper: 23.84%
    ]
    # the average, the paper's headline ("23.84%", Section 6.4), at the same decimals, over "1 model"
    assert table.rows[-1] == [
        "Average over 1 model",
        f"{q['interaction'] - q['direct']:+.3f}",
        f"{100 * (q['interaction'] - q['gold']) / q['gold']:+.2f}%",
    ]


@pytest.mark.parametrize("fmt", ["markdown", "csv", "json", "latex", "text"])
def test_every_format_parses(tmp_path, capsys, fmt):
    make_run(tmp_path, "r1", lca={n: (C, U) for n in CASES}, dcg={n: True for n in CASES})
    make_run(tmp_path, "r2", lca={n: (U, U) for n in CASES}, dcg={n: False for n in CASES})
    assert show_results.main(["--output-root", str(tmp_path), "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        data = json.loads(out)
        (group,) = data["groups"]
        assert group["run_ids"] == ["r1", "r2"]
        dcg = group["metrics"]["dcg"]["accuracy"]["overall"]
        assert dcg["per_run"] == {"r1": 1.0, "r2": 0.0} and dcg["mean"] == 0.5
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert rows[0][:2] == ["table", "row"]
        # numbers as numbers, a column each for the mean, SD, interval bounds and n
        main = [r for r in rows if r and r[0].startswith("Main results")]
        header, row = main[0], next(r for r in main if r[1] == "m")
        at = header.index("DCG Acc. mean")
        assert header[at : at + 5] == [
            "DCG Acc. mean",
            "DCG Acc. SD",
            "DCG Acc. low",
            "DCG Acc. high",
            "DCG Acc. n",
        ]
        assert row[at] == "0.5" and float(row[at + 1]) == 2**0.5 / 2 and row[at + 2 : at + 5] == ["", "", "2"]
    elif fmt == "markdown":
        for block in out.strip().split("### ")[1:]:
            lines = [l for l in block.splitlines() if l.startswith("|")]
            assert len({l.count(" | ") for l in lines if not l.startswith("|---")}) == 1
            assert lines[1].startswith("|---")
    elif fmt == "latex":
        assert out.count(r"\begin{tabular}") == out.count(r"\end{tabular}") > 3 and r"$\pm$" in out
    else:
        assert "Main results" in out


def test_no_results_yet_is_one_line_and_exit_zero(tmp_path, capsys):
    assert show_results.main(["--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "No results" in out


def test_the_relative_change_is_not_taken_against_a_gold_qwk_at_or_below_zero(tmp_path):
    """ "Interaction vs Gold (relative)" printed -777.4% for a Gold QWK of -0.057: over a Gold QWK at or below zero
    the relative change is n/a."""
    pairs = {
        "direct": [("支持", "驳回"), ("驳回", "驳回")],
        "interaction": [("支持", "部分支持"), ("驳回", "驳回")],
        "gold": [("支持", "驳回"), ("驳回", "支持")],
    }
    make_run(tmp_path, "r1", cases={"A1": "离婚纠纷"}, ljp={s: {"A1": p} for s, p in pairs.items()})
    table = tables.interaction_gain_table(group_runs(load_runs(tmp_path, None, None)))
    assert quadratic_weighted_kappa(*zip(*pairs["gold"])) <= 0
    assert table.rows[0][2] == "n/a"


# ----------------------------------------------------------------------------- broken runs


def manifest_edit(change):
    def edit(h):
        path = run_folder(h) / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        change(manifest)
        path.write_text(json.dumps(manifest), encoding="utf-8")

    return edit


REPORT_BREAKAGES = {
    # compared settings edited by hand: the manifest's settings digest says so first
    "manifest without models": (
        manifest_edit(lambda m: m.pop("models")),
        "settings were changed after it started",
    ),
    "manifest without selected_cases": (
        manifest_edit(lambda m: m.pop("selected_cases")),
        "settings were changed after it started",
    ),
    "integer run_id": (manifest_edit(lambda m: m.update(run_id=7)), "lacks models.eval.model"),
    "run_id outside the root": (
        manifest_edit(lambda m: m.update(run_id="../../../etc")),
        "do not match its folder",
    ),
    "unknown cause of action": (break_record("cause_of_action", "外星纠纷"), "unknown cause of action"),
}


@pytest.mark.parametrize("name", REPORT_BREAKAGES)
def test_show_results_reports_a_broken_run_in_one_line(saved_run, tmp_path, monkeypatch, capsys, name):
    h = saved_run(tmp_path, monkeypatch)
    breakage, message = REPORT_BREAKAGES[name]
    if name == "unknown cause of action":  # keep the digest right: the cause itself is the problem
        from lexpilot.benchmark.records import content_digest

        path = h.file(LJP_GOLD)
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        records[0]["cause_of_action"] = "外星纠纷"
        records[0]["digest"] = content_digest(records[0])
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    else:
        breakage(h)
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--usage"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err


def test_records_made_with_other_settings_than_the_manifest_are_left_out(harness, capsys):
    """A manifest with a valid digest but other settings (swapped in) than its records."""
    import show_results
    from lexpilot.storage.compared import settings_digest

    assert harness.run("gold", "--limit", "2") == 0
    path = next((harness.root / "runs").glob("*/*/manifest.json"))
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["generation"]["temperature"] = 0.9
    manifest["settings_digest"] = settings_digest(manifest)
    path.write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    assert "was made with other settings than the run's manifest says" in capsys.readouterr().err
