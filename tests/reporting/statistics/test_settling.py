"""The sequential rule that settles each ranking decision against the randomization test's own Monte-Carlo error: a
drawn p whose interval holds its Holm threshold draws more patterns until it clears it or reaches the cap, a decision
still turning on it is marked unsettled, and a decision printed as settled is the same at every seed."""

import math
import subprocess
import sys

import numpy as np
import pytest

import show_results
from lexpilot.reporting.statistics.letters import decisions
from lexpilot.reporting.statistics.randomization import Randomization
from lexpilot.reporting.statistics.settling import (
    ABOVE,
    BELOW,
    BLOCKS,
    STRADDLES,
    Family,
    monte_carlo_interval,
    settle,
)
from tests.helpers.paths import ROOT
from tests.helpers.rankings import KEY, group_of, write_dcg_runs
from tests.helpers.reports import rows_of

# Three models, one run each, on 80 cases: "best" right on every case; "mid" on cases 0-31 and 49-59, "low" on 32-59,
# so mid and low differ on 49 cases, 32 of them mid's: a sign test's p just below 0.05, far from the other pairs'
CASES = 80
NEAR = {
    "best": set(range(CASES)),
    "mid": set(range(32)) | set(range(49, 60)),
    "low": set(range(32, 60)),
}
# two-sided exact p of mid against low: 49 differing cases, 32 one way
NEAR_P = 2 * sum(math.comb(49, x) for x in range(32, 50)) / 2**49
PERMUTATIONS = 1199  # (B + 1) = 20 · 3 pairs / 0.05


def near_groups() -> dict:
    return {
        m: group_of(m, np.array([[float(c in right) for c in range(CASES)]])) for m, right in NEAR.items()
    }


def clopper_pearson(k: int, n: int, level: float) -> tuple[float, float]:
    """The exact binomial interval by its definition, solved for the tails (no Beta quantile)."""
    from scipy.optimize import brentq  # here: SciPy costs every worker's collection otherwise
    from scipy.stats import binom

    low = 0.0 if k == 0 else brentq(lambda q: binom.sf(k - 1, n, q) - level / 2, 1e-12, 1 - 1e-12)
    high = 1.0 if k == n else brentq(lambda q: binom.cdf(k, n, q) - level / 2, 1e-12, 1 - 1e-12)
    return low, high


def test_the_monte_carlo_interval_is_clopper_pearsons():
    """P(X ≥ k) = level / 2 at the lower bound and P(X ≤ k) = level / 2 at the upper, X ~ Bin(n, q)."""
    for k, n in ((0, 1199), (3, 1199), (53, 1199), (851, 19184), (1199, 1199)):
        assert monte_carlo_interval(k, n, 0.001) == pytest.approx(clopper_pearson(k, n, 0.001), abs=1e-9)


def test_a_p_near_its_holm_threshold_draws_more_until_its_interval_clears_it():
    """By hand: the three pairs' Holm thresholds are 0.05 / 3, 0.05 / 2 and 0.05, mid-low's p (exact: 2 · P(X ≥ 32),
    X ~ Bin(49, ½), 0.0444) the largest. Over B = 1,199 patterns its 99.9% interval (half-width about
    3.29 · √(p(1 − p)/B) = 0.019) holds 0.05: it doubles its patterns until the interval lies below 0.05, before
    the cap at seed 7; the far pairs (p about 1/1,200) draw nothing more."""
    g = near_groups()
    family = [(g["best"], g["low"], KEY), (g["best"], g["mid"], KEY), (g["mid"], g["low"], KEY)]
    test = Randomization(PERMUTATIONS, seed=7, stop_above=0.05)
    first = test.estimate(g["mid"], g["low"], KEY)
    low, high = clopper_pearson(first.extreme, first.drawn, 0.001)
    assert first.drawn == PERMUTATIONS and low < 0.05 < high  # straddles at B
    assert settle([family], test, 0.05) == [[False, False, False]]
    assert [test.blocks(*pair) for pair in family[:2]] == [0, 0]
    blocks = test.blocks(g["mid"], g["low"], KEY)
    near = test.estimate(g["mid"], g["low"], KEY)
    assert (
        1 <= blocks < BLOCKS and near.drawn == PERMUTATIONS * 2**blocks
    )  # B, 2B, 4B, …: stopped before 16 B
    assert near.p == (near.extreme + 1) / (near.drawn + 1)
    assert clopper_pearson(near.extreme, near.drawn, 0.001)[1] < 0.05  # cleared, so it stopped
    assert abs(near.p - NEAR_P) < 4 * math.sqrt(NEAR_P * (1 - NEAR_P) / near.drawn)


def test_a_p_on_its_threshold_draws_to_the_cap_and_its_decision_is_unsettled():
    """At α equal to mid-low's exact p, no number of patterns clears it: 16 B drawn (B · 2^4), then unsettled."""
    g = near_groups()
    family = [(g["best"], g["low"], KEY), (g["best"], g["mid"], KEY), (g["mid"], g["low"], KEY)]
    test = Randomization(PERMUTATIONS, seed=7, stop_above=NEAR_P)
    assert settle([family], test, NEAR_P) == [[False, False, True]]
    assert test.estimate(g["mid"], g["low"], KEY).drawn == 16 * PERMUTATIONS


