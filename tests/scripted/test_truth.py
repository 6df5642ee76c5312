"""The truth the scripted provider plays: every decision right with exactly its set probability, runs differing by
the set noise only, the judge giving each true label with its recall and spreading its errors evenly; and each
model's expected metrics, true and judged, as worked out by hand."""

import numpy as np
import pytest

from lexpilot.benchmark.dataset import load_dataset
from lexpilot.scripted.abilities import parse_abilities
from lexpilot.scripted.expected import expected_metrics
from lexpilot.scripted.truth import chance, draw, judged
from tests.helpers.paths import SAMPLE

ONE_MODEL = """
noise = {noise}
[models."m"]
lca_complete = 0.9
lca_underspecified = 0.8
dcg = 0.6
ljp = 0.7
[judge]
lca_predict = 0.9
lca_ask = 0.8
dcg_yes = 0.85
dcg_no = 0.9
ljp = 0.95
"""
N = 4000  # decisions drawn: a share's SD is at most √(¼ / N) = 0.008, so 4 SD is 0.032


def abilities(noise: float):
    return parse_abilities(ONE_MODEL.format(noise=noise), "a.toml")


def test_a_draw_is_the_same_for_the_same_parts_and_uniform():
    assert draw(0, "x", 1) == draw(0, "x", 1) != draw(1, "x", 1)
    u = np.array([draw(0, i) for i in range(N)])
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / N)
    assert abs((u < 0.3).mean() - 0.3) < 0.032


@pytest.mark.parametrize("noise", [0.0, 0.5, 1.0])
def test_two_runs_agree_as_the_noise_says_and_each_is_right_with_its_probability(noise):
    """Both decisions keep the case's draw with probability (1 − ν)², and then agree; otherwise they are independent
    and agree with probability p² + (1 − p)²."""
    a, p = abilities(noise), 0.7
    one = np.array([chance(a, "m", "run1", f"case{i}", "s") < p for i in range(N)])
    two = np.array([chance(a, "m", "run2", f"case{i}", "s") < p for i in range(N)])
    kept = (1 - noise) ** 2
    agree = kept + (1 - kept) * (p**2 + (1 - p) ** 2)
    assert abs((one == two).mean() - agree) < 0.032
    assert abs(one.mean() - p) < 0.032 and abs(two.mean() - p) < 0.032


def test_the_judge_gives_the_truth_with_its_recall_and_spreads_its_errors_evenly():
    a = abilities(0)
    said = [judged(a, "judge", "", f"prompt {i}", "LJP", "支持", 1) for i in range(N)]
    assert abs(said.count("支持") / N - 0.95) < 0.032
    assert abs(said.count("部分支持") / N - 0.025) < 0.01 and abs(said.count("驳回") / N - 0.025) < 0.01
    asks = [judged(a, "judge", "", f"prompt {i}", "LCA", "策略二") for i in range(N)]
    assert abs(asks.count("策略二") / N - 0.8) < 0.032
    # the same prompt in the same run is labelled alike; another run of the judge draws anew
    assert judged(a, "judge", "r1", "p", "DCG", "是") == judged(a, "judge", "r1", "p", "DCG", "是")


def test_the_expected_metrics_are_the_abilities_worked_out_by_hand():
    cases, _ = load_dataset(SAMPLE)  # its claims: 10 支持, 7 部分支持, 4 驳回
    true, seen = (
        expected_metrics(abilities(0), cases)["m"],
        expected_metrics(abilities(0), cases, judged=True)["m"],
    )
    assert true[("LCA", "acc_c")] == 0.9 and true[("LCA", "acc_u")] == 0.8
    # per 10 cases: TP 8, FN 2 (underspecified); TN 9, FP 1 (complete)
    assert true[("LCA", "macro_f1")] == pytest.approx((16 / 19 + 18 / 21) / 2)
    assert true[("DCG", "accuracy")] == pytest.approx(1 - 0.4**2)
    # the 21 claims' expected confusion at 0.7: rows [7, 1.5, 1.5], [1.05, 4.9, 1.05], [0.6, 0.6, 2.8]; columns
    # 8.65, 7, 5.35; weighted disagreement 0.25 · 4.2 + 2.1 = 3.15, by chance (0.25 · 196 + 88.1) / 21
    assert true[("LJP_direct", "qwk")] == pytest.approx(1 - 3.15 / (137.1 / 21))
    assert true[("LJP_gold", "accuracy")] == pytest.approx(0.7)
    # judged: a right reply keeps its label, a wrong one is mislabelled into a pass
    assert seen[("LCA", "acc_c")] == pytest.approx(0.9 * 0.9 + 0.1 * 0.2)
    assert seen[("LCA", "acc_u")] == pytest.approx(0.8 * 0.8 + 0.2 * 0.1)
    assert seen[("DCG", "accuracy")] == pytest.approx(1 - (1 - (0.6 * 0.85 + 0.4 * 0.1)) ** 2)
    assert seen[("LJP_direct", "accuracy")] == pytest.approx(0.7 * 0.95 + 0.3 * 0.025)
