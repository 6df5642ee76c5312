"""Provider quirks, in one place: what a refused request means for the harness, read from the provider's error (its
HTTP status, `param`, `code` and wording), for a synchronous call and a batch output line alike, so that batch mode
cannot drift from the synchronous path; and where each provider puts the counts and text a reply carries beyond
the standard ones (cached prompt tokens, reasoning tokens, reasoning text). Each provider's wording or field is one
named entry with an example of its own (tests/models/test_quirks.py plays every entry's example); a new quirk is one
entry. And the one message a refusal that stops a stage gives, whichever path met it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from lexpilot.benchmark.vocabulary import ROLE


class Refusal(str, Enum):
    """What a refused request asks of the harness."""

    TOKEN_FIELD = "token_field"  # the output-limit field is refused: asked again with max_completion_tokens
    # the prompt plus the output limit exceed the model's context: the case fails
    CONTEXT_WINDOW = "context_window"
    TEMPERATURE = "temperature"  # the model accepts no temperature but its default: the stage stops
    OUTPUT_LIMIT = "output_limit"  # the output limit is above the model's: the stage stops
    SERVICE_TIER = "service_tier"  # the model does not take the service tier asked for: the role stops
    # the flex tier has no capacity now (not a rate limit: the endpoint's window is not narrowed): asked again
    UNAVAILABLE = "unavailable"


STOPS = (Refusal.TEMPERATURE, Refusal.OUTPUT_LIMIT, Refusal.SERVICE_TIER)  # no retry, no other case gets past


@dataclass(frozen=True)
class ProviderError:
    """A provider's refusal of one request, however it came (an HTTP error, a batch output or error line)."""

    status: int | None  # None: a batch error-file line, which carries no status
    message: str
    param: str = ""
    code: str = ""


@dataclass(frozen=True)
class Quirk:
    """One provider's way of saying a refusal: its `param` and `code` (all given must match) or its wording."""

    name: str
    refusal: Refusal
    example: ProviderError  # what that provider sends (tests/models/test_quirks.py)
    param: str = ""
    code: str = ""
    wording: str = ""  # a regular expression, case-insensitive, searched in the code and the message
    statuses: tuple[int | None, ...] = (
        400,
        None,
    )  # the HTTP statuses it comes with (None: a batch error line)

    def matches(self, error: ProviderError) -> bool:
        if self.wording:
            return re.search(self.wording, f"{error.code} {error.message}", re.I | re.S) is not None
        return (not self.param or error.param == self.param) and (not self.code or error.code == self.code)


def _e(message: str, param: str = "", code: str = "", status: int = 400) -> ProviderError:
    return ProviderError(status, message, param, code)


# in the order they are tried: a context window is said before an output limit, whose wordings overlap
QUIRKS = (
    Quirk(
        "OpenAI: context_length_exceeded",
        Refusal.CONTEXT_WINDOW,
        _e("This model's maximum context length is 8192 tokens.", "messages", "context_length_exceeded"),
        wording=r"context_length_exceeded",
    ),
    Quirk(
        "OpenAI, vLLM, DeepSeek: 'maximum context length'",
        Refusal.CONTEXT_WINDOW,
        _e("This model's maximum context length is 32768 tokens. However, you requested 40000 tokens."),
        wording=r"maximum context length|context length",
    ),
    Quirk(
        "llama.cpp server: 'exceeds the available context size' (exceed_context_size_error)",
        Refusal.CONTEXT_WINDOW,
        _e("request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it"),
        wording=r"exceeds? the available context size",
    ),
    Quirk(
        "OpenAI-compatible: 'context window'",
        Refusal.CONTEXT_WINDOW,
        _e("Input is longer than the model's context window."),
        wording=r"context window",
    ),
    Quirk(
        "OpenAI reasoning models: max_tokens unsupported (param and code)",
        Refusal.TOKEN_FIELD,
        _e("Unsupported parameter.", "max_tokens", "unsupported_parameter"),
        param="max_tokens",
        code="unsupported_parameter",
    ),
    Quirk(
        "OpenAI reasoning models: max_tokens unsupported (wording)",
        Refusal.TOKEN_FIELD,
        _e(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
            "instead."
        ),
        wording=r"'max_tokens' is not supported.*max_completion_tokens|Unsupported parameter: 'max_tokens'",
    ),
    Quirk(
        "OpenAI reasoning models: temperature unsupported (param)",
        Refusal.TEMPERATURE,
        _e("Unsupported value.", "temperature", "unsupported_value"),
        param="temperature",
    ),
    Quirk(
        "OpenAI-compatible: temperature unsupported (wording)",
        Refusal.TEMPERATURE,
        _e("Unsupported value: 'temperature' does not support 0.7 with this model."),
        wording=r"unsupported value: 'temperature'|temperature.*not support",
    ),
    Quirk(
        "OpenAI, Anthropic, DeepSeek, vLLM: max_tokens too large / at most / maximum / range",
        Refusal.OUTPUT_LIMIT,
        _e("max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for this model"),
        wording=r"max_(completion_)?tokens.*(too large|at most|maximum|exceed|less than|<=|range)",
    ),
    Quirk(
        "OpenAI-compatible: 'maximum output/completion tokens' without the field's name",
        Refusal.OUTPUT_LIMIT,
        _e("The requested output exceeds the maximum completion tokens (4096) of this model"),
        wording=r"(maximum|max) (output|completion) tokens",
    ),
    Quirk(
        "OpenAI, Azure OpenAI: a model without the flex tier (400 invalid_request_error, no fall back to standard)",
        Refusal.SERVICE_TIER,
        _e("Unsupported service_tier: flex", code="invalid_request_error"),
        wording=r"service[_ ]tier",
    ),
    Quirk(
        "OpenAI, Azure OpenAI: flex processing without capacity now (429 'Resource Unavailable', not charged)",
        Refusal.UNAVAILABLE,
        _e("Resource unavailable. Please try again later.", code="resource_unavailable", status=429),
        wording=r"resource[ _]unavailable",
        statuses=(429,),
    ),
    Quirk(
        "Groq: flex processing without capacity now (498 capacity_exceeded)",
        Refusal.UNAVAILABLE,
        _e("Flex tier capacity exceeded. This is a known issue.", code="capacity_exceeded", status=498),
        wording=r"capacity_exceeded",
        statuses=(498,),
    ),
)


