"""Each evaluated model's metrics as its abilities make them expected on a dataset, true (what experts labelling every
decision would find) or judged (what the scripted judge's confusion makes of them): the numbers a simulation test
compares the harness's raw and corrected estimates with.

Accuracies are exact expectations (every decision is right with its probability, truth.py). LCA Macro-F1 and the LJP
QWKs are the metric of the expected counts (a plug-in: the value a very large dataset would converge to), on the
dataset's own claims and court verdicts.
"""

from __future__ import annotations

import numpy as np

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.records import LJP_SETUPS
from lexpilot.benchmark.vocabulary import ASKS, NO, PREDICTS, VERDICTS, YES
from lexpilot.scripted.abilities import Abilities, ModelAbilities

DCG_ROUNDS = (
    2  # the forced questions per case (protocols/dcg.py's, which the scripted provider may not import)
)
K = len(VERDICTS)
QWK_WEIGHTS = np.subtract.outer(np.arange(K), np.arange(K)) ** 2 / (K - 1) ** 2


def macro_f1(acc_c: float, acc_u: float) -> float:
    """LCA Macro-F1 with as many complete as underspecified histories (every case has both), from the accuracies."""
    tp, fn, tn, fp = acc_u, 1 - acc_u, acc_c, 1 - acc_c
    f1_u = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    f1_c = 2 * tn / (2 * tn + fp + fn) if tn + fp + fn else 0.0
    return (f1_u + f1_c) / 2


def qwk(counts: np.ndarray) -> float:
    """Quadratic weighted kappa of a gold × predicted matrix of counts (expected ones allowed)."""
    n = counts.sum()
    chance = np.outer(counts.sum(axis=1), counts.sum(axis=0)) / n
    return float(1 - (QWK_WEIGHTS * counts).sum() / (QWK_WEIGHTS * chance).sum())


def recall_matrix(share) -> np.ndarray:
    """true × given: `share(label)` on the diagonal, the rest spread evenly over the other labels."""
    m = np.empty((K, K))
    for i, label in enumerate(VERDICTS):
        m[i] = (1 - share(label)) / (K - 1)
        m[i, i] = share(label)
    return m


def _lca(model: ModelAbilities, abilities: Abilities, judged: bool) -> dict:
    acc_c, acc_u = model.lca_complete, model.lca_underspecified
    if (
        judged
    ):  # a right reply keeps its label with the judge's recall of it; a wrong one passes when mislabelled
        keep_predict, keep_ask = abilities.recall("LCA", PREDICTS), abilities.recall("LCA", ASKS)
        acc_c = acc_c * keep_predict + (1 - acc_c) * (1 - keep_ask)
        acc_u = acc_u * keep_ask + (1 - acc_u) * (1 - keep_predict)
    return {("LCA", "acc_c"): acc_c, ("LCA", "acc_u"): acc_u, ("LCA", "macro_f1"): macro_f1(acc_c, acc_u)}


def _dcg(model: ModelAbilities, abilities: Abilities, judged: bool) -> dict:
    said_yes = model.dcg  # P(a round is labelled 是)
    if judged:
        said_yes = model.dcg * abilities.recall("DCG", YES) + (1 - model.dcg) * (
            1 - abilities.recall("DCG", NO)
        )
    return {("DCG", "accuracy"): 1 - (1 - said_yes) ** DCG_ROUNDS}


def _ljp(model: ModelAbilities, abilities: Abilities, cases: list[Case], judged: bool) -> dict:
    gold = np.array([sum(v == label for c in cases for v in c.verdicts) for label in VERDICTS], float)
    metrics = {}
    for setup in LJP_SETUPS:
        share = model.ljp[setup.name]
        counts = np.diag(gold) @ recall_matrix(lambda label: share)
        if judged:
            counts = counts @ recall_matrix(lambda label: abilities.recall("LJP", label))
        metrics[(setup.verdicts.name, "qwk")] = qwk(counts)
        metrics[(setup.verdicts.name, "accuracy")] = float(np.trace(counts) / counts.sum())
    return metrics


def expected_metrics(abilities: Abilities, cases: list[Case], judged: bool = False) -> dict[str, dict]:
    """Per model id: (task, metric) -> the expected value, as the report names them (("LCA", "acc_c"),
    ("DCG", "accuracy"), ("LJP_direct", "qwk")…); `judged`: as the scripted judge is expected to score it."""
    return {
        name: {
            **_lca(model, abilities, judged),
            **_dcg(model, abilities, judged),
            **_ljp(model, abilities, cases, judged),
        }
        for name, model in abilities.models.items()
    }
