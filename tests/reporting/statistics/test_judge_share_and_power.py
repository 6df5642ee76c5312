"""Rules of the judge's share and the power table, each pinned by hand: the case-level judge's share only for a mean over cases, its interval on the
bootstrap's own draws, the judge's share interval over the resamples where it is defined, and the power table's
median over pairs."""

from statistics import NormalDist

import numpy as np
import pytest

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey, Run, TaskData
from lexpilot.reporting.scoring.scoring import metrics_of
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.statistics.consistency import (
    case_level_parts,
    case_share_interval,
    judge_noise_table,
    share_interval,
)
from lexpilot.reporting.statistics.rankings import power_table
from lexpilot.reporting.tables.formats import HEADLINE
from lexpilot.storage.manifest import Manifest
from tests.helpers.rankings import KEY, group_of


class Drawn(Bootstrap):
    """A bootstrap whose resamples are given (resamples × cases, how often each case is drawn), so that every
    quantile can be worked out by hand."""

    def __init__(self, weights: list[list[int]]):
        super().__init__(len(weights), 0)
        self.drawn = np.array(weights, dtype=float)

    def weights(self, cases: tuple) -> np.ndarray:
        assert self.drawn.shape[1] == len(cases)
        return self.drawn


def task_run(run_id: str, task: str, cases: list[str], counts: list, source: str | None = None) -> Run:
    """A run of one task from its per-case counts, scored as the reports score it (a copy re-judged from `source`
    when given)."""
    saved = {"selected_cases": cases, **({"rejudged_from": source} if source else {})}
    run = Run(run_id, "m", Manifest.of(saved), "m")
    data = run.tasks[task] = TaskData(cases, ["c"] * len(cases), np.array(counts, dtype=float))
    for metric, value in metrics_of(task, data).items():
        run.metrics[MetricKey(task, metric)] = value
    return run


def dcg_run(run_id: str, cases: list[str], successes: list[int], source: str | None = None) -> Run:
    return task_run(run_id, "DCG", cases, [[s, 1] for s in successes], source)


# LCA's per-case counts (TP, FP, FN, TN), underspecified positive: each case's two histories
BOTH_RIGHT, UNDERSPECIFIED_WRONG = [1, 0, 0, 1], [0, 0, 1, 1]


def test_the_case_level_share_is_n_a_for_macro_f1_and_printed_for_acc_u():
    """docs/statistics.md: the case-level share is for the metrics that are a mean over cases (DCG accuracy, Acc_C,
    Acc_U) and n/a for QWK and Macro-F1. A per-case Macro-F1 exists (the F1s of one case's two histories), so the
    share was summed from it; the run's Macro-F1 is no mean of it. Three cases: r1 all right, r2 wrong on case 1's
    underspecified history, r1's copy wrong on case 2's, r2's copy as r2. Acc_U per case: r1 (1, 1, 1), r2
    (0, 1, 1), r1' (1, 0, 1): variance between runs ½ on case 1; the judge's ((1 − 0)² + 0) / 2 / 2 = ¼ on case 2:
    ¼ / ½ = 50%."""
    cases = ["1", "2", "3"]
    r1 = task_run("r1", "LCA", cases, [BOTH_RIGHT] * 3)
    r2 = task_run("r2", "LCA", cases, [UNDERSPECIFIED_WRONG, BOTH_RIGHT, BOTH_RIGHT])
    r1_again = task_run("r1-again", "LCA", cases, [BOTH_RIGHT, UNDERSPECIFIED_WRONG, BOTH_RIGHT], "r1")
    r2_again = task_run("r2-again", "LCA", cases, [UNDERSPECIFIED_WRONG, BOTH_RIGHT, BOTH_RIGHT], "r2")
    sources = Group("m", (), [r1, r2])
    copies = [(r1, r1_again), (r2, r2_again)]
    assert case_level_parts(sources, copies, MetricKey("LCA", "macro_f1")) is None
    parts = case_level_parts(sources, copies, MetricKey("LCA", "acc_u"))
    assert parts is not None
    assert parts[1].tolist() == [0.5, 0, 0] and parts[2].tolist() == [0, 0.25, 0]
    # as printed: the Macro-F1 row's case-level share and its interval n/a, Acc_U's 50%
    lca = [(name, key) for name, key in HEADLINE if key[0] == "LCA"]
    table = judge_noise_table([sources, Group("m", (), [r1_again, r2_again])], lca, Bootstrap(200, 0))
    assert table is not None
    rows = {row[1]: row for row in table.rows}
    case_level = table.headers.index("Case-level share")
    assert [str(c) for c in rows["LCA Macro-F1"][case_level : case_level + 2]] == ["n/a", "n/a"]
    assert str(rows["LCA Acc_U"][case_level]) == "50.0%"


