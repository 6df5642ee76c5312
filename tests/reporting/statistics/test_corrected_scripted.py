"""The correction recovers the truth on runs the stage scripts wrote against the scripted provider playing models
of set abilities and a judge of set confusion (lexpilot/scripted/abilities.py), with 200 expert labels per task made
from the scripted truth (bench/scripted_experts.py): every corrected estimate is within four of its standard errors
of the truth the abilities set, where the judge's own misses it on the metric its confusion bends most; and the
corrected ranking keeps the stronger model above the weaker.

The issue's words: "Simulation tests, on runs the stage scripts wrote against the scripted provider with known
abilities and a known judge confusion, and 200 expert labels: corrected estimates are within one point of the truth;
the corrected 95 % intervals cover the truth ..." The one point is the mean error over replicates
(bench/corrected_confusion.py); one replicate here is held to its own standard errors.
"""

import pytest

from lexpilot.scripted.expected import expected_metrics
from tests.helpers.reports import rows_of

RUNS = ("run1", "run2")
Z_95 = 1.959963984540054


@pytest.mark.slow
def test_the_correction_recovers_the_abilities_truth(abilities_grid, tmp_path, capsys):
    grid = abilities_grid  # two models, two runs (RUNS), 60 cases
    import judge_agreement
    import show_results
    from bench import scripted_experts

    labels = tmp_path / "labels.csv"
    export = ["export", "--output-root", str(grid.root), "--per-task", "400", "--out", str(labels)]
    assert judge_agreement.main(export) == 0 and scripted_experts.main([str(labels)]) == 0
    capsys.readouterr()
    argv = [
        "--output-root",
        str(grid.root),
        "--corrected",
        str(labels),
        "--rank",
        "--format",
        "csv",
        "--table",
    ]
    assert show_results.main([*argv, "corrected", "corrected_notes", "corrected_ranking"]) == 0
    out = capsys.readouterr().out
    truth = expected_metrics(grid.abilities, grid.cases)
    names = {
        "LCA Macro-F1": ("LCA", "macro_f1"),
        "LCA Acc_C": ("LCA", "acc_c"),
        "LCA Acc_U": ("LCA", "acc_u"),
        "DCG Acc.": ("DCG", "accuracy"),
        "LJP Direct QWK": ("LJP_direct", "qwk"),
    }
    rows = [r for r in rows_of(out, "Judge-corrected") if r[2] == f"mean of {len(RUNS)}"]
    assert rows_of(out, "Not corrected") == [] and {r[0] for r in rows} == set(names)
    for metric, model, _, _raw, raw_low, raw_high, value, low, high, _ in rows:
        true = truth[model][names[metric]]
        se = (float(high) - float(low)) / (2 * Z_95)
        assert abs(float(value) - true) <= 4 * se, (metric, model, value, true, se)
        if (metric, model) == ("LCA Acc_U", "m-strong"):  # asks missed by a fifth: the judge 14 points low
            assert not float(raw_low) <= true <= float(raw_high)
            assert float(low) <= true <= float(high)
    ranking = [r for r in rows_of(out, "Ranking per judge-corrected metric") if r[0] == "LCA Acc_U"]
    assert [r[2] for r in ranking] == ["m-strong", "m-weak"]
