"""One run's transcript of one case on its case page, task by task in protocol order (LexAwN and LCA, DCG, the
interaction, LJP, then the later stages' sections), each reply with its exact call; the key details a User Model
reply contains highlighted by a simple rule: a run of at least HIGHLIGHT_RUN consecutive characters of a key
detail appearing verbatim. Everything is escaped: model outputs and dataset text are untrusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import render_fault
from lexpilot.benchmark.records import (
    A1,
    DCG,
    FORCE_ASK,
    INTERACTION,
    INTERACTION_LABELS,
    LCA,
    LJP_SETUPS,
    RecordKind,
)
from lexpilot.benchmark.vocabulary import ROLE
from lexpilot.reporting.scoring.runs import Run
from lexpilot.reporting.site.calls_view import (
    call_button,
    raw_slot,
)
from lexpilot.reporting.site.case_sections import (
    audit_call,
    audit_note,
    esc,
    later_sections,
    lca_label,
    msg,
    rejudged,
)
from lexpilot.reporting.site.parts import PartRecords, part_records

HIGHLIGHT_RUN = 6
SETUPS = sorted(LJP_SETUPS, key=lambda s: s.name == "interaction")  # a case page shows Interaction-Based last


def highlighted(text: str, details: list[str]) -> tuple[str, list[str]]:
    """Escaped text with the runs of key details it contains marked, and the details found."""
    marks = [False] * len(text)
    found = []
    for detail in details:
        hit = False
        for start in range(0, max(len(detail) - HIGHLIGHT_RUN + 1, 0)):
            piece = detail[start : start + HIGHLIGHT_RUN]
            at = text.find(piece)
            while at >= 0:
                hit = True
                for i in range(at, at + HIGHLIGHT_RUN):
                    marks[i] = True
                at = text.find(piece, at + 1)
        if hit:
            found.append(detail)
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and marks[j] == marks[i]:
            j += 1
        out.append(f"<mark>{esc(text[i:j])}</mark>" if marks[i] else esc(text[i:j]))
        i = j
    return "".join(out), found


@dataclass
class RunRecords:
    run: Run
    label: str  # the group label and run id, as shown
    records: dict = field(default_factory=dict)  # kind name -> case_number -> record
    group: str = ""  # the group's label: what an overview row names
    # its exact calls' roles and changed prompt files (run_settings)
    settings: dict = field(default_factory=dict)
    # part name -> the records it shows (part_records), made once per run
    shown: dict = field(default_factory=dict, repr=False)

    def part(self, name: str) -> PartRecords:
        """The records the part `name` shows, made on the first case that asks."""
        if name not in self.shown:
            self.shown[name] = part_records(self.records, name)
        return self.shown[name]


def dialogue_html(messages: Sequence[dict]) -> str:
    return "".join(msg(m["role"], m["content"]) for m in messages)


@dataclass
class Ids:
    """Message ids of one run's transcript on a case page (r<run>m<n>), and the run's index for its settings."""

    run: int
    n: int = 0
    replies: dict = field(default_factory=dict)  # LJP setup -> the id of its prediction's message

    def next(self) -> str:
        self.n += 1
        return f"r{self.run}m{self.n}"


def lexawn_part(r: dict, number: str, ids: Ids, source: dict | None) -> str:
    a1, lca = r[A1.name].get(number), r[LCA.name].get(number)
    original = ((source or {}).get(LCA.name) or {}).get(number) if source else None
    parts = []
    for t in ("complete", "underspecified") if a1 else ():
        judged = (lca or {}).get("judgments", {}).get(t, {})
        label = (
            rejudged(judged.get("label"), (original or {}).get("judgments", {}).get(t, {}).get("label"))
            if source
            else lca_label(judged.get("label"))
        )
        mid = ids.next()
        parts.append(
            f"<h4>LexAwN after the {t} history (LCA: {esc(label)})</h4>"
            + msg(
                "assistant",
                a1["responses"][t]["response"],
                mid=mid,
                call=call_button("lexawn", "eval", {"history": f"h:{t}"}, A1),
            )
            + msg(
                "judge",
                "\n".join(judged.get("judge_raw") or []),
                "LCA judge, raw",
                call=call_button(
                    "judge_lca", "judge", {"history": f"m:{mid}"}, LCA, len(judged.get("judge_raw") or [])
                ),
            )
        )
    return "".join(parts)


def dcg_part(r: dict, number: str, ids: Ids, details: list[str], source: dict | None = None) -> str:
    asked, dcg = r[FORCE_ASK.name].get(number), r[DCG.name].get(number)
    if not asked:
        return ""
    labels = {x["round"]: x for x in (dcg or {}).get("rounds", [])}
    originals = {
        x["round"]: x.get("label")
        for x in (((source or {}).get(DCG.name) or {}).get(number) or {}).get("rounds", [])
    }
    outcomes: dict[object, str] = {True: "success", False: "miss"}  # looked up by the record's JSON value
    success = outcomes.get((dcg or {}).get("success"), "–")
    parts = [f"<h4>DCG: {esc(success)}</h4>"]
    for q in asked["rounds"]:
        judged, mid = labels.get(q["round"], {}), ids.next()
        parts.append(
            msg(
                "assistant",
                q["question"],
                f"forced question {q['round']}",
                mid=mid,
                thread="dcg",
                call=call_button("force_ask", "eval", {"history": "d:underspecified:dcg"}, FORCE_ASK),
            )
        )
        # a re-judged run: the original judge's label beside
        label = (
            rejudged(judged.get("label", "–"), originals[q["round"]])
            if source is not None and q["round"] in originals
            else str(judged.get("label", "–"))
        )
        parts.append(
            msg(
                "judge",
                label,
                f"DCG judge on question {q['round']}",
                call=call_button(
                    "judge_dcg",
                    "judge",
                    {"ai_response": f"m:{mid}", "focus_text": "fp", "key_facts": "dbf"},
                    DCG,
                    len(judged.get("judge_raw") or []),
                ),
            )
        )
        if q.get("user_reply"):
            parts.append(_dcg_user_reply(r, number, q, details))
    return "".join(parts)


def _dcg_user_reply(r: dict, number: str, q: dict, details: list[str]) -> str:
    """The User Model's answer to a forced question, its key details marked, with its call and its audit."""
    marked, _ = highlighted(q["user_reply"], details)
    source_name = f"DCG round {q['round']}"
    return msg(
        "user",
        q["user_reply"],
        ROLE["user"].display + audit_note(r, number, source_name),
        marked,
        thread="dcg",
        call=call_button(
            "user_standard", "user", {"history": "d:underspecified:dcg", "key_facts": "kf"}, FORCE_ASK
        )
        + audit_call(r, number, source_name, "dcg"),
    )


