"""The later stages' cases as export instances (instances.py makes the main stages'): the plain consultation (Table
6), Table 4's Targeted and Off-target dialogues with the prediction made from them, the simulator audit of the User
Model's replies, the focal-point types (Figure 4), the claim-order diagnostic and the User Model probes. Each is made
from the records its stage wrote, every message of the consultation kept, each label said to be the judge's (or the
dataset's, for the focal-point types it gives) against its reference where there is one."""

from __future__ import annotations

from collections.abc import Callable

from lexpilot.benchmark.records import SETUP
from lexpilot.benchmark.vocabulary import NO, YES
from lexpilot.reporting.export.instances import (
    DATASET,
    EVALUATED,
    LLM_JUDGE,
    USER_MODEL,
    Instance,
    Label,
    Message,
    claim_instance,
    dcg_messages,
    history,
    ljp_messages,
)
from lexpilot.reporting.scoring.metrics import PLAIN_TYPE_ORDER, protocol_turn

PROBE_FILE = "probe file"  # a probe's question: the experts wrote it, asked as the evaluated model would ask


def plain_instances(task: str) -> Callable[[dict, dict], list[Instance]]:
    """A plain consultation: the history sent as an ordinary chat, the evaluated model's reply, and the response type
    the judge gave it (Table 6 counts the types: no reference). Its score is 1 where the type is deficiency
    recognition, the stage's first metric, whose value is the mean of these scores."""

    def build(typed: dict, reply: dict) -> list[Instance]:
        messages = history(reply["messages"]) + [Message("assistant", str(reply["response"]), EVALUATED)]
        label = Label(len(messages) - 1, typed["type"], "", typed.get("judge_raw") or [], "response type")
        recognised = typed["type"] == PLAIN_TYPE_ORDER[0]
        return [
            Instance(
                task,
                typed["case_number"],
                typed["cause_of_action"],
                messages,
                [label],
                float(recognised),
                recognised,
                {},
                {},
                {"history_type": typed["history_type"]},
            )
        ]

    return build


def behaviour_instances(task: str) -> Callable[[dict, dict, dict], list[Instance]]:
    """A Table 4 case: the constructed dialogue (the dataset's history, then the evaluated model's Targeted or
    Off-target questions and the User Model's replies of the accepted attempt, or the last one of an unresolved
    case), the prediction made from it, and the verdict the judge extracted per claim against the court's."""

    def build(verdict: dict, prediction: dict, dialogue: dict) -> list[Instance]:
        turns = dialogue["dialogue"]
        constructed = len(dialogue["attempts"][-1]["dialogue"]) if dialogue["attempts"] else 0
        given = len(turns) - constructed
        messages = history(turns[:given]) + [
            Message(str(m["role"]), str(m["content"]), USER_MODEL if m["role"] == "user" else EVALUATED)
            for m in turns[given:]
        ]
        messages.append(Message("assistant", str(prediction["response"] or ""), EVALUATED))
        made = claim_instance(task, verdict, messages, "predicted", "gold")
        made.details |= {"condition": dialogue["condition"], "attempts": len(dialogue["attempts"])}
        return [made]

    return build


AUDIT_CRITERIA = (  # (name, the reply's verdict as yes or no, the clean answer)
    ("over-disclosure", lambda r: YES if r["over_disclosed"] else NO, NO),
    ("error", lambda r: YES if r["error"] else NO, NO),
    ("answered", lambda r: YES if r["answered"] else NO, YES),
)


