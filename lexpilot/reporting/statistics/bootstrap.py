"""The bootstrap over whole cases, shared by every statistic of a report, and paired differences on it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.metrics import (
    ratio,
)
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey
from lexpilot.reporting.scoring.scoring import TASKS

MAX_RESAMPLES = 100_000  # --resamples: more adds nothing a paper reports, and costs minutes of CPU per table


@dataclass
class Bootstrap:
    """Resampling of whole cases (a case's claims and both its histories stay together).

    One draw of cases per resample, shared by every run, task, setup and model on the same selected cases,
    so differences between setups or models are paired. A group's value in a resample is the mean over its
    runs of the metric on that resample.
    """

    resamples: int = 1000
    seed: int = 0
    _weights: dict = field(default_factory=dict)
    # (id(group), task, class) -> (group, its runs' metrics per resample): the group is held, so that no other
    # group can take its id while its resamples are cached (a freed object's id is given to the next one made)
    _metrics: dict = field(default_factory=dict)

    def weights(self, cases: tuple) -> np.ndarray:
        """Resamples × cases: how often each case was drawn."""
        if cases not in self._weights:
            rng = np.random.default_rng(self.seed)
            draws = rng.integers(0, len(cases), size=(self.resamples, len(cases)))
            self._weights[cases] = np.stack([np.bincount(d, minlength=len(cases)) for d in draws]).astype(
                float
            )
        return self._weights[cases]

    def distribution(self, group: Group, key: MetricKey) -> np.ndarray | None:
        task, metric, cls = key
        if (id(group), task, cls) not in self._metrics:
            per_run = []
            for run in group.runs:
                data = run.tasks.get(task)
                if data is not None:
                    counts = (
                        data.counts
                        if cls == OVERALL
                        else data.counts * (np.array(data.classes) == cls)[:, None]
                    )
                    per_run.append(TASKS[task][2](self.weights(tuple(data.cases)) @ counts))
            self._metrics[(id(group), task, cls)] = (group, per_run)
        per_run = self._metrics[(id(group), task, cls)][1]
        if not per_run:
            return None
        values = np.array([m[metric] for m in per_run])
        defined = ~np.isnan(values)
        return ratio(np.where(defined, values, 0).sum(axis=0), defined.sum(axis=0))

    def run_values(self, run, key: MetricKey) -> np.ndarray | None:
        """One run's metric on every resample (NaN where undefined), on the same drawn cases as every run's."""
        task, metric, cls = key
        data = run.tasks.get(task)
        if data is None:
            return None
        counts = data.counts if cls == OVERALL else data.counts * (np.array(data.classes) == cls)[:, None]
        return np.asarray(TASKS[task][2](self.weights(tuple(data.cases)) @ counts)[metric], dtype=float)

    def interval(self, group: Group, key: MetricKey) -> tuple[float, float] | None:
        return percentile_interval(self.distribution(group, key))


def percentile_interval(values: np.ndarray | None) -> tuple[float, float] | None:
    """The 95% percentile interval over the resamples where the value is defined."""
    if values is None or np.isnan(values).all():
        return None
    lo, hi = np.percentile(values[~np.isnan(values)], [2.5, 97.5])
    return float(lo), float(hi)


def paired_difference(boot: Bootstrap, a: tuple[Group, MetricKey], b: tuple[Group, MetricKey]) -> dict | None:
    """a − b on the same resampled cases: point difference of the group means, interval, share below zero."""
    (ga, ka), (gb, kb) = a, b
    mean_a, mean_b = (ga.stat(ka) or {}).get("mean"), (gb.stat(kb) or {}).get("mean")
    da, db = boot.distribution(ga, ka), boot.distribution(gb, kb)
    if mean_a is None or mean_b is None or da is None or db is None:
        return None
    diff = da - db
    defined = diff[~np.isnan(diff)]
    return {
        "difference": mean_a - mean_b,
        "ci": percentile_interval(diff),
        "below_zero": float((defined < 0).mean()) if defined.size else None,
    }
