"""The case page's sections for the stages after the paper's main tasks: the plain consultation (Table 6), the
Targeted and Off-target dialogues of every attempt with the validator's outcome per fact (Table 4), the simulator
audit's verdict on a User Model reply, the focal-point types, the probe study's replies, the claim-order
diagnostic; and a re-judged run's labels beside its source's. Each reply and judge output has its exact call
(calls_view.py). Everything is escaped: model outputs and dataset text are untrusted.
"""

from __future__ import annotations

from collections.abc import Callable

from lexpilot.benchmark.categories import FOCAL_TYPES
from lexpilot.benchmark.records import (
    AUDIT,
    BEHAVIOUR_DIALOGUE,
    BEHAVIOUR_PREDICTION,
    FOCAL_TYPE_RECORDS,
    LJP_BEHAVIOUR,
    LJP_ORDER,
    PLAIN,
    PLAIN_TYPES,
    PROBE_DCG,
    PROBE_REPLIES,
    RecordKind,
)
from lexpilot.benchmark.vocabulary import ASKS, PREDICTS, ROLE
from lexpilot.reporting.scoring.metrics import correction, injected
from lexpilot.reporting.site.calls_view import MESSAGES, call_button, raw_slot
from lexpilot.reporting.site.parts import PartRecords
from lexpilot.reporting.tables.formats import PLAIN_TYPE_NAMES

LCA_MEANING = {PREDICTS: "策略一 · answered", ASKS: "策略二 · asked"}
CONDITION_NAMES = {"targeted": "Targeted", "off_target": "Off-target"}


def esc(text) -> str:
    """Escaped for HTML, the viewer's one escape; a carriage return as a character reference, which the HTML parser
    keeps (a literal one it folds into the line feed), so a reply's exact text survives into the page and its
    exact call."""
    if text is None:
        return ""
    text = str(text)
    # html.escape's replacements, in its order, inline: a case page of 50 runs calls this 100,000 times
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#x27;")
        .replace("\r", "&#13;")
    )


def lca_label(label) -> str:
    """An LCA label with its meaning (策略一 = answered, 策略二 = asked)."""
    return LCA_MEANING.get(label, "–" if label is None else str(label))


def msg(
    role: str,
    text: str,
    note: str = "",
    body_html: str | None = None,
    mid: str = "",
    call: str = "",
    thread: str = "",
) -> str:
    """A message; with `mid` an id a judge's exact call refers to, with `thread` the dialogue it belongs to (a later
    round's prompt holds the thread's earlier messages), with `call` its exact-call button."""
    attributes = (f' id="{mid}"' if mid else "") + (f' data-th="{thread}"' if thread else "")
    return (
        f'<div class="msg {esc(role)}"{attributes}><b>{esc(role)}</b>{(" · " + esc(note)) if note else ""}{call}'
        # dir=auto and an isolate (the style): an unclosed right-to-left override in a reply reorders nothing
        # outside it
        f'<br><span class="text" dir="auto">{body_html if body_html is not None else esc(text)}</span></div>'
    )


def verdict_table(record: dict) -> str:
    rows = "".join(
        f'<tr><td>{esc(c)}</td><td>{esc(g)}</td><td class="{"ok" if g == p else "bad"}">{esc(p)}</td></tr>'
        for c, g, p in zip(record.get("claims", []), record.get("gold", []), record.get("predicted", []))
    )
    return f"<table><tr><th>Claim</th><th>Gold</th><th>Extracted</th></tr>{rows}</table>"


def audited_reply(records: dict, number: str, source: str) -> tuple[RecordKind, dict] | None:
    """(audit record kind, the audit's entry) of the User Model reply audited as `source` ("DCG round 1",
    "interaction round 2"), or None where the reply was not audited; `records`: a part's, with the audit kinds it
    shows."""
    for kind in (k for k in AUDIT.values() if k.name in records):
        for reply in (records.get(kind.name, {}).get(number) or {}).get("replies", []):
            if str(reply.get("source", "")).split(" (")[0] == source:
                return kind, reply
    return None


