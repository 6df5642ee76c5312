"""Rankings with multiplicity control, power and consistency over runs (issue 27): the statistics on known and
simulated inputs, then the tables end to end on runs the stage scripts wrote with a scripted provider."""
import numpy as np
import pytest

from lexpilot.reporting.consistency import consistency
from lexpilot.reporting.rankings import (
    bootstrap_p,
    detectable_difference,
    holm,
    letter_display,
    variance_components,
)
from lexpilot.reporting.results import OVERALL, Bootstrap, Group, Run, TaskData

KEY = ("DCG", "accuracy", OVERALL)


def test_holm_on_known_p_values():
    # sorted: 0.005 × 4 = 0.02, 0.01 × 3 = 0.03, 0.03 × 2 = 0.06, 0.04 × 1 = 0.04 -> kept monotone: 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # never above 1


def test_the_letter_display_on_an_unambiguous_set():
    ranked = ["A", "B", "C", "D"]
    different = {frozenset("AC"), frozenset("AD"), frozenset("BD")}
    # A and B alike, B and C alike, C and D alike: three overlapping groups
    assert letter_display(ranked, different) == {"A": "a", "B": "ab", "C": "bc", "D": "c"}
    assert letter_display(ranked, set()) == {m: "a" for m in ranked}
    everything = {frozenset(p) for p in ["AB", "AC", "AD", "BC", "BD", "CD"]}
    assert letter_display(ranked, everything) == {"A": "a", "B": "b", "C": "c", "D": "d"}


def group_of(model: str, outcomes: np.ndarray) -> Group:
    """A group of runs from success outcomes (runs × cases) of a per-case accuracy task."""
    cases = [str(i) for i in range(outcomes.shape[1])]
    runs = []
    for i, row in enumerate(outcomes):
        run = Run(f"r{i}", model, {"selected_cases": cases}, model)
        run.tasks["DCG"] = TaskData(cases, ["c"] * len(cases), np.stack([row, np.ones_like(row)], axis=1).astype(float))
        run.metrics[KEY] = float(row.mean())
        runs.append(run)
    return Group(model, (), runs)


def simulated_p(rng, weights, p_a, p_b, runs=1) -> float:
    a = group_of("a", (rng.random((runs, p_a.size)) < p_a).astype(float))
    b = group_of("b", (rng.random((runs, p_b.size)) < p_b).astype(float))
    boot = Bootstrap(500, 0, _weights=weights)  # a report's groups live as long as its Bootstrap: one per experiment
    return bootstrap_p(boot.distribution(a, KEY) - boot.distribution(b, KEY))


def test_the_p_value_is_uniform_under_a_true_null_and_small_under_a_planted_difference():
    rng = np.random.default_rng(7)
    weights = {}  # the one resample matrix of the 120 cases, shared by every simulated experiment
    difficulty = rng.uniform(0.2, 0.9, 120)  # the same cases for both models: a paired design
    null = np.array([simulated_p(rng, weights, difficulty, difficulty) for _ in range(300)])
    assert 0.02 <= (null < 0.05).mean() <= 0.09  # a 5% test rejects about 5% of true nulls
    for q in (0.25, 0.5, 0.75):  # and the p-values spread evenly (the quartiles of a uniform, within sampling)
        assert abs((null < q).mean() - q) < 0.08
    planted = np.array([simulated_p(rng, weights, difficulty, difficulty - 0.25) for _ in range(50)])
    assert (planted < 0.05).mean() > 0.9


def test_the_power_formula_against_a_simulation_with_known_variance_components():
    rng = np.random.default_rng(3)
    n, k = 200, 5
    p_a = rng.uniform(0.3, 0.9, n)
    p_b = np.clip(p_a - rng.normal(0.05, 0.15, n), 0.05, 0.95)
    # the known components: between cases, the variance of the per-case true difference; between runs, the two
    # models' Bernoulli noise, per case
    case_var, noise = np.var(p_a - p_b), np.mean(p_a * (1 - p_a)) + np.mean(p_b * (1 - p_b))
    true_se = lambda cases, runs: np.sqrt(case_var / cases + noise / (cases * runs))  # noqa: E731
    # the formula's standard error is the spread of the difference of means over repeated experiments (cases drawn
    # afresh each time, runs sampled)
    diffs = []
    for _ in range(400):
        idx = rng.integers(0, n, n)
        a = (rng.random((k, n)) < p_a[idx]).mean()
        b = (rng.random((k, n)) < p_b[idx]).mean()
        diffs.append(a - b)
    assert np.std(diffs) == pytest.approx(true_se(n, k), rel=0.12)
    # estimated from one saved experiment, the components give the same detectable difference as the truth
    boot = Bootstrap(1000, 0)
    a = group_of("a", (rng.random((k, n)) < p_a).astype(float))
    b = group_of("b", (rng.random((k, n)) < p_b).astype(float))
    est_case, est_run = variance_components(a, b, boot, KEY)
    assert est_run * n == pytest.approx(noise, rel=0.25)  # a run's variance is the noise over its cases
    for cases, runs in ((n, k), (432, 5), (100, 1), (200, 10)):
        expected = 2.8016 * true_se(cases, runs)  # z(0.975) + z(0.8) = 1.95996 + 0.84162
        assert detectable_difference(est_case, est_run, cases, runs, n) == pytest.approx(expected, rel=0.2)


def lca_ljp_run(run_id: str, labels: list[str], verdicts: list[list[str]]) -> Run:
    """A constructed run: LCA labels of case 1's two histories, and one LJP setup's verdicts per case."""
    run = Run(run_id, "m", {"selected_cases": ["1", "2"]}, "m")
    truth = {"complete": "策略一", "underspecified": "策略二"}
    run.saved = {"LCA": {"1": {"judgments": {h: {"predicted_type": label, "true_type": truth[h]}
                                                      for h, label in zip(truth, labels)}}},
                 "LJP_direct": {str(i + 1): {"predicted": v, "gold": ["支持", "驳回"]} for i, v in enumerate(verdicts)}}
    return run


def test_consistency_figures_on_constructed_runs():
    runs = [lca_ljp_run("r1", ["策略一", "策略二"], [["支持", "驳回"], ["支持", "支持"]]),
            lca_ljp_run("r2", ["策略一", "策略一"], [["支持", "支持"], ["驳回", "支持"]]),
            lca_ljp_run("r3", ["策略一", "策略二"], [["支持", "驳回"], ["支持", "驳回"]])]
    c = consistency(runs)
    # LCA: the complete history right and the same in all three; the underspecified one wrong once (r2)
    assert c["LCA"] == pytest.approx({"items": 2, "all_right": 0.5, "any_right": 1.0, "same": 0.5, "flip": 1 / 3})
    # LJP claims (gold 支持, 驳回): case 1 claim 1 right ×3; claim 2 right in r1, r3; case 2 claim 1 right in r1,
    # r3; claim 2 right in r3 only. Verdicts differ between r1/r2 on 2 of 4, r1/r3 on 1, r2/r3 on 3
    assert c["LJP Direct"] == pytest.approx({"items": 4, "all_right": 0.25, "any_right": 1.0, "same": 0.25,
                                             "flip": (2 + 1 + 3) / 12})
