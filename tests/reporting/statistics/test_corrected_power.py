"""The power table on the judge-corrected metrics (`--power --corrected LABELS`): the raw "In hand" is the power
table's, and the corrected one adds the expert labels' variance of both models of each pair, checked by hand on DCG
runs the stage wrote.

The issue's words: "Rankings, Holm letters and the power table are computed on the corrected metrics too."
"""

from statistics import NormalDist

import pytest

from tests.helpers.rankings import experts_labelled, write_dcg_runs
from tests.helpers.reports import rows_of

CASES = 40
PLAN = {"m-a": {"r1": range(20), "r2": range(22)}, "m-b": {"r1": range(10), "r2": range(14)}}
EXPERTS_FAIL = {("m-a", case) for case in range(6)}  # passed by the judge in both runs


@pytest.fixture(scope="module")
def dcg_runs(tmp_path_factory):
    return write_dcg_runs(tmp_path_factory.mktemp("corrected_power"), PLAN, CASES)


@pytest.mark.slow
def test_the_corrected_power_adds_the_labels_variance(dcg_runs, tmp_path, capsys):
    import show_results

    root, dataset = dcg_runs
    labels = experts_labelled(root, dataset, tmp_path / "labels.csv", EXPERTS_FAIL)
    capsys.readouterr()
    argv = ["--output-root", str(root), "--power", "--corrected", str(labels), "--format", "csv", "--table"]
    assert show_results.main([*argv, "power", "corrected_power"]) == 0
    out = capsys.readouterr().out
    power = {r[0]: r for r in rows_of(out, "Smallest difference between")}
    in_hand = float(power["DCG Acc."][3])
    assert power["LCA Macro-F1"][3] == "n/a: not run by two models"  # only DCG was run: no runs to add
    raw, corrected = {r[0]: r for r in rows_of(out, "Smallest difference detectable")}["DCG Acc."][1:3]
    assert float(raw) == pytest.approx(in_hand, abs=5e-4)
    # m-a's 80 labelled decisions: the experts fail 12 the judge passed (cases 0-5 of both runs), a rectifier of −1
    # on 15% of them: its mean's variance 0.15 · 0.85 / 80; m-b's experts agree: none. The corrected difference
    # squared is the raw one's plus (z_0.975 + z_0.8)² times that variance (the bootstrap's, within its error)
    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    added = (float(corrected) ** 2 - float(raw) ** 2) / z**2
    assert added == pytest.approx(0.15 * 0.85 / 80, rel=0.1)  # a variance from 2,000 resamples: ±3%
