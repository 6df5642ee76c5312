"""Judge-corrected LCA Macro-F1 and LJP QWK (prediction-powered inference through the confusion matrix): the estimate
by hand, an independent NumPy computation of the estimate and its interval, a simulated judge of known confusion
corrected to the truth, the intervals' coverage over a few replicates (bench/corrected_confusion.py runs hundreds),
and show_results.py --corrected on LJP and LCA runs the stages wrote against the scripted provider.

The issue's words: "Use prediction-powered estimates where the metric is a mean of decisions (accuracies), and a
documented, validated estimator for Macro-F1 and QWK (for example PPI through the confusion matrix, or a bootstrap
over the expert sample and the cases together)"; "The intervals include the expert sample's uncertainty."
"""

import numpy as np
import pytest

from bench import corrected_confusion as sim
from lexpilot.reporting.scoring.metrics import lca_from_counts, ljp_from_counts
from lexpilot.reporting.statistics.corrected_confusion import Resampler, Stratum, corrected_metric
from tests.helpers.annotations import dataset_cases

W = np.subtract.outer(np.arange(3), np.arange(3)) ** 2 / 4  # the QWK weights, (i − j)² / (K − 1)²


def qwk_by_numpy(shares: np.ndarray) -> float:
    """Cohen's quadratic-weighted kappa of a 3 × 3 gold × predicted table, as the textbook writes it."""
    p = shares / shares.sum()
    expected = np.outer(p.sum(axis=1), p.sum(axis=0))
    return 1 - (W * p).sum() / (W * expected).sum()


def macro_f1_by_numpy(tp, fp, fn, tn) -> float:
    return (2 * tp / (2 * tp + fp + fn) + 2 * tn / (2 * tn + fp + fn)) / 2


def qwk(counts):
    return ljp_from_counts(counts)["qwk"]


def macro_f1(counts):
    return lca_from_counts(counts)["macro_f1"]


def cell(gold: int, predicted: int) -> np.ndarray:
    one = np.zeros(9)
    one[gold * 3 + predicted] = 1
    return one


def test_qwk_by_hand():
    # one run of two cases, two claims each: case 1 (支持 → 支持), (驳回 → 驳回); case 2 (支持 → 部分支持),
    # (部分支持 → 部分支持), as the judge read them. Shares 1/4 at (0,0), (0,1), (1,1), (2,2).
    # Raw by hand: observed disagreement Σ w·p = w01 · 1/4 = 1/16; gold margins (1/2, 1/4, 1/4), predicted
    # (1/4, 1/2, 1/4); expected Σ w_ij g_i q_j = 1/16 + 1/8 + 1/64 + 1/64 + 1/16 + 1/32 = 5/16; QWK = 1 − 1/5 = 0.8.
    # The experts labelled four claims: the judge's (支持 → 部分支持) is (支持 → 支持) to them, the other three as
    # the judge read them. Rectifier mean: +1/4 at (0,0), −1/4 at (0,1): corrected shares 1/2, 0, 1/4, 1/4 all on
    # the diagonal: QWK 1.
    judged = np.array([[cell(0, 0) + cell(2, 2), cell(0, 1) + cell(1, 1)]])
    rectifiers = np.array([cell(0, 0) - cell(0, 1), np.zeros(9), np.zeros(9), np.zeros(9)])
    stratum = Stratum(tuple(range(9)), rectifiers)
    assert corrected_metric(judged, [stratum], qwk, corrected=False).value == pytest.approx(0.8)
    assert corrected_metric(judged, [stratum], qwk).value == pytest.approx(1.0)


