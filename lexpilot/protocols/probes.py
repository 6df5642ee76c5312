"""The probe study's generation (Appendix E.3.3): one Standard User Model reply per probe condition from a
fresh copy of the underspecified history, and the DCG judge on the A-C questions.
"""

from __future__ import annotations

import functools
from pathlib import Path

from lexpilot.benchmark.dataset import Case, load_dataset
from lexpilot.benchmark.probe_file import CONDITIONS, Probe, load_probes
from lexpilot.benchmark.prompts import key_detail_lines, render_history
from lexpilot.benchmark.records import PROBE_DCG, PROBE_REPLIES
from lexpilot.protocols.dcg import judge_question
from lexpilot.protocols.steps import CaseCalls, Stage, Step

# ----------------------------------------------------------------------------- generation (a stage)


def probes_of(calls: CaseCalls) -> Probe | None:
    settings = calls.run_settings
    return probe_table(settings.probes, settings.dataset)[0].get(calls.case.number)


@functools.lru_cache(maxsize=4)
def probe_table(path: Path, dataset: Path) -> tuple[dict[str, Probe], str]:
    """The probe file, validated against the dataset; read once per process (a pure function of the files)."""
    return load_probes(path, {c.number: c for c in load_dataset(dataset)[0]})


def check_probe_file(settings) -> str:
    """Before any case starts: the probe file is valid, or every problem is listed."""
    probes, digest = probe_table(settings.probes, settings.dataset)
    return f"probe file {settings.probes} (sha256 {digest}): {len(probes)} cases"


def reply_for(calls: CaseCalls, probe: Probe, condition: str) -> dict:
    """A fresh copy of the underspecified history, the probe question as the assistant's turn, and the
    Standard User Model; for D, the key details without the removed ones."""
    details = key_detail_lines(calls.case)
    if condition == "D":
        details = [d for i, d in enumerate(details, 1) if i not in probe.removed]
    dialogue = calls.case.history("underspecified") + [
        {"role": "assistant", "content": probe.questions[condition]}
    ]
    reply = calls.generate(
        "user", "user_standard", history=render_history(dialogue), key_facts="\n".join(details)
    )
    return {"question": probe.questions[condition], "reply": reply, "key_details_given": len(details)}


def probe_replies(calls: CaseCalls, upstream: dict) -> dict:
    probe = probes_of(calls)
    if probe is None:
        return {"probed": False, "replies": {}}
    conditions = CONDITIONS if probe.removed else CONDITIONS[:3]
    digest = probe_table(calls.run_settings.probes, calls.run_settings.dataset)[1]
    return {
        "probed": True,
        "probe_file": digest,
        "replies": {c: reply_for(calls, probe, c) for c in conditions},
    }


def probe_dcg(calls: CaseCalls, upstream: dict) -> dict:
    """The DCG judge once per A-C question, the simulator's reply withheld."""
    replies = upstream["probe_replies"]["replies"]
    labels = {}
    for condition in ("A", "B", "C"):
        if condition in replies:
            label, raw = judge_question(calls, replies[condition]["question"])
            labels[condition] = {"label": label, "judge_raw": raw}
    return {"labels": labels}


def probe_calls(role: str):
    def calls(upstream: dict, settings, case: Case | None = None) -> dict:
        probe = probe_table(settings.probes, settings.dataset)[0].get(case.number) if case else None
        if case is not None and probe is None:
            return {}
        return {"user": 4 if probe is None or probe.removed else 3} if role == "user" else {"judge": 3}

    return calls


PROBE_STEPS = (
    Step(PROBE_REPLIES, probe_replies, max_calls=probe_calls("user"), prompts={"user": "user_standard"}),
    Step(
        PROBE_DCG,
        probe_dcg,
        needs=("probe_replies",),
        max_calls=probe_calls("judge"),
        prompts={"judge": "judge_dcg"},
    ),
)


def not_probed(settings, case: Case) -> bool:
    return case.number not in probe_table(settings.probes, settings.dataset)[0]


PROBE_STAGE = Stage(
    "probes",
    "user_probes.py",
    PROBE_STEPS,
    probe_file=True,
    prepare=check_probe_file,
    idle=("not in the probe file (nothing to ask)", not_probed),
)