def interaction_part(r: dict, number: str, ids: Ids, details: list[str]) -> str:
    inter = r[INTERACTION.name].get(number)
    if not inter:
        return ""
    parts = [
        f"<h4>Interaction ({esc(inter.get('user_condition', 'standard'))} user; stop: "
        f"{esc(inter['stop_reason'])})</h4>"
    ]
    # a re-judged run: the new judge's round labels (interaction_labels), each beside the original judge's
    relabelled = {e.get("round"): e for e in (r[INTERACTION_LABELS.name].get(number) or {}).get("rounds", [])}
    for x in inter["rounds"]:
        call = (
            call_button("lexawn", "eval", {"history": "h:underspecified"}, A1)
            if x["round"] == 1
            else call_button(x["prompt"], "eval", {"history": "d:underspecified:int"}, INTERACTION)
        )
        mid, again = ids.next(), relabelled.get(x["round"])
        label = rejudged(again.get("label"), x.get("label")) if again else lca_label(x.get("label"))
        judged = x | {"label": again.get("label"), "judge_raw": again.get("judge_raw")} if again else x
        parts.append(
            msg(
                "assistant",
                x["assistant"],
                f"round {x['round']}, {x['prompt']}, LCA label: {label}",
                call=call,
                thread="int",
                mid=mid,
            )
            + round_judges(judged, mid, INTERACTION_LABELS if again else INTERACTION)
        )
        if x.get("user_reply"):
            marked, _ = highlighted(x["user_reply"], details)
            prompt = x.get("user_prompt", "user_standard")
            note = f"{ROLE['user'].display} ({prompt})" + audit_note(
                r, number, f"interaction round {x['round']}"
            )
            if x.get("fault"):
                note += f"; fault: {x['fault']['kind']} about “{x['fault']['detail']}”"
            slots = {"history": "d:underspecified:int", "key_facts": "kf"}
            if prompt == "user_correction":  # the fault the earlier reply recorded, as the prompt renders it
                slots["fault"] = raw_slot(render_fault(inter["fault"]) if inter.get("fault") else "")
            parts.append(
                msg(
                    "user",
                    x["user_reply"],
                    note,
                    marked,
                    thread="int",
                    call=call_button(prompt, "user", slots, INTERACTION)
                    + audit_call(r, number, f"interaction round {x['round']}", "int"),
                )
            )
    return "".join(parts)


