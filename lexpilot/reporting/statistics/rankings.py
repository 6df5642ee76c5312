"""Rankings a reviewer can trust: every pair of comparable model groups on each headline metric (the difference
of means, its paired bootstrap interval, a two-sided p-value from a paired randomization test over cases,
Holm-adjusted across the pairs of the metric), the models ranked with a compact letter display, and the smallest
difference a design of cases × runs can detect. The intervals and the power reuse the one shared resample matrix
of `Bootstrap` (cases drawn whole, the same draws for every group), so pairs are paired on cases.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from lexpilot.reporting.scoring.groups import (
    NOT_COMPARED,
    Group,
    differing_settings,
    recorded_prompts,
    same_code,
)
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.statistics.bootstrap import Bootstrap, paired_difference
from lexpilot.reporting.statistics.corrected_rankings import corrected_ranking_tables
from lexpilot.reporting.statistics.letters import UNSETTLED_MARK, Decisions, decisions, holm, pair_row
from lexpilot.reporting.statistics.randomization import Randomization, check_permutations
from lexpilot.reporting.statistics.settling import CAP, LEVEL, settle
from lexpilot.reporting.tables.formats import HEADLINE, number_cell
from lexpilot.reporting.tables.table import METRIC, Figure, Kind, Table, declares
from lexpilot.reporting.validation.expert_labels import Matched
from lexpilot.text import counted

# what must be equal for two groups to be compared: every compared setting but the evaluated model's own identity


def comparable_settings(group: Group, prompts: set[str] | None = None) -> dict:
    """The settings two groups must share to be compared; prompts on `prompts` (the files every group records)."""
    manifest = group.runs[0].manifest
    settings = manifest.compared_settings(NOT_COMPARED, prompts, roles_left_out=("eval",))
    # a judge or User Model that answered as another model is another judge or User Model (docs/results.md)
    return settings | {"served": {role: list(ids) for role, ids in group.served.items() if role != "eval"}}


def why_not_comparable(a: Group, b: Group) -> str | None:
    """None when the two groups ran on the same cases with the same judge, User Model, prompts and generation
    settings; else the settings that differ."""
    differing = differing_settings(comparable_settings(a), comparable_settings(b))
    if a.model == b.model:
        differing.insert(
            0, "the evaluated model is the same" + ("" if same_code(a, b) else " (its runs differ in code)")
        )
    return ", ".join(differing) or None


def ranked_groups(groups: list[Group]) -> list[Group]:
    """The groups a ranking compares: standard users, not re-judged copies (those are the judge's analysis)."""
    return [g for g in groups if g.condition == "standard" and not g.rejudged]


@dataclass
class PairTest:
    metric: str
    a: Group
    b: Group
    difference: float
    interval: tuple[float, float] | None
    p: float | None
    key: MetricKey
    p_holm: float | None = None
    unsettled: bool = False  # its decision still turns on Monte-Carlo error at the cap (settling.py)


def comparable_sets(groups: list[Group]) -> list[list[Group]]:
    """The groups split into sets that may be compared: the same cases, judge, User Model, prompts and generation
    settings, one group per model (a model's runs made with other code go to a further set), in the order met."""
    sets: list[tuple[str, list[Group]]] = []
    prompts = recorded_prompts([g.runs[0] for g in groups])
    for g in groups:
        key = json.dumps(comparable_settings(g, prompts), sort_keys=True)
        home = next(
            (members for k, members in sets if k == key and all(m.model != g.model for m in members)), None
        )
        if home is None:
            sets.append((key, [g]))
        else:
            home.append(g)
    return [members for _, members in sets]


def pair_tests(
    groups: list[Group], boot: Bootstrap, test: Randomization, key: MetricKey, metric: str
) -> list[PairTest]:
    """Every pair of one comparable set (A ranked above B by mean) on one metric, Holm-adjusted together."""
    tests = []
    for a, b in ordered_pairs(groups, key):
        result = paired_difference(boot, (a, key), (b, key))
        if result is None:
            continue
        tests.append(PairTest(metric, a, b, result["difference"], result["ci"], test.p_value(a, b, key), key))
    adjust(tests)
    return tests


def adjust(tests: list[PairTest]) -> None:
    """Holm's adjusted p of each test with a p-value, across them."""
    defined = [t for t in tests if t.p is not None]
    for t, adjusted in zip(defined, holm([t.p for t in defined])):  # type: ignore[misc]
        t.p_holm = adjusted


def settled_tests(families: list[list[PairTest]], test: Randomization, alpha: float) -> None:
    """The families' tests after the sequential rule (settling.py): drawn p-values refined until each is settled
    against its Holm threshold or capped, Holm taken again, and each decision still turning on Monte-Carlo error
    marked unsettled."""
    defined = [[t for t in family if t.p is not None] for family in families]
    unsettled = settle([[(t.a, t.b, t.key) for t in family] for family in defined], test, alpha)
    for family, marks in zip(defined, unsettled):
        for t, mark in zip(family, marks):
            t.p, t.unsettled = test.p_value(t.a, t.b, t.key), mark
        adjust(family)


def ordered_pairs(groups: list[Group], key: MetricKey):
    """Every comparable pair of one set with both means defined, the higher mean first (A − B ≥ 0)."""
    for a, b in itertools.combinations(groups, 2):
        mean_a, mean_b = (a.stat(key) or {}).get("mean"), (b.stat(key) or {}).get("mean")
        if why_not_comparable(a, b) or mean_a is None or mean_b is None:
            continue
        yield (b, a) if mean_b > mean_a else (a, b)


def headline_keys(by_class: list[str] | None = None):
    for name, (task, metric) in HEADLINE:
        yield name, MetricKey(task, metric)
        for cls in by_class or ():
            yield f"{name} ({cls})", MetricKey(task, metric, cls)


def set_decisions(tests: list[PairTest], members: list[Group], key: MetricKey, alpha: float) -> Decisions:
    """A set's decisions on one metric: the pairs found different and the letters of its models with a mean."""
    ranked = [g.label for g, _ in ranked_stats(members, key)]
    unsettled = {frozenset((t.a.label, t.b.label)) for t in tests if t.unsettled}
    return decisions(ranked, [(t.a.label, t.b.label, t.p_holm) for t in tests], alpha, unsettled)


def ranked_stats(members: list[Group], key: MetricKey) -> list[tuple[Group, dict]]:
    """(group, its stat) of the groups with a mean, the highest first."""
    return sorted(
        ((g, s) for g in members if (s := g.stat(key)) is not None and s["mean"] is not None),
        key=lambda ranked_stat: -ranked_stat[1]["mean"],
    )


def ranked_rows(
    decided: Decisions, members: list[Group], key: MetricKey, name: str, set_label: str
) -> list[list[str]]:
    """One set's ranking on one metric: rank, model, mean, SD, runs and its letters ("n/a" when some pair of the
    set could not be tested)."""
    ranked = ranked_stats(members, key)
    means = [round(s["mean"], 12) for _, s in ranked]  # equal but for float noise: the same value
    return [
        [
            name,
            *([set_label] if set_label else []),
            str(means.index(mean) + 1),
            g.label,  # equal values share
            number_cell(s["mean"], METRIC),  # a rank (1, 1, 3), as in competition ranking
            number_cell(s["sd"], METRIC),
            str(s["n"]),
            decided.shown(g.label),
        ]
        for (g, s), mean in zip(ranked, means)
    ]


PAIR_HEADERS = ("Metric", "Model A", "Model B", "Difference", "95% interval", "p", "p (Holm)", "Different")


@declares(
    Kind("pairs", "nearest: Table 11", 3),
    Kind("ranking", "nearest: Table 11", 3),
    Kind("not_comparable", "the harness's", 3),
    *corrected_ranking_tables.kinds,  # with --corrected
)
def ranking_tables(
    groups: list[Group],
    boot: Bootstrap,
    alpha: float,
    by_class: list[str] | None = None,
    permutations: int | None = None,
    corrected: Matched | None = None,
) -> list[Table]:
    """Per headline metric and comparable set: the pairs (difference, interval, p, Holm p) and the ranking with its
    letters; the pairs of groups in different sets, with what differs. `permutations`: of the randomization test
    (None: as many as the largest family of pairs needs at `alpha`). `corrected`: the expert labels matched to
    the runs: the same on the judge-corrected metrics, and what the correction changed (corrected_rankings.py)."""
    groups = ranked_groups(groups)
    sets = comparable_sets(groups)
    family = max((len(s) * (len(s) - 1) // 2 for s in sets), default=1)
    test = Randomization(check_permutations(permutations, family, alpha), boot.seed, stop_above=alpha)
    pair_rows, rank_rows, decided = [], [], {}
    test.prepare(
        [
            (a, b, key)
            for _, key in headline_keys(by_class)
            for members in sets
            for a, b in ordered_pairs(members, key)
        ]
    )
    families = {
        (name, number): pair_tests(members, boot, test, key, name)
        for name, key in headline_keys(by_class)
        for number, members in enumerate(sets, 1)
    }
    settled_tests(list(families.values()), test, alpha)
    for name, key in headline_keys(by_class):
        for number, members in enumerate(sets, 1):
            tests = families[(name, number)]
            pair_rows += [_pair_row(t, alpha) for t in tests]
            decided[(name, number)] = set_decisions(tests, members, key, alpha)
            set_label = str(number) if len(sets) > 1 else ""
            rank_rows += ranked_rows(decided[(name, number)], members, key, name, set_label)
    tables = [
        Table("pairs", _pairs_title(boot, test, alpha), list(PAIR_HEADERS), pair_rows),
        Table(
            "ranking",
            f"Ranking per metric: mean and SD over runs; models sharing a letter are not different "
            f"at α = {alpha:g} after Holm's adjustment ('n/a': some pair could not be compared; '{UNSETTLED_MARK}': "
            f"an unsettled decision could change the model's letters, which could then change with --seed)",
            ["Metric", *(["Set"] if len(sets) > 1 else []), "Rank", "Model", "Mean", "SD", "Runs", "Group"],
            rank_rows,
        ),
    ]
    apart = _not_comparable_table(sets)
    if corrected:
        tables += corrected_ranking_tables(sets, decided, corrected, alpha, list(headline_keys()), boot.seed)
    return tables + ([apart] if apart else [])


def _pair_row(t: PairTest, alpha: float) -> list:
    """One pair of the pairs table: the difference, its interval, p and Holm's p, and whether they differ."""
    said = "unsettled" if t.unsettled else "yes" if t.p_holm is not None and t.p_holm < alpha else "no"
    return pair_row(t.metric, t.a.label, t.b.label, t.difference, t.interval, t.p, t.p_holm, said)


def _pairs_title(boot: Bootstrap, test: Randomization, alpha: float) -> str:
    """The pairs table's title: how the intervals and p-values were made."""
    return (
        f"Every comparable pair: difference of means (A − B, A ranked higher), 95% paired bootstrap "
        f"interval over cases ({boot.resamples} resamples), two-sided p of a paired randomization test "
        f"over cases ({test.permutations} permutations, a test stopping once its p is sure to exceed α; "
        f"exact where few cases differ; one whose p's {1 - LEVEL:.1%} Monte-Carlo interval holds its Holm threshold "
        f"drawing more, up to {CAP} times as many: {counted(test.refined(), 'test')} did), Holm-adjusted across the pairs of "
        f"each metric; different at α = {alpha:g} after adjustment ('unsettled': the decision still turns on the "
        "test's Monte-Carlo error at that cap)"
    )


def _not_comparable_table(sets: list[list[Group]]) -> Table | None:
    """The pairs of groups in different comparable sets, with the settings that keep them apart."""
    apart = [
        f"{a.label} (set {i + 1}) and {b.label} (set {j + 1}): {why_not_comparable(a, b)} differ"
        for (i, one), (j, other) in itertools.combinations(enumerate(sets), 2)
        for a in one
        for b in other
    ]
    if not apart:
        return None
    return Table(
        "not_comparable",
        "Pairs not compared (their runs differ in more than the evaluated "
        "model; each set is ranked on its own)",
        ["Pair"],
        [[n] for n in apart],
    )


# ----------------------------------------------------------------------------- power

Z = NormalDist().inv_cdf


def detectable_difference(
    case_variance: float,
    run_variance: float,
    cases: int,
    runs: int,
    design_cases: int,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """The smallest true difference between two models a two-sided test at `alpha` detects with `power`, for a
    design of `cases` × `runs`. `case_variance`: the variance of the paired difference from drawing the cases
    (measured on `design_cases` cases, beyond the run noise); `run_variance`: the sum of the two models' run-to-run
    variances of a run's metric (on `design_cases` cases). Both shrink with more cases; the run noise with more
    runs too."""
    scale = design_cases / cases
    return (Z(1 - alpha / 2) + Z(power)) * float(np.sqrt(case_variance * scale + run_variance * scale / runs))


def variance_components(a: Group, b: Group, boot: Bootstrap, key: MetricKey) -> tuple[float, float] | None:
    """(case variance, run variance) of the difference of two groups on the design in hand: the run variance is
    the sum of the groups' variances between runs; the case variance is the bootstrap variance of the difference
    of the group means less the run noise it holds (each group's run variance over its number of runs)."""
    sa, sb = a.stat(key), b.stat(key)
    if not sa or not sb or sa["sd"] is None or sb["sd"] is None:
        return None
    da, db = boot.distribution(a, key), boot.distribution(b, key)
    assert da is not None and db is not None, "a metric defined in a run was scored from its task's data"
    diff = da - db
    diff = diff[~np.isnan(diff)]
    if diff.size < 2:
        return None
    run_variance = sa["sd"] ** 2 + sb["sd"] ** 2
    within = sa["sd"] ** 2 / sa["n"] + sb["sd"] ** 2 / sb["n"]
    return max(0.0, float(np.var(diff, ddof=1)) - within), run_variance


def median_detectable(
    components: list[tuple[float, float]],
    cases: int,
    runs: int,
    design_cases: int,
    alpha: float,
    power: float,
) -> float:
    """The median over pairs of each pair's smallest detectable difference (`components`: each pair's case and run
    variance). The median of the differences, not the difference of the median variances: the two medians of the
    components may come from different pairs, and then describe no pair of the set."""
    return float(
        np.median(
            [
                detectable_difference(case_var, run_var, cases, runs, design_cases, alpha, power)
                for case_var, run_var in components
            ]
        )
    )


MIN_POWER_RESAMPLES = 100  # the variance of a difference from B resamples is off by about √(2/B): 14% at 100

# (runs, cases; None: as run)
DESIGNS = ((1, None), (3, None), (5, None), (10, None), (5, 100), (5, 216), (5, 432))


@declares(Kind("power", "nearest: Table 11", 3))
def power_table(groups: list[Group], boot: Bootstrap, alpha: float = 0.05, power: float = 0.8) -> Table:
    """Per comparable set and headline metric: the median over the set's pairs of each pair's smallest detectable
    difference, for the set's design (its cases × the median of its runs) and other numbers of runs and cases; in
    hand also at α / m, the level Holm's first step holds a ranking of m pairs to."""
    sets = [members for members in comparable_sets(ranked_groups(groups)) if len(members) > 1]
    rows = []
    for number, members in enumerate(sets, 1):
        cases = len(members[0].runs[0].selected)
        runs = int(np.median([len(g.runs) for g in members]))
        pairs = len(members) * (len(members) - 1) // 2
        for name, key in headline_keys():
            label = [
                name,
                *([str(number)] if len(sets) > 1 else []),
                Figure(f"{cases} × {runs}", {"cases": cases, "runs": runs}),
            ]
            components = [
                c
                for c in (variance_components(a, b, boot, key) for a, b in itertools.combinations(members, 2))
                if c is not None
            ]
            if not components:
                # a task no two models ran is not a design that needs more runs
                ran = sum(any(key.family in r.tasks for r in g.runs) for g in members) >= 2
                why = "n/a: needs two runs of each model" if ran else "n/a: not run by two models"
                rows.append(label + [why] + [""] * (len(DESIGNS) + 1))
                continue
            # a pair with no variance at all detects anything, which means nothing: it is no pair of the median
            components = [c for c in components if c != (0, 0)]
            if not components:
                rows.append(label + ["n/a: no variance between cases or runs"] + [""] * (len(DESIGNS) + 1))
                continue
            at = lambda k, n, level: number_cell(  # noqa: E731
                median_detectable(components, n or cases, k, cases, level, power), METRIC
            )
            rows.append(
                label
                + [at(runs, None, alpha), at(runs, None, alpha / pairs)]
                + [at(k, n, alpha) for k, n in DESIGNS]
            )
    if not sets:
        rows.append(["n/a: needs two comparable models"] + [""] * (3 + len(DESIGNS)))
    headers = [
        "Metric",
        *(["Set"] if len(sets) > 1 else []),
        "Design (cases × runs)",
        "In hand",
        "In hand at α/m (ranking)",
    ] + [f"{n or 'same'} × {k}" for k, n in DESIGNS]
    return Table(
        "power",
        f"Smallest difference between two models detectable at α = {alpha:g} with power "
        f"{power:g} (median over a set's comparable pairs of each pair's own, from its variance between cases and "
        "between runs in the saved runs; a pair with neither is left out; see docs/statistics.md). For a claim in a ranking of m pairs read 'In hand at "
        "α/m': Holm holds the first of them to α/m",
        headers,
        rows,
    )
