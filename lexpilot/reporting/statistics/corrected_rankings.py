"""Rankings on the judge-corrected metrics (`show_results.py --rank --corrected LABELS`): every pair of one comparable
set on each headline metric, its corrected difference with a 95% interval and p-value, Holm-adjusted across the
set's pairs as the raw ranking is; the models ranked with their letters; and every pair whose decision, and every
model whose letters, changed between the raw ranking and the corrected one.

The resamples are paired on cases as the raw ranking's are (every model of a set is resampled on the same draws of
cases) and draw each model's expert labels apart (models are labelled on their own items). The p-value is the normal
one of the difference over its bootstrap standard error: a percentile p from 2,000 resamples cannot go below 1/1,000,
while Holm holds the first of 45 pairs to 0.05/45. docs/statistics.md says more.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.statistics.corrected_confusion import RESAMPLES, SEED, Resampler
from lexpilot.reporting.statistics.corrected_table import Correction, correction
from lexpilot.reporting.statistics.letters import Decisions, decisions, holm, pair_row
from lexpilot.reporting.tables.formats import interval_cell, number_cell
from lexpilot.reporting.tables.table import METRIC, Kind, Table, declares
from lexpilot.reporting.validation.expert_labels import Matched


@dataclass
class Corrected:
    """One model's corrected metric over its runs, its interval as the corrected table gives it (the same figure
    in both tables), and its value in each of the ranking's paired resamples."""

    group: Group
    value: float
    interval: tuple[float, float] | None
    resampled: np.ndarray


def corrected_values(
    members: list[Group], key: MetricKey, matched: Matched, resamples: int, seed: int
) -> tuple[list[Corrected], list[str]]:
    """The set's models with a corrected value (paired on one draw of the cases), and one line per model left out
    for its labels."""
    resampler = Resampler(resamples, seed)
    rng = np.random.default_rng([seed, 1])  # the labels'
    having = [g for g in members if any(key.family in r.tasks for r in g.runs)]
    if len(having) < 2:
        return [], []  # nothing to rank
    cases = list(dict.fromkeys(c for g in having for r in g.runs for c in r.tasks[key.family].cases))
    case_draws = resampler.cases(len(cases))
    out, left_out = [], []
    for group in having:
        how: Correction = correction(key, group.model, set(group.run_ids), matched, resampler)
        if how.shortfall:
            left_out.append(f"{group.label}: refused: {how.shortfall}")
            continue
        runs = [r for r in group.runs if key.family in r.tasks]
        made = how.made(runs, cases)
        interval = how.estimates(runs, True)[-1].interval  # the mean over runs, as the corrected table has it
        out.append(Corrected(group, made.value(), interval, made.resampled(case_draws, rng)))
    return out, left_out


@dataclass
class CorrectedPair:
    a: Group
    b: Group
    difference: float
    interval: tuple[float, float] | None
    p: float | None
    p_holm: float | None = None


def corrected_pairs(values: list[Corrected]) -> list[CorrectedPair]:
    """Every pair (the higher corrected value first) with its difference, interval and normal p, Holm-adjusted."""
    ranked = sorted(values, key=lambda v: -v.value)
    pairs = []
    for a, b in itertools.combinations(ranked, 2):
        diff = a.resampled - b.resampled
        diff = diff[np.isfinite(diff)]
        se = float(np.std(diff, ddof=1)) if diff.size > 1 else 0.0
        interval = (float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5))) if diff.size else None
        difference = a.value - b.value
        p = None if se == 0 else 2 * (1 - NormalDist().cdf(abs(difference) / se))
        pairs.append(CorrectedPair(a.group, b.group, difference, interval, p))
    defined = [t for t in pairs if t.p is not None]
    for t, adjusted in zip(defined, holm([t.p for t in defined if t.p is not None])):
        t.p_holm = adjusted
    return pairs


