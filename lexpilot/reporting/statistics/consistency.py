"""What a single-run paper hides: per model, how consistent its outcomes are over runs (claims right in every run
and in at least one, items with the same outcome in every run, the flip rate between two runs, and tau-bench's
pass^k), and how much of a metric's run-to-run variance is the judge's, from runs re-judged with the same judge
(test-retest).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from lexpilot.benchmark.records import LJP_SETUPS
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey, Run
from lexpilot.reporting.scoring.scoring import TASKS, item_outcomes
from lexpilot.reporting.statistics.bootstrap import Bootstrap, percentile_interval
from lexpilot.reporting.tables.formats import number_cell
from lexpilot.reporting.tables.table import PERCENT, VARIANCE, Figure, Kind, Table, declares


def consistency(runs: list[Run]) -> dict[str, dict]:
    """Per task, over the items every run has: how many, the share right in every run and in at least one, the
    share with the same outcome in every run, and the flip rate (the mean over pairs of runs of the share of
    items whose outcome differs)."""
    per_run = [r.outcomes if r.outcomes is not None else item_outcomes(r.saved or {}) for r in runs]
    out = {}
    for task in per_run[0]:
        shared = set.intersection(*(set(o[task]) for o in per_run))
        if not shared:
            continue
        values = [[o[task][item] for o in per_run] for item in sorted(shared, key=str)]
        flips = [
            np.mean([v[i][0] != v[j][0] for v in values])
            for i, j in itertools.combinations(range(len(runs)), 2)
        ]
        right = [sum(r for _, r in v) for v in values]
        out[task] = {
            "items": len(values),
            "all_right": np.mean([all(r for _, r in v) for v in values]),
            "pass": [pass_hat(right, len(runs), k) for k in range(1, len(runs) + 1)],
            "any_right": np.mean([any(r for _, r in v) for v in values]),
            "same": np.mean([len({o for o, _ in v}) == 1 for v in values]),
            "flip": float(np.mean(flips)),
        }
    return out


def pass_hat(right: list[int], runs: int, k: int) -> float:
    """tau-bench's pass^k: the chance that k runs drawn from the n saved all get an item right, averaged over the
    items, mean of C(c, k) / C(n, k) for an item right in c of the n runs. It does not depend on n as "right in
    all n" does, so models with different numbers of runs compare at one k."""
    return float(np.mean([math.comb(c, k) / math.comb(runs, k) for c in right]))


@declares(Kind("consistency", "nearest: Table 11", 3))
def consistency_table(groups: list[Group]) -> Table:
    rows = []
    # a re-judged group is the judge's analysis (the judge tables), neither a model here nor what sets the common k
    standard = [g for g in groups if g.condition == "standard" and len(g.runs) > 1 and not g.rejudged]
    most = max((len(g.runs) for g in standard), default=2)
    common = min((len(g.runs) for g in standard), default=2)
    for g in standard:
        for task, c in consistency(g.runs).items():
            rows.append(
                [
                    g.label,
                    task,
                    str(len(g.runs)),
                    str(c["items"]),
                    *(
                        number_cell(c[m], PERCENT, percent=True)
                        for m in ("all_right", "any_right", "same", "flip")
                    ),
                    *(number_cell(v, PERCENT, percent=True) for v in c["pass"]),
                    *[""] * (most - len(c["pass"])),
                ]
            )
    return Table(
        "consistency",
        "Consistency over runs: items (LCA: case × history; DCG: case; LJP: claim) right in "
        "all k runs and in at least one, with the same outcome in every run, the flip rate (share of "
        "items whose outcome differs between two runs, averaged over pairs of runs), and pass^k (tau-bench: "
        "the chance that k runs all get an item right, mean over items of C(c, k) / C(k runs, k)). Models "
        f"with different numbers of runs compare at pass^{common}, the smallest number of runs here "
        "('Right in all k' depends on k)",
        [
            "Model",
            "Task",
            "Runs (k)",
            "Items",
            "Right in all k",
            "Right in ≥ 1",
            "Same in all k",
            "Flip rate",
            *(f"pass^{k}" + (" (common)" if k == common else "") for k in range(1, most + 1)),
        ],
        rows,
        row_tasks={"LCA": "LCA", "DCG": "DCG", **{f"LJP {s.title}": s.name for s in LJP_SETUPS}},
        compare="never",  # a row links to the cases the model gets wrong in every run
    )