def round_judges(entry: dict, mid: str, kind: RecordKind = INTERACTION) -> str:
    """An interaction round's judges after round 1 (whose label is LCA's, shown above): the LCA judge's label of the
    response and, for a non-ideal user, the DCG judge's check that it asks a relevant question."""
    parts = []
    if entry["round"] > 1 and entry.get("label") is not None:
        raw = entry.get("judge_raw") or []
        parts.append(
            msg(
                "judge",
                "\n".join(raw),
                f"LCA judge on round {entry['round']}, raw",
                call=call_button("judge_lca", "judge", {"history": f"m:{mid}"}, kind, len(raw)),
            )
        )
    if isinstance(entry.get("relevance"), dict):
        raw = entry["relevance"].get("judge_raw") or []
        parts.append(
            msg(
                "judge",
                str(entry["relevance"].get("label", "–")),
                "DCG judge: a relevant question?",
                call=call_button(
                    "judge_dcg",
                    "judge",
                    {"ai_response": f"m:{mid}", "focus_text": "fp", "key_facts": "dbf"},
                    INTERACTION,
                    len(raw),
                ),
            )
        )
    return "".join(parts)


def ljp_part(r: dict, number: str, ids: Ids, source: dict | None = None) -> str:
    parts, inter = [], r[INTERACTION.name].get(number)
    for one in SETUPS:
        setup, generation, verdicts = one.name, one.generation, one.verdicts
        v, g = r[verdicts.name].get(number), r[generation.name].get(number)
        if not v:
            continue
        before = (
            (((source or {}).get(verdicts.name) or {}).get(number) or {}).get("predicted")
            if source is not None
            else None
        )
        rows = "".join(
            f'<tr><td>{esc(c)}</td><td>{esc(gold)}</td><td class="{"ok" if gold == p else "bad"}">'
            f"{esc(p)}</td>"
            + (
                f"<td>{esc(before[i])}{' ≠' if before[i] != p else ''}</td>"
                if before and i < len(before)
                else ""
            )
            + "</tr>"
            for i, (c, gold, p) in enumerate(zip(v["claims"], v["gold"], v["predicted"]))
        )
        reply = (
            (g or {}).get(one.reply_field, "")
            if setup != "interaction"
            else (inter or {}).get("final_response", "")
        )
        mid = ids.replies[setup] = ids.next()
        predicted = (
            ""
            if setup == "interaction"
            else call_button(
                "force_judge",
                "eval",
                {"history": "h:underspecified" if setup == "direct" else "h:complete"},
                generation,
            )
        )
        parts.append(
            f"<h4>LJP {one.title}</h4>"
            + msg("assistant", reply, "prediction", mid=mid, call=predicted)
            + msg(
                "judge",
                "\n".join(v.get("judge_raw") or []),
                "extraction judge, raw",
                call=call_button(
                    "judge_ljp",
                    "judge",
                    {"history": f"m:{mid}", "claims": "cl"},
                    verdicts,
                    len(v.get("judge_raw") or []),
                ),
            )
            + "<table><tr><th>Claim</th><th>Gold</th><th>Extracted</th>"
            + ("<th>Original judge</th>" if before else "")
            + f"</tr>{rows}</table>"
        )
    return "".join(parts)


def transcript(
    rr: RunRecords,
    case: Case | None,
    number: str,
    details: list[str],
    source: dict | None = None,
    run: int = 0,
) -> str:
    """Every task of one case in one run, in protocol order, each reply with its exact call; `source`: the records
    of the run it re-judged."""
    ids, mine = Ids(run), rr.part
    theirs = lambda part: part_records(source, part) if source else None  # noqa: E731
    parts = [
        ("lexawn", lexawn_part(mine("lexawn"), number, ids, theirs("lexawn"))),
        ("dcg", dcg_part(mine("dcg"), number, ids, details, theirs("dcg"))),
        ("interaction", interaction_part(mine("interaction"), number, ids, details)),
        ("ljp", ljp_part(mine("ljp"), number, ids, theirs("ljp"))),
        *later_sections(mine, number, details, ids),
    ]
    # each task apart, so that the page's "Show" choice keeps one task of every run in view
    text = "".join(f'<div class="part" data-part="{name}">{html}</div>' for name, html in parts if html)
    return text or "<p>No saved record of this case in this run.</p>"
