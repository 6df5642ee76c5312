"""`show_results.py --corrected LABELS`: each model's headline metrics as the judge decided them and corrected by the
experts' labels, per run and as the mean over runs, each with its 95% interval: the accuracies in closed form
(statistics/corrected.py), LCA Macro-F1 and the LJP QWKs through the confusion matrix (corrected_confusion.py); and
what is not corrected, and why, one line each (a label set too small or unbalanced).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lexpilot.benchmark.vocabulary import VERDICTS
from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.metrics import confusion, lca_from_counts, ljp_from_counts
from lexpilot.reporting.scoring.runs import MetricKey, Run
from lexpilot.reporting.statistics.corrected import (
    Estimate,
    claims_shortfall,
    corrected_accuracy,
    judge_accuracy,
    label_shortfall,
)
from lexpilot.reporting.statistics.corrected_confusion import (
    SEED,
    Bootstrapped,
    Correctable,
    Resampler,
    Stratum,
    each_run_and_mean,
)
from lexpilot.reporting.tables.formats import HEADLINE, interval_cell, number_cell
from lexpilot.reporting.tables.table import METRIC, Kind, Table, declares
from lexpilot.reporting.validation.expert_labels import (
    DCG_ACCURACY,
    LCA_METRICS,
    Labelled,
    LabelledClaim,
    Matched,
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
MACRO_F1 = MetricKey("LCA", "macro_f1")
# LCA's strata: each history's (right, wrong) cells, drawn apart (statistics/corrected_confusion.py)
LCA_STRATA = {LCA_METRICS["complete"]: (3, 1), LCA_METRICS["underspecified"]: (0, 2)}
# each accuracy's (right, wrong) cells in the counts judged_counts gives
ACCURACY_CELLS = {**LCA_STRATA, DCG_ACCURACY: (0, 1)}
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


def judged_counts(runs: list[Run], family: str, cases: list[str] | None = None) -> np.ndarray:
    """Runs × cases × cells of the judge's counts of a task (0 where a run lacks a case), cases in the given order
    (default: as the runs have them). DCG's (successes, cases) become (right, wrong) cells."""
    cases = cases or list(dict.fromkeys(c for r in runs for c in r.tasks[family].cases))
    where = {c: i for i, c in enumerate(cases)}
    counts = np.zeros((len(runs), len(cases), runs[0].tasks[family].counts.shape[1]))
    for i, run in enumerate(runs):
        data = run.tasks[family]
        counts[i, [where[c] for c in data.cases]] = data.counts
    if family == DCG_ACCURACY.family:
        counts[..., 1] -= counts[..., 0]
    return counts


def one_hot_right(right) -> np.ndarray:
    """Decisions (1 right, 0 wrong) as one-hot (right, wrong) cells."""
    return np.array([[r, 1 - r] for r in right], float).reshape(-1, 2)


def _share_of_right(counts: np.ndarray, right: int, wrong: int) -> np.ndarray:
    """An accuracy from (right, wrong) cells: the right ones' share."""
    return counts[..., right] / (counts[..., right] + counts[..., wrong])


def _estimate_cells(
    raw: Estimate | Bootstrapped, corrected: Estimate | Bootstrapped | None, refused: str
) -> list:
    """Raw and corrected, each a number and its interval ("refused" where the labels do not allow it)."""
    cells = [number_cell(raw.value, METRIC), interval_cell(raw.interval)]
    if corrected is None:
        return cells + [refused, ""]
    return cells + [number_cell(corrected.value, METRIC), interval_cell(corrected.interval)]


@dataclass(frozen=True)
class Correction:
    """How one metric of one model is estimated, raw and corrected: `estimates(runs, corrected)`, each run's and
    (over several) the mean over runs; what it is made of on the runs and cases given, for a ranking's resamples
    (`made(runs, cases)`); why its labels do not allow a correction (None: they do); what the labels are."""

    estimates: Callable[[list[Run], bool], Sequence[Estimate | Bootstrapped]]
    made: Callable[[list[Run], list[str] | None], Correctable]
    shortfall: str | None
    count: str

    @staticmethod
    def of(
        made: Callable[[list[Run], list[str] | None], Correctable],
        shortfall: str | None,
        count: str,
        resampler: Resampler,
    ):
        """A metric estimated by its bootstrap over cases and labels (Macro-F1, QWK), on the table's resamples."""

        found: dict[tuple, dict[bool, list[Bootstrapped]]] = {}  # raw and corrected come from one resampling

        def estimates(runs: list[Run], corrected: bool) -> list[Bootstrapped]:
            key = tuple(r.run_id for r in runs)
            if key not in found:
                found[key] = each_run_and_mean(made(runs, None), resampler)
            return found[key][corrected]

        return Correction(estimates, made, shortfall, count)


