"""A provider's reply as the harness accepts it: a chat-completion body, or a stream of server-sent events,
read within a wall-clock deadline and validated field by field into a `Reply`. Anything else (not JSON,
HTML, a wrong shape, nesting too deep, invalid Unicode) is a `MalformedReply`, which the caller treats as a
transient failure; malformed usage is not (the reply is kept, its counts unreported). The SDK's own response models are not used: parsing here is explicit,
and free of their lazily built classes (which raced across threads on a first call).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from lexpilot.models.quirks import CACHED_TOKENS, REASONING_TEXT, REASONING_TOKENS, first_field

MAX_TOKENS = 10**9  # a token count above this is no count (and overflows the prices' floats)


class MalformedReply(Exception):
    """The endpoint answered 200 with something that is not a valid chat completion. What it quotes of the reply
    (`excerpt`) is kept whole here and cut only when said (`said`), after redaction: a key cut first would no
    longer be matched."""

    def __init__(self, message: str, excerpt: str | None = None, limit: int = 40):
        super().__init__(message)
        self.excerpt, self.limit = excerpt, limit

    def said(self, redact) -> str:
        """The message with its excerpt redacted, then cut to its limit."""
        message = redact(str(self))
        if self.excerpt is None:
            return message
        return f"{message} ({' '.join(redact(self.excerpt).split())[: self.limit]!r}…)"


class StreamCutShort(MalformedReply):
    """A stream that ended without a finish reason: the endpoint gave up on the request (push-back)."""


class DeadlineExceeded(Exception):
    """The reply did not complete within the call's wall-clock deadline."""


@dataclass
class Reply:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None = None  # None: the reply carried no token counts
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    # prompt tokens the provider served from its prompt cache, where reported
    cached_tokens: int | None = None
    reasoning: str = ""  # reasoning returned apart from the content (reasoning_content / reasoning)
    usage_problem: str = ""  # why the reply's usage could not be read (its counts are then unreported)
    served: Served | None = None  # what the reply says served it (model, tier, fingerprint)


@dataclass(frozen=True)
class Served:
    """What a reply says served it: the model that answered (a provider may answer an alias or a retired id with
    another), the service tier that served it (which decides its price) and the system fingerprint, each None when
    the reply does not say (or says it as something that is not a short line of text)."""

    model: str | None = None
    service_tier: str | None = None
    system_fingerprint: str | None = None


SERVED_FIELDS = ("model", "service_tier", "system_fingerprint")
MAX_SERVED = 200  # characters: longer is no model id, tier or fingerprint


def _served_value(value) -> str | None:
    # untrusted text that reaches the display and the report: printable, one short line, or nothing
    if isinstance(value, str) and 0 < len(value) <= MAX_SERVED and value.isprintable():
        return value
    return None


def served_of(data) -> Served | None:
    """The served fields of a reply's body or stream event (None: it says none of them)."""
    if not isinstance(data, dict):
        return None
    values = [_served_value(data.get(name)) for name in SERVED_FIELDS]
    return Served(*values) if any(values) else None


def first_served(earlier: Served | None, later: Served | None) -> Served | None:
    """A stream's served fields: each as the first event that says it (the tier may come only with the usage)."""
    if earlier is None or later is None:
        return earlier or later
    return Served(*(getattr(earlier, n) or getattr(later, n) for n in SERVED_FIELDS))


TRUNCATED = "reply truncated at"  # how a reply cut at its output limit is said, followed by the limit's flag


def truncation_flag(problem: str) -> str:
    """The output-limit flag a failure names when its reply was cut at that limit ("" otherwise): what a rerun must
    change, or it buys the same cut reply again."""
    _, said, rest = problem.partition(f"{TRUNCATED} ")
    return rest.split(" ", 1)[0] if said and rest.startswith("--") else ""


def unusable(reply: Reply, limit: str) -> str:
    """Why a reply that came back is not accepted ("": it is), for a synchronous call and a batch line alike: cut
    at its output limit (`limit`, as the role's flag and value), or empty. Either is paid for and asked again."""
    if reply.finish_reason == "length":
        return f"{TRUNCATED} {limit}"
    return "" if reply.text.strip() else "empty reply"


def _loads(data: bytes | str, what: str):
    try:
        return json.loads(data)
    except RecursionError:
        raise MalformedReply(f"{what} is nested too deeply to be a chat completion") from None
    except ValueError:
        start = data[:4000].decode("utf-8", "replace") if isinstance(data, bytes) else data[:4000]
        kind = "HTML" if start.lstrip().lower().startswith(("<!doctype", "<html")) else "not JSON"
        raise MalformedReply(f"{what} is {kind}", start) from None