def test_the_case_level_share_interval_is_drawn_over_the_cases_every_interval_is():
    """The bootstrap draws one matrix per tuple of cases, in the runs' order (Bootstrap.run_values). Twelve cases
    "0" … "11" whose sorted order ("0", "1", "10", "11", "2", …) is not the runs' order: the case-level share's
    interval must weigh each case as the run-level share's resamples do. r1 and r2 differ on cases 0, 2, 5, 10
    (each case's variance between runs ½); r1's copy differs from r1 on cases 2 and 11, r2's from r2 on 10 (the
    judge's half mean squared difference ¼ on each), so on a resample of weights w the share is
    (w₂ + w₁₁ + w₁₀) · ¼ / ((w₀ + w₂ + w₅ + w₁₀) · ½)."""
    cases = [str(i) for i in range(12)]
    r1 = dcg_run("r1", cases, [1 if i in (0, 2, 5, 10) else 0 for i in range(12)])
    r2 = dcg_run("r2", cases, [0] * 12)
    r1_again = dcg_run("r1-again", cases, [1 if i in (0, 5, 10, 11) else 0 for i in range(12)], "r1")
    r2_again = dcg_run("r2-again", cases, [1 if i == 10 else 0 for i in range(12)], "r2")
    parts = case_level_parts(Group("m", (), [r1, r2]), [(r1, r1_again), (r2, r2_again)], KEY)
    assert parts is not None
    drawn, total, judge = parts
    assert drawn == tuple(cases)
    boot = Bootstrap(1000, 0)
    w = boot.weights(tuple(cases))
    # the very draws every run's resampled metric is made of
    assert np.allclose(boot.run_values(r1, KEY), (w[:, 0] + w[:, 2] + w[:, 5] + w[:, 10]) / 12)
    varied = w[:, 0] + w[:, 2] + w[:, 5] + w[:, 10]
    w = w[varied > 0]  # no variance between runs, no share
    by_hand = (w[:, 2] + w[:, 11] + w[:, 10]) / 4 / ((w[:, 0] + w[:, 2] + w[:, 5] + w[:, 10]) / 2)
    assert list(case_share_interval(boot, drawn, total, judge)) == pytest.approx(
        list(np.percentile(by_hand, [2.5, 97.5]))
    )


