"""The rankings' p-values: a paired randomization test over cases whose resolution always
allows a rejection after Holm's adjustment, checked against the exact sign test on runs the DCG stage wrote with
planted differences, and against the nominal rate under a true null."""

import json

import numpy as np
import pytest

import show_results
from lexpilot.reporting.scoring.groups import group_runs
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.reporting.statistics.randomization import Randomization, permutations_needed
from tests.helpers.rankings import KEY, group_of, plan_script, run_dcg
from tests.helpers.reports import rows_of


def write_dcg_grid(folder, n: int, plan: dict) -> tuple:
    """The DCG stage of every model and run of the plan (model -> run -> cases right), on n synthetic cases."""
    from bench.throughput import synthetic_dataset
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.stages import SECRET

    dataset = folder / "cases.json"
    synthetic_dataset(n, dataset)
    cases = json.loads(dataset.read_text(encoding="utf-8"))
    runs = sorted({run for model in plan.values() for run in model})
    with pytest.MonkeyPatch.context() as monkeypatch, ScriptedProvider() as provider:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        for run_id in runs:
            provider.script = plan_script(cases, plan, run_id)
            for model in (m for m in plan if run_id in plan[m]):
                run_dcg(provider, run_id, model, dataset, folder / "out")
    return folder / "out", dataset


# Ten models, one run each, on 81 cases: model j is right on the first 9·j cases, so neighbours differ on 9 cases,
# all one way, and models further apart on 18 or more
TEN = {f"m{j}": {"r1": range(9 * j)} for j in range(10)}


@pytest.fixture(scope="module")
def ten_models(tmp_path_factory):
    return write_dcg_grid(tmp_path_factory.mktemp("ten"), 81, TEN)[0]


def pairs_and_letters(root, capsys, *extra) -> tuple[dict, dict]:
    capsys.readouterr()
    assert show_results.main(["--output-root", str(root), "--rank", "--format", "csv", *extra]) == 0
    out = capsys.readouterr().out
    pairs = {(r[1], r[2]): r[3:] for r in rows_of(out, "Every comparable pair") if r[0] == "DCG Acc."}
    letters = {r[2]: r[6] for r in rows_of(out, "Ranking per metric") if r[0] == "DCG Acc."}
    return pairs, letters


@pytest.mark.slow
def test_ten_models_with_ordered_differences_get_ten_letters_at_the_default_command(ten_models, capsys):
    """ "At the defaults, ten models can never differ ... The resolution of p must always allow a
    rejection: (B + 1) ≥ 20 · m / α for a family of m pairs, chosen automatically". By hand: 45 pairs at α 0.05
    need B = 20 · 45 / 0.05 − 1 = 17,999 permutations. Neighbours differ on 9 cases, one way: the 2^9 swap patterns
    are enumerated, p = 2 · (1/2)^9 = 1/256 (the exact sign test); the other 36 pairs differ on 18 or more cases,
    and a drawn pattern rarely reaches their observed difference: p = (k + 1)/18,000, k at most 2. Holm: the 36 smallest × 45 … × 10 (at
    most 0.0025), then the nine neighbours' 1/256 × 9 = 0.0352 < 0.05: every pair differs, letters a … j."""
    pairs, letters = pairs_and_letters(ten_models, capsys)
    assert len(pairs) == 45
    for j in range(9):
        higher, lower = f"m{j + 1}", f"m{j}"
        assert float(pairs[(higher, lower)][0]) == pytest.approx(9 / 81)
        assert [float(p) for p in pairs[(higher, lower)][3:5]] == [1 / 256, pytest.approx(9 / 256)]
        assert pairs[(higher, lower)][5] == "yes"
    far = [pairs[(f"m{i}", f"m{j}")] for i in range(10) for j in range(i - 1)]
    # (k + 1) / 18,000, k the drawn patterns as extreme: for 18 differing cases each draw is with chance 2 / 2^18,
    # so k is 0 or rarely 1 or 2
    drawn = [float(p[3]) * 18000 for p in far]
    assert all(abs(k - round(k)) < 1e-6 and 1 <= round(k) <= 3 for k in drawn), drawn
    assert all(p[5] == "yes" for p in far)
    assert letters == {f"m{9 - i}": "abcdefghij"[i] for i in range(10)}