def _text(value, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedReply(f"{where} is a {type(value).__name__}, not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedReply(f"{where} holds invalid Unicode (a lone surrogate)") from None
    return value


def _usage(reply: Reply, usage) -> None:
    """The reply's token counts. Usage that is not an object of whole, non-negative counts leaves the reply's
    counts unreported, with what was wrong in `usage_problem`: the reply itself is kept (it was paid for, and
    asking again would buy it twice)."""
    if usage is None:
        return
    if not isinstance(usage, dict):
        reply.usage_problem = f"usage is a JSON {type(usage).__name__}, not an object"
        return
    counts: list[Any] = [usage.get("prompt_tokens"), usage.get("completion_tokens")]  # JSON values
    if counts == [None, None]:
        return
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= MAX_TOKENS for c in counts):
        # the counts' kinds, not their text: a provider's text here may hold anything, a key included
        kinds = ", ".join(
            type(c).__name__ if not isinstance(c, int) else "out of range" if c >= 0 else "negative"
            for c in counts
        )
        reply.usage_problem = (
            f"usage holds token counts that are not whole numbers from 0 to {MAX_TOKENS:,} ({kinds})"
        )
        return
    prompt_tokens, completion_tokens = counts
    reply.prompt_tokens, reply.completion_tokens = prompt_tokens, completion_tokens
    reasoning = first_field(usage, REASONING_TOKENS)
    if isinstance(reasoning, int) and not isinstance(reasoning, bool) and reasoning >= 0:
        reply.reasoning_tokens = reasoning
    cached = first_field(usage, CACHED_TOKENS)
    if isinstance(cached, int) and not isinstance(cached, bool) and 0 <= cached <= prompt_tokens:
        reply.cached_tokens = cached


def _choice(data) -> dict | None:
    if not isinstance(data, dict):
        raise MalformedReply(f"the reply is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise MalformedReply(f"choices is {'missing' if choices is None else 'a ' + type(choices).__name__}")
    if not choices:
        return None
    if not isinstance(choices[0], dict):
        raise MalformedReply("choices[0] is not an object")
    return choices[0]


def read_body(chunks, deadline: float) -> bytes:
    """The whole body, abandoned when the deadline (time.monotonic) passes even while bytes keep trickling."""
    parts = []
    for chunk in chunks:
        parts.append(chunk)
        if time.monotonic() > deadline:
            raise DeadlineExceeded()
    return b"".join(parts)


def parse_completion(body: bytes) -> Reply:
    """A non-streamed chat completion."""
    data = _loads(body, "the reply")
    choice = _choice(data)
    reply = Reply("", None)
    _usage(reply, data.get("usage"))
    reply.served = served_of(data)
    if choice is None:
        return reply  # no choice: an empty reply, retried as such
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedReply(f"choices[0].message is {'null' if message is None else 'not an object'}")
    reply.text = _text(message.get("content"), "the reply's content")
    reply.reasoning = _text(first_field(message, REASONING_TEXT), "the reply's reasoning")
    finish = choice.get("finish_reason")
    reply.finish_reason = finish if isinstance(finish, str) else None
    return reply


def parse_stream(lines, deadline: float, aborted) -> Reply:
    """A streamed chat completion from its text lines (`data: {...}` events up to `data: [DONE]`)."""
    parts, reasoning = [], []
    reply = Reply("", None)
    for line in lines:
        if aborted():
            raise InterruptedError()
        if time.monotonic() > deadline:
            raise DeadlineExceeded()
        if not line.startswith("data:"):
            continue  # comments, event names, keep-alives
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        event = _loads(payload, "a stream event")
        if isinstance(event, dict) and isinstance(event.get("error"), dict):
            raise MalformedReply(
                "the stream reported an error", str(event["error"].get("message"))[:4000], 120
            )
        if isinstance(event, dict) and event.get("usage") is not None:
            _usage(reply, event["usage"])
        reply.served = first_served(reply.served, served_of(event))
        if isinstance(event, dict) and event.get("choices") == []:
            continue  # the usage event
        choice = _choice(event)
        if choice is None:
            continue
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise MalformedReply("a stream event's delta is not an object")
        parts.append(_text(delta.get("content"), "the reply's content"))
        reasoning.append(_text(first_field(delta, REASONING_TEXT), "the reply's reasoning"))
        if isinstance(choice.get("finish_reason"), str):
            reply.finish_reason = choice["finish_reason"]
    reply.text, reply.reasoning = "".join(parts), "".join(reasoning)
    if reply.finish_reason is None:
        raise StreamCutShort("stream ended before the reply finished")
    return reply