def _accuracy(metric: MetricKey, mine: list[Labelled]) -> Correction:
    """A mean of decisions: the closed-form prediction-powered estimate (statistics/corrected.py)."""
    judge_right = np.array([d.judge_right for d in mine])
    expert_right = np.array([d.expert_right for d in mine])

    def estimate(judged: np.ndarray, corrected: bool) -> Estimate:
        return corrected_accuracy(judged, judge_right, expert_right) if corrected else judge_accuracy(judged)

    def estimates(runs: list[Run], corrected: bool) -> list[Estimate]:
        """Each run (its own judge term, the model's rectifier), then the mean over runs."""
        judged = judged_matrix(runs, metric)
        each = [estimate(judged[i], corrected) for i in range(len(runs))]
        return each + [estimate(judged, corrected)] * (len(runs) > 1)

    cells = ACCURACY_CELLS[metric]
    stratum = Stratum(cells, one_hot_right(expert_right) - one_hot_right(judge_right))

    def made(runs: list[Run], cases: list[str] | None) -> Correctable:
        share = lambda c: _share_of_right(c, *cells)  # noqa: E731
        return Correctable(judged_counts(runs, metric.family, cases), [stratum], share)

    right = int(expert_right.sum())
    count = f"{len(mine)}: {right} right, {len(mine) - right} wrong"
    # a DCG decision is a case, all its rounds labelled
    unit = "labelled cases (every round)" if metric == DCG_ACCURACY else "expert labels"
    return Correction(estimates, made, label_shortfall(expert_right, unit), count)


def _lca_strata(mine: list[Labelled]) -> tuple[list[Stratum], list[str]]:
    """LCA's two strata, each with its labels' rectifiers (one-hot of the experts' (right, wrong) cell less the
    judge's), and each history's label shortfall."""
    strata, shortfalls = [], []
    for metric, cells in LCA_STRATA.items():
        labels = [d for d in mine if d.metric == metric]
        rectifiers = one_hot_right([d.expert_right for d in labels]) - one_hot_right(
            [d.judge_right for d in labels]
        )
        strata.append(Stratum(cells, rectifiers))
        why = label_shortfall([d.expert_right for d in labels])
        shortfalls += [f"{metric.name}: {why}"] if why else []
    return strata, shortfalls


def _macro_f1(mine: list[Labelled], resampler: Resampler) -> Correction:
    """LCA Macro-F1: the plug-in of both histories' corrected cells."""
    strata, shortfalls = _lca_strata(mine)

    def made(runs: list[Run], cases: list[str] | None) -> Correctable:
        f1 = lambda c: lca_from_counts(c)["macro_f1"]  # noqa: E731
        return Correctable(judged_counts(runs, MACRO_F1.family, cases), strata, f1)

    count = ", ".join(f"{len(s.rectifiers)} {m.name}" for m, s in zip(LCA_STRATA, strata))
    return Correction.of(made, "; ".join(shortfalls) or None, count, resampler)


def _qwk(metric: MetricKey, claims: list[LabelledClaim], resampler: Resampler) -> Correction:
    """An LJP setup's QWK: the plug-in of its nine gold × predicted cells, corrected."""
    rectifiers = np.array(
        [confusion([(c.gold, c.expert)]) - confusion([(c.gold, c.judge)]) for c in claims], float
    ).reshape(-1, len(VERDICTS) ** 2)
    stratum = Stratum(tuple(range(len(VERDICTS) ** 2)), rectifiers)

    def made(runs: list[Run], cases: list[str] | None) -> Correctable:
        qwk = lambda c: ljp_from_counts(c)["qwk"]  # noqa: E731
        return Correctable(judged_counts(runs, metric.family, cases), [stratum], qwk)

    changed = sum(c.judge != c.expert for c in claims)
    count = f"{len(claims)}: {changed} changed"
    return Correction.of(made, claims_shortfall([c.expert for c in claims]), count, resampler)


