"""The prompts of prompts/ (one file each, Appendix F and the harness's own) and how a case fills their slots:
the rendering of a history, the key details, focal points, claims and a recorded fault.
"""

from __future__ import annotations

import re

from lexpilot.benchmark.dataset import Case
from lexpilot.paths import PROMPT_DIR

# ----------------------------------------------------------------------------- prompts and rendering

PROMPT_FILES = {
    "lexawn": "lexawn.txt",  # Table 19
    "force_ask": "dcg_force_ask.txt",  # Table 20
    "force_judge": "force_judge.txt",  # Table 21: Direct, Gold-Standard, forced final prediction
    "user_standard": "user_standard.txt",  # Table 22
    # Appendix E.5 non-ideal users, written from the paper's description in the register of Table 22:
    "user_delayed": "user_delayed.txt",  # the one hesitant, withholding reply
    "user_self_correction": "user_self_correction.txt",  # the one incomplete or mistaken reply
    "user_correction": "user_correction.txt",  # the spontaneous correction in the next user turn
    "judge_lca": "judge_lca.txt",  # Table 23
    "judge_dcg": "judge_dcg.txt",  # Table 24
    "judge_ljp": "judge_ljp_extract.txt",  # Table 25
    # Pilot Study II (Appendix C.2), written for this harness in the register of Appendix F:
    "judge_response_type": "judge_response_type.txt",  # the four response types of a plain consultation
    "judge_simulator_audit": "judge_simulator_audit.txt",  # the audit of every User Model reply of a run
    # Targeted / Off-target dialogues (Appendix E.7; the paper does not print them):
    "behaviour_targeted": "behaviour_targeted.txt",  # a question meant to recover the key details
    "behaviour_off_target": "behaviour_off_target.txt",  # a question meant to leave them undisclosed
    "behaviour_validation": "behaviour_validation.txt",  # the judge's check of a constructed dialogue
    "judge_focal_type": "judge_focal_type.txt",  # the Table 18 type of a focal point (Appendix E.8)
}
# The prompts written for the non-ideal users (Appendix E.5): only runs of that condition use them.
CONDITION_PROMPTS = {
    "delayed": ("user_delayed",),
    "self-correction": ("user_self_correction", "user_correction"),
}


def prompt_files_used(condition: str) -> list[str]:
    """The prompt files a run of this user condition sends (their hashes decide whether it may resume)."""
    special = {name for names in CONDITION_PROMPTS.values() for name in names}
    return sorted(
        PROMPT_FILES[name]
        for name in PROMPT_FILES
        if name not in special or name in CONDITION_PROMPTS.get(condition, ())
    )


# the slots a prompt file may hold: a new slot is declared here, else it would be sent as written (a review of
# issue 37 found a new stage's {question} sent as literal text and its value dropped: `fill` now refuses that)
SLOTS = ("history", "key_facts", "ai_response", "focus_text", "claims", "fault", "reply")
SLOT = re.compile(r"\{(" + "|".join(SLOTS) + r")\}")


def load_prompts() -> dict[str, str]:
    return {name: (PROMPT_DIR / file).read_text(encoding="utf-8") for name, file in PROMPT_FILES.items()}


def fill(template: str, **slots: str) -> str:
    """Fill the template's slots in one pass: text inserted is never expanded again."""
    unknown = sorted(set(slots) - set(SLOTS))
    if unknown:
        raise KeyError(f"prompt slot {{{unknown[0]}}} is not declared in benchmark/prompts.py's SLOTS")

    def value(match: re.Match) -> str:
        if match.group(1) not in slots:
            raise KeyError(f"prompt slot {{{match.group(1)}}} was given no value")
        return slots[match.group(1)]

    return SLOT.sub(value, template)


def render_history(messages) -> str:
    """Every message in order as 'User: …' / 'Assistant: …' lines (multi-line content kept)."""
    return "\n".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in messages)


def render_claims(case: Case, order: list[int] | None = None) -> str:
    """One claim per line (the extraction prompt reads each line as one claim), in the case's order or in `order`
    (the claims' indices, for the order-sensitivity diagnostic)."""
    claims = case.claims if order is None else [case.claims[i] for i in order]
    return "\n".join(" ".join(claim.splitlines()) for claim in claims)


def render_key_facts(case: Case) -> str:
    """Key details alone (the User Model never sees focal-point text)."""
    return "\n".join(key_detail_lines(case))


def key_detail_lines(case: Case) -> list[str]:
    details = case.key_details
    return [d for ds in details.values() for d in ds] if isinstance(details, dict) else list(details)


def render_numbered_details(case: Case) -> str:
    """Key details one per line, numbered from 1, for a judge that names them by number."""
    return "\n".join(f"{i}. {d}" for i, d in enumerate(key_detail_lines(case), 1))


def render_fault(fault: dict) -> str:
    """A self-correcting user's recorded fault, for the correction prompt."""
    kind = {"incomplete": "不完整", "wrong": "有误"}[fault["kind"]]
    return f"类型：{kind}\n涉及的事实：{fault['detail']}"


def render_focal_points(case: Case) -> str:
    return "\n".join(case.focal_points)


def render_details_by_focal_point(case: Case) -> str:
    """Key details for the DCG judge, each focal point next to its details when they are mapped."""
    if not isinstance(case.key_details, dict):
        return "\n".join(case.key_details)
    return "\n".join(f"【{fp}】\n" + "\n".join(ds) for fp, ds in case.key_details.items())
