"""Rankings on the judge-corrected metrics (`show_results.py --rank --corrected LABELS`) on DCG runs the stage wrote
against the scripted judge: the corrected values are the corrected table's, a pair's difference and p are the
corrected values' and their standard error's (checked against the normal formula computed here), and the pair whose
decision the correction changes is listed, with the letters that change.

The issue's words: "Rankings, Holm letters and the power table are computed on the corrected metrics too. The report
lists every pair whose decision or letter changes between raw and corrected."
"""

from statistics import NormalDist

import numpy as np
import pytest

from tests.helpers.rankings import experts_labelled, write_dcg_runs
from tests.helpers.reports import rows_of

CASES = 60
# the cases each model's forced questions succeed on, by the judge
PLAN = {"m-a": {"r1": range(45)}, "m-b": {"r1": range(30)}, "m-c": {"r1": range(10)}}
# the experts fail m-a's cases 30-44, which the judge passed: to them m-a is as good as m-b
EXPERTS_FAIL = {("m-a", case) for case in range(30, 45)}


@pytest.fixture(scope="module")
def dcg_runs(tmp_path_factory):
    return write_dcg_runs(tmp_path_factory.mktemp("corrected_rankings"), PLAN, CASES)


def all_labelled(root, dataset, out):
    """Every DCG round labelled: as the judge said, but 否 for both rounds of the EXPERTS_FAIL cases."""
    return experts_labelled(root, dataset, out, EXPERTS_FAIL)


@pytest.mark.slow
def test_the_corrected_ranking_lists_the_pair_the_correction_changes(dcg_runs, tmp_path, capsys):
    import show_results

    root, dataset = dcg_runs
    labels = all_labelled(root, dataset, tmp_path / "labels.csv")
    capsys.readouterr()
    argv = ["--output-root", str(root), "--corrected", str(labels), "--rank", "--format", "csv", "--table"]
    tables = ["pairs", "ranking", "corrected", "corrected_pairs", "corrected_ranking", "corrected_changes"]
    assert show_results.main([*argv, *tables]) == 0
    out = capsys.readouterr().out
    # raw, by the judge: 0.75, 0.50, 0.167, every pair different (15, 20 and 35 cases differ, all one way)
    raw = {(r[1], r[2]): r[-1] for r in rows_of(out, "Every comparable pair:") if r[0] == "DCG Acc."}
    assert raw == {("m-a", "m-b"): "yes", ("m-b", "m-c"): "yes", ("m-a", "m-c"): "yes"}
    # corrected, every decision labelled: the experts' own accuracies 0.5, 0.5, 1/6
    ranking = {r[2]: r for r in rows_of(out, "Ranking per judge-corrected metric") if r[0] == "DCG Acc."}
    assert {m: float(r[3]) for m, r in ranking.items()} == pytest.approx(
        {"m-a": 0.5, "m-b": 0.5, "m-c": 1 / 6}
    )
    corrected = {r[1]: float(r[6]) for r in rows_of(out, "Judge-corrected metrics") if r[0] == "DCG Acc."}
    assert {m: float(r[3]) for m, r in ranking.items()} == pytest.approx(corrected)  # the table's own values
    intervals = {r[1]: r[7:9] for r in rows_of(out, "Judge-corrected metrics") if r[0] == "DCG Acc."}
    assert {
        m: r[4:6] for m, r in ranking.items()
    } == intervals  # and its intervals: one figure in both tables
    pairs = {
        (r[1], r[2]): r[3:]
        for r in rows_of(out, "Every comparable pair on the judge-corrected")
        if r[0] == "DCG Acc."
    }
    tie = pairs.get(("m-a", "m-b")) or pairs[("m-b", "m-a")]
    assert float(tie[0]) == pytest.approx(0) and tie[-1] == "no"
    # m-b against m-c: 1/3 apart; its standard error by the normal formula, from the experts' outcomes (n = 60,
    # each model's rectifier is 0 for m-b and m-c, whose experts agree with the judge: only the cases' term)
    b = np.array([1.0 if c < 30 else 0.0 for c in range(CASES)])
    c = np.array([1.0 if c < 10 else 0.0 for c in range(CASES)])
    se = np.std(b - c, ddof=1) / np.sqrt(CASES)
    difference, low, high, p = (float(x) for x in pairs[("m-b", "m-c")][:4])
    assert difference == pytest.approx(1 / 3)
    # the standard error the p was made from is the formula's, within the bootstrap's error (about 2% at 2,000
    # resamples, and 1/60 for the bootstrap's variance over n rather than n − 1)
    assert difference / NormalDist().inv_cdf(1 - p / 2) == pytest.approx(se, rel=0.06)
    assert low < difference < high
    changes = rows_of(out, "What the correction changed")
    assert ["DCG Acc.", "m-a and m-b", "different", "not different"] in changes
    letters = {r[1]: r[2:] for r in changes if r[0] == "DCG Acc." and r[1].endswith("letters")}
    assert letters == {"m-b's letters": ["b", "a"], "m-c's letters": ["c", "b"]}
    assert [r[-2:] for r in ranking.values()] == [["a", "a"], ["a", "b"], ["b", "c"]]