def audit_note(records: dict, number: str, source: str) -> str:
    """The simulator audit's verdict on the User Model reply it audited as `source`, or nothing."""
    found = audited_reply(records, number, source)
    if found is None:
        return ""
    reply = found[1]
    flags = [
        f"over-disclosed {len(reply['over_disclosed'])}" if reply.get("over_disclosed") else "",
        "unsupported or wrong" if reply.get("error") else "",
        "did not answer" if not reply.get("answered", True) else "",
        "the injected disruption" if injected(reply) else "",
        "the correction turn (a protocol turn)" if correction(reply) else "",
    ]
    return "; audit: " + (", ".join(f for f in flags if f) or "clean")


def audit_call(records: dict, number: str, source: str, thread: str) -> str:
    """The audit judge's exact call on a User Model reply of `thread`: the conversation before the question it
    answered, the question, the reply (the message the button is on) and the numbered key details."""
    found = audited_reply(records, number, source)
    if found is None:
        return ""
    kind, reply = found
    return call_button(
        "judge_simulator_audit",
        "judge",
        {
            "history": f"b:underspecified:{thread}",
            "ai_response": f"l:{thread}",
            "reply": "s",
            "key_facts": "nd",
        },
        kind,
        len(reply.get("judge_raw") or []),
        "the audit's exact call",
    )


def plain_section(records: dict, number: str, ids) -> str:
    """The plain consultation's answer (its call: the history as its own messages) and the response-type judge."""
    parts = []
    for history, kind in PLAIN.items():
        answer = records.get(kind.name, {}).get(number)
        if not answer:
            continue
        judged = records.get(PLAIN_TYPES[history].name, {}).get(number) or {}
        judged_type = judged.get("type", "–")
        kind_name = (
            PLAIN_TYPE_NAMES.get(judged_type, judged_type) if isinstance(judged_type, str) else judged_type
        )
        mid, raw = ids.next(), judged.get("judge_raw") or []
        parts.append(
            f"<h4>Plain consultation, {esc(history)} history (response type: {esc(kind_name)})</h4>"
            + msg(
                "assistant",
                answer.get("response", ""),
                "no task prompt (Table 6)",
                mid=mid,
                call=call_button(MESSAGES, "eval", {"messages": f"h:{history}"}, kind),
            )
            + (
                msg(
                    "judge",
                    "\n".join(raw),
                    "response-type judge, raw",
                    call=call_button(
                        "judge_response_type",
                        "judge",
                        {"history": f"h:{history}", "key_facts": "kf", "ai_response": f"m:{mid}"},
                        PLAIN_TYPES[history],
                        len(raw),
                    ),
                )
                if judged
                else ""
            )
        )
    return "".join(parts)


def detail_of(details: list[str], number) -> str:
    """The key detail a validator names by its number (1-based, as the case page lists them)."""
    return details[number - 1] if isinstance(number, int) and 0 < number <= len(details) else ""


def behaviour_section(records: dict, number: str, details: list[str], ids) -> str:
    """Table 4: every attempt of each condition, the validator's outcome per fact and its rejection reasons, which
    attempt was accepted, then the verdicts predicted from it; each call with its exact call."""
    parts = []
    for condition, kind in BEHAVIOUR_DIALOGUE.items():
        record = records.get(kind.name, {}).get(number)
        if not record:
            continue
        name = CONDITION_NAMES.get(condition, condition)
        parts.append(f"<h4>{esc(name)} dialogue (Table 4): {esc(record.get('status'))}</h4>")
        attempts = record.get("attempts", [])
        for attempt in attempts:
            parts.append(attempt_html(attempt, condition, kind, details))
        last = attempt_thread(condition, attempts[-1]) if attempts else ""
        prediction = records.get(BEHAVIOUR_PREDICTION[condition].name, {}).get(number)
        mid = ids.next()
        if prediction:  # from the accepted dialogue, or (unresolved) the last attempted one
            parts.append(
                msg(
                    "assistant",
                    prediction.get("response", ""),
                    f"{name} prediction",
                    mid=mid,
                    call=call_button(
                        "force_judge",
                        "eval",
                        {"history": f"d:underspecified:{last}"},
                        BEHAVIOUR_PREDICTION[condition],
                    ),
                )
            )
        verdicts = records.get(LJP_BEHAVIOUR[condition].name, {}).get(number)
        if verdicts:
            raw = verdicts.get("judge_raw") or []
            parts.append(
                f"<p>{esc(name)} verdicts ({esc(verdicts.get('status'))})</p>"
                + (
                    msg(
                        "judge",
                        "\n".join(raw),
                        "extraction judge, raw",
                        call=call_button(
                            "judge_ljp",
                            "judge",
                            {"history": f"m:{mid}", "claims": "cl"},
                            LJP_BEHAVIOUR[condition],
                            len(raw),
                        ),
                    )
                    if prediction
                    else ""
                )
                + verdict_table(verdicts)
            )
    return "".join(parts)


