"""Macro-F1 and QWK corrected for the judge's errors: prediction-powered inference through the confusion matrix, with a
bootstrap over the cases and the expert sample together (docs/statistics.md, "Macro-F1 and QWK").

Both metrics are functions of a confusion matrix, not means of decisions, so the accuracies' closed form
(statistics/corrected.py) does not apply to them. Each cell's share of its stratum is a mean of decisions, though,
and the prediction-powered estimate of a mean is unbiased: for a stratum with the judge's one-hot cells f on every
item and the experts' y on n of them,

    corrected share = mean_N(f) + mean_n(y − f)

and the metric is the plug-in of the corrected shares. A stratum is what a label was drawn from at random: LCA's
complete histories (cells FP, TN) and underspecified ones (TP, FN) apart, as the export draws them; an LJP setup's
claims together (all nine gold × predicted cells, the gold verdict being the court's and fixed). The interval is the
percentile interval of the same computation over joint resamples: cases drawn whole for the judge's term (as every
other interval of the report draws them) and, independently, each stratum's labels for the rectifier, so it holds the
expert sample's uncertainty. Over several runs the value is the mean over runs of each run's corrected metric, one
rectifier per model (the labels are drawn from all its runs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000  # the percentile interval's 2.5% tails then rest on 50 resamples each
SEED = 20231  # fixed: the same labels and runs give the same interval


@dataclass(frozen=True)
class Stratum:
    """Cells of the confusion drawn from together (their shares add to 1), and the labelled items' rectifiers:
    labels × cells of the experts' one-hot cell less the judge's."""

    cells: tuple[int, ...]
    rectifiers: np.ndarray


@dataclass(frozen=True)
class Bootstrapped:
    """A metric with its 95% percentile interval (None where too few resamples define it)."""

    value: float
    interval: tuple[float, float] | None


def corrected_shares(counts: np.ndarray, strata: list[Stratum], shifts: list[np.ndarray]) -> np.ndarray:
    """Per row of `counts` (… × cells, summed over cases), each stratum's cells as shares of the stratum, moved by
    its rectifier's mean (`shifts`, one row of cells' shifts per stratum, broadcast), scaled back to the stratum's
    count: counts a metric function reads as it reads the judge's."""
    out = np.zeros_like(counts, dtype=float)
    for stratum, shift in zip(strata, shifts):
        cells = list(stratum.cells)
        total = counts[..., cells].sum(axis=-1, keepdims=True)
        shares = np.divide(
            counts[..., cells], total, out=np.full(counts[..., cells].shape, np.nan), where=total > 0
        )
        out[..., cells] = (shares + shift) * total
    return out


def _value(
    judged: np.ndarray, strata: list[Stratum], metric: Callable, shifts: list[np.ndarray]
) -> np.ndarray:
    """The mean over runs of each run's metric on its corrected counts (`judged`: runs × … × cells summed over
    cases)."""
    per_run = metric(corrected_shares(judged, strata, shifts))
    with np.errstate(invalid="ignore"):
        return np.nanmean(per_run, axis=0) if np.ndim(per_run) else per_run


def _draws(rng: np.random.Generator, items: int, resamples: int) -> np.ndarray:
    """Resamples × items: how many times each item is drawn in each resample of `items` draws with replacement."""
    return rng.multinomial(items, np.full(items, 1 / items), size=resamples)


def corrected_metric(
    judged: np.ndarray,
    strata: list[Stratum],
    metric: Callable[[np.ndarray], np.ndarray],
    *,
    corrected: bool = True,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Bootstrapped:
    """The metric corrected by the strata's rectifiers (or the judge's own, `corrected=False`), with its interval.
    `judged`: runs × cases × cells of the judge's counts, 0 where a run lacks a case; `metric`: counts (… × cells) to
    the metric (… ), vectorised as scoring/metrics.py's are."""
    judged = np.asarray(judged, float)
    shifts = [s.rectifiers.mean(axis=0) if corrected else np.zeros(len(s.cells)) for s in strata]
    value = float(_value(judged.sum(axis=1), strata, metric, shifts))
    rng = np.random.default_rng(seed)
    summed = np.einsum("bc,rcx->rbx", _draws(rng, judged.shape[1], resamples), judged)  # one product per run
    # each stratum's labels drawn afresh, apart from the cases: the expert sample's own uncertainty
    drawn = [
        _draws(rng, len(s.rectifiers), resamples) @ s.rectifiers / len(s.rectifiers)
        if corrected
        else np.zeros((resamples, len(s.cells)))
        for s in strata
    ]
    values = _value(summed, strata, metric, drawn)
    values = values[np.isfinite(values)]
    if values.size < resamples / 2:
        return Bootstrapped(value, None)
    low, high = np.percentile(values, [2.5, 97.5])
    return Bootstrapped(value, (float(low), float(high)))
