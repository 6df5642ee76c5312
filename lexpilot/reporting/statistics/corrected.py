"""Accuracies corrected for the judge's errors by prediction-powered inference (Angelopoulos et al., Science 2023):
the judge's decision on every item, and the experts' on a random sample of the same items, give an unbiased
estimate of the accuracy the experts would have given, with an interval that holds the expert sample's uncertainty.

For a mean of right/wrong decisions (DCG accuracy, LCA Acc_C and Acc_U), with f the judge's decision on each of the
N items and (f, y) the judge's and the experts' on n of them:

    corrected = mean_N(f) + mean_n(y − f)          (the judge's mean, plus the rectifier: its mean error)
    variance  = var_n(y − f) / n + var_N(f) / N    (the rectifier's over the n labelled, the judge's over the N)

Each model and metric is its own stratum (stratified PPI): its rectifier comes from the labels of its own items only
(Acc_C from complete histories, Acc_U from underspecified ones), since a judge whose confusion differs by label errs
by different amounts on models of different accuracy. Over several runs the items are the runs' decisions: the
judge's mean is the mean over runs of each run's accuracy, its variance taken over cases (each case's mean over
runs: cases are the unit drawn, as the bootstrap draws them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Z_95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
# a label set smaller than this, or with fewer expert-right or expert-wrong labels, is refused (docs/statistics.md)
MIN_LABELS = 30
MIN_EACH = 5


@dataclass(frozen=True)
class Estimate:
    """An accuracy with its standard error and 95% normal interval."""

    value: float
    se: float

    @property
    def interval(self) -> tuple[float, float]:
        """The normal interval, cut to [0, 1], where an accuracy lies (near 0 or 1 with few labels, the normal
        interval reaches past them: what lies beyond says nothing)."""
        low, high = self.value - Z_95 * self.se, self.value + Z_95 * self.se
        return max(0.0, low), min(1.0, high)


def _by_case(judged) -> tuple[float, np.ndarray]:
    """The mean over runs of each run's accuracy, and each case's mean over the runs that have it (runs × cases,
    NaN where a run lacks the case; one run may be given as a vector)."""
    judged = np.atleast_2d(np.asarray(judged, float))
    per_run = np.nanmean(judged, axis=1)
    per_case = np.nanmean(judged[:, ~np.all(np.isnan(judged), axis=0)], axis=0)
    return float(per_run.mean()), per_case


def judge_accuracy(judged) -> Estimate:
    """The accuracy as the judge decided it, with the judge term alone: the raw figure beside the corrected one,
    differing from it only by the correction."""
    mean, per_case = _by_case(judged)
    return Estimate(mean, _sample_variance(per_case) ** 0.5 / len(per_case) ** 0.5)


def corrected_accuracy(judged, judge_right, expert_right) -> Estimate:
    """The prediction-powered estimate of an accuracy: `judged` the judge's decisions (1 right, 0 wrong) on every
    item (runs × cases, or one run's vector), `judge_right` and `expert_right` the judge's and the experts' on the
    labelled items, in the same order."""
    mean, per_case = _by_case(judged)
    rectifier = np.asarray(expert_right, float) - np.asarray(judge_right, float)
    variance = _sample_variance(rectifier) / len(rectifier) + _sample_variance(per_case) / len(per_case)
    return Estimate(mean + float(rectifier.mean()), variance**0.5)


def _sample_variance(values: np.ndarray) -> float:
    """The sample variance (ddof 1); 0 for a single value (nothing to estimate it from: the label rule keeps it
    from mattering)."""
    return float(np.var(values, ddof=1)) if len(values) > 1 else 0.0


def label_shortfall(expert_right, unit: str = "expert labels") -> str | None:
    """Why a label set is too small or unbalanced to correct with, or None. Both outcomes must be there in number:
    the judge's errors differ by label (it misses right answers and passes wrong ones at different rates), and a
    sample with few of one outcome barely sees that error's rate, nor the rectifier's variance."""
    right = int(np.sum(expert_right))
    wrong = len(expert_right) - right
    if len(expert_right) >= MIN_LABELS and min(right, wrong) >= MIN_EACH:
        return None
    return (
        f"{len(expert_right)} {unit} ({right} right, {wrong} wrong); needs at least {MIN_LABELS}, "
        f"with at least {MIN_EACH} right and {MIN_EACH} wrong"
    )


def claims_shortfall(expert_verdicts) -> str | None:
    """Why an LJP setup's labelled claims are too few to correct its QWK with, or None: at least MIN_LABELS claims,
    and at least MIN_EACH of each of two verdicts as the experts read them (a QWK is undefined on one verdict, and a
    sample with few of the second barely sees the judge's errors between them)."""
    counts = sorted((list(expert_verdicts).count(v) for v in set(expert_verdicts)), reverse=True)
    if len(expert_verdicts) >= MIN_LABELS and len(counts) >= 2 and counts[1] >= MIN_EACH:
        return None
    return (
        f"{len(expert_verdicts)} labelled claims; needs at least {MIN_LABELS}, with at least {MIN_EACH} of each "
        "of two verdicts"
    )