def test_macro_f1_by_hand():
    # one run of four cases, each with a complete and an underspecified history. The judge: complete right on 3
    # (TN 3, FP 1), underspecified right on 2 (TP 2, FN 2). Raw: F1_U = 4/7, F1_C = 6/9: Macro-F1 = 13/21.
    # Experts: of 4 complete-history labels, one the judge passed is wrong (right −1/4, wrong +1/4): TN 2, FP 2; of
    # 4 underspecified ones, two the judge failed are right (+1/2): TP 4, FN 0. F1_U = 8/10, F1_C = 4/6: 11/15.
    judged = np.zeros((1, 4, 4))
    judged[0, :3, 3], judged[0, 3, 1] = 1, 1  # TN, FP
    judged[0, :2, 0], judged[0, 2:, 2] = 1, 1  # TP, FN
    complete = Stratum((3, 1), np.array([[-1.0, 1.0], [0, 0], [0, 0], [0, 0]]))  # (right, wrong) shifts
    underspecified = Stratum((0, 2), np.array([[1.0, -1.0], [1.0, -1.0], [0, 0], [0, 0]]))
    strata = [underspecified, complete]
    assert corrected_metric(judged, strata, macro_f1, corrected=False).value == pytest.approx(13 / 21)
    assert corrected_metric(judged, strata, macro_f1).value == pytest.approx(11 / 15)


def independent_qwk(judged, rectifiers, rng, resamples):
    """The estimate (the mean over runs of each run's QWK on its shares plus the rectifiers' mean) and a percentile
    bootstrap over cases and labels drawn afresh, written out with loops."""

    def estimate(cases, labels):
        shift = rectifiers[labels].mean(axis=0)
        values = []
        for run in judged:
            counts = run[cases].sum(axis=0)
            values.append(qwk_by_numpy((counts / counts.sum() + shift).reshape(3, 3)))
        return np.mean(values)

    n_cases, n_labels = judged.shape[1], len(rectifiers)
    value = estimate(np.arange(n_cases), np.arange(n_labels))
    draws = [
        estimate(rng.integers(0, n_cases, n_cases), rng.integers(0, n_labels, n_labels))
        for _ in range(resamples)
    ]
    return value, np.percentile(draws, [2.5, 97.5])


def test_an_independent_numpy_computation_gives_the_same_estimate_and_interval():
    rng = np.random.default_rng(11)
    for _ in range(4):
        d = sim.Design(
            cases=int(rng.integers(60, 200)), runs=int(rng.integers(1, 4)), labels=80, resamples=1000
        )
        run, case, gold, predicted, judge = sim.ljp_claims(rng, d)
        judged = np.zeros((d.runs, d.cases, 9))
        np.add.at(judged, (run, case, gold * 3 + judge), 1)
        drawn = rng.choice(gold.size, d.labels, replace=False)
        rectifiers = np.array(
            [cell(g, p) - cell(g, j) for g, p, j in zip(gold[drawn], predicted[drawn], judge[drawn])]
        )
        got = corrected_metric(
            judged, [Stratum(tuple(range(9)), rectifiers)], qwk, resampler=Resampler(d.resamples)
        )
        value, (low, high) = independent_qwk(judged, rectifiers, rng, d.resamples)
        assert got.value == pytest.approx(value, abs=1e-12)
        # two bootstraps of 1,000 draws each: the endpoints agree within their Monte-Carlo error (a tail
        # percentile of 1,000 draws moves by about a tenth of the interval's width)
        width = high - low
        assert got.interval == pytest.approx((low, high), abs=0.15 * width)


def test_a_judge_of_known_confusion_is_corrected_to_the_truth():
    # at 432 cases × 5 runs and 4,000 labels, the corrected estimates sit within a point of the truth; the
    # judge's own are far off (it errs toward 部分支持 and fails 10% of the wrong LCA replies)
    rng = np.random.default_rng(3)
    d = sim.Design(labels=4000, resamples=200)
    for replicate, truth in ((sim.lca_replicate, sim.lca_truth(d)), (sim.ljp_replicate, sim.ljp_truth(d))):
        raw, corrected = replicate(rng, d)
        assert abs(corrected.value - truth) < 0.01
        assert abs(raw.value - truth) > 0.04