def same_judge(a: Run, b: Run) -> bool:
    """The same judge: the same model, endpoint and settings, served by the same model (a judge that answered as
    another model is another judge)."""
    return a.manifest.judge_identity() == b.manifest.judge_identity() and a.served_apart(
        "judge"
    ) == b.served_apart("judge")


def retests(groups: list[Group]) -> list[tuple[Group, list[tuple[Run, Run]]]]:
    """Per group of source runs: the (run, its copy re-judged by the same judge) pairs, from every re-judged run."""
    # looked up by a run's source too (None: it re-judged no run)
    source_group: dict[tuple[str, str | None], tuple[Group, Run]] = {
        (r.model, r.run_id): (g, r) for g in groups for r in g.runs
    }
    found: dict[int, tuple[Group, list]] = {}
    for g in groups:
        for r in g.runs:
            source = source_group.get((r.model, r.manifest.rejudged_from))
            if source and same_judge(source[1], r):
                found.setdefault(id(source[0]), (source[0], []))[1].append((source[1], r))
    return list(found.values())


@declares(Kind("judge_noise", "nearest: Table 11", 3))
def judge_noise_table(groups: list[Group], metrics, boot: Bootstrap) -> Table | None:
    """For a group of runs re-judged with the same judge: each metric's variance between runs split into the
    judge's share (half the mean squared difference between a run and its re-judged copy, which differ only by the
    judge's sampling) and the rest (generation and simulation). The share is shown as estimated, never capped (a
    value above 100% is noise, and marked so), with a bootstrap interval over cases."""
    rows = []
    for sources, pairs in retests(groups):
        for name, (task, metric) in metrics:
            key = MetricKey(task, metric)
            values = both_defined(pairs, key)
            stat = sources.stat(key)
            if not values or not stat or stat["sd"] is None:
                continue
            judge_var = float(np.mean([(a - b) ** 2 for a, b, _, _ in values]) / 2)
            total = stat["sd"] ** 2
            share = judge_var / total if total > 0 else None
            copies = [(a, b) for _, _, a, b in values]
            by_case = case_level_parts(sources, copies, key)
            rows.append(
                [
                    sources.label,
                    name,
                    str(stat["n"]),
                    str(len(values)),
                    number_cell(total, VARIANCE),
                    number_cell(judge_var, VARIANCE),
                    share_cell(share),
                    percent_interval(share_interval(boot, sources, copies, key)),
                    share_cell(None if by_case is None else case_share(*by_case[1:])),
                    percent_interval(None if by_case is None else case_share_interval(boot, *by_case)),
                    number_cell(total - judge_var, VARIANCE),
                ]
            )
    if not rows:
        return None
    return Table(
        "judge_noise",
        "Judge noise: each metric's variance between runs, and the judge's share of it from "
        "runs re-judged with the same judge (half the mean squared difference between a run and its "
        "re-judged copy; the rest is generation and simulation), and the case-level estimate (both "
        "variances summed case by case: steadier with few runs; n/a for a metric that is no mean over "
        "cases), each with its 95% bootstrap interval over cases; a share outside 0-100% is shown as "
        "estimated and marked: too few runs (see docs/statistics.md)",
        [
            "Model",
            "Metric",
            "Runs",
            "Re-judged runs",
            "Variance between runs",
            "Judge's variance",
            "Judge's share",
            "95% interval",
            "Case-level share",
            "Case-level 95% interval",
            "The rest",
        ],
        rows,
    )


def both_defined(pairs: list[tuple[Run, Run]], key: MetricKey) -> list[tuple[float, float, Run, Run]]:
    """(a's value, b's value, a, b) of the pairs of runs where both have the metric defined."""
    return [
        (va, vb, a, b)
        for a, b in pairs
        if (va := a.metrics.get(key)) is not None and (vb := b.metrics.get(key)) is not None
    ]


# (task, metric) of the metrics that are a mean over cases of each case's own value: the case-level share is
# theirs alone (docs/statistics.md)
MEANS_OVER_CASES = {("DCG", "accuracy"), ("LCA", "acc_c"), ("LCA", "acc_u")}