def test_the_judges_share_interval_is_over_the_resamples_where_the_share_is_defined():
    """Two cases x, y. r1 succeeds on x only, r2 on neither; r1's copy on both (the judge flipped y), r2's as r2.
    On a resample drawing x w_x times and y w_y times (w_x + w_y = 2): r1's accuracy is w_x / 2, r2's 0, so the
    variance between runs is (w_x / 2)² / 2 = w_x² / 8; r1 − its copy = w_x / 2 − 1 = −w_y / 2, so the judge's
    variance is ((w_y / 2)² + 0) / 2 / 2 = w_y² / 16, and the share w_y² / (2 · w_x²):
      (2, 0): 0;   (1, 1): ½;   (0, 2): undefined (no variance between runs).
    Ten resamples: (2, 0) once, (1, 1) eight times, (0, 2) once. Over the nine where it is defined the sorted
    shares are [0, ½ × 8]; NumPy's percentile (linear) sits at 0.025 · 8 = 0.2 (0 + 0.2 · ½ = 0.1) and at
    0.975 · 8 = 7.8 (½): [10%, 50%]. Counting the undefined one as 0 would give [0, ½ × 8] with two zeros, its
    2.5% at 0.225 of the way between two zeros: 0."""
    cases = ["x", "y"]
    r1, r2 = dcg_run("r1", cases, [1, 0]), dcg_run("r2", cases, [0, 0])
    copies = [(r1, dcg_run("r1-again", cases, [1, 1], "r1")), (r2, dcg_run("r2-again", cases, [0, 0], "r2"))]
    boot = Drawn([[2, 0]] + [[1, 1]] * 8 + [[0, 2]])
    low, high = share_interval(boot, Group("m", (), [r1, r2]), copies, KEY)
    assert (low, high) == pytest.approx((0.1, 0.5))


def test_the_power_tables_median_is_over_the_pairs():
    """The caption says "median over a set's comparable pairs": the median of each pair's detectable difference,
    not the difference from the median case variance and the median run variance (from different pairs). Three
    models, two runs (rows) of two cases, the two resamples given: each draws one case twice, so a group's value on
    a resample is its mean over runs on that case, and the bootstrap variance of a pair's difference of means is
    (δ₁ − δ₂)² / 2, δ_c the difference on case c.
      A: [[0, 0], [0, 0]]  per case (0, 0), run means 0, 0: run variance 0
      B: [[0, 0], [0, 1]]  per case (0, ½), run means 0, ½: run variance ⅛
      C: [[1, 0], [1, 0]]  per case (1, 0), run means ½, ½: run variance 0
    Case variance = (δ₁ − δ₂)² / 2 less each run variance over its 2 runs; run variance = the sum of the two:
      A − B: δ (0, −½): ⅛ − ⅛ / 2 = 1/16, ⅛    in hand (2 runs): 1/16 + ⅛ / 2 = ⅛
      A − C: δ (−1, 0): ½,              0     ½
      B − C: δ (−1, ½): 9/8 − 1/16 = 17/16, ⅛  17/16 + 1/16 = 9/8
    and D, A's twin: D − A has no variance at all (it would detect anything, which means nothing) and is left out;
    D − B and D − C are A − B and A − C again. The median of the five pairs' squared detectable differences / z²,
    (⅛, ⅛, ½, ½, 9/8), is ½: z · √½. The median case variance ½ with the median run variance ⅛ would give
    z · √(½ + 1/16) = z · 0.75; the twins' pair kept, the median of six, (⅛ + ½) / 2. With one run: the middle
    value is ½ again; with 432 cases and 5 runs each is scaled by 2 / 432 (1/16 + 1/40, ½, 17/16 + 1/40, …):
    median ½ · 2 / 432. At Holm's first level, α / 6 for the six pairs of four models."""
    groups = [
        group_of("A", np.array([[0, 0], [0, 0]])),
        group_of("B", np.array([[0, 0], [0, 1]])),
        group_of("C", np.array([[1, 0], [1, 0]])),
        group_of("D", np.array([[0, 0], [0, 0]])),
    ]
    table = power_table(groups, Drawn([[2, 0], [0, 2]]))
    row = next(r for r in table.rows if r[0] == "DCG Acc.")
    cell = lambda header: row[table.headers.index(header)].numbers["value"]  # noqa: E731
    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    assert cell("In hand") == pytest.approx(z * 0.5**0.5)
    assert cell("same × 1") == pytest.approx(z * 0.5**0.5)
    assert cell("432 × 5") == pytest.approx(z * (0.5 * 2 / 432) ** 0.5)
    z_ranking = NormalDist().inv_cdf(1 - 0.05 / 6 / 2) + NormalDist().inv_cdf(0.8)
    assert cell("In hand at α/m (ranking)") == pytest.approx(z_ranking * 0.5**0.5)
