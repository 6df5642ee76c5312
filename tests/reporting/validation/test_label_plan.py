"""The label planner (`judge_agreement.py export --plan`): the labels that bring the corrected interval's
half-width below the smallest difference the runs detect, by hand and on DCG runs the stage wrote, with the
detectable difference read from show_results.py --power.

The issue's words: "`judge_agreement.py export` gains a planner: how many expert labels per task bring the corrected
interval's half-width below the table's minimum detectable difference."
"""

import math

import numpy as np
import pytest

from lexpilot.reporting.statistics.corrected import Z_95
from lexpilot.reporting.validation.label_plan import labels_needed, rule_met_at
from tests.helpers.rankings import write_dcg_runs
from tests.helpers.reports import rows_of


def test_labels_needed_by_hand():
    # half-width 0.1, the judge's SE 0.02, a tenth of the decisions read otherwise: (0.1 / 1.96)² − 0.02² =
    # 0.0026031 − 0.0004 = 0.0022031; 0.1 / 0.0022031 = 45.4: 46 labels
    assert labels_needed(0.1, 0.02, 0.1) == 46
    assert labels_needed(0.3, 0.02, 0.1) == 30  # 4.4 by the formula: the label rule's 30
    assert labels_needed(0.03, 0.02, 0.1) is None  # 0.03 / 1.96 = 0.0153 < 0.02: no number of labels does it
    # a judge at 0.9: the formula's 46 labels would hold fewer than 5 wrong ones about half the time, and the rule
    # would refuse them; the plan asks for as many as hold 5 wrong with a 95% chance
    assert labels_needed(0.1, 0.02, 0.1, accuracy=0.9) == rule_met_at(0.9) == fewest_meeting_the_rule(0.1)


def fewest_meeting_the_rule(rare: float) -> int:
    """The smallest n with P(Binomial(n, rare) ≤ 4) ≤ 5%, the pmf built by its recursion p(k+1) = p(k) · (n − k) /
    (k + 1) · rare / (1 − rare)."""
    n = 5
    while True:
        pmf, below = (1 - rare) ** n, 0.0
        for k in range(5):
            below += pmf
            pmf *= (n - k) / (k + 1) * rare / (1 - rare)
        if below <= 0.05:
            return n
        n += 1


CASES = 40
PLAN = {"m-a": {"r1": range(20), "r2": range(22)}, "m-b": {"r1": range(10), "r2": range(14)}}


@pytest.fixture(scope="module")
def dcg_runs(tmp_path_factory):
    return write_dcg_runs(tmp_path_factory.mktemp("label_plan"), PLAN, CASES)


@pytest.mark.slow
def test_the_plan_reads_the_power_tables_detectable_difference_and_the_judges_error(dcg_runs, capsys):
    import judge_agreement
    import show_results

    root, dataset = dcg_runs
    capsys.readouterr()
    assert (
        show_results.main(["--output-root", str(root), "--power", "--format", "csv", "--table", "power"]) == 0
    )
    power = {r[0]: r for r in rows_of(capsys.readouterr().out, "Smallest difference")}
    detectable = float(power["DCG Acc."][3])  # its "In hand", after the design (cases, runs)
    argv = ["export", "--output-root", str(root), "--dataset", str(dataset), "--plan", "--out", "unused.csv"]
    assert judge_agreement.main(argv) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("DCG Acc.")]
    assert len(lines) == 2
    for line, model in zip(lines, ("m-a", "m-b")):
        # the judge's SE by hand: each case's mean over the two runs, their SD over √40
        per_case = np.mean(
            [[1.0 if c in PLAN[model][r] else 0.0 for c in range(CASES)] for r in ("r1", "r2")], 0
        )
        se = np.std(per_case, ddof=1) / np.sqrt(CASES)
        room = (detectable / Z_95) ** 2 - se**2
        accuracy = np.mean([len(PLAN[model][r]) / CASES for r in ("r1", "r2")])
        rare = min(accuracy, 1 - accuracy)
        expected = max(30, math.ceil(0.1 / room), fewest_meeting_the_rule(rare)) if room > 0 else None
        cells = line.split()
        assert cells[2] == model and float(cells[3]) == pytest.approx(detectable, abs=5e-4)
        assert float(cells[4]) == pytest.approx(se, abs=5e-4)
        assert cells[5] == str(expected)
    assert not (root.parent / "unused.csv").exists()


def test_labelled_lines_are_parsed_alone_only_as_the_harness_writes_them(tmp_path):
    """The labels' matching reads only the labelled cases' lines of a record file, each held to its digest; a line
    written otherwise (keys in another order, a digest that does not hold) sends the file the long way."""
    from lexpilot.benchmark.records import content_digest, record_line
    from lexpilot.reporting.validation.expert_labels import _labelled_lines

    records = [{"case_number": f"（2099）民初{i}号", "label": "是"} for i in range(3)]
    for record in records:
        record["digest"] = content_digest(record)
    path = tmp_path / "DCG_results.jsonl"
    path.write_bytes(b"".join(record_line(r) for r in records))
    found = _labelled_lines(path, {"（2099）民初1号"})
    assert list(found) == ["（2099）民初1号"] and found["（2099）民初1号"]["label"] == "是"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], lines[1].replace("是".encode(), "否".encode()), lines[2]]) + b"\n")
    assert _labelled_lines(path, {"（2099）民初1号"}) is None  # edited: its digest no longer holds
    path.write_text('{"label": "是", "case_number": "x"}\n', encoding="utf-8")
    assert _labelled_lines(path, {"x"}) is None  # not a line as the harness writes it