def changes(
    name: str, pairs: list[CorrectedPair], letters: dict[str, str], raw: Decisions, alpha: float
) -> list[list[str]]:
    """The pairs whose decision, and the models whose letters, differ between the raw and the corrected ranking; a
    raw decision the randomization test left unsettled (settling.py) says so beside its present side."""
    rows = []
    said = lambda different: "different" if different else "not different"  # noqa: E731
    for t in pairs:
        pair = frozenset((t.a.label, t.b.label))
        now = t.p_holm is not None and t.p_holm < alpha
        if now != (pair in raw.different):
            before = said(pair in raw.different) + (" (unsettled)" if pair in raw.unsettled else "")
            rows.append([name, f"{t.a.label} and {t.b.label}", before, said(now)])
    for label, mine in letters.items():
        if raw.letters.get(label, "n/a") != mine:
            rows.append([name, f"{label}'s letters", raw.shown(label), mine])
    return rows


def _pair_row(name: str, t: CorrectedPair, alpha: float) -> list:
    said = "yes" if t.p_holm is not None and t.p_holm < alpha else "no"
    return pair_row(name, t.a.label, t.b.label, t.difference, t.interval, t.p, t.p_holm, said)


@dataclass
class Ranked:
    """The corrected ranking's rows, pairs, changes and notes, gathered over metrics and sets."""

    pairs: list[list]
    ranking: list[list]
    changed: list[list]
    notes: list[list]


def rank_one(name: str, values: list[Corrected], raw: Decisions, alpha: float, into: Ranked) -> None:
    """One metric of one set: its pairs, ranking with letters, and what changed from the raw ranking."""
    pairs = corrected_pairs(values)
    ranked = [v.group.label for v in sorted(values, key=lambda v: -v.value)]
    letters = decisions(ranked, [(t.a.label, t.b.label, t.p_holm) for t in pairs], alpha).letters
    into.pairs += [_pair_row(name, t, alpha) for t in pairs]
    for v in sorted(values, key=lambda v: -v.value):
        into.ranking.append(
            [
                name,
                str(ranked.index(v.group.label) + 1),
                v.group.label,
                number_cell(v.value, METRIC),
                interval_cell(v.interval),
                letters.get(v.group.label, "n/a"),
                raw.shown(v.group.label),
            ]
        )
    into.changed += changes(name, pairs, letters, raw, alpha)


@declares(
    Kind("corrected_pairs", "nearest: Table 11", 3),
    Kind("corrected_ranking", "nearest: Table 11", 3),
    Kind("corrected_changes", "the harness's", 3),
)
def corrected_ranking_tables(
    sets: list[list[Group]],
    raw: dict[tuple[str, int], Decisions],
    matched: Matched,
    alpha: float,
    keys: list[tuple[str, MetricKey]],
    seed: int = SEED,
) -> list[Table]:
    """The corrected pairs, ranking and changes of every headline metric and comparable set (`raw`: the raw
    ranking's decisions by (metric name, set number); `seed`: the report's --seed)."""
    into = Ranked([], [], [], [])
    for name, key in keys:
        for number, members in enumerate(sets, 1):
            shown = f"{name} (set {number})" if len(sets) > 1 else name
            values, left_out = corrected_values(members, key, matched, RESAMPLES, seed)
            into.notes += [[shown, line] for line in left_out]
            if len(values) > 1:
                rank_one(shown, values, raw.get((name, number), Decisions(set(), {})), alpha, into)
    return _tables(into, alpha)


def _tables(into: Ranked, alpha: float) -> list[Table]:
    return [
        Table(
            "corrected_pairs",
            f"Every comparable pair on the judge-corrected metrics: difference (A − B, A ranked higher), 95% "
            f"percentile interval over {RESAMPLES} resamples of cases (paired) and of each model's expert labels, "
            f"two-sided normal p, Holm-adjusted across the pairs of each metric; different at α = {alpha:g}",
            ["Metric", "Model A", "Model B", "Difference", "95% interval", "p", "p (Holm)", "Different"],
            into.pairs,
        ),
        Table(
            "corrected_ranking",
            "Ranking per judge-corrected metric: models sharing a letter are not different after Holm's "
            "adjustment; the raw ranking's letters beside them",
            ["Metric", "Rank", "Model", "Corrected", "95% interval", "Group", "Raw group"],
            into.ranking,
        ),
        Table(
            "corrected_changes",
            "What the correction changed: every pair whose decision, and every model whose letters, differ "
            "between the raw ranking and the corrected one; and the models a metric's ranking leaves out for "
            "their labels",
            ["Metric", "Pair or model", "Raw", "Corrected"],
            into.changed + [[name, line, "", ""] for name, line in into.notes],
        ),
    ]