def attempt_thread(condition: str, attempt: dict) -> str:
    return f"t4{condition}{attempt.get('attempt')}"


def attempt_html(attempt: dict, condition: str, kind: RecordKind, details: list[str]) -> str:
    """One attempt, folded unless accepted: its dialogue, the validator (its exact call reads the dialogue with the
    user turns numbered) and its outcome per key detail."""
    name = CONDITION_NAMES.get(condition, condition)
    accepted = not attempt.get("rejected")
    facts = "".join(
        f"<tr><td>{esc(f.get('id'))}. {esc(detail_of(details, f.get('id')))}</td><td>{esc(f.get('status'))}</td>"
        f"<td>{esc(', '.join(map(str, f.get('turns', []))))}</td></tr>"
        for f in (attempt.get("validation") or {}).get("facts", [])
    )
    verdict = "accepted" if accepted else "rejected: " + "; ".join(map(str, attempt["rejected"]))
    raw = attempt.get("judge_raw") or []
    validator = msg(
        "judge",
        "\n".join(raw),
        "validator, raw",
        call=call_button(
            "behaviour_validation",
            "judge",
            {"history": f"v:underspecified:{attempt_thread(condition, attempt)}", "key_facts": "nd"},
            kind,
            len(raw),
        ),
    )
    return (
        f"<details{' open' if accepted else ''}><summary>{esc(name)} attempt {esc(attempt.get('attempt'))}: "
        f"{esc(verdict)}</summary>"
        + attempt_dialogue(attempt, condition, kind)
        + validator
        + f"<table><tr><th>Key detail</th><th>Validator</th><th>Turns</th></tr>{facts}</table></details>"
    )


def attempt_dialogue(attempt: dict, condition: str, kind: RecordKind) -> str:
    """One attempt's questions and replies, each with its exact call: a question from the condition's prompt, a
    reply from the standard User Model's, both over the underspecified history and the attempt's turns so far."""
    thread = attempt_thread(condition, attempt)
    history = {"history": f"d:underspecified:{thread}", "key_facts": "kf"}
    return "".join(
        msg(
            m.get("role", "?"),
            m.get("content", ""),
            thread=thread,
            call=call_button(
                f"behaviour_{condition}" if m.get("role") == "assistant" else "user_standard",
                "eval" if m.get("role") == "assistant" else "user",
                history,
                kind,
            ),
        )
        for m in attempt.get("dialogue", [])
    )


def focal_types_section(records: dict, number: str) -> str:
    """Figure 4's focal-point types: the dataset's, or the judge's with its exact call."""
    record = records.get(FOCAL_TYPE_RECORDS.name, {}).get(number)
    if not record:
        return ""
    # named as Figure 4 and the case list name it; the label the dataset or the judge gave is its tooltip
    items = "".join(
        f'<li><bdi>{esc(t.get("focal_point"))}</bdi>: <b title="{esc(t.get("type"))}">'
        f"{esc(FOCAL_TYPES.get(t.get('type'), str(t.get('type'))))}</b> ({esc(t.get('source'))})"
        + (
            call_button(
                "judge_focal_type",
                "judge",
                {"focus_text": raw_slot(str(t.get("focal_point")))},
                FOCAL_TYPE_RECORDS,
                len(t.get("judge_raw") or []),
            )
            if t.get("source") == "judge"
            else ""
        )
        + "</li>"
        for t in record.get("types", [])
    )
    return f"<h4>Focal-point types (Figure 4)</h4><ul>{items}</ul>"