@pytest.mark.slow
def test_too_few_permutations_for_the_family_are_refused_in_one_line(ten_models, capsys):
    """ "`--resamples` below what the family needs is refused in one line" (the test's own count is
    --permutations; --resamples sets the intervals' bootstrap), and a level no permitted count can reach is said."""
    capsys.readouterr()
    assert show_results.main(["--output-root", str(ten_models), "--rank", "--permutations", "1000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "show_results: --rank: 45 pairs at --alpha 0.05 need at least 17,999 permutations ((B + 1) ≥ "
        "20 · pairs / alpha), got --permutations 1,000; leave it out to have it chosen"
    )
    assert show_results.main(["--output-root", str(ten_models), "--rank", "--alpha", "0.0001"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "show_results: --rank: 45 pairs at --alpha 0.0001 need 8,999,999 permutations, above the cap of 100,000: "
        "use a larger --alpha, or rank fewer models (--model)"
    )
    assert permutations_needed(10, 0.05) == 3999 and permutations_needed(1, 0.05) == 999
    # one model has no pair to test, so no count is too few ("0 pairs ... need 999")
    assert (
        show_results.main(
            ["--output-root", str(ten_models), "--rank", "--permutations", "5", "--model", "m1"]
        )
        == 0
    )


# Six models against a base, one run each, on 24 cases: m-dK is right on the base's 12 cases and K more
DISCORDANT = {"base": {"r1": range(12)}} | {f"m-d{k}": {"r1": range(12 + k)} for k in (3, 4, 5, 6, 8, 12)}


@pytest.fixture(scope="module")
def discordant(tmp_path_factory):
    return write_dcg_grid(tmp_path_factory.mktemp("discordant"), 24, DISCORDANT)


@pytest.mark.slow
def test_with_few_differing_cases_p_is_the_exact_sign_tests(discordant, capsys):
    """ "With 4 cases where only A is right ... the tool gives 0.034–0.042 against an exact sign
    test's 0.125 ... Use a paired randomization test over cases ... enumerate exactly when the differing cases are
    few". K differing cases, all one way: the two-sided sign test's p = 2 · (1/2)^K."""
    root, _ = discordant
    pairs, _ = pairs_and_letters(root, capsys)
    for k in (3, 4, 5, 6, 8, 12):
        exact = 2 * 0.5**k
        assert float(pairs[(f"m-d{k}", "base")][3]) == exact, k  # every pattern enumerated: exactly


@pytest.mark.slow
def test_drawn_permutations_agree_with_the_exact_p_within_monte_carlo_error(discordant):
    """The same runs, the test drawing B patterns instead of enumerating (B below 2^K): the estimate (k + 1)/(B + 1)
    is within three standard errors of the exact p, plus its 1/(B + 1)."""
    root, dataset = discordant
    groups = {g.model: g for g in group_runs(load_runs(root, None, None, dataset=dataset))}
    for k, permutations in ((8, 199), (12, 2999)):
        exact = 2 * 0.5**k
        drawn = Randomization(permutations, seed=k).p_value(groups[f"m-d{k}"], groups["base"], KEY)
        error = 3 * np.sqrt(exact * (1 - exact) / permutations) + 1 / (permutations + 1)
        assert abs(drawn - exact) <= error, (k, drawn, exact)


@pytest.mark.slow  # both modules' grids (~10 s)
def test_the_pairs_tested_on_every_core_have_the_p_values_of_one_by_one(discordant, ten_models):
    """The ranking prepares its pairs' tests in threads (docs/performance.md): each pair's p must be what the same
    test gives alone, in another order, on runs the stage wrote (drawn and enumerated patterns both)."""
    import itertools

    for root, dataset in (discordant, (ten_models, ten_models.parent / "cases.json")):
        groups = group_runs(load_runs(root, None, None, dataset=dataset))
        pairs = [(a, b, KEY) for a, b in itertools.combinations(groups, 2)]
        together = Randomization(2999, seed=7)
        together.prepare(pairs)
        alone = [Randomization(2999, seed=7).p_value(a, b, key) for a, b, key in reversed(pairs)][::-1]
        assert [together.p_value(a, b, key) for a, b, key in pairs] == alone and len(set(alone)) > 1


# Three models, one run each, on 60 cases: "far" right on every case, "base" on the first 48 and "near" on 45 others
# (36 in common), so base and near are alike (21 cases differ, 12 against 9: p large) and far differs from both
SEQUENTIAL = {"far": {"r1": range(60)}, "base": {"r1": range(0, 48)}, "near": {"r1": range(12, 57)}}


@pytest.mark.slow
def test_a_pair_sure_to_exceed_alpha_stops_early_and_every_decision_is_the_full_tests(tmp_path, capsys):
    """The sequential Monte Carlo p of Besag and Clifford (1991), as docs/statistics.md states it: "a test stops at
    the h-th pattern as extreme as the observed difference, its p then h / L over the L patterns drawn", at
    h = floor(α B) + 1. By hand on runs the DCG stage wrote: 3 pairs at α 0.05 draw B = 20 · 3 / 0.05 − 1 = 1,199
    patterns (the report's own draws, seed 0), h = 60; each pattern's difference is the sum over cases of
    (A − B) · (1 − 2 · swapped) / 60, counted here from the records."""
    root, dataset = write_dcg_grid(tmp_path, 60, SEQUENTIAL)
    pairs, letters = pairs_and_letters(root, capsys)
    order = [c["case_number"] for c in json.loads(dataset.read_text(encoding="utf-8"))]
    right = {}
    for path in root.glob("eval_results/r1/*/DCG_results.jsonl"):
        model = json.loads((root / "runs" / "r1" / path.parent.name / "manifest.json").read_text())["models"]
        records = {r["case_number"]: r["success"] for r in map(json.loads, path.read_text().splitlines())}
        right[model["eval"]["model"]] = np.array([float(records[c]) for c in order])
    swaps = Randomization(1199, seed=0).signs(60)  # the draws: rng([seed, cases]) < 0.5, one row per pattern
    stopped = 0
    for (a, b), row in pairs.items():
        d = right[a] - right[b]
        observed, drawn = abs(d.sum()) / 60, np.abs((1 - 2 * swaps) @ d) / 60
        hits = drawn >= observed - 1e-12
        if hits.sum() >= 60:  # the 60th extreme at pattern L: p = 60 / L
            expected = 60 / (int(np.flatnonzero(np.cumsum(hits) == 60)[0]) + 1)
            stopped += 1
        else:
            expected = (hits.sum() + 1) / 1200
        assert float(row[3]) == pytest.approx(expected, rel=1e-12), (a, b)
    assert stopped == 1 and float(pairs[("base", "near")][3]) > 0.3 and len(pairs) == 3
    assert letters == {"far": "a", "near": "b", "base": "b"}


@pytest.mark.slow
def test_stopping_early_never_changes_a_decision_of_the_full_test():
    """At h = floor(α (B + 1)) the stopped p = h / L could fall just below α where the full test's
    did not (B = 1,018: 0.049 "yes" against 0.05005 "no"). At h = floor(α B) + 1, over 300 tests near the edge (12
    simulated pairs whose p is near α, one model a little better on 40 cases, three runs each; 25 seeds each), each
    p at or below α is the full test's to the last digit and every decision at α is the same."""
    rng = np.random.default_rng(3)
    edge, stopped = [], 0
    while len(edge) < 12:
        chances = rng.uniform(0.3, 0.8, 40)
        a = group_of("a", (rng.random((3, 40)) < np.clip(chances + 0.1, 0, 1)).astype(float))
        b = group_of("b", (rng.random((3, 40)) < chances).astype(float))
        if 0.03 < Randomization(1018, 0).p_value(a, b, KEY) < 0.08:
            edge.append((a, b))
    for a, b in edge:
        for seed in range(25):
            full = Randomization(1018, seed).p_value(a, b, KEY)
            early = Randomization(1018, seed, stop_above=0.05).p_value(a, b, KEY)
            assert early == full or (early > 0.05 and full > 0.05), (seed, early, full)
            stopped += early != full
    assert stopped > 50  # many tests stopped, none changed its answer


def test_under_a_true_null_a_5_percent_test_rejects_at_most_5_percent():
    """ "The null rejection rate over 300 simulated grids is at most α + 2 SE" — two models with the
    same per-case chances, two runs each, 120 cases; and a planted difference is found."""
    rng = np.random.default_rng(5)
    test = Randomization(499)
    difficulty = rng.uniform(0.2, 0.9, 120)

    def p(shift: float) -> float:
        a = group_of("a", (rng.random((2, 120)) < difficulty).astype(float))
        b = group_of("b", (rng.random((2, 120)) < np.clip(difficulty - shift, 0, 1)).astype(float))
        return test.p_value(a, b, KEY)

    null = np.array([p(0.0) for _ in range(300)])
    se = np.sqrt(0.05 * 0.95 / 300)
    assert (null < 0.05).mean() <= 0.05 + 2 * se
    for q in (0.25, 0.5):  # valid at every level, not only at 5%
        assert (null <= q).mean() <= q + 2 * np.sqrt(q * (1 - q) / 300)
    assert np.mean([p(0.2) < 0.05 for _ in range(40)]) > 0.9


# A 4-run model and a 2-run one, each run right on 10 of 12 cases: "right in all k" favours the model with fewer runs
RUNS = {
    "four": {
        "r1": range(10),
        "r2": range(2, 12),
        "r3": [*range(6), *range(8, 12)],
        "r4": [0, 1, 2, 4, 5, 6, 8, 9, 10, 11],
    },
    "two": {"r1": range(10), "r2": range(1, 11)},
}


@pytest.mark.slow
def test_pass_hat_k_compares_models_with_different_numbers_of_runs_at_one_k(tmp_path, capsys):
    """ "Consistency is not pass^k ... Report tau-bench's pass^k estimator for every k ≤ n: the mean
    over cases of C(c, k)/C(n, k). Compare models at a common k, the smallest run count in the table, and say
    which." Expected values from tau-bench's formula on the plan, each case's c counted from the plan here."""
    import math

    root, _ = write_dcg_grid(tmp_path, 12, RUNS)
    capsys.readouterr()
    assert show_results.main(["--output-root", str(root), "--consistency", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    header = next(
        r
        for r in __import__("csv").reader(__import__("io").StringIO(out))
        if r and r[0].startswith("Consistency over runs") and r[1] == "header"
    )
    # as numbers
    assert header[-4:] == ["pass^1 value", "pass^2 (common) value", "pass^3 value", "pass^4 value"]
    assert "compare at pass^2, the smallest number of runs here" in header[0]
    rows = {r[0]: r[2:] for r in rows_of(out, "Consistency over runs") if r[1] == "DCG"}
    for model, runs in RUNS.items():
        right = [sum(case in cases for cases in runs.values()) for case in range(12)]
        n = len(runs)
        expected = [100 * sum(math.comb(c, k) / math.comb(n, k) for c in right) / 12 for k in range(1, n + 1)]
        assert [float(v) for v in rows[model][6 : 6 + n]] == pytest.approx(expected), model
        assert rows[model][6 + n :] == [""] * (4 - n), model
    # right in all runs: the 2-run model 9/12 (cases 2-10), the 4-run model 5/12 (cases 3, 5, 6, 9, 10)
    assert float(rows["two"][2]) == pytest.approx(100 * 9 / 12) and float(rows["four"][2]) == pytest.approx(
        100 * 5 / 12
    )


def test_a_cached_test_is_never_read_for_a_group_made_after_another_was_freed():
    """A freed object's id is given to the next one made: the tests and resamples cached by group id must never
    answer for a new group (Python 3.10 reused the null grid's ids, and a planted difference read their p)."""
    import gc

    from lexpilot.reporting.statistics.bootstrap import Bootstrap

    rng = np.random.default_rng(1)
    test, boot = Randomization(199), Bootstrap(50)
    for _ in range(30):
        same = rng.random((2, 60)) < 0.5
        a, b = group_of("a", same.astype(float)), group_of("b", same.astype(float))
        assert test.p_value(a, b, KEY) == 1.0 and boot.interval(a, KEY) is not None
        del a, b
        gc.collect()
        a, b = group_of("a", np.ones((2, 60))), group_of("b", np.zeros((2, 60)))
        assert test.p_value(a, b, KEY) < 0.01 and boot.interval(a, KEY) == (1.0, 1.0)
        del a, b
        gc.collect()
