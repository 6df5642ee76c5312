"""Metrics computed through the harness's own count functions, for comparing against hand-computed values."""

from lexpilot.reporting.scoring.metrics import confusion, ljp_from_counts, plain


def quadratic_weighted_kappa(gold: list[str], predicted: list[str]) -> float | None:
    return plain(ljp_from_counts(confusion(zip(gold, predicted))))["qwk"]
