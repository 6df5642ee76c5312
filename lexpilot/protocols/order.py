"""A diagnostic outside the paper's protocol, labelled so everywhere: the LJP extraction judge (Table 25) asked
again with each case's claims in a shuffled order (seeded per case and setup), its verdicts mapped back to the
claims' own order, so that their agreement with the original extraction shows how much the judge's answers depend
on the order of the claims — the reason FastChat's judge is asked with both answer orders. A control asks it once
more with the original order: its agreement with the original is the judge's own noise, so the difference between
the two is the order's effect, told apart from the noise.
"""

from __future__ import annotations

import random

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import render_claims
from lexpilot.benchmark.records import LJP_ORDER, LJP_SETUPS, RecordKind
from lexpilot.protocols.judging import verdict_parser
from lexpilot.protocols.steps import CaseCalls, Stage, Step

ORDER_SEED = "lexpilot-order-1"  # part of the protocol of this diagnostic: the same orders in every run


def shuffled_order(n_claims: int, case_number: str, setup: str) -> list[int]:
    """The claims' indices in the order they are shown: seeded by the case and setup, never the original order
    when there are two claims or more (a case with one claim cannot be reordered)."""
    order = list(range(n_claims))
    if n_claims < 2:
        return order
    rng = random.Random(f"{ORDER_SEED}:{case_number}:{setup}")
    while order == sorted(order):
        rng.shuffle(order)
    return order


def restore(order: list[int], shown: list[str]) -> list[str]:
    """Verdicts given in the shown order, put back in the claims' own order (shown[j] is claim order[j]'s)."""
    restored = [""] * len(order)
    for position, claim in enumerate(order):
        restored[claim] = shown[position]
    return restored


def one_claim(case: Case) -> bool:
    """A case with one claim: its order cannot change, so it is saved without a call (and left out of the report)."""
    return len(case.claims) < 2


def reextract(setup: str, verdicts: RecordKind, generation: RecordKind, field: str):
    def run(calls: CaseCalls, upstream: dict) -> dict:
        case = calls.case
        original = upstream[verdicts.name]["predicted"]
        if one_claim(case):
            return {
                "setup": setup,
                "order": [0] * len(case.claims),
                "claims": list(case.claims),
                "predicted": list(original),
                "control": list(original),
                "original": original,
                "gold": list(case.verdicts),
                "judge_raw": None,
                "control_raw": None,
            }
        order = shuffled_order(len(case.claims), case.number, setup)
        history = upstream[generation.name][field]
        shown, raw = calls.judge(
            "judge_ljp", verdict_parser(len(case.claims)), history=history, claims=render_claims(case, order)
        )
        # the control: the same prompt as the original extraction, asked again
        control, control_raw = calls.judge(
            "judge_ljp",
            verdict_parser(len(case.claims)),
            history=history,
            claims=render_claims(case, list(range(len(case.claims)))),
        )
        return {
            "setup": setup,
            "order": order,
            "claims": list(case.claims),
            "predicted": restore(order, shown),
            "control": control,
            "original": original,
            "gold": list(case.verdicts),
            "judge_raw": raw,
            "control_raw": control_raw,
        }

    return run


def order_calls(upstream: dict, settings, case: Case | None = None) -> dict:
    # shuffled, and the same-order control
    return {} if case is not None and one_claim(case) else {"judge": 2}


ORDER_STEPS = tuple(
    Step(
        LJP_ORDER[s.name],
        reextract(s.name, s.verdicts, s.generation, s.reply_field),
        needs=(s.generation.name, s.verdicts.name),
        max_calls=order_calls,
        prompts={"judge": "judge_ljp"},
    )
    for s in LJP_SETUPS
)
ORDER_STAGE = Stage(
    "LJP order (diagnostic)",
    "eval_LJP_order.py",
    ORDER_STEPS,
    upstream=tuple(kind for s in LJP_SETUPS for kind in (s.generation, s.verdicts)),
    idle=("with one claim (no order to change; no call)", lambda settings, case: one_claim(case)),
)
