"""Judge-corrected accuracies (prediction-powered inference): the estimate and its interval by hand and by an
independent NumPy computation, a simulated judge with a known confusion, the intervals' coverage over a few
replicates (bench/corrected.py runs hundreds), the label rule, and show_results.py --corrected on runs the DCG stage
wrote against the scripted provider, with an expert label file written here.

The paper validates its judge against experts (Appendix E.3.1: "we randomly sampled 100 instances, with 10 from each
of the 10 evaluated models … The legal experts … conducted evaluation of these 300 instances using the exact same
criteria and guidelines as the evaluator") and reports agreement and κ only; the correction uses the same labels.
"""

import numpy as np
import pytest

from lexpilot.files import key_file
from lexpilot.reporting.statistics.corrected import (
    MIN_EACH,
    MIN_LABELS,
    Z_95,
    corrected_accuracy,
    judge_accuracy,
    label_shortfall,
)
from lexpilot.reporting.validation import agreement as agreement_kit
from tests.helpers.annotations import exported_items, read_csv, write_csv
from tests.helpers.rankings import write_dcg_runs
from tests.helpers.reports import rows_of


def by_numpy(judged, judge_right, expert_right):
    """The estimate and its 95% interval computed again from the paper's formulas, written out plainly (runs ×
    cases): theta = mean over runs of the run's mean + mean(y − f); var = s²(y − f)/n + s²(case means)/N."""
    judged = np.asarray(judged, float).reshape(-1, np.shape(judged)[-1])
    difference = np.asarray(expert_right, float) - np.asarray(judge_right, float)
    n, cases = len(difference), judged.mean(axis=0)
    theta = judged.mean(axis=1).mean() + difference.sum() / n
    variance = ((difference - difference.mean()) ** 2).sum() / (n - 1) / n + (
        (cases - cases.mean()) ** 2
    ).sum() / (len(cases) - 1) / len(cases)
    half = 1.959963984540054 * np.sqrt(variance)
    return theta, max(0.0, theta - half), min(1.0, theta + half)  # an accuracy's interval lies in [0, 1]


def test_the_estimate_and_its_interval_by_hand():
    # N = 10 decisions, the judge right on 6 (mean 0.6); the experts labelled 4 of them: the judge said right,
    # right, wrong, wrong; the experts right, wrong, wrong, wrong. Rectifier y − f = 0, −1, 0, 0: mean −0.25.
    # corrected = 0.6 − 0.25 = 0.35
    # s²(y − f) = (0.25² · 3 + 0.75²) / 3 = 0.75 / 3 = 0.25, over n = 4: 0.0625
    # s²(f) = (6 · 0.4² + 4 · 0.6²) / 9 = 2.4 / 9 = 0.26667, over N = 10: 0.026667
    # se = √(0.0625 + 0.026667) = √0.089167 = 0.29861; interval 0.35 ± 1.96 · 0.29861 = [−0.2353, 0.9353], cut
    # to [0, 0.9353] (an accuracy lies in [0, 1])
    judged = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    estimate = corrected_accuracy(judged, [1, 1, 0, 0], [1, 0, 0, 0])
    assert estimate.value == pytest.approx(0.35)
    assert estimate.se == pytest.approx(np.sqrt(0.0625 + 2.4 / 9 / 10))
    assert estimate.interval == pytest.approx((0.0, 0.35 + Z_95 * 0.298608), abs=1e-5)
    assert estimate.interval == pytest.approx(by_numpy(judged, [1, 1, 0, 0], [1, 0, 0, 0])[1:])
    # the raw figure: the judge's mean and the judge term alone, 0.6 ± 1.96 · √0.026667
    raw = judge_accuracy(judged)
    assert (raw.value, raw.se) == pytest.approx((0.6, np.sqrt(2.4 / 9 / 10)))


