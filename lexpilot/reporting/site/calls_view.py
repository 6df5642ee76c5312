"""The exact call behind a reply on a case page: the prompt re-rendered from `prompts/` and the case (in the page,
from the templates and the texts already on it, so that a case of 10 models × 5 runs does not carry every prompt
twice), the role's model and generation settings, the tokens its record reports and the model and tier that served
them (as the record counts them: docs/viewer.md), the judge's attempts, and a
warning where the prompt file differs from the one the run recorded (the text shown is then today's file, not what
was sent).

A reply carries a descriptor: the prompt's name, the role, and for each slot where its text comes from: a history
of the case ("h"), a history followed by messages of the page ("d"), the same less its last message, the question a
reply answered ("b"), that question alone ("l"), the message the button is on ("s"), a history and a dialogue's
turns numbered as the Table 4 validator reads them ("v"), one message of the page ("m"), a text of the case (key
details "kf", numbered "nd", focal points "fp", claims "cl", the claims in another order "co", key details by focal
point "dbf") or a literal ("raw").
The plain consultation has no prompt: its call ("(messages)") is the history sent as its own messages.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Sequence
from urllib.parse import quote

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import (
    PROMPT_FILES,
    load_prompts,
    render_claims,
    render_details_by_focal_point,
    render_focal_points,
    render_key_facts,
    render_numbered_details,
)
from lexpilot.benchmark.records import RECORD_KINDS, SERVED_CALLS_FIELD, RecordKind
from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.pricing import counts_of
from lexpilot.reporting.site.web_files import web_file
from lexpilot.storage.manifest import Manifest, prompt_hashes
from lexpilot.text import counted

CALL_SCRIPT = web_file("call.js")  # a reply's exact call, shown on request


@functools.lru_cache(maxsize=None)  # one read of prompts/ per site, not one per case page and run
def current_digests(condition: str) -> dict[str, str]:
    return prompt_hashes(condition)[1]


@functools.lru_cache(maxsize=1)
def templates() -> dict[str, str]:
    return load_prompts()


def case_texts(case: Case | None) -> dict:
    """The case's texts a prompt slot can hold, rendered as the protocols render them."""
    if case is None:
        return {}
    return {
        "underspecified": case.underspecified,
        "complete": case.complete,
        "kf": render_key_facts(case),
        "nd": render_numbered_details(case),
        "fp": render_focal_points(case),
        "cl": render_claims(case),
        "dbf": render_details_by_focal_point(case),
    }


def run_settings(manifest: Manifest) -> dict:
    """Per role the model and its generation settings, and the prompts whose file changed since the run: the same on
    every case page, so made once per run."""
    roles = {}
    for role in ROLES:
        generation = manifest.generation[role]
        shown = "?" if generation.temperature is None else generation.temperature
        roles[role] = {
            "model": str(manifest.model(role) or "?"),
            "settings": f"temperature {shown}, max_tokens {generation.max_tokens}",
        }
    recorded, current = manifest.prompt_files, current_digests(manifest.user_condition)
    changed = [
        name
        for name, file in PROMPT_FILES.items()
        if file in recorded and file in current and recorded[file] != current[file]
    ]
    return {"roles": roles, "changed": changed}


def run_info(settings: dict, records: dict, number: str) -> dict:
    """A run's settings (`run_settings`) and the usage each of this case's records reports per role ([calls,
    prompt, completion tokens, what served them])."""
    usage = {}
    for kind in CALLED_KINDS:
        record = (records.get(kind) or {}).get(number) or {}
        used, served = record.get("usage"), record.get(SERVED_CALLS_FIELD)
        calls = served if isinstance(served, list) else []
        if isinstance(used, dict):
            usage[kind] = {
                role: [
                    u.get("calls"),
                    u.get("prompt_tokens"),
                    u.get("completion_tokens"),
                    served_line(u, [c for c in calls if isinstance(c, dict) and c.get("role") == role]),
                ]
                for role, u in used.items()
                if isinstance(u, dict)
            }
    return settings | {"usage": usage}


def served_line(used: dict, calls: Sequence[dict] = ()) -> str:
    """What served a record's calls of a role: one model and tier said as such; calls served by more than one,
    call by call in the order they were made, as the record lists them (`served_calls`), or, for a record made
    before they were listed, each with its calls as its usage counts them; "" for a record made before replies'
    models were kept, or at a provider that does not say."""
    labels = [_call_label(call) for call in calls]
    if len(set(labels)) > 1:
        return "served in order: " + "; ".join(_runs(labels))
    if calls and calls[0].get("fallback"):  # every call of the role fell back alike
        return _counted_line(used) + FELL_BACK
    return _counted_line(used)


def _counted_line(used: dict) -> str:
    parts = [
        f"{word} {_counted_names(counts_of(used, kind))}"
        for kind, word in (("served", "served by"), ("tier", "tier"))
        if counts_of(used, kind)
    ]
    return ", ".join(parts)


FELL_BACK = " (fell back to the standard tier)"  # a flex call sent at the standard tier at last


def _call_label(call: dict) -> str:
    names = [
        f"{word}{name if isinstance(name, str) else ' and '.join(map(str, name))}"
        for word, name in (("", call.get("served")), ("tier ", call.get("tier")))
        if name
    ]
    return (", ".join(names) or "not said") + (
        " (fell back to the standard tier)" if call.get("fallback") else ""
    )


def _runs(labels: list[str]) -> list[str]:
    """Consecutive calls served alike said once: "calls 1-3: m, tier flex"."""
    runs: list[list] = []
    for number, label in enumerate(labels, 1):
        if runs and runs[-1][2] == label:
            runs[-1][1] = number
        else:
            runs.append([number, number, label])
    return [f"call {a}: {label}" if a == b else f"calls {a}-{b}: {label}" for a, b, label in runs]


def _counted_names(counts: dict[str, int]) -> str:
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{name} ({counted(n, 'call')})" for name, n in sorted(counts.items()))


MESSAGES = "(messages)"  # the plain consultation's call: no prompt file

CALLED_KINDS = tuple(kind.name for kind in RECORD_KINDS)  # every record kind whose calls a page can show


def call_data(case: Case | None, infos: list[dict]) -> dict:
    """The page's data for the exact calls: templates, the case's texts, and each run's `run_info` on the case
    (roles, changed files and usage)."""
    return {
        "templates": templates(),
        "files": PROMPT_FILES | {MESSAGES: "no prompt: the history sent as its own messages"},
        "case": case_texts(case),
        "runs": infos,
    }


def call_button(
    template: str,
    role: str,
    slots: dict,
    kind: RecordKind,
    attempts: int | None = None,
    text: str = "exact call",
) -> str:
    """The button that shows the exact call of a reply (its box is made when asked): the prompt's name, the role,
    where each slot's text comes from ("history=d:underspecified:dcg;key_facts=kf"), the record kind whose usage it
    reports, a judge's attempts, and the button's words (the audit's call sits beside the reply's own)."""
    spec = ";".join(f"{name}={source}" for name, source in slots.items())
    return (
        f'<button class="call" data-t="{template}" data-r="{role}" data-s="{html.escape(spec, quote=True)}" '
        f'data-k="{kind.name}"'
        + (f' data-a="{attempts}"' if attempts else "")
        + f">{html.escape(text)}</button>"
    )


def raw_slot(text: str) -> str:
    """A literal slot value (a self-correcting user's fault), safe inside the descriptor."""
    return "raw:" + quote(text, safe="")
