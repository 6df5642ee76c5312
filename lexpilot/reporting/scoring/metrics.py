"""The paper's metrics from per-case count vectors: LCA Macro-F1 with Acc_C/Acc_U, DCG accuracy, claim-level
QWK on the fixed ordinal scale and accuracy.

Each task reduces a case to a small vector of counts; a metric is a function of the summed counts. The same
functions give the point estimate (counts summed over the cases) and, vectorised over the first axis, every
bootstrap resample (counts weighted by how often each case was drawn).
"""

from __future__ import annotations

import numpy as np

from lexpilot.benchmark.vocabulary import VERDICTS

K = len(VERDICTS)
VERDICT_INDEX = {label: i for i, label in enumerate(VERDICTS)}
QWK_WEIGHTS = np.subtract.outer(np.arange(K), np.arange(K)) ** 2 / (K - 1) ** 2


def ratio(num, den):
    """num/den, NaN where den is 0 (the metric is undefined there)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=den != 0)


def lca_counts(labels) -> np.ndarray:
    """(TP, FP, FN, TN) with underspecified as the positive class, from (true, predicted) types."""
    cells = {
        ("underspecified", "underspecified"): 0,
        ("complete", "underspecified"): 1,
        ("underspecified", "complete"): 2,
        ("complete", "complete"): 3,
    }
    c = np.zeros(4)
    for pair in labels:
        c[cells[pair]] += 1
    return c


def lca_from_counts(c: np.ndarray) -> dict:
    tp, fp, fn, tn = np.moveaxis(np.asarray(c, float), -1, 0)
    # an F1 with no positive anywhere is 0, as in the paper's always-ask / always-answer 1/3
    f1_u = np.nan_to_num(ratio(2 * tp, 2 * tp + fp + fn))
    f1_c = np.nan_to_num(ratio(2 * tn, 2 * tn + fp + fn))
    return {
        "macro_f1": (f1_u + f1_c) / 2,
        "f1_u": f1_u,
        "f1_c": f1_c,
        "acc_c": ratio(tn, tn + fp),
        "acc_u": ratio(tp, tp + fn),
    }


def dcg_from_counts(c: np.ndarray) -> dict:
    successes, cases = np.moveaxis(np.asarray(c, float), -1, 0)
    return {"accuracy": ratio(successes, cases)}


def confusion(pairs) -> np.ndarray:
    """Gold × predicted counts on the fixed ordinal scale, flattened."""
    c = np.zeros((K, K))
    for g, p in pairs:
        c[VERDICT_INDEX[g], VERDICT_INDEX[p]] += 1
    return c.ravel()


# flattened gold × predicted counts -> gold totals, predicted totals, agreements: as products with these, which is
# many times faster than sums over axes of three when there are thousands of resamples or permutations
GOLD_TOTALS = np.kron(np.eye(K), np.ones((K, 1)))
PREDICTED_TOTALS = np.kron(np.ones((K, 1)), np.eye(K))
AGREEMENTS = np.eye(K).ravel()


# every linear part of the claim-level metrics at once, one product: claims, the gold totals weighted by the QWK
# weights (Σ_i w_ij · gold_i for each predicted j), predicted totals, the observed disagreement and the agreements.
# Exact (counts times 0, 1 or a quarter), and one pass instead of six: the rankings' permutations take it millions
# of times
LJP_PARTS = np.column_stack(
    [np.ones(K * K), GOLD_TOTALS @ QWK_WEIGHTS, PREDICTED_TOTALS, QWK_WEIGHTS.ravel(), AGREEMENTS]
)


def ljp_from_counts(c: np.ndarray) -> dict:
    parts = np.moveaxis(np.asarray(c, float) @ LJP_PARTS, -1, 0)
    n, weighted_gold, predicted = parts[0], parts[1 : 1 + K], parts[1 + K : 1 + 2 * K]
    observed_disagreement, agreements = parts[1 + 2 * K], parts[2 + 2 * K]
    # the disagreement chance predicts: sum over gold i and predicted j of w_ij · gold_i · predicted_j / n
    expected_disagreement = np.nan_to_num(ratio(sum(weighted_gold[j] * predicted[j] for j in range(K)), n))
    # QWK undefined when the expected disagreement is zero (one label on either side, or no claim)
    qwk = 1 - ratio(observed_disagreement, expected_disagreement)
    return {"qwk": qwk, "accuracy": ratio(agreements, n)}


def plain(metrics: dict) -> dict:
    return {k: None if np.isnan(v) else float(v) for k, v in metrics.items()}


def kappa_from_confusion(c: np.ndarray) -> np.ndarray:
    """Unweighted Cohen's kappa from K×K confusion counts (vectorised over leading axes); NaN where chance
    agreement is 1 (both raters used one same label) or there is no item. The bootstrap of the judge
    agreement uses it; the point estimates come from scikit-learn, and the tests hold the two equal."""
    c = np.asarray(c, float)
    n = c.sum(axis=(-2, -1))
    observed = ratio(np.trace(c, axis1=-2, axis2=-1), n)
    expected = ratio((c.sum(-1) * c.sum(-2)).sum(-1), n**2)
    return ratio(observed - expected, 1 - expected)


PLAIN_TYPE_ORDER = (
    "deficiency_recognition",
    "conditional_advice",
    "unconditional_advice",
    "premature_prediction",
)


def plain_counts(response_type: str) -> np.ndarray:
    return np.eye(len(PLAIN_TYPE_ORDER))[PLAIN_TYPE_ORDER.index(response_type)]


def plain_from_counts(c: np.ndarray) -> dict:
    """The share of each response type of Pilot Study II (Appendix C.2) among the judged responses."""
    c = np.asarray(c, float)
    total = c.sum(axis=-1)
    return {name: ratio(np.moveaxis(c, -1, 0)[i], total) for i, name in enumerate(PLAIN_TYPE_ORDER)}


def injected(reply: dict) -> bool:
    """A non-ideal user's deliberate disruption (labelled since issue 25; before, known by its prompt)."""
    return bool(
        reply.get(
            "injected", str(reply.get("source", "")).endswith(("(user_delayed)", "(user_self_correction)"))
        )
    )