def test_over_runs_the_judge_term_is_taken_over_cases():
    # two runs of three cases: [1, 0, 1] and [1, 1, 0]; each run 2/3, the mean over runs 2/3. Each case's mean over
    # the runs: 1, 0.5, 0.5; their s² = ((1/3)² + 2 · (1/6)²) / 2 = 1/12, over N = 3 cases: 1/36, se 1/6
    raw = judge_accuracy([[1, 0, 1], [1, 1, 0]])
    assert (raw.value, raw.se) == pytest.approx((2 / 3, 1 / 6))
    # a case a run lacks (NaN) is left out of that run's mean and of the case's mean
    assert judge_accuracy([[1, 0, np.nan], [1, 1, 0]]).value == pytest.approx((1 / 2 + 2 / 3) / 2)


def test_an_independent_numpy_computation_gives_the_same_estimate_and_interval():
    rng = np.random.default_rng(7)
    for _ in range(20):
        runs, cases, n = rng.integers(1, 6), rng.integers(20, 400), rng.integers(30, 200)
        judged = (rng.random((runs, cases)) < rng.random()).astype(float)
        judge_right = (rng.random(n) < 0.6).astype(float)
        expert_right = np.where(rng.random(n) < 0.85, judge_right, 1 - judge_right)
        estimate = corrected_accuracy(judged, judge_right, expert_right)
        assert (estimate.value, *estimate.interval) == pytest.approx(
            by_numpy(judged, judge_right, expert_right)
        )


def judged_with_confusion(rng, truth, items, sensitivity, specificity):
    """Items right with probability `truth`, and a judge that passes a right one with probability `sensitivity` and
    fails a wrong one with probability `specificity`: (true outcomes, the judge's)."""
    right = rng.random(items) < truth
    judge = np.where(right, rng.random(items) < sensitivity, rng.random(items) >= specificity)
    return right.astype(float), judge.astype(float)


def one_replicate(rng, truth=0.7, items=1000, labels=200, sensitivity=0.85, specificity=0.90):
    """The raw and corrected estimates on one simulated set of decisions, labels drawn at random among them."""
    right, judge = judged_with_confusion(rng, truth, items, sensitivity, specificity)
    sample = rng.choice(items, labels, replace=False)
    return judge_accuracy(judge), corrected_accuracy(judge, judge[sample], right[sample])


def test_a_judge_of_known_confusion_is_corrected_to_the_truth():
    # the judge expects 0.7 · 0.85 + 0.3 · 0.10 = 0.625: 7.5 points below the truth
    raw, corrected = one_replicate(np.random.default_rng(1), items=20_000, labels=4_000)
    assert raw.value == pytest.approx(0.625, abs=0.01)
    assert abs(corrected.value - 0.7) < 0.015  # its standard error is 0.0066 here


def test_the_corrected_interval_covers_the_truth_where_the_raw_one_does_not():
    # a few replicates here; bench/corrected.py runs 1,000 (docs/statistics.md has its figures)
    rng = np.random.default_rng(2)
    covered = {"raw": 0, "corrected": 0}
    replicates = 60
    for _ in range(replicates):
        for name, estimate in zip(covered, one_replicate(rng)):
            low, high = estimate.interval
            covered[name] += low <= 0.7 <= high
    assert covered["corrected"] / replicates >= 0.9
    assert covered["raw"] / replicates < 0.5


def test_a_label_set_too_small_or_unbalanced_is_refused_saying_what_is_needed():
    assert MIN_LABELS == 30 and MIN_EACH == 5
    assert label_shortfall([1] * 25 + [0] * 5) is None
    assert label_shortfall([1] * 24 + [0] * 5) == (
        "29 expert labels (24 right, 5 wrong); needs at least 30, with at least 5 right and 5 wrong"
    )
    assert label_shortfall([1] * 26 + [0] * 4) == (
        "30 expert labels (26 right, 4 wrong); needs at least 30, with at least 5 right and 5 wrong"
    )
    assert label_shortfall([0] * 26 + [1] * 4).startswith("30 expert labels (4 right, 26 wrong)")


# ----------------------------------------------------------------------------- show_results.py --corrected

