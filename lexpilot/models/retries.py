"""The retry policy of a model call, in one module: which HTTP statuses are transient, how long a backoff or a provider's
Retry-After pauses a call, the caps on rate-limited and flex-unavailable answers, and what one attempt came to
(`Attempt`) and where a call's attempts stand (`Tries`).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from lexpilot.models.replies import (
    Reply,
)

TRANSIENT_STATUS = {408, 409, 429}

MAX_BACKOFF = 60.0

# the longest a provider's Retry-After may pause a stage; a longer one fails the attempt
MAX_RETRY_AFTER = 300.0

RATE_LIMITED_ATTEMPTS = 30  # 429s mean "slow down", not "failed": waited out under their own cap


def retry_after_seconds(headers) -> float | None:
    """The pause a response asks for (Retry-After in seconds or as an HTTP date, or retry-after-ms); any
    value, however large or non-finite, is returned as it is: the caller caps it."""
    if headers is None:
        return None
    if headers.get("retry-after-ms"):
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
        return seconds if seconds == seconds else math.inf  # NaN: no usable pause, treated as too long
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, OverflowError, IndexError):
            return None


def backoff_seconds(attempt: int, retry_after: float | None, base: float) -> float:
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_AFTER)
    return min(MAX_BACKOFF, base * 2**attempt) * random.uniform(0.5, 1.0)


def _duration(seconds: float) -> str:
    if seconds == math.inf:
        return "forever"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


FLEX_UNAVAILABLE_ATTEMPTS = 30  # "resource unavailable" answers a call waits out before its case fails


@dataclass
class Tries:
    """Where one call's attempts stand: failed attempts, rate-limited and flex-unavailable answers (each under its
    own cap), and the tier the next request asks for (the standard one after --flex-fallback's count)."""

    attempts: int
    tier: str | None
    attempt: int = 0
    rate_limited: int = 0
    unavailable: int = 0

    def after(self, last: Attempt, transport) -> float | None:
        """The pause before the next request (None: none), counting `last` where it belongs."""
        if (
            last.pushed_back == "rate"
            and last.retry_after is not None
            and self.rate_limited < RATE_LIMITED_ATTEMPTS
        ):
            self.rate_limited += 1  # the throttle makes every worker wait out Retry-After
            return None
        if last.unavailable and self.unavailable + 1 < FLEX_UNAVAILABLE_ATTEMPTS:
            self.unavailable += 1  # not a failed attempt: the tier has no room now (not charged)
            if transport.flex_fallback and self.unavailable >= transport.flex_fallback:
                self.tier = "default"
            return backoff_seconds(min(self.unavailable - 1, 6), last.retry_after, transport.backoff_base)
        self.attempt += 1
        if self.attempt >= self.attempts:
            return None
        return backoff_seconds(self.attempt - 1, last.retry_after, transport.backoff_base)


@dataclass
class Attempt:
    """What one attempt at a call came to: an accepted reply, or a problem and how the provider pushed back."""

    reply: Reply | None = None  # accepted
    problem: str = ""
    retry_after: float | None = None
    pushed_back: str | None = None  # "rate" (429 with a wait the harness honours), "slots" (a cut stream)
    hint: str = ""
    repeat: bool = False  # asked again at once, not a failed attempt (the output-limit field switched)
    unavailable: bool = False  # refused at the flex tier for want of capacity (not charged)
    # any reply the provider gave, accepted or not (its cost settles the budget)
    answered: Reply | None = None
    # the HTTP status of a refusal (429, 500, ...; None for a reply, or when nothing came back): every 429 is counted,
    # whatever its Retry-After asked
    status: int | None = None