def probes_section(records: dict, number: str, ids) -> str:
    """Table 13: each probe question (from the probe file), the User Model's reply and the DCG judge's label; a
    D reply's key details are the probe file's, less the removed ones, which the page does not have: no exact
    call for it."""
    replies = records.get(PROBE_REPLIES.name, {}).get(number)
    if not replies or not replies.get("probed"):
        return ""
    labels = (records.get(PROBE_DCG.name, {}).get(number) or {}).get("labels", {})
    parts = ["<h4>Probe study (Table 13)</h4>"]
    for condition, probed in replies.get("replies", {}).items():
        thread, mid = f"probe{condition}", ids.next()
        judged = labels.get(condition) if isinstance(labels.get(condition), dict) else {}
        user_call = (
            ""
            if condition == "D"
            else call_button(
                "user_standard",
                "user",
                {"history": f"d:underspecified:{thread}", "key_facts": "kf"},
                PROBE_REPLIES,
            )
        )
        parts.append(
            msg(
                "assistant", probed.get("question", ""), f"probe question {condition}", mid=mid, thread=thread
            )
            + msg(
                "user",
                probed.get("reply", ""),
                ROLE["user"].display
                + ("" if user_call else " (with the probe file's key details less the removed ones)"),
                thread=thread,
                call=user_call,
            )
            + (
                msg(
                    "judge",
                    str(judged.get("label", "–")),
                    f"DCG judge on probe question {condition}",
                    call=call_button(
                        "judge_dcg",
                        "judge",
                        {"ai_response": f"m:{mid}", "focus_text": "fp", "key_facts": "dbf"},
                        PROBE_DCG,
                        len(judged.get("judge_raw") or []),
                    ),
                )
                if judged
                else ""
            )
        )
    return "".join(parts)


def order_section(records: dict, number: str, ids) -> str:
    """The claim-order diagnostic (outside the paper's protocol): per setup the extraction judge asked again with
    the claims in another order, and once more in the original order (the control: its own noise), its verdicts
    beside the original extraction's, a difference marked. A case with one claim made no call: not shown."""
    parts = []
    for setup, kind in LJP_ORDER.items():
        record = records.get(kind.name, {}).get(number)
        if not record or len(record.get("order", [])) < 2:
            continue
        original, again = record.get("original") or [], record.get("predicted") or []
        control = record.get("control") if isinstance(record.get("control"), list) else None
        mark = lambda o, a: f'<td class="{"ok" if o == a else "bad"}">{esc(a)}{"" if o == a else " ≠"}</td>'  # noqa: E731
        rows = "".join(
            f"<tr><td>{esc(c)}</td><td>{esc(o)}</td>{mark(o, a)}"
            + (mark(o, control[i]) if control else "")
            + "</tr>"
            for i, (c, o, a) in enumerate(zip(record.get("claims", []), original, again))
        )
        reply = ids.replies.get(setup)
        asked = [("reordered", record.get("order", []), record.get("judge_raw"))]
        if control:
            asked.append(("same order (control)", list(range(len(original))), record.get("control_raw")))
        messages = "".join(
            msg(
                "judge",
                "\n".join(raw or []),
                f"extraction judge, claims {what}, raw",
                call=call_button(
                    "judge_ljp",
                    "judge",
                    {"history": f"m:{reply}", "claims": "co:" + ",".join(str(i) for i in order)},
                    kind,
                    len(raw or []),
                )
                if reply
                else "",
            )
            for what, order, raw in asked
        )
        parts.append(
            f"<h4>Claim order (diagnostic, not in the paper): LJP {esc(setup)}, claims shown in the order "
            f"{esc(', '.join(str(i + 1) for i in record.get('order', [])))}</h4>"
            + messages
            + "<table><tr><th>Claim</th><th>Original extraction</th><th>Claims reordered</th>"
            + ("<th>Same order (control)</th>" if control else "")
            + f"</tr>{rows}</table>"
        )
    return "".join(parts)


def later_sections(
    shows: Callable[[str], PartRecords], number: str, details: list[str], ids
) -> list[tuple[str, str]]:
    """(part, its HTML) of the stages after the paper's main tasks, each from the records its part shows
    (`shows(part)`, parts.py); `ids` numbers their messages after the main ones (its `replies`: each LJP setup's
    prediction, which the claim-order diagnostic's judge read)."""
    return [
        ("plain", plain_section(shows("plain"), number, ids)),
        ("table4", behaviour_section(shows("table4"), number, details, ids)),
        ("focal", focal_types_section(shows("focal"), number)),
        ("probes", probes_section(shows("probes"), number, ids)),
        ("order", order_section(shows("order"), number, ids)),
    ]


def rejudged(label, original) -> str:
    """A re-judged label beside the source run's, a disagreement marked."""
    if original is None:
        return lca_label(label)
    mark = "" if original == label else " ≠ "
    return f"{lca_label(label)}{mark or ' = '}original judge {lca_label(original)}" + (
        " (disagree)" if mark else ""
    )
