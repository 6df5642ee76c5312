"""The power table on the judge-corrected metrics (`show_results.py --power --corrected LABELS`): per comparable set
and headline metric, the smallest difference the design detects as the raw power table gives it ("In hand") and
with the expert sample's variance added, which no number of cases or runs removes: it shrinks with more labels only
(docs/statistics.md). A pair whose labels the rule refuses is left out of the corrected median.
"""

from __future__ import annotations

import itertools

import numpy as np

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.statistics.corrected_confusion import Resampler
from lexpilot.reporting.statistics.corrected_table import correction
from lexpilot.reporting.statistics.rankings import (
    comparable_sets,
    detectable_difference,
    headline_keys,
    ranked_groups,
    variance_components,
)
from lexpilot.reporting.tables.formats import number_cell
from lexpilot.reporting.tables.table import METRIC, Kind, Table, declares
from lexpilot.reporting.validation.expert_labels import Matched


def label_variance(group: Group, key: MetricKey, matched: Matched, resampler: Resampler) -> float | None:
    """The variance the expert sample adds to a model's corrected metric: its resamples with every case once and
    the labels drawn afresh (None where its labels are refused)."""
    how = correction(key, group.model, set(group.run_ids), matched, resampler)
    runs = [r for r in group.runs if key.family in r.tasks]
    if how.shortfall or not runs:
        return None
    made = how.made(runs, None)
    # every case once in every resample: the counts are the runs' own, only the labels are drawn
    summed = np.broadcast_to(
        made.judged.sum(axis=1)[:, None, :], (len(runs), resampler.resamples, made.judged.shape[2])
    )
    values = made.resampled_sums(summed, np.random.default_rng([resampler.seed, 2]))
    values = values[np.isfinite(values)]
    return float(np.var(values, ddof=1)) if values.size > 1 else None


def corrected_detectable(
    members: list[Group], key: MetricKey, boot: Bootstrap, matched: Matched, alpha: float, power: float
) -> tuple[float | None, float | None]:
    """(raw, corrected) "In hand": the median over the set's pairs of each pair's smallest detectable difference,
    the corrected one with both models' label variance added to the pair's variance (it does not shrink with more
    cases or runs, only with more labels)."""
    resampler = Resampler(seed=boot.seed)  # the report's --seed
    labels = {g.label: label_variance(g, key, matched, resampler) for g in members}
    cases = len(members[0].runs[0].selected)
    runs = int(np.median([len(g.runs) for g in members]))
    raw, corrected = [], []
    for a, b in itertools.combinations(members, 2):
        components = variance_components(a, b, boot, key)
        if components is None or components == (0, 0):
            continue
        case_var, run_var = components
        raw.append(detectable_difference(case_var, run_var, cases, runs, cases, alpha, power))
        label_a, label_b = labels[a.label], labels[b.label]
        if label_a is not None and label_b is not None:
            added = case_var + label_a + label_b
            corrected.append(detectable_difference(added, run_var, cases, runs, cases, alpha, power))
    median = lambda xs: float(np.median(xs)) if xs else None  # noqa: E731
    return median(raw), median(corrected)


@declares(Kind("corrected_power", "nearest: Table 11", 3))
def corrected_power_table(
    groups: list[Group], boot: Bootstrap, matched: Matched, alpha: float = 0.05, power: float = 0.8
) -> Table:
    """Per comparable set and headline metric: the raw and the corrected "In hand" detectable difference."""
    sets = [members for members in comparable_sets(ranked_groups(groups)) if len(members) > 1]
    rows = []
    for number, members in enumerate(sets, 1):
        for name, key in headline_keys():
            raw, corrected = corrected_detectable(members, key, boot, matched, alpha, power)
            shown = f"{name} (set {number})" if len(sets) > 1 else name
            rows.append([shown, number_cell(raw, METRIC), number_cell(corrected, METRIC)])
    return Table(
        "corrected_power",
        f"Smallest difference detectable at α = {alpha:g} with power {power:g} in the design in hand (median over "
        "a set's pairs), raw and on the judge-corrected metrics: the expert labels' variance added, which more "
        "cases or runs do not remove ('n/a': no pair with labels enough)",
        ["Metric", "In hand (raw)", "In hand (corrected)"],
        rows,
    )
