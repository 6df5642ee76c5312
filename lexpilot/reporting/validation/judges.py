"""Two judges on the same generations (a re-judged run beside its source): which records each judge labelled,
their agreement and Cohen's kappa per task.
"""

from __future__ import annotations

from lexpilot.benchmark.records import (
    DCG,
    INTERACTION,
    INTERACTION_LABELS,
    LCA,
    LJP_SETUPS,
)
from lexpilot.reporting.scoring.metrics import label_agreement

REJUDGED_KINDS = (LCA, DCG, INTERACTION, INTERACTION_LABELS, *(s.verdicts for s in LJP_SETUPS))


# ----------------------------------------------------------------------------- the two judges' agreement


def judge_labels(saved: dict) -> dict[str, dict]:
    """Item -> label, per task, of one run's saved judge decisions (`saved`: kind name -> case -> record)."""
    items: dict[str, dict] = {"LCA": {}, "DCG": {}, "LJP": {}, "interaction rounds": {}}
    for n, r in saved.get(LCA.name, {}).items():
        for t, j in r["judgments"].items():
            items["LCA"][(n, t)] = j["label"]
    for n, r in saved.get(DCG.name, {}).items():
        for x in r["rounds"]:
            items["DCG"][(n, x["round"])] = x["label"]
    for setup in LJP_SETUPS:
        for n, r in saved.get(setup.task, {}).items():
            for i, label in enumerate(r["predicted"]):
                items["LJP"][(n, setup.name, i)] = label
    for n, r in saved.get(INTERACTION.name, {}).items():
        for x in r["rounds"]:
            if x.get("label") is not None:
                items["interaction rounds"][(n, x["round"])] = x["label"]
    return items


def judges_agreement(original: dict, rejudged: dict) -> dict[str, tuple[int, float | None, float | None]]:
    """Per task: (items judged by both, share of equal labels, Cohen's kappa; None where undefined)."""
    out: dict[str, tuple[int, float | None, float | None]] = {}
    a_items, b_items = judge_labels(original), judge_labels(rejudged)
    b_items["interaction rounds"] = {
        (n, x["round"]): x["label"]
        for n, r in rejudged.get(INTERACTION_LABELS.name, {}).items()
        for x in r["rounds"]
    }
    for task, a in a_items.items():
        shared = sorted(set(a) & set(b_items[task]), key=str)
        if not shared:
            continue
        x, y = [a[k] for k in shared], [b_items[task][k] for k in shared]
        out[task] = (len(shared), *label_agreement(x, y))
    return out


# ----------------------------------------------------------------------------- claim order (a diagnostic)


def order_agreement(records: dict) -> dict | None:
    """Over a run's re-extractions (eval_LJP_order.py), the claims of cases with two or more: how many, the share
    of verdicts with the claims shuffled equal to the original extraction's and Cohen's kappa, the share equal in
    the same-order control (the judge's own noise; None for records made before the control), and the order's
    effect, the control's agreement less the shuffled one's. None without any such case."""
    # a case with one claim is never reordered: it says nothing of the order
    ordered = [r for r in records.values() if len(r["order"]) > 1]
    pairs = [(a, b) for r in ordered for a, b in zip(r["original"], r["predicted"])]
    if not pairs:
        return None
    agree, kappa = label_agreement([a for a, _ in pairs], [b for _, b in pairs])
    controlled = all(isinstance(r.get("control"), list) for r in ordered)
    same = (
        sum(a == b for r in ordered for a, b in zip(r["original"], r["control"])) / len(pairs)
        if controlled
        else None
    )
    return {
        "claims": len(pairs),
        "agreement": agree,
        "kappa": kappa,
        "control": same,
        "effect": None if same is None else same - agree,
    }