def test_the_truth_is_the_metric_of_the_expected_confusion():
    d = sim.Design()
    # LCA: TP 0.6, FP 0.2, FN 0.4, TN 0.8 per case
    assert sim.lca_truth(d) == pytest.approx(macro_f1_by_numpy(0.6, 0.2, 0.4, 0.8))
    # LJP: gold shares (0.5, 0.3, 0.2), right with 0.6, else one of the two others at random
    expected = np.array([0.5, 0.3, 0.2])[:, None] * np.where(np.eye(3) == 1, 0.6, 0.2)
    assert sim.ljp_truth(d) == pytest.approx(qwk_by_numpy(expected))


@pytest.mark.slow
def test_the_corrected_interval_covers_the_truth_where_the_raw_one_does_not():
    # a few replicates here; bench/corrected_confusion.py runs 500 (docs/statistics.md has its figures)
    rng = np.random.default_rng(5)
    d = sim.Design(resamples=400)
    for replicate, truth in ((sim.lca_replicate, sim.lca_truth(d)), (sim.ljp_replicate, sim.ljp_truth(d))):
        runs = [replicate(rng, d) for _ in range(25)]
        raw = np.mean([sim.covered(r, truth) for r, _ in runs])
        corrected = np.mean([sim.covered(c, truth) for _, c in runs])
        assert corrected >= 0.8 and raw < 0.5, (replicate.__name__, corrected, raw)


def test_the_corrected_interval_holds_the_expert_samples_uncertainty():
    # many cases (the judge's term narrow) and 40 labels that change a quarter of the verdicts: the rectifier's
    # spread dominates. By the normal approximation the label term alone has a QWK standard error of several points,
    # the case term well under one: the corrected interval is several times the raw one's width.
    rng = np.random.default_rng(8)
    d = sim.Design(cases=3000, runs=1, labels=40, reading=0.75, resamples=1000)
    run, case, gold, predicted, judge = sim.ljp_claims(rng, d)
    judged = np.zeros((1, d.cases, 9))
    np.add.at(judged, (run, case, gold * 3 + judge), 1)
    drawn = rng.choice(gold.size, d.labels, replace=False)
    rectifiers = np.array(
        [cell(g, p) - cell(g, j) for g, p, j in zip(gold[drawn], predicted[drawn], judge[drawn])]
    )
    stratum = Stratum(tuple(range(9)), rectifiers)
    raw = corrected_metric(judged, [stratum], qwk, corrected=False)
    corrected = corrected_metric(judged, [stratum], qwk)
    assert np.diff(corrected.interval)[0] > 3 * np.diff(raw.interval)[0]


# ----------------------------------------------------------------------------- show_results.py --corrected

CASES = 40


@pytest.fixture(scope="module")
def lca_ljp_run(tmp_path_factory):
    """One run of LexAwN_gen.py (LCA) and the Direct LJP setup on 40 cases, written by the stages against the
    scripted provider: (the output root, the dataset)."""
    from bench.throughput import synthetic_dataset
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.stages import Harness

    folder = tmp_path_factory.mktemp("corrected_confusion")
    dataset = folder / "cases.json"
    synthetic_dataset(CASES, dataset)
    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(folder, provider, monkeypatch, dataset=dataset)
        assert h.run("LexAwN") == 0 and h.run("direct") == 0
    return h.root, dataset


def expert_labels(root, dataset, out):
    """Every LCA and LJP item of the run, labelled by experts who read them otherwise than the judge in places:
    an LCA reply is right to them on every third case but the first of each history (whatever the judge said) and
    as the judge said elsewhere; a claim's verdict is the court's on even cases, the judge's on odd ones."""
    from lexpilot.reporting.validation import agreement as agreement_kit
    from tests.helpers.annotations import exported_items, write_csv

    rows = []
    for row, k, index in list(exported_items(root, dataset, out)):
        history = k["source"].rsplit(" ", 1)[1]
        if row["task"] == "LCA":
            label = expert_lca(k["llm_label"], history, index)
        elif row["task"] == "LJP":  # the court's verdict of the claim, from the dataset
            court = dataset_cases(dataset)[index]["result_dict"][row["claim"]]
            label = court if index % 2 == 0 else k["llm_label"]
        else:
            continue
        rows.append(row | {"annotator_1": label, "annotator_2": label})
    write_csv(out, agreement_kit.ANNOTATION_COLUMNS, rows)
    return out