CASES = 24
# the cases whose forced questions succeed, by the judge (the scripted judge says 是 to both rounds of those)
PLAN = {
    "m-a": {"r1": range(16), "r2": [*range(14), 20, 21]},
    "m-b": {"r1": range(12)},
}
# what the experts say differs: the judge passed m-a's r1 cases 0, 1, 2 (the experts fail both rounds) and failed
# r2 case 14 (the experts pass its second round)
EXPERTS_FAIL = {("m-a", "r1", 0), ("m-a", "r1", 1), ("m-a", "r1", 2)}
EXPERTS_PASS_ROUND_2 = {("m-a", "r2", 14)}


@pytest.fixture(scope="module")
def dcg_runs(tmp_path_factory):
    """m-a's two DCG runs and m-b's one, on 24 cases, written once for the module by the DCG stage."""
    return write_dcg_runs(tmp_path_factory.mktemp("corrected"), PLAN, CASES)


def expert_file(root, dataset, tmp_path, chosen):
    """The annotation sheet judge_agreement.py exports for the runs, its rows kept for the chosen (model, run,
    case index, round) items only, filled with the experts' labels (the judge's, but where EXPERTS_* say)."""
    out = tmp_path / "labels.csv"
    rows = []
    for row, k, index in list(exported_items(root, dataset, out)):
        item = (k["model"], k["run_id"], index, int(k["source"].rsplit(" ", 1)[1]))
        if row["task"] == "DCG" and item in chosen:
            label = k["llm_label"]
            if item[:3] in EXPERTS_FAIL or (item[:3] in EXPERTS_PASS_ROUND_2 and item[3] == 2):
                label = "否" if item[:3] in EXPERTS_FAIL else "是"
            rows.append(row | {"annotator_1": label, "annotator_2": label})
    write_csv(out, agreement_kit.ANNOTATION_COLUMNS, rows)
    return out


@pytest.mark.slow
def test_show_results_prints_raw_and_corrected_dcg_accuracy_with_intervals(dcg_runs, tmp_path, capsys):
    import show_results

    root, dataset = dcg_runs
    # m-a: both rounds of cases 0-17 of each run (36 decisions), and round 1 only of r1's case 20 (left out);
    # m-b: both rounds of cases 0-9 (10 decisions: refused)
    chosen = {("m-a", run, case, r) for run in ("r1", "r2") for case in range(18) for r in (1, 2)}
    chosen |= {("m-a", "r1", 20, 1)} | {("m-b", "r1", case, r) for case in range(10) for r in (1, 2)}
    labels = expert_file(root, dataset, tmp_path, chosen)
    capsys.readouterr()
    argv = ["--output-root", str(root), "--corrected", str(labels), "--format", "csv"]
    assert show_results.main([*argv, "--table", "corrected", "corrected_notes"]) == 0
    out = capsys.readouterr().out
    rows = {(r[1], r[2]): r[3:] for r in rows_of(out, "Judge-corrected")}
    # By hand, m-a: the judge passes 16 of 24 cases in r1 (0-15) and in r2 (0-13, 20, 21): 2/3 in each, 2/3 over
    # both. On the 36 labelled decisions (cases 0-17 of each run) the judge says 30 right, 6 wrong; the experts
    # fail r1's 0, 1, 2 and pass r2's 14: rectifier −3 + 1 over 36 = −1/18, corrected 2/3 − 1/18 = 11/18 = 0.6111.
    # s²(y − f) = (4 − 36/18²) / 35 = 1/9, over 36: 0.003086. Each case's mean over the runs: 14 cases at 1 (0-13),
    # 4 at 0.5 (14, 15, 20, 21), 6 at 0: s² = (15 − 24 · 4/9) / 23 = 0.188406, over 24: 0.007850.
    # se = √(0.003086 + 0.007850) = 0.10458: 0.6111 ± 0.2050 = [0.4061, 0.8161]; raw 0.6667 ± 0.1737
    mean = rows[("m-a", "mean of 2")]
    assert float(mean[3]) == pytest.approx(11 / 18)
    assert [float(x) for x in mean[4:6]] == pytest.approx(
        [11 / 18 - Z_95 * 0.104577, 11 / 18 + Z_95 * 0.104577], abs=1e-5
    )
    assert [float(x) for x in mean[:3]] == pytest.approx(
        [2 / 3, 2 / 3 - Z_95 * 0.088600, 2 / 3 + Z_95 * 0.088600], abs=1e-5
    )
    assert mean[6] == "36: 28 right, 8 wrong"
    # the same by the independent computation, on the runs' decisions and the labels
    r1 = [1.0 if c in PLAN["m-a"]["r1"] else 0.0 for c in range(CASES)]
    r2 = [1.0 if c in PLAN["m-a"]["r2"] else 0.0 for c in range(CASES)]
    judge = [r1[c] for c in range(18)] + [r2[c] for c in range(18)]
    expert = [0.0 if c < 3 else r1[c] for c in range(18)] + [1.0 if c == 14 else r2[c] for c in range(18)]
    assert [float(x) for x in mean[3:6]] == pytest.approx(by_numpy([r1, r2], judge, expert))
    # each run: its own judge term, the model's rectifier
    assert [float(x) for x in rows[("m-a", "r1")][3:6]] == pytest.approx(by_numpy([r1], judge, expert))
    notes = rows_of(out, "Not corrected")
    assert [
        "DCG Acc.",
        "m-b",
        "refused: 10 labelled cases (every round) (10 right, 0 wrong); needs at least 30, with at least 5 right "
        "and 5 wrong",
    ] in notes
    assert rows[("m-b", "r1")][3] == "refused"
    assert ["DCG Acc.", "", "1 case(s) left out: a DCG case counts when every round is labelled"] in notes


