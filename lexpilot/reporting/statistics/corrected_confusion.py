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

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

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
    # a resample whose metric is undefined in every run stays NaN (numpy warns of it): intervals read defined ones
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        return np.nanmean(per_run, axis=0) if np.ndim(per_run) else per_run


def draws(rng: np.random.Generator, items: int, resamples: int) -> np.ndarray:
    """Resamples × items: how many times each item is drawn in each resample of `items` draws with replacement
    (counted from drawn indices in one pass: numpy's multinomial of a whole matrix took most of a report's time)."""
    drawn = rng.integers(0, items, size=(resamples, items)) + items * np.arange(resamples)[:, None]
    return np.bincount(drawn.ravel(), minlength=resamples * items).reshape(resamples, items).astype(float)


@dataclass(frozen=True)
class Correctable:
    """What a corrected metric is made of: the judge's counts (runs × cases × cells, 0 where a run lacks a case), the
    strata with their rectifiers, and the metric of counts (… × cells → …, vectorised as scoring/metrics.py's)."""

    judged: np.ndarray
    strata: list[Stratum]
    metric: Callable[[np.ndarray], np.ndarray]

    def value(self, corrected: bool = True) -> float:
        shifts = [s.rectifiers.mean(axis=0) if corrected else np.zeros(len(s.cells)) for s in self.strata]
        return float(_value(self.judged.sum(axis=1), self.strata, self.metric, shifts))

    def resampled(
        self, case_draws: np.ndarray, rng: np.random.Generator, corrected: bool = True
    ) -> np.ndarray:
        """The value in each resample: cases as `case_draws` gives them (resamples × cases; a ranking gives every
        model the same, so that pairs are paired on cases), each stratum's labels drawn afresh from `rng`, apart
        from the cases: the expert sample's own uncertainty."""
        return self.resampled_sums(resampled_counts(case_draws, self.judged), rng, corrected)

    def resampled_sums(
        self, summed: np.ndarray, rng: np.random.Generator, corrected: bool = True
    ) -> np.ndarray:
        """As `resampled`, from each run's counts summed in each resample (runs × resamples × cells)."""
        return _value(summed, self.strata, self.metric, self.shifts(rng, summed.shape[1], corrected))

    def shifts(self, rng: np.random.Generator, resamples: int, corrected: bool = True) -> list[np.ndarray]:
        """Each stratum's rectifier mean in each resample of its labels (zero for the judge's own figure)."""
        return [
            draws(rng, len(s.rectifiers), resamples) @ s.rectifiers / len(s.rectifiers)
            if corrected
            else np.zeros((resamples, len(s.cells)))
            for s in self.strata
        ]

    def run(self, i: int) -> Correctable:
        """The same of one run alone."""
        return Correctable(self.judged[i : i + 1], self.strata, self.metric)


def resampled_counts(case_draws: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """Each run's counts summed over each resample's cases (runs × resamples × cells): one product per run, in
    single precision (exact: whole counts far below 2²⁴; it halves the report's largest cost)."""
    return np.matmul(case_draws.astype(np.float32), judged.astype(np.float32)).astype(float)


def bootstrapped(value: float, values: np.ndarray) -> Bootstrapped:
    """A value with the 95% percentile interval of its resamples (None where fewer than half define it)."""
    defined = values[np.isfinite(values)]
    if defined.size < values.size / 2:
        return Bootstrapped(value, None)
    low, high = np.percentile(defined, [2.5, 97.5])
    return Bootstrapped(value, (float(low), float(high)))


@dataclass
class Resampler:
    """One table's resamples: each number of cases drawn once and shared by every model, run and metric of the table
    (they are paired on cases, and a report of ten models asks for the same draws hundreds of times); each call's
    labels drawn afresh from its own seeded generator."""

    resamples: int = RESAMPLES
    seed: int = SEED
    _cases: dict[int, np.ndarray] = field(default_factory=dict)

    def cases(self, items: int) -> np.ndarray:
        if items not in self._cases:
            self._cases[items] = draws(np.random.default_rng([self.seed, items]), items, self.resamples)
        return self._cases[items]


def corrected_metric(
    judged: np.ndarray,
    strata: list[Stratum],
    metric: Callable[[np.ndarray], np.ndarray],
    *,
    corrected: bool = True,
    resampler: Resampler | None = None,
) -> Bootstrapped:
    """The metric corrected by the strata's rectifiers (or the judge's own, `corrected=False`), with its interval."""
    resampler = resampler or Resampler()
    made = Correctable(np.asarray(judged, float), strata, metric)
    labels = np.random.default_rng([resampler.seed, 1])
    values = made.resampled(resampler.cases(made.judged.shape[1]), labels, corrected)
    return bootstrapped(made.value(corrected), values)


def each_run_and_mean(made: Correctable, resampler: Resampler) -> dict[bool, list[Bootstrapped]]:
    """Raw and corrected: each run's metric with its interval, then (over several runs) the mean over runs with
    its. The cases are drawn once for all of them and the labels once per stratum (one product for the model, not
    one per row and figure)."""
    summed = resampled_counts(resampler.cases(made.judged.shape[1]), made.judged)
    out: dict[bool, list[Bootstrapped]] = {}
    for corrected in (False, True):
        shifts = made.shifts(np.random.default_rng([resampler.seed, 1]), resampler.resamples, corrected)
        rows = [
            bootstrapped(
                made.run(i).value(corrected), _value(summed[i : i + 1], made.strata, made.metric, shifts)
            )
            for i in range(len(made.judged))
        ]
        if len(made.judged) > 1:
            rows.append(bootstrapped(made.value(corrected), _value(summed, made.strata, made.metric, shifts)))
        out[corrected] = rows
    return out
