"""Calls and tokens per role (`Usage`), for a record or a whole stage: the counts every reader sums, the calls each
served model, tier and fingerprint answered, and the price class each call is billed at (`billed_class`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lexpilot.models.replies import (
    Reply,
    Served,
)
from lexpilot.pricing import PRICED_COUNTS, counted_key, counts_of, price_class


@dataclass
class Usage:
    """Calls and tokens per role, for one record or a whole stage. Beside the totals, an entry counts the calls each
    served model, tier and fingerprint answered ("served:ID", "tier:NAME", "fingerprint:FP") and the calls and
    tokens billed at another price class than the standard ("flex:prompt_tokens", ...): flat whole numbers."""

    by_role: dict = field(default_factory=dict)

    def add(
        self,
        role: str,
        prompt_tokens: int,
        completion_tokens: int,
        calls: int = 1,
        unreported: int = 0,
        reasoning_tokens: int = 0,
        batched: int = 0,
        cached_tokens: int = 0,
        priced: str = "",
        served: Served | None = None,
    ) -> None:
        """`unreported`: calls whose reply carried no token counts (e.g. llama.cpp's streamed replies);
        `reasoning_tokens`: the part of the completion tokens spent on reasoning, where reported;
        `cached_tokens`: the part of the prompt tokens served from the provider's prompt cache, where reported;
        `priced`: the price class the calls were billed at (price_class; "": standard); `served`: what served them."""
        entry = self.by_role.setdefault(role, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        entry["calls"] += calls
        entry["prompt_tokens"] += prompt_tokens
        entry["completion_tokens"] += completion_tokens
        extra = {
            "unreported_calls": unreported,
            "reasoning_tokens": reasoning_tokens,
            "batched_calls": batched,  # answered through a provider's batch API (priced at its batch price)
            "cached_prompt_tokens": cached_tokens,  # priced at the cached-input price
        }
        if priced:
            values = (calls, prompt_tokens, completion_tokens, cached_tokens)
            extra |= {counted_key(priced, name): n for name, n in zip(PRICED_COUNTS, values)}
        if served:
            for kind, value in zip(SERVED_KINDS, served_names(served)):
                if value:
                    extra[counted_key(kind, value)] = calls
        for key, n in extra.items():
            if n:
                entry[key] = entry.get(key, 0) + n

    def note(self, role: str, key: str, n: int = 1) -> None:
        """Count one more of something a role's calls came to (FLEX_FALLBACK_CALLS)."""
        entry = self.by_role.setdefault(role, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        entry[key] = entry.get(key, 0) + n

    def merge(self, other: dict) -> None:
        """Add another usage's entries (role -> counts): every whole number in them, whatever its key."""
        for role, e in other.items():
            entry = self.by_role.setdefault(role, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
            for key, n in e.items():
                if isinstance(n, int) and not isinstance(n, bool):
                    entry[key] = entry.get(key, 0) + n


def served_names(served: Served) -> tuple[str | None, str | None, str | None]:
    return served.model, served.service_tier, served.system_fingerprint


FLEX_FALLBACK_CALLS = (
    "flex_fallback_calls"  # a usage entry's count of calls sent at the standard tier at last
)


SERVED_KINDS = ("served", "tier", "fingerprint")  # what a reply says served it, as a usage entry counts it


def served_call(role: str, used: dict) -> dict:
    """One call as a record lists it (`served_calls`, in the order the calls were made): its role, and the model,
    tier and fingerprint its usage says served it, and whether it fell back to the standard tier. A call retried
    after an unusable reply may have been served by more than one: then each, sorted, in a list. Keys a provider
    did not say are left out."""
    counts = used.get(role) or {}
    call: dict = {"role": role}
    for kind in SERVED_KINDS:
        names = sorted(counts_of(counts, kind))
        if names:
            call[kind] = names[0] if len(names) == 1 else names
    if counts.get(FLEX_FALLBACK_CALLS):
        call["fallback"] = True
    return call


def billed_class(reply: Reply, window: str = "") -> str:
    """The price class a reply is billed at: the tier the reply says served it, not the one asked for, and the price
    window its request was sent in (windows.py: "peak" or "")."""
    return price_class(reply.served.service_tier if reply.served else None, window or None)
