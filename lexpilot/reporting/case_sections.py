"""The case page's sections for the stages after the paper's main tasks: the plain consultation (Table 6), the
Targeted and Off-target dialogues of every attempt with the validator's outcome per fact (Table 4), the simulator
audit's verdict on a User Model reply, the focal-point types, the probe study's replies; and a re-judged run's
labels beside its source's. Everything is escaped: model outputs and dataset text are untrusted.
"""
from __future__ import annotations

from lexpilot.benchmark.records import (
    AUDIT,
    BEHAVIOUR_DIALOGUE,
    BEHAVIOUR_PREDICTION,
    FOCAL_TYPE_RECORDS,
    LJP_BEHAVIOUR,
    PLAIN,
    PLAIN_TYPES,
    PROBE_DCG,
    PROBE_REPLIES,
)
from lexpilot.benchmark.vocabulary import ASKS, PREDICTS
from lexpilot.reporting.calls_view import call_button
from lexpilot.reporting.tables import PLAIN_TYPE_NAMES

KINDS = (*PLAIN.values(), *PLAIN_TYPES.values(), *BEHAVIOUR_DIALOGUE.values(), *BEHAVIOUR_PREDICTION.values(),
         *LJP_BEHAVIOUR.values(),
         *AUDIT.values(), FOCAL_TYPE_RECORDS, PROBE_REPLIES, PROBE_DCG)
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
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&#x27;").replace("\r", "&#13;"))


def lca_label(label) -> str:
    """An LCA label with its meaning (策略一 = answered, 策略二 = asked)."""
    return LCA_MEANING.get(label, "–" if label is None else str(label))


def msg(role: str, text: str, note: str = "", body_html: str | None = None, mid: str = "", call: str = "",
        thread: str = "") -> str:
    """A message; with `mid` an id a judge's exact call refers to, with `thread` the dialogue it belongs to (a later
    round's prompt holds the thread's earlier messages), with `call` its exact-call button."""
    attributes = (f' id="{mid}"' if mid else "") + (f' data-th="{thread}"' if thread else "")
    return (f'<div class="msg {esc(role)}"{attributes}><b>{esc(role)}</b>{(" · " + esc(note)) if note else ""}{call}'
            f'<br><span class="text">{body_html if body_html is not None else esc(text)}</span></div>')


def verdict_table(record: dict) -> str:
    rows = "".join(f"<tr><td>{esc(c)}</td><td>{esc(g)}</td><td class=\"{'ok' if g == p else 'bad'}\">{esc(p)}</td></tr>"
                   for c, g, p in zip(record.get("claims", []), record.get("gold", []), record.get("predicted", [])))
    return f"<table><tr><th>Claim</th><th>Gold</th><th>Extracted</th></tr>{rows}</table>"


def audit_note(records: dict, number: str, source: str) -> str:
    """The simulator audit's verdict on the User Model reply it audited as `source` ("DCG round 1", "interaction
    round 2"), or nothing where the reply was not audited."""
    for kind in AUDIT.values():
        for reply in (records.get(kind.name, {}).get(number) or {}).get("replies", []):
            if str(reply.get("source", "")).split(" (")[0] == source:
                flags = [f"over-disclosed {len(reply['over_disclosed'])}" if reply.get("over_disclosed") else "",
                         "unsupported or wrong" if reply.get("error") else "",
                         "did not answer" if not reply.get("answered", True) else "",
                         "the injected disruption" if reply.get("injected") else ""]
                return "; audit: " + (", ".join(f for f in flags if f) or "clean")
    return ""


def plain_section(records: dict, number: str) -> str:
    parts = []
    for history, kind in PLAIN.items():
        answer = records.get(kind.name, {}).get(number)
        if not answer:
            continue
        judged = records.get(PLAIN_TYPES[history].name, {}).get(number) or {}
        kind_name = PLAIN_TYPE_NAMES.get(judged.get("type"), judged.get("type", "–"))
        parts.append(f"<h4>Plain consultation, {esc(history)} history (response type: {esc(kind_name)})"
                     "</h4>" + msg("assistant", answer.get("response", ""), "no task prompt (Table 6)"))
    return "".join(parts)


def detail_of(details: list[str], number) -> str:
    """The key detail a validator names by its number (1-based, as the case page lists them)."""
    return details[number - 1] if isinstance(number, int) and 0 < number <= len(details) else ""