def case_level_parts(
    sources: Group, pairs: list[tuple[Run, Run]], key: MetricKey
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray] | None:
    """The judge's share from the cases one by one, in parts: for a metric that is a mean over cases (each case's
    own value defined, as DCG accuracy, Acc_C, Acc_U), the cases, each case's run-to-run variance and each case's
    half mean squared difference between a run and its copy. Summed over the cases and divided, they give the
    case-level share: the case-to-case covariances the run-level estimate holds drop out, which assumes the cases
    of a run vary independently (their covariances are then only noise). None for another metric (QWK, Macro-F1)."""
    task, metric, _ = key
    if (task, metric) not in MEANS_OVER_CASES:
        # a per-case Macro-F1 or QWK exists (the metric on one case's counts), but the run's figure is no mean of
        # it: a share summed from it would be a number the docs call n/a
        return None

    def per_case(run: Run) -> dict | None:
        data = run.tasks.get(task)
        if data is None:
            return None
        values = np.asarray(TASKS[task][2](data.counts)[metric], dtype=float)
        return None if np.isnan(values).any() else dict(zip(data.cases, values))

    found = [per_case(r) for r in sources.runs]
    found_copies = [(per_case(a), per_case(b)) for a, b in pairs]
    runs = [v for v in found if v is not None]
    copies = [(a, b) for a, b in found_copies if a is not None and b is not None]
    if len(runs) < len(found) or len(copies) < len(found_copies):
        return None
    common = set.intersection(*(set(v) for v in runs + [x for pair in copies for x in pair]))
    # in the runs' own case order: the bootstrap draws per case tuple, so another order (sorted) would resample
    # other cases than every other interval of the report does
    cases = tuple(c for c in sources.runs[0].tasks[task].cases if c in common)
    total = np.array([np.var([v[c] for v in runs], ddof=1) for c in cases])
    judge = np.array([np.mean([(a[c] - b[c]) ** 2 for a, b in copies]) / 2 for c in cases])
    return cases, total, judge


def case_share(total: np.ndarray, judge: np.ndarray) -> float | None:
    return float(judge.sum() / total.sum()) if total.sum() > 0 else None


def case_share_interval(boot: Bootstrap, cases: tuple, total: np.ndarray, judge: np.ndarray):
    """The case-level share's 95% percentile interval: both sums taken over the resampled cases."""
    weights = boot.weights(cases)
    drawn_total, drawn_judge = weights @ total, weights @ judge
    with np.errstate(invalid="ignore", divide="ignore"):
        return percentile_interval(np.where(drawn_total > 0, drawn_judge / drawn_total, np.nan))


def share_cell(share: float | None) -> Figure:
    """The judge's share as estimated: above 100% (or below 0) it is marked, never capped to look plausible."""
    cell = number_cell(share, PERCENT, percent=True)
    if share is None or 0 <= share <= 1:
        return cell
    return Figure(f"{cell} (outside 0-100%: noise)", cell.numbers)


def percent_interval(interval: tuple[float, float] | None) -> Figure:
    if interval is None:
        return Figure("n/a", {"low": None, "high": None})
    low, high = (100 * v for v in interval)
    return Figure(f"[{low:.{PERCENT}f}%, {high:.{PERCENT}f}%]", {"low": low, "high": high})


def share_interval(boot: Bootstrap, sources: Group, pairs: list[tuple[Run, Run]], key: MetricKey):
    """The 95% percentile interval of the share over the resampled cases: every run and its copy on the same drawn
    cases, the variance between the source runs and the judge's variance recomputed on each."""
    found = [boot.run_values(r, key) for r in sources.runs]
    found_copies = [(boot.run_values(a, key), boot.run_values(b, key)) for a, b in pairs]
    runs = [v for v in found if v is not None]
    copies = [(a, b) for a, b in found_copies if a is not None and b is not None]
    if len(runs) < len(found) or len(copies) < len(found_copies):
        return None
    total = np.var(np.array(runs), axis=0, ddof=1)
    judge = np.mean([(a - b) ** 2 for a, b in copies], axis=0) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(total > 0, judge / total, np.nan)
    return percentile_interval(share)