@pytest.mark.slow
def test_a_label_whose_judge_label_is_not_the_runs_is_refused_in_one_line(dcg_runs, tmp_path, capsys):
    import show_results

    root, dataset = dcg_runs
    labels = expert_file(
        root, dataset, tmp_path, {("m-a", "r1", case, r) for case in range(18) for r in (1, 2)}
    )
    keys = read_csv(key_file(labels))
    changed = next(k for k in keys if k["item_id"] in {r["item_id"] for r in read_csv(labels)})
    changed["llm_label"] = (
        "否" if changed["llm_label"] == "是" else "是"
    )  # as if the run were judged again since
    write_csv(key_file(labels), agreement_kit.ANNOTATION_KEY_COLUMNS, keys)
    capsys.readouterr()
    assert show_results.main(["--output-root", str(root), "--corrected", str(labels)]) == 2
    refused = [line for line in capsys.readouterr().err.splitlines() if line.startswith("show_results:")]
    assert refused == [
        f"show_results: --corrected {labels}: expert label {changed['item_id']}: the key's judge label "
        f"{changed['llm_label']} is not run r1's ({'是' if changed['llm_label'] == '否' else '否'}): the run was "
        "judged again since the export, or the file was exported from another output root; export again from "
        "this one"
    ]


def test_a_label_file_that_is_not_there_is_one_line_before_any_run_is_read(tmp_path, capsys):
    import show_results

    assert show_results.main(["--output-root", str(tmp_path), "--corrected", str(tmp_path / "no.csv")]) == 2
    assert capsys.readouterr().err == f"show_results: --corrected: {tmp_path / 'no.csv'}: not found\n"