def provider_error(status: int | None, body, fallback: str = "") -> ProviderError:
    """A provider's error body as providers send it (`{"error": {...}}`, the object itself, or a bare string), with
    `fallback` as its message when it states none."""
    body = body if isinstance(body, dict) else {}
    inner = body.get("error", body)
    inner = inner if isinstance(inner, dict) else {"message": inner} if isinstance(inner, str) else {}
    message = inner.get("message")
    return ProviderError(
        status,
        message if isinstance(message, str) and message.strip() else fallback,
        str(inner.get("param") or ""),
        str(inner.get("code") or ""),
    )


def refusal_of(error: ProviderError) -> Refusal | None:
    """The refusal a provider's error states, by the first quirk that matches; None for any other error (a 400
    that is not one of these is a request the harness cannot mend)."""
    return next(
        (quirk.refusal for quirk in QUIRKS if error.status in quirk.statuses and quirk.matches(error)), None
    )


def stop_message(role, refusal: Refusal, said: str) -> str:
    """The line a stage stops with for a refusal in STOPS (`said`: the provider's words, redacted), the same for a
    synchronous call and a batch line."""
    flag_temperature, flag_tokens = role.flags
    if refusal is Refusal.SERVICE_TIER:
        return (
            f"{role.describe()}: the model does not take service tier {role.service_tier!r} ({said}). Send none: "
            f"drop {ROLE[role.name].flag('service-tier')}, or, in a grid, the service_tier of {role.model!r} in "
            "its grid file"
        )
    if refusal is Refusal.TEMPERATURE:
        return (
            f"{role.describe()}: the model does not accept temperature {role.temperature} ({said}). Pass "
            f"{flag_temperature} default to send none, so that the provider's default applies (a protocol "
            "change: report it)"
        )
    return (
        f"{role.describe()}: the model does not accept {role.max_tokens} output tokens ({said}). Pass "
        f"{flag_tokens} with the model's limit"
    )


def context_message(role, said: str) -> str:
    """Why a case fails when its prompt is beyond the model's context window (no retry helps; other cases may fit)."""
    return (
        f"{role.describe()}: the prompt plus {role.flags[1]} {role.max_tokens} exceed the model's context "
        f"window ({said}). Lower {role.flags[1]} or serve the model with a longer context"
    )


# ----------------------------------------------------------------------------- where a reply's extras are


@dataclass(frozen=True)
class Field:
    """One provider's place for a value: a path of keys into the reply's `usage` or message (or stream delta)."""

    name: str
    path: tuple[str, ...]
    example: (
        dict  # a usage or message object that provider sends, holding 7 there (tests/models/test_quirks.py)
    )


CACHED_TOKENS = (  # prompt tokens served from the provider's prompt cache (priced apart), in `usage`
    Field(
        "OpenAI-compatible (OpenAI, vLLM): prompt_tokens_details.cached_tokens",
        ("prompt_tokens_details", "cached_tokens"),
        {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 7}},
    ),
    Field(
        "DeepSeek: prompt_cache_hit_tokens",
        ("prompt_cache_hit_tokens",),
        {"prompt_tokens": 9, "prompt_cache_hit_tokens": 7, "prompt_cache_miss_tokens": 2},
    ),
)
REASONING_TOKENS = (  # completion tokens spent reasoning, in `usage`
    Field(
        "OpenAI: completion_tokens_details.reasoning_tokens",
        ("completion_tokens_details", "reasoning_tokens"),
        {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}},
    ),
)
REASONING_TEXT = (  # reasoning returned apart from the content, in the message or a stream delta
    Field(
        "DeepSeek, llama.cpp (--reasoning-format deepseek), vLLM before 0.10: reasoning_content",
        ("reasoning_content",),
        {"content": "答", "reasoning_content": 7},
    ),
    Field("vLLM, OpenRouter, Ollama: reasoning", ("reasoning",), {"content": "答", "reasoning": 7}),
)


def first_field(data: dict, fields: tuple[Field, ...]) -> Any:
    """The value at the first of `fields` that `data` holds (not None and not empty), else None."""
    for f in fields:
        value: Any = data  # a JSON value, one key deeper at each step
        for key in f.path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and value != "":
            return value
    return None