def expert_lca(judge: str, history: str, index: int) -> str:
    """The experts' strategy label: the fitting one (策略二, asking, after an underspecified history) on every third
    case from the third on, the judge's elsewhere."""
    fitting = "策略二" if history == "underspecified" else "策略一"
    return fitting if index % 3 == 2 else judge


@pytest.mark.slow
def test_show_results_corrects_macro_f1_and_qwk_on_runs_the_stages_wrote(lca_ljp_run, tmp_path, capsys):
    """Every decision labelled: the corrected shares are then the experts' own, and the corrected metrics are the
    metrics of the experts' confusion, computed here from the dataset and the sheet alone."""
    import show_results
    from lexpilot.files import key_file
    from tests.helpers.annotations import read_csv
    from tests.helpers.reports import rows_of

    root, dataset = lca_ljp_run
    labels = expert_labels(root, dataset, tmp_path / "labels.csv")
    keys = {k["item_id"]: k for k in read_csv(key_file(labels))}
    cases = dataset_cases(dataset)
    numbers = [c["case_number"] for c in cases]
    # by hand from the sheet: the judge's and the experts' LJP tables (gold × predicted) and LCA counts
    judge_table, expert_table = np.zeros((3, 3)), np.zeros((3, 3))
    fits = {"judge": {"complete": [], "underspecified": []}, "expert": {"complete": [], "underspecified": []}}
    order = ["支持", "部分支持", "驳回"]
    for row in read_csv(labels):
        k = keys[row["item_id"]]
        case = cases[numbers.index(k["case_number"])]
        if row["task"] == "LJP":
            gold = order.index(case["result_dict"][row["claim"]])
            judge_table[gold, order.index(k["llm_label"])] += 1
            expert_table[gold, order.index(row["annotator_1"])] += 1
        else:
            history = k["source"].rsplit(" ", 1)[1]
            asks = "策略二"
            for who, label in (("judge", k["llm_label"]), ("expert", row["annotator_1"])):
                fits[who][history].append((label == asks) == (history == "underspecified"))

    def f1(who):
        acc_u, acc_c = np.mean(fits[who]["underspecified"]), np.mean(fits[who]["complete"])
        return macro_f1_by_numpy(acc_u, 1 - acc_c, 1 - acc_u, acc_c)

    capsys.readouterr()
    argv = ["--output-root", str(root), "--corrected", str(labels), "--format", "csv"]
    assert show_results.main([*argv, "--table", "corrected", "corrected_notes"]) == 0
    out = capsys.readouterr().out
    # each metric's raw value, low, high, corrected value, low, high and labels
    rows = {r[0]: r[3:] for r in rows_of(out, "Judge-corrected")}
    assert float(rows["LJP Direct QWK"][0]) == pytest.approx(qwk_by_numpy(judge_table))
    assert float(rows["LJP Direct QWK"][3]) == pytest.approx(qwk_by_numpy(expert_table))
    assert float(rows["LCA Macro-F1"][0]) == pytest.approx(f1("judge"))
    assert float(rows["LCA Macro-F1"][3]) == pytest.approx(f1("expert"))
    assert qwk_by_numpy(expert_table) != pytest.approx(qwk_by_numpy(judge_table))
    assert f1("expert") != pytest.approx(f1("judge"))
    for name in ("LJP Direct QWK", "LCA Macro-F1"):  # an interval about each, the corrected one wider
        raw_low, raw_high, value, low, high = (float(x) for x in rows[name][1:6])
        assert low <= value <= high and high - low > raw_high - raw_low
    assert rows_of(out, "Not corrected") == []
