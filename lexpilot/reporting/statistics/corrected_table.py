"""`show_results.py --corrected LABELS`: each model's accuracies as the judge decided them and corrected by the experts'
labels (statistics/corrected.py), per run and as the mean over runs, each with its 95% interval; and what is not
corrected, and why, one line each (a label set too small or unbalanced, a metric not in this version).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey, Run
from lexpilot.reporting.statistics.corrected import (
    Estimate,
    corrected_accuracy,
    judge_accuracy,
    label_shortfall,
)
from lexpilot.reporting.tables.formats import HEADLINE, interval_cell, number_cell
from lexpilot.reporting.tables.table import METRIC, Kind, Table, declares
from lexpilot.reporting.validation.expert_labels import (
    DCG_ACCURACY,
    Labelled,
    labelled_decisions,
    read_expert_labels,
)

# the metrics that are means of decisions, with the per-case count columns of a right and a wrong decision
# (scoring/metrics.py: LCA's (TP, FP, FN, TN) with underspecified positive; DCG's (successes, cases))
RIGHT_WRONG = {
    MetricKey("LCA", "acc_c"): (3, 1),
    MetricKey("LCA", "acc_u"): (0, 2),
    DCG_ACCURACY: (0, None),  # None: wrong is the case count less the successes
}
NOT_IN_THIS_VERSION = (
    "corrected: not in this version (only the accuracies, means of decisions, are corrected so far; "
    "docs/statistics.md)"
)
HEADERS = [
    "Metric",
    "Model",
    "Run",
    "Raw",
    "Raw 95% interval",
    "Corrected",
    "Corrected 95% interval",
    "Labels",
]


def judged_outcomes(run: Run, metric: MetricKey) -> dict[str, float]:
    """The judge's decision on each case of a run (1 right, 0 wrong), from the counts the metric is made of."""
    data = run.tasks[metric.family]
    right, wrong = RIGHT_WRONG[metric]
    counts = data.counts
    total = counts[:, 1] if wrong is None else counts[:, right] + counts[:, wrong]
    return dict(zip(data.cases, counts[:, right] / total))


def judged_matrix(runs: list[Run], metric: MetricKey) -> np.ndarray:
    """Runs × cases of the judge's decisions (NaN where a run lacks a case), cases in the first run's order."""
    outcomes = [judged_outcomes(r, metric) for r in runs]
    cases = list(dict.fromkeys(c for o in outcomes for c in o))
    return np.array([[o.get(c, np.nan) for c in cases] for o in outcomes])


def _estimate_cells(raw: Estimate, corrected: Estimate | None, refused: str) -> list:
    """Raw and corrected, each a number and its interval ("refused" where the labels do not allow it)."""
    cells = [number_cell(raw.value, METRIC), interval_cell(raw.interval)]
    if corrected is None:
        return cells + [refused, ""]
    return cells + [number_cell(corrected.value, METRIC), interval_cell(corrected.interval)]


def _group_rows(
    name: str, group: Group, metric: MetricKey, labels: list[Labelled]
) -> tuple[list, str | None]:
    """A group's rows on one metric: each run, then the mean over runs; and why it is not corrected, if so."""
    runs = [r for r in group.runs if metric.family in r.tasks]
    mine = [d for d in labels if d.metric == metric and d.model == group.model and d.run_id in group.run_ids]
    judge_right = np.array([d.judge_right for d in mine])
    expert_right = np.array([d.expert_right for d in mine])
    shortfall = label_shortfall(expert_right)
    count = f"{len(mine)}: {int(expert_right.sum())} right, {len(mine) - int(expert_right.sum())} wrong"
    rows = []
    matrix = judged_matrix(runs, metric)
    # each run, then the mean over runs as Table 11 gives it (a single run is its own mean)
    shown = [(r.run_id, matrix[i]) for i, r in enumerate(runs)] + [(f"mean of {len(runs)}", matrix)] * (
        len(runs) > 1
    )
    for label, judged in shown:
        corrected = None if shortfall else corrected_accuracy(judged, judge_right, expert_right)
        rows.append(
            [name, group.label, label, *_estimate_cells(judge_accuracy(judged), corrected, "refused"), count]
        )
    return rows, shortfall


@declares(Kind("corrected", "nearest: Table 11", 3), Kind("corrected_notes", "the harness's", 3))
def corrected_tables(groups: list[Group], labels_path: Path, root: Path) -> list[Table]:
    """Per corrected metric and model: raw and corrected with their intervals; per metric and model not corrected,
    one line saying why."""
    runs = [r for g in groups for r in g.runs]
    try:
        labels, partial = labelled_decisions(read_expert_labels(labels_path), runs, root)
    except HarnessError as e:  # said with the file it is about
        raise HarnessError(f"--corrected {labels_path}: {e}") from None
    if runs and not labels:
        raise HarnessError(
            f"--corrected {labels_path}: none of its LCA or DCG labels is a decision of the runs shown; pass "
            "the annotation file exported from these runs (judge_agreement.py export)"
        )
    rows, notes = [], []
    for name, (family, metric_name) in HEADLINE:
        metric = MetricKey(family, metric_name)
        having = [g for g in groups if any(family in r.tasks for r in g.runs)]
        if metric not in RIGHT_WRONG:
            notes += [[name, "every model", NOT_IN_THIS_VERSION]] if having else []
            continue
        for group in having:
            made, shortfall = _group_rows(name, group, metric, labels)
            rows += made
            if shortfall:
                notes.append([name, group.label, f"refused: {shortfall}"])
        if metric == DCG_ACCURACY and partial:
            notes.append(
                [name, "", f"{partial} case(s) left out: a DCG case counts when every round is labelled"]
            )
    return [
        Table("corrected", _title(), list(HEADERS), rows),
        Table("corrected_notes", "Not corrected, and why", ["Metric", "Model", "Why"], notes),
    ]


def _title() -> str:
    return (
        "Judge-corrected accuracies (prediction-powered inference with the experts' labels): raw and corrected, "
        "95% normal intervals over cases; the corrected one holds the expert sample's uncertainty"
    )