def audit_instances(task: str, source: str) -> Callable[[dict, dict], list[Instance]]:
    """The audited consultation (DCG's forced questions or the interaction, with every User Model reply) and the
    judge's findings on each reply, each read from that reply: over-disclosure, error and answered, each against the
    clean answer. Its score is its share of counted replies without over-disclosure or error (what the clean-cases
    table asks of every reply); a non-ideal user's protocol turns are labelled and not counted, as the audit's rates
    leave them out."""

    def build(audit: dict, generation: dict) -> list[Instance]:
        messages = (
            dcg_messages(generation)[0] if source == "dcg" else ljp_messages(generation, "final_response")
        )
        replies = [i for i, m in enumerate(messages) if m.source == USER_MODEL]
        labels, counted, clean = [], 0, 0
        for n, reply in enumerate(audit["replies"]):
            turn = replies[n] if n < len(replies) else len(messages) - 1
            note = " (protocol turn, not counted)" if protocol_turn(reply) else ""
            for name, verdict, wanted in AUDIT_CRITERIA:
                raw = reply.get("judge_raw") or []
                labels.append(Label(turn, verdict(reply), wanted, raw, f"{reply['source']}: {name}{note}"))
            if not note:
                counted += 1
                clean += not (reply["over_disclosed"] or reply["error"])
        score = clean / counted if counted else 1.0
        return [
            Instance(
                task,
                audit["case_number"],
                audit["cause_of_action"],
                messages,
                labels,
                score,
                clean == counted,
                {},
                {},
                {"replies_counted": counted},
                result=None,
            )
        ]

    return build


def focal_type_instances(typed: dict, dcg: dict) -> list[Instance]:
    """A case's focal points, one line each, and the type of each (the dataset's where it gives one, else the
    judge's: Table 18). Its score is the case's DCG success, which Figure 4 (a) averages within each of its types."""
    points = [str(entry["focal_point"]) for entry in typed["types"]]
    labels = [
        Label(
            0, str(e["type"]), "", [], str(e["focal_point"]), LLM_JUDGE if e["source"] == "judge" else DATASET
        )
        for e in typed["types"]
    ]
    success = bool(dcg["success"])
    return [
        Instance(
            "focal_types",
            typed["case_number"],
            typed["cause_of_action"],
            [Message("user", "\n".join(points), DATASET)],
            labels,
            float(success),
            success,
            {},
            {},
            {"type_sources": sorted({e["source"] for e in typed["types"]})},
            result=None,
        )
    ]


def order_instances(task: str, setup: str) -> Callable[[dict, dict], list[Instance]]:
    """A case of the claim-order diagnostic: the setup's consultation and final reply, and per claim the verdict the
    judge extracted with the claims shuffled against its original extraction's. A case of one claim is never asked
    again (its verdict is the original's) and counts toward none of the diagnostic's numbers."""
    reply_field = SETUP[setup].reply_field

    def build(order: dict, generation: dict) -> list[Instance]:
        made = claim_instance(task, order, ljp_messages(generation, reply_field), "predicted", "original")
        asked = len(order["order"]) > 1
        made.labels = [
            Label(
                lab.turn,
                lab.predicted,
                lab.reference,
                lab.judge_raw,
                lab.name,
                LLM_JUDGE if asked else "none",
            )
            for lab in made.labels
        ]
        made.details |= {"order": order["order"], "control": order.get("control"), "reordered": asked}
        made.result = made.result if asked else None
        return [made]

    return build


def probe_instances(judged: dict, probed: dict) -> list[Instance]:
    """The User Model probes of a case (Appendix E.3.2): each condition its own consultation, a fresh copy of the
    underspecified history asked the probe file's question, the User Model's reply, and the DCG judge's label of the
    question (A-C; D is not judged). Its score is 1 where the judge accepted the question. A case outside the probe
    file has none."""
    if not probed.get("probed"):
        return []
    labels = judged.get("labels") or {}
    found = []
    for condition, asked in probed["replies"].items():
        messages = [
            Message("assistant", str(asked["question"]), PROBE_FILE),
            Message("user", str(asked["reply"]), USER_MODEL),
        ]
        label = labels.get(condition) or {}
        given = [
            Label(
                0, str(label["label"]), "", label.get("judge_raw") or [], f"DCG judge, condition {condition}"
            )
            for _ in [label]
            if label
        ]
        accepted = bool(given) and given[0].predicted == YES
        found.append(
            Instance(
                "probes",
                probed["case_number"],
                probed["cause_of_action"],
                messages,
                given,
                float(accepted),
                accepted,
                {},
                {},
                {"condition": condition, "key_details_given": asked.get("key_details_given")},
                part=condition,
                result=condition if given else None,
            )
        )
    return found