def behaviour_section(records: dict, number: str, details: list[str]) -> str:
    """Table 4: every attempt of each condition, the validator's outcome per fact and its rejection reasons, which
    attempt was accepted, then the verdicts predicted from it."""
    parts = []
    for condition, kind in BEHAVIOUR_DIALOGUE.items():
        record = records.get(kind.name, {}).get(number)
        if not record:
            continue
        name = CONDITION_NAMES.get(condition, condition)
        parts.append(f"<h4>{esc(name)} dialogue (Table 4): {esc(record.get('status'))}</h4>")
        attempts = record.get("attempts", [])
        for attempt in attempts:
            accepted = not attempt.get("rejected")
            facts = "".join(f"<tr><td>{esc(f.get('id'))}. {esc(detail_of(details, f.get('id')))}</td><td>{esc(f.get('status'))}</td>"
                            f"<td>{esc(', '.join(map(str, f.get('turns', []))))}</td></tr>"
                            for f in (attempt.get("validation") or {}).get("facts", []))
            verdict = "accepted" if accepted else "rejected: " + "; ".join(map(str, attempt["rejected"]))
            parts.append(f"<details{' open' if accepted else ''}><summary>{esc(name)} attempt "
                         f"{esc(attempt.get('attempt'))}: {esc(verdict)}</summary>"
                         + attempt_dialogue(attempt, condition, kind.name)
                         + f"<table><tr><th>Key detail</th><th>Validator</th><th>Turns</th></tr>{facts}</table>"
                         "</details>")
        prediction = records.get(BEHAVIOUR_PREDICTION[condition].name, {}).get(number)
        if prediction:
            parts.append(msg("assistant", prediction.get("response", ""), f"{name} prediction"))
        verdicts = records.get(LJP_BEHAVIOUR[condition].name, {}).get(number)
        if verdicts:
            parts.append(f"<p>{esc(name)} verdicts ({esc(verdicts.get('status'))})</p>" + verdict_table(verdicts))
    return "".join(parts)


def attempt_dialogue(attempt: dict, condition: str, kind: str) -> str:
    """One attempt's questions and replies, each with its exact call: a question from the condition's prompt, a
    reply from the standard User Model's, both over the underspecified history and the attempt's turns so far."""
    thread = f"t4{condition}{attempt.get('attempt')}"
    history = {"history": f"d:underspecified:{thread}", "key_facts": "kf"}
    return "".join(msg(m.get("role", "?"), m.get("content", ""), thread=thread, call=call_button(
        f"behaviour_{condition}" if m.get("role") == "assistant" else "user_standard",
        "eval" if m.get("role") == "assistant" else "user", history, kind)) for m in attempt.get("dialogue", []))


def focal_types_section(records: dict, number: str) -> str:
    record = records.get(FOCAL_TYPE_RECORDS.name, {}).get(number)
    if not record:
        return ""
    items = "".join(f"<li>{esc(t.get('focal_point'))}: <b>{esc(t.get('type'))}</b> ({esc(t.get('source'))})</li>"
                    for t in record.get("types", []))
    return f"<h4>Focal-point types (Figure 4)</h4><ul>{items}</ul>"


def probes_section(records: dict, number: str) -> str:
    replies = records.get(PROBE_REPLIES.name, {}).get(number)
    if not replies or not replies.get("probed"):
        return ""
    labels = (records.get(PROBE_DCG.name, {}).get(number) or {}).get("labels", {})
    return "<h4>Probe study (Table 13)</h4>" + "".join(
        msg("assistant", r.get("question", ""), f"probe, {condition}")
        + msg("user", r.get("reply", ""), f"User Model; DCG label: {labels.get(condition, '–')}")
        for condition, r in replies.get("replies", {}).items())


def later_sections(records: dict, number: str, details: list[str]) -> str:
    return (plain_section(records, number) + behaviour_section(records, number, details)
            + focal_types_section(records, number)
            + probes_section(records, number))


def rejudged(label, original) -> str:
    """A re-judged label beside the source run's, a disagreement marked."""
    if original is None:
        return lca_label(label)
    mark = "" if original == label else " ≠ "
    return f"{lca_label(label)}{mark or ' = '}original judge {lca_label(original)}" + (" (disagree)" if mark else "")
