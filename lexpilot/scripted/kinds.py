"""What a request to the scripted provider is: its kind, told from the prompt it fills (each declared prompt file's
own line), the run its base URL names, and the helpers that read a filled prompt's slots."""

from __future__ import annotations

import hashlib

# The scripted provider's name for the requests each prompt of lexpilot.benchmark.prompts.PROMPT_FILES fills (the
# tests count and answer requests by these names). A prompt declared there and not here is known by its own name,
# so a new stage's prompt is told apart as soon as it is declared (issue 37 item 3), never "unknown".
KIND_OF_PROMPT = {
    "judge_lca": "lca_judge",
    "judge_response_type": "type_judge",
    "behaviour_validation": "behaviour_judge",
    "judge_simulator_audit": "audit_judge",
    "judge_focal_type": "focal_judge",
    "behaviour_targeted": "targeted",
    "behaviour_off_target": "off_target",
    "judge_dcg": "dcg_judge",
    "judge_ljp": "ljp_judge",
    **dict.fromkeys(("user_standard", "user_delayed", "user_self_correction", "user_correction"), "user"),
    "force_ask": "force_ask",
    "force_judge": "force_judge",
    "lexawn": "lexawn",
}


def prompt_markers() -> tuple[tuple[str, str], ...]:
    """(kind, marker) for every declared prompt: the marker is the prompt's longest line that has no slot (so a
    filled prompt holds it as written) and that no other prompt has."""
    from lexpilot.benchmark.prompts import load_prompts

    prompts = load_prompts()
    markers = []
    for name, text in prompts.items():
        lines = [line.strip() for line in text.splitlines() if line.strip() and "{" not in line]
        own = [line for line in lines if not any(line in other for n, other in prompts.items() if n != name)]
        if not own:
            raise ValueError(f"prompts: {name} has no line of its own to tell its requests apart")
        markers.append((KIND_OF_PROMPT.get(name, name), max(own, key=len)))
    return tuple(markers)


KIND_MARKERS = prompt_markers()


def kind_of(prompt: str) -> str:
    """The role a request plays, from its prompt."""
    for kind, marker in KIND_MARKERS:
        if marker in prompt:
            return kind
    return "unknown"


def request_kind(body: dict) -> str:
    """A conversation of several messages is a plain consultation; one message is a filled prompt."""
    return "plain" if len(body["messages"]) > 1 else kind_of(body["messages"][0]["content"])


def between(prompt: str, tag: str) -> str:
    """The slot's content: the last <tag>…</tag> block (the instructions mention the tags too)."""
    end = prompt.rfind(f"</{tag}>")
    start = prompt.rfind(f"<{tag}>", 0, end)
    return prompt[start + len(tag) + 2 : end].strip() if start >= 0 else ""


def stable(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


def run_of_path(path: str) -> tuple[str, str]:
    """(the run a request names, its path from /v1 on): a base URL http://127.0.0.1:P/run3/v1 names run "run3", so
    that a script can play runs apart (nothing in an OpenAI request says which run sent it); /v1/… names none ("")."""
    head, sep, tail = path.partition("/v1/")
    return (head.strip("/"), "/v1/" + tail) if sep else ("", path)
