"""How many expert labels each task needs (`judge_agreement.py export --plan`): per accuracy and model, the labels
that bring the judge-corrected interval's half-width below the smallest difference the runs can detect (the power
table's "In hand", `show_results.py --power`), and the `--per-task` that asks the export for them.

The corrected accuracy's variance is s²(y − f) / n + s²(f) / N (statistics/corrected.py). Before any label the
first term is unknown: it is taken as the share of decisions the experts will read otherwise than the judge
(`--disagreement`, default 0.10: y − f is then 0 on the rest and ±1 on that share, a variance of about that
share). The half-width 1.96 · √(d / n + se²) is below the detectable difference D when

    n ≥ d / ((D / 1.96)² − se²)

with se the judge's own standard error; where D / 1.96 is not above se, no number of labels does it (the cases are
too few). Every plan is at least the label rule's 30 (statistics/corrected.py). Macro-F1 and the QWKs are
functions of the same decisions: their labels are the accuracies' (LCA) or the claims' (LJP), and their interval
is the bootstrap's (docs/statistics.md); the plan covers the accuracies.
"""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist

import numpy as np

from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.groups import Group, group_runs
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.statistics.corrected import MIN_EACH, MIN_LABELS, judge_accuracy
from lexpilot.reporting.statistics.corrected_table import RIGHT_WRONG, judged_matrix
from lexpilot.reporting.statistics.rankings import (
    comparable_sets,
    median_detectable,
    ranked_groups,
    variance_components,
)
from lexpilot.reporting.tables.formats import HEADLINE, number_cell
from lexpilot.reporting.tables.renderings import render_text
from lexpilot.reporting.tables.table import METRIC, Kind, Table, declares

DISAGREEMENT = 0.10  # the share of decisions the experts are taken to read otherwise than the judge


RULE_MET = 0.95  # the planned sample meets the label rule's "5 right and 5 wrong" with at least this chance


def labels_needed(
    half_width: float, judge_se: float, disagreement: float, accuracy: float = 0.5
) -> int | None:
    """The labels that bring the corrected half-width below `half_width` and meet the label rule by design, not by
    luck: at least MIN_LABELS, and enough that a sample of a model right with `accuracy` (the judge's figure, the
    best guess before any label) holds MIN_EACH right and MIN_EACH wrong with chance RULE_MET (None: no number
    does)."""
    room = (half_width / NormalDist().inv_cdf(0.975)) ** 2 - judge_se**2
    if room <= 0:
        return None
    return max(MIN_LABELS, math.ceil(disagreement / room), rule_met_at(accuracy))


def rule_met_at(accuracy: float, cap: int = 100_000) -> int:
    """The smallest sample that holds MIN_EACH of the rarer outcome with chance RULE_MET (the binomial's lower
    tail, summed term by term)."""
    rare = min(accuracy, 1 - accuracy)
    if rare <= 0:
        return cap  # an outcome never seen is never sampled: no plan meets the rule
    n = MIN_EACH
    while n < cap and _fewer_than_each(n, rare) > 1 - RULE_MET:
        n += 1
    return n


def _fewer_than_each(n: int, rare: float) -> float:
    """P(fewer than MIN_EACH of an outcome of chance `rare` in n draws)."""
    return sum(math.comb(n, k) * rare**k * (1 - rare) ** (n - k) for k in range(MIN_EACH))


def detectable(members: list[Group], key: MetricKey, boot: Bootstrap, alpha: float) -> float | None:
    """The power table's "In hand" for one comparable set: the median over its pairs of each pair's smallest
    detectable difference (None with fewer than two runs of two models)."""
    components = [
        c
        for c in (variance_components(a, b, boot, key) for a, b in itertools.combinations(members, 2))
        if c is not None and c != (0, 0)
    ]
    if not components:
        return None
    cases = len(members[0].runs[0].selected)
    runs = int(np.median([len(g.runs) for g in members]))
    return median_detectable(components, cases, runs, cases, alpha, 0.8)