@pytest.mark.slow
def test_lca_labels_are_acc_c_and_acc_u_decisions_by_their_history(finished_run, tmp_path, capsys):
    """Every LCA item of a finished run (two cases, both histories), labelled as the judge did but for the first
    complete-history item, which the experts see the other way: each label is a decision of the metric of its
    history, right as the run's own scoring counts it."""
    import judge_agreement
    from lexpilot.reporting.scoring.results import load_runs
    from lexpilot.reporting.scoring.runs import MetricKey
    from lexpilot.reporting.validation.expert_labels import labelled_decisions, read_expert_labels

    out = tmp_path / "labels.csv"
    assert judge_agreement.main(["export", "--output-root", str(finished_run), "--out", str(out)]) == 0
    keys = {k["item_id"]: k for k in read_csv(key_file(out))}
    rows = [r for r in read_csv(out) if r["task"] == "LCA"]
    flipped = next(r["item_id"] for r in rows if keys[r["item_id"]]["source"].endswith(" complete"))
    for row in rows:
        label = keys[row["item_id"]]["llm_label"]
        other = "策略二" if label == "策略一" else "策略一"
        row["annotator_1"] = row["annotator_2"] = other if row["item_id"] == flipped else label
    claim_rows = [r for r in read_csv(out) if r["task"] == "LJP"]
    for row in claim_rows:  # the experts read each claim's verdict as the judge did
        row["annotator_1"] = row["annotator_2"] = keys[row["item_id"]]["llm_label"]
    write_csv(out, agreement_kit.ANNOTATION_COLUMNS, rows + claim_rows)
    runs = load_runs(finished_run, None, None)
    matched = labelled_decisions(read_expert_labels(out), runs, finished_run)
    decisions = matched.decisions
    assert matched.partial == 0 and len(decisions) == 4
    for name in ("acc_c", "acc_u"):
        mine = [d for d in decisions if d.metric == MetricKey("LCA", name)]
        assert len(mine) == 2  # one per case
        # the judge's right/wrong on the labelled items are the run's own: its Acc_C and Acc_U
        assert np.mean([d.judge_right for d in mine]) == runs[0].metrics[MetricKey("LCA", name)]
    differ = [d for d in decisions if d.judge_right != d.expert_right]
    assert [(d.metric.name, d.case) for d in differ] == [("acc_c", keys[flipped]["case_number"])]
    # the LJP items are claims of their setup, with the court's verdict beside the judge's: 9 claims over the three
    # setups of the two cases, as many as the run's claims
    claims = matched.claims
    assert len(claims) == 9
    assert {c.metric.family for c in claims} == {"LJP_direct", "LJP_gold", "LJP_interaction"}
    for setup in ("LJP_direct", "LJP_gold", "LJP_interaction"):
        counts = runs[0].tasks[setup].counts.sum(axis=0).reshape(3, 3)  # gold × predicted, the run's own
        from lexpilot.benchmark.vocabulary import VERDICTS

        mine = [c for c in claims if c.metric.family == setup]
        by_hand = np.zeros((3, 3))
        for c in mine:
            by_hand[VERDICTS.index(c.gold), VERDICTS.index(c.judge)] += 1
        assert (by_hand == counts).all()
    # the report: every metric refused on these few labels, each saying what it needs
    import show_results

    argv = ["--output-root", str(finished_run), "--corrected", str(out), "--format", "csv", "--table"]
    assert show_results.main([*argv, "corrected_notes"]) == 0
    notes = {(r[0], r[2].split(":")[0]) for r in rows_of(capsys.readouterr().out, "Not corrected")}
    assert notes == {
        ("LCA Macro-F1", "refused"),
        ("LCA Acc_C", "refused"),
        ("LCA Acc_U", "refused"),
        ("DCG Acc.", "refused"),
        *((f"{name} QWK", "refused") for name in ("LJP Direct", "LJP Interaction", "LJP Gold")),
    }


@pytest.mark.slow
def test_two_key_rows_naming_one_decision_are_refused_in_one_line(dcg_runs, tmp_path, capsys):
    """A key edited by hand, or two files joined, could name one decision twice: it would be counted twice."""
    import show_results

    root, dataset = dcg_runs
    labels = expert_file(
        root, dataset, tmp_path, {("m-a", "r1", case, r) for case in range(18) for r in (1, 2)}
    )
    keys = read_csv(key_file(labels))
    labelled = {r["item_id"] for r in read_csv(labels)}
    first, second = [k for k in keys if k["item_id"] in labelled][:2]
    second["case_number"], second["source"] = first["case_number"], first["source"]
    write_csv(key_file(labels), agreement_kit.ANNOTATION_KEY_COLUMNS, keys)
    capsys.readouterr()
    assert show_results.main(["--output-root", str(root), "--corrected", str(labels)]) == 2
    refused = [line for line in capsys.readouterr().err.splitlines() if line.startswith("show_results:")]
    assert len(refused) == 1 and "name the same decision" in refused[0], refused
    assert first["item_id"] in refused[0] and second["item_id"] in refused[0]