def correction(
    metric: MetricKey, model: str, run_ids: set[str], matched: Matched, resampler: Resampler
) -> Correction:
    """How a model's metric is corrected, from the labels of its runs."""
    if metric.family.startswith("LJP"):
        claims = [
            c for c in matched.claims if c.metric == metric and c.model == model and c.run_id in run_ids
        ]
        return _qwk(metric, claims, resampler)
    mine = [d for d in matched.decisions if d.model == model and d.run_id in run_ids]
    if metric == MACRO_F1:
        return _macro_f1(mine, resampler)
    return _accuracy(metric, [d for d in mine if d.metric == metric])


def _group_rows(
    name: str, group: Group, metric: MetricKey, matched: Matched, resampler: Resampler
) -> tuple[list, str | None]:
    """A group's rows on one metric: each run, then the mean over runs; and why it is not corrected, if so."""
    runs = [r for r in group.runs if metric.family in r.tasks]
    how = correction(metric, group.model, set(group.run_ids), matched, resampler)
    # each run, then the mean over runs as Table 11 gives it (a single run is its own mean)
    shown = [r.run_id for r in runs] + [f"mean of {len(runs)}"] * (len(runs) > 1)
    raw = how.estimates(runs, False)
    corrected: Sequence[Estimate | Bootstrapped | None] = (
        [None] * len(raw) if how.shortfall else how.estimates(runs, True)
    )
    rows = [
        [name, group.label, label, *_estimate_cells(r, c, "refused"), how.count]
        for label, r, c in zip(shown, raw, corrected)
    ]
    return rows, how.shortfall


def matched_labels(groups: list[Group], labels_path: Path, root: Path) -> Matched:
    """The expert labels matched to the groups' runs, or one line saying why they cannot be."""
    runs = [r for g in groups for r in g.runs]
    try:
        matched = labelled_decisions(read_expert_labels(labels_path), runs, root)
    except HarnessError as e:  # said with the file it is about
        raise HarnessError(f"--corrected {labels_path}: {e}") from None
    if runs and not matched.decisions and not matched.claims:
        raise HarnessError(
            f"--corrected {labels_path}: none of its LCA, DCG or LJP labels is a decision of the runs shown; pass "
            "the annotation file exported from these runs (judge_agreement.py export)"
        )
    return matched


@declares(Kind("corrected", "nearest: Table 11", 3), Kind("corrected_notes", "the harness's", 3))
def corrected_tables(groups: list[Group], matched: Matched, seed: int = SEED) -> list[Table]:
    """Per corrected metric and model: raw and corrected with their intervals; per metric and model not corrected,
    one line saying why."""
    resampler = Resampler(seed=seed)  # one draw of the cases for the whole table, at the report's --seed
    rows, notes = [], []
    for name, (family, metric_name) in HEADLINE:
        metric = MetricKey(family, metric_name)
        having = [g for g in groups if any(family in r.tasks for r in g.runs)]
        for group in having:
            made, shortfall = _group_rows(name, group, metric, matched, resampler)
            rows += made
            if shortfall:
                notes.append([name, group.label, f"refused: {shortfall}"])
        if metric == DCG_ACCURACY and matched.partial:
            notes.append(
                [
                    name,
                    "",
                    f"{matched.partial} case(s) left out: a DCG case counts when every round is labelled",
                ]
            )
    return [
        Table("corrected", _title(), list(HEADERS), rows),
        Table("corrected_notes", "Not corrected, and why", ["Metric", "Model", "Why"], notes),
    ]


def _title() -> str:
    return (
        "Judge-corrected metrics (prediction-powered inference with the experts' labels): raw and corrected, with "
        "95% intervals over cases (the accuracies' normal, Macro-F1's and QWK's percentile bootstrap over cases and "
        "labels); the corrected one holds the expert sample's uncertainty"
    )