def correction(reply: dict) -> bool:
    """A non-ideal user's correction turn (it corrects the disruption rather than answering the question): labelled
    since issue 35, known before by its prompt."""
    return bool(reply.get("correction", str(reply.get("source", "")).endswith("(user_correction)")))


def protocol_turn(reply: dict) -> bool:
    """A reply the protocol scripted, not the simulator's own: a non-ideal user's disruption or its correction."""
    return injected(reply) or correction(reply)


def audit_counts(record: dict) -> np.ndarray:
    """A simulator-audit record per case: replies audited, over-disclosing, erroneous, not answering; a non-ideal
    user's protocol turns (the injected disruption and its correction) are left out (they are the protocol, not a
    simulator error)."""
    replies = [r for r in record["replies"] if not protocol_turn(r)]
    return np.array(
        [
            len(replies),
            sum(bool(r["over_disclosed"]) for r in replies),
            sum(bool(r["error"]) for r in replies),
            sum(not r["answered"] for r in replies),
        ],
        float,
    )


def audit_from_counts(c: np.ndarray) -> dict:
    """The share of audited User Model replies that disclosed unasked key details, stated something
    unsupported or contradicting them, or did not answer the question."""
    replies, over, error, missed = np.moveaxis(np.asarray(c, float), -1, 0)
    return {
        "over_disclosure": ratio(over, replies),
        "error": ratio(error, replies),
        "non_answer": ratio(missed, replies),
    }


def cohen_kappa(a: list[str], b: list[str]) -> float | None:
    """Unweighted Cohen's kappa (scikit-learn); None when chance agreement is 1 (both raters used one same
    label), where scikit-learn answers NaN. Every kappa the reports print comes from here."""
    if len(set(a) | set(b)) == 1:
        return None
    from sklearn.metrics import (
        cohen_kappa_score,  # here: importing scikit-learn costs a report 2 s, and few need it
    )

    return float(cohen_kappa_score(a, b))


def label_agreement(a: list[str], b: list[str]) -> tuple[float, float | None]:
    """Two raters' labels of the same items: the share of equal labels and Cohen's kappa."""
    return sum(x == y for x, y in zip(a, b)) / len(a), cohen_kappa(a, b)