def plan_rows(name: str, key: MetricKey, members: list[Group], boot: Bootstrap, args) -> list[list]:
    """One accuracy's rows for one comparable set: per model the detectable difference, the judge's standard error
    and the labels needed."""
    difference = detectable(members, key, boot, args.alpha)
    rows = []
    for group in members:
        runs = [r for r in group.runs if key.family in r.tasks]
        if not runs:
            continue
        judge = judge_accuracy(judged_matrix(runs, key))
        judge_se = judge.se
        needed = (
            None
            if difference is None
            else labels_needed(difference, judge_se, args.disagreement, judge.value)
        )
        why = "n/a: needs two runs of two models" if difference is None else "none: too few cases"
        rows.append(
            [
                name,
                group.label,
                number_cell(difference, METRIC),
                number_cell(judge_se, METRIC),
                str(needed) if needed is not None else why,
            ]
        )
    return rows


@declares(Kind("label_plan", "the harness's", 3))
def label_plan_table(groups: list[Group], boot: Bootstrap, args) -> Table:
    """Per accuracy and model: the detectable difference, the judge's standard error, the labels needed."""
    rows = []
    for name, (family, metric) in HEADLINE:
        key = MetricKey(family, metric)
        if key not in RIGHT_WRONG:
            continue
        for members in comparable_sets(ranked_groups(groups)):
            rows += plan_rows(name, key, members, boot, args)
    return Table(
        "label_plan",
        f"Expert labels each model needs so that the corrected 95% interval's half-width is below the smallest "
        f"difference the runs detect (α = {args.alpha:g}, power 0.8: show_results.py --power's 'In hand'), if "
        f"the experts read {args.disagreement:.0%} of the decisions otherwise than the judge; at least "
        f"{MIN_LABELS}, and enough that {MIN_EACH} right and {MIN_EACH} wrong are sampled with a {RULE_MET:.0%} "
        "chance (the label rule). LCA labels are per history, DCG labels per case (all its rounds)",
        ["Metric", "Model", "Detectable difference", "Judge's SE", "Labels needed"],
        rows,
    )


def plan(args) -> int:
    """`judge_agreement.py export --plan`: the runs under --output-root scored, the plan printed; nothing written."""
    root = args.output_root.resolve()
    runs = [
        r for r in load_runs(root, args.model, args.run_id, dataset=args.dataset) if r.condition == "standard"
    ]
    if not runs:
        raise HarnessError(f"no standard runs under {root}: run the stages first (see README.md)")
    # the report's bootstrap at its defaults: the plan's detectable difference is show_results.py --power's
    table = label_plan_table(group_runs(runs), Bootstrap(seed=args.seed), args)
    print(render_text([table]))
    for line in per_task(table.rows):
        print(line)
    print(
        "LJP: the QWKs are corrected from labelled claims, and Macro-F1 from LCA's labels; the plan covers the "
        "accuracies (docs/statistics.md)"
    )
    return 0


# what the export draws together: per model and history for LCA, a case's rounds for DCG (agreement.py _stratum)
ROUNDS_PER_CASE = 2  # the forced clarification questions of a DCG case (Section 6.3)


def per_task(rows: list[list]) -> list[str]:
    """The --per-task that asks the export for the largest need of each task: it draws in equal shares per model
    (and per history for LCA), and DCG cases with all their rounds."""
    lines = []
    for task, strata_per_model, decisions_per_label in (("LCA", 2, 1), ("DCG", 1, ROUNDS_PER_CASE)):
        mine = [r for r in rows if r[0].startswith(task)]
        needs = [int(r[-1]) for r in mine if str(r[-1]).isdigit()]
        if needs:
            models = len({r[1] for r in mine})
            ask = max(needs) * strata_per_model * models * decisions_per_label
            lines.append(
                f"{task}: judge_agreement.py export --per-task {ask} (the largest need, {max(needs)}, for each of {models} model(s))"
            )
    return lines