@pytest.mark.parametrize(
    "sides, expected",
    [
        # Holm's order: test 2, then 0, then 1
        ([BELOW, BELOW, BELOW], [False, False, False]),
        ([BELOW, STRADDLES, BELOW], [False, True, False]),  # the last place: only its own decision turns
        ([STRADDLES, BELOW, BELOW], [True, True, False]),  # "different" only if the one before it is
        ([STRADDLES, ABOVE, BELOW], [True, False, False]),  # "not different" whatever the one before it does
        ([BELOW, BELOW, ABOVE], [False, False, False]),  # the first fails: every decision "not different"
    ],
)
def test_a_decision_is_unsettled_when_a_straddling_test_up_to_its_place_can_change_it(sides, expected):
    assert Family(sides, order=[2, 0, 1]).unsettled() == expected


def test_the_letters_an_unsettled_pair_could_change_are_marked():
    """By hand with the letter display: A, B, C all alike ("a"); should B-C be different, A would read "ab", B "a",
    C "b", so all three are marked. With C apart from A and B (C "a", A and B "b"), a different A-B would give A "b",
    B "c": C's letters stay, so only A and B are marked."""
    alike = decisions(
        ["A", "B", "C"], [("A", "B", 0.5), ("A", "C", 0.5), ("B", "C", 0.5)], 0.05, {frozenset("BC")}
    )
    assert alike.letters == {"A": "a", "B": "a", "C": "a"}
    assert [alike.shown(m) for m in "ABC"] == ["a*", "a*", "a*"]
    apart = decisions(
        ["C", "A", "B"], [("C", "A", 0.01), ("C", "B", 0.01), ("A", "B", 0.5)], 0.05, {frozenset("AB")}
    )
    assert [apart.shown(m) for m in "CAB"] == ["a", "b*", "b*"]


@pytest.fixture(scope="module")
def near_runs(tmp_path_factory):
    plan = {model: {"r1": sorted(right)} for model, right in NEAR.items()}
    return write_dcg_runs(tmp_path_factory.mktemp("near"), plan, CASES)[0]


def ranked_at(root, seed: int, capsys) -> tuple[dict, dict, float, str]:
    """`--rank` at a seed: each pair's decision, each model's letters, mid-low's p, and the pairs table's title."""
    capsys.readouterr()
    argv = ["--output-root", str(root), "--rank", "--seed", str(seed), "--format", "csv"]
    assert show_results.main(argv) == 0
    out = capsys.readouterr().out
    pairs = {(r[1], r[2]): r[3:] for r in rows_of(out, "Every comparable pair") if r[0] == "DCG Acc."}
    letters = {r[2]: r[6] for r in rows_of(out, "Ranking per metric") if r[0] == "DCG Acc."}
    title = next(line for line in out.splitlines() if line.startswith('"Every comparable pair'))
    return {pair: row[5] for pair, row in pairs.items()}, letters, float(pairs[("mid", "low")][3]), title


@pytest.mark.slow
def test_a_decision_printed_as_settled_is_the_same_at_every_seed(near_runs, capsys):
    """`--rank` at five seeds on runs the DCG stage wrote, mid-low near its threshold: every decision printed as
    settled ("yes" or "no"), and every model's letters printed unmarked, is the same at every seed. The rule
    engages: mid-low's p is (k + 1) / (n + 1) over n = 1,199 · 2^b patterns with b ≥ 1, and it is settled, as
    "yes" (its exact p, 0.0444, is below 0.05), at some seeds; where it is not, its models' letters are marked and
    best's are not (a different mid-low leaves best alone in "a")."""
    decided, letters, near = {}, {}, []
    for seed in range(1, 6):
        pairs, shown, p, title = ranked_at(near_runs, seed, capsys)
        for pair, value in pairs.items():
            if value != "unsettled":
                decided.setdefault(pair, set()).add(value)
        for model, value in shown.items():
            if not value.endswith("*"):
                letters.setdefault(model, set()).add(value)
        near.append((seed, pairs[("mid", "low")], shown, p, title))
    assert all(len(values) == 1 for values in decided.values()), decided
    assert all(len(values) == 1 for values in letters.values()), letters
    assert decided[("mid", "low")] == {"yes"}  # settled at some seed, and as its exact p says
    drawn = [PERMUTATIONS * 2**b for b in range(1, BLOCKS + 1)]
    for seed, decision, shown, p, title in near:
        assert any(abs(p * (n + 1) - round(p * (n + 1))) < 1e-6 for n in drawn), (seed, p)
        assert "test did)" in title or "tests did)" in title
        if decision == "unsettled":
            assert shown["best"] == "a" and shown["mid"].endswith("*") and shown["low"].endswith("*")


def test_a_report_starts_without_scipy_or_scikit_learn():
    """SciPy and scikit-learn are imported where a report uses them (the settling interval, a kappa), not as it
    starts: SciPy imported at this module's top took half of every report's start (0.28 s of 0.6 s here)."""
    loaded = "import sys, show_results; print(sorted({'scipy', 'sklearn'} & {m.split('.')[0] for m in sys.modules}))"
    done = subprocess.run(
        [sys.executable, "-c", loaded], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "[]\n", done.stdout + done.stderr
