"""Each endpoint's limits, shared by every call made to it: requests in flight (AIMD on push-back), the pause a
429's Retry-After asks for, optional proactive pacing to a requests- and tokens-per-minute limit, turns taken in
rotation by the cells (stages) waiting for it, and a stop that holds for every call once the endpoint has refused
the grid's settings (a bad key, an unknown model).

One stage invocation keeps one limiter per base URL; the grid (`run_grid.py`) keeps one per endpoint, its base URL,
model id and key (by a hash, never the key), for every cell at once.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable

from lexpilot.errors import Aborted, FatalError, HarnessError
from lexpilot.settings import Role

# Paced a little under the limit: a provider counts arrivals in its own window, and requests let go exactly 60/rpm s
# apart reach it closer together or further apart than that (the client's threads, the network). 3 % keeps 429s
# rare on a loaded machine (tests/running/grid/test_run_grid.py, under the suite's load) and costs 3 % of the endpoint.
PACING_MARGIN = 0.97
POLL = 0.5  # the longest a waiting call sleeps before it looks at a stop again (a Ctrl-C, an abort)


@dataclass(frozen=True)
class Limits:
    """An endpoint's proactive limits (None: not limited that way): requests in flight, requests per minute and
    tokens per minute."""

    concurrency: int | None = None
    rpm: float | None = None
    tpm: float | None = None

    NAMES = ("concurrency", "rpm", "tpm")


# The range each limit is taken in: below it the pacing and the quote's wall time turn absurd (rpm = 1e-300 was quoted
# as a 300-digit number of hours), above it no provider goes. rpm: one request in 1,000 minutes at least; tpm: one
# token a minute (a request counts at least its output limit, so even that paces one call in days).
LIMIT_RANGES = {"concurrency": (1, 1_000_000), "rpm": (1e-3, 1e9), "tpm": (1.0, 1e12)}


def limit_value(name: str, value, where: str) -> float:
    """A positive number for a limit within its range (a whole one for concurrency), or a one-line error saying
    where, and the range."""
    ok = (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )
    if not ok or (name == "concurrency" and value != int(value)):
        kind = "a positive whole number" if name == "concurrency" else "a positive number"
        raise HarnessError(f"{where}: {name} = {str(value)[:40]!r} is not {kind}")
    low, high = LIMIT_RANGES[name]
    if not low <= value <= high:
        raise HarnessError(f"{where}: {name} = {value:g} is out of range; give {low:g} to {high:g}")
    return int(value) if name == "concurrency" else float(value)


def parse_limits(text: str, where: str) -> Limits:
    """'rpm:R,tpm:T,concurrency:C' (any of them) -> Limits; a bad entry is a one-line error naming `where`."""
    values: dict[str, float] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, _, number = entry.partition(":")
        if name not in Limits.NAMES:
            raise HarnessError(
                f"{where}: {name!r} is not a limit; use {', '.join(Limits.NAMES)} as NAME:VALUE"
            )
        if name in values:
            raise HarnessError(f"{where}: {name} is given twice; give each limit once")
        parsed: float | str
        try:
            parsed = float(number)
        except ValueError:
            parsed = number
        values[name] = limit_value(name, parsed, where)
    if not values:
        raise HarnessError(f"{where}: no limit given; use e.g. rpm:500,tpm:200000,concurrency:16")
    concurrency = values.get("concurrency")  # a whole number (limit_value)
    return Limits(int(concurrency) if concurrency is not None else None, values.get("rpm"), values.get("tpm"))


def key_digest(api_key: str) -> str:
    """A key's identity for telling endpoints apart: its hash, so the key itself is never kept or shown."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]


def request_tokens(prompt_chars: int, max_tokens: int) -> int:
    """What a request counts against a tokens-per-minute limit when it is sent, as OpenAI's rate-limit guide counts
    it: the larger of its output limit and its estimated prompt tokens (one token per character, as --max-cost
    estimates Chinese text)."""
    return max(max_tokens, prompt_chars)


def requests_per_minute(limits: Limits, tokens_per_request: int) -> float | None:
    """What an endpoint's limits allow in requests a minute, a request counted at `tokens_per_request` against tpm
    (None: no rpm or tpm limit)."""
    allowed = min(limits.rpm or math.inf, limits.tpm / tokens_per_request if limits.tpm else math.inf)
    return None if allowed == math.inf else allowed


class Ticket:
    """One call waiting for its turn at an endpoint."""

    __slots__ = ("cell", "tokens", "granted", "wake_at", "event", "lease")

    def __init__(self, cell: Hashable, tokens: int):
        self.cell, self.tokens, self.granted = cell, tokens, False
        self.wake_at: float | None = None
        self.lease: str | None = None  # where slots are shared (SharedLimiter), the slot's lease id
        self.event = threading.Event()


class Limiter:
    """Requests in flight to one endpoint: on HTTP 429 every waiting call waits out Retry-After and the limit
    halves; a stream the endpoint cut short (a server with fewer slots than requests) lowers the limit below
    what was in flight; each success raises it again (AIMD), so a pushing-back endpoint is not hammered. With
    `limits`, requests are also paced to its rpm and tpm. Waiting calls are let through a cell at a time in
    rotation, so no cell starves; only the call whose turn it is is woken."""

    def __init__(self, ceiling: int, limits: Limits = Limits(), name: str = ""):
        self.name, self.limits = name, limits
        self.max_limit: float = limits.concurrency or ceiling  # lowered (not to a whole number) on push-back
        self.limit, self.in_flight = float(self.max_limit), 0
        self.resume_at = self.last_cut = 0.0
        self.next_request = self.next_tokens = 0.0  # the earliest moment the pacing lets the next request go
        self.waiting: dict[Hashable, deque[Ticket]] = {}
        self.turns: deque[Hashable] = deque()  # cells with a call waiting, the next to go first
        self.failure = ""  # an endpoint-wide refusal: every call raises it
        self.sent = 0  # slots taken, for the pacing; a call whose slot went back unsent (the budget) counts
        # the calls the endpoint answered (any status; not a connection refused), for the display's calls/s, and of
        # those the 429s, each one whatever its Retry-After asked
        self.answers = self.rate_limited = 0
        self.unavailable = (
            0  # flex requests answered "resource unavailable": waited out, the window left whole
        )
        self.server_waits = (
            0  # of the calls in flight, those still waiting for their server's turn (OnServer)
        )
        # while calls wait for it (its backlog): since when, for how long in all, and the calls let go meanwhile
        self.backlog_since: float | None = None
        self.backlog_seconds, self.backlog_sent, self.backlogs = 0.0, 0, 0
        # where the limiter is shared (Redis): the calls every process sent while this one's calls waited, which is
        # what the limit is measured against (a shard's own sends are its share only); None until read
        self.backlog_shared: int | None = None
        self.shared_at_start: int | None = None
        self.lock = threading.Lock()

    def busy(self) -> float | None:
        """The share of its rpm limit the endpoint was used at while calls waited for it (None: no rpm limit, or
        never a backlog). Over a backlog of t seconds the limit lets t × rpm / 60 calls go after the one it starts
        with, so each backlog counts one call more than its length: a call that waited a millisecond for its turn
        is the limit used in full, not a thousand times over."""
        with self.lock:
            seconds = self.backlog_seconds + (
                time.monotonic() - self.backlog_since if self.backlog_since else 0.0
            )
            if not self.limits.rpm or not self.backlogs:
                return None
            sent = self.backlog_sent
            if self.backlog_shared is not None:
                sent = self.backlog_shared
                ongoing = (
                    self._shared_sent() if self.backlog_since and self.shared_at_start is not None else None
                )
                if ongoing is not None and self.shared_at_start is not None:
                    sent += ongoing - self.shared_at_start
            return sent / (seconds * self.limits.rpm / 60 + self.backlogs)

    def _shared_sent(self) -> int | None:
        """The calls every process sharing this endpoint has sent so far (None: the limiter is this process's)."""
        return None

    def _stopped_waiting(self) -> None:
        """No call of this process waits any more, the last one stopped (where slots are shared: it leaves the
        queue of processes waiting, at once rather than when it goes stale)."""

    # --- taking and giving back a slot
    def acquire(self, stopped: Callable[[], bool], cell: Hashable = None, tokens: int = 0) -> str | None:
        """Wait for this call's turn (the slot's lease id, where slots are shared, for `release`); Aborted when
        `stopped()` turns true first, FatalError once the endpoint has refused the settings."""
        ticket = Ticket(cell, tokens)
        with self.lock:
            if cell not in self.waiting:
                self.waiting[cell] = deque()
                self.turns.append(cell)
            self.waiting[cell].append(ticket)
        while True:
            with self.lock:
                if not ticket.granted and (self.failure or stopped()):
                    self._withdraw(ticket)
                    if not self.waiting:
                        self._stopped_waiting()
                    self._dispatch(time.monotonic())
                    if self.failure:
                        raise FatalError(self.failure)
                    raise Aborted()
                # only the next call can go: no one else asks
                if not ticket.granted and self._is_next(ticket):
                    self._dispatch(time.monotonic())
                if ticket.granted:
                    return ticket.lease
                timeout = POLL if ticket.wake_at is None else ticket.wake_at - time.monotonic()
                ticket.event.clear()
            ticket.event.wait(min(max(timeout, 0.0), POLL))

    def release(
        self,
        pushed_back: str | None = None,
        pause: float | None = None,
        tokens_over: int = 0,
        lease: str | None = None,
    ) -> None:
        """`pushed_back`: "rate" (HTTP 429, pause = its Retry-After, already capped) or "slots"; `tokens_over`:
        tokens the reply used beyond what was counted when it was sent, charged to the tpm pacing."""
        with self.lock:
            now = time.monotonic()
            self._give_back(pushed_back, pause, tokens_over, now, lease)
            self._dispatch(now)

    def _give_back(
        self,
        pushed_back: str | None,
        pause: float | None,
        tokens_over: int,
        now: float,
        lease: str | None = None,
    ) -> None:
        """A call ended: its slot back, and what its ending says about the endpoint (AIMD)."""
        if pushed_back == "slots":  # the server has fewer slots than requests: it never grows them
            self.limit = self.max_limit = max(1.0, min(self.limit, self.in_flight - 1))
        elif pushed_back == "rate":
            pause = pause if pause is not None else 1.0
            self.resume_at = max(self.resume_at, now + pause)
            if now - self.last_cut > pause:  # one cut per push-back, not one per rejected request
                self.limit, self.last_cut = max(1.0, self.limit / 2), now
        else:
            self.limit = min(self.max_limit, self.limit + 1 / self.limit)
        if tokens_over > 0 and self.limits.tpm:
            self.next_tokens = max(self.next_tokens, now) + tokens_over / self._token_rate()
        self.in_flight -= 1

    def count_answer(self, status: int | None) -> None:
        """The endpoint answered a call (`status`: the HTTP status of a refusal, None for a reply): for the display."""
        with self.lock:
            self.answers += 1
            self.rate_limited += status == 429

    def count_unavailable(self) -> None:
        """A flex request found no room: counted for the display, not a push-back (the window keeps its size)."""
        with self.lock:
            self.unavailable += 1

    def fail(self, message: str) -> None:
        """The endpoint refused what every call sends (a key, a model id): no call to it is made again."""
        with self.lock:
            self.failure = self.failure or message
            for queue in self.waiting.values():
                for ticket in queue:
                    ticket.event.set()

    # --- under the lock
    def _is_next(self, ticket: Ticket) -> bool:
        return bool(self.turns) and self.waiting[self.turns[0]][0] is ticket

    def _token_rate(self) -> float:
        assert self.limits.tpm, "only a tpm limit paces by tokens"
        return self.limits.tpm * PACING_MARGIN / 60

    def _take(self, ticket: Ticket, now: float) -> float:
        """The next call's slot if the limits allow it now (0.0), else how long it must wait (inf: until a call in
        flight ends)."""
        if self.in_flight >= int(self.limit):
            return math.inf
        wait = max(
            0.0,
            self.resume_at - now,
            self.next_request - now if self.limits.rpm else 0.0,
            self.next_tokens - now if self.limits.tpm else 0.0,
        )
        if wait > 0:
            return wait
        self.in_flight += 1
        if self.limits.rpm:
            self.next_request = max(self.next_request, now) + 60 / (self.limits.rpm * PACING_MARGIN)
        if self.limits.tpm:
            self.next_tokens = max(self.next_tokens, now) + ticket.tokens / self._token_rate()
        return 0.0

    def _dispatch(self, now: float) -> None:
        """Let waiting calls go, a cell at a time in rotation, while the limits allow."""
        while self.turns:
            cell = self.turns[0]
            ticket = self.waiting[cell][0]
            wait = self._take(ticket, now)
            if wait > 0:
                wake_at = None if wait == math.inf else now + wait
                if wake_at != ticket.wake_at:  # it sleeps until then (or until a release lets it go)
                    ticket.wake_at = wake_at
                    ticket.event.set()
                if self.backlog_since is None:
                    self.backlog_since, self.backlogs = now, self.backlogs + 1
                    self.shared_at_start = self._shared_sent()
                return
            if self.backlog_since is not None:
                self.backlog_sent += 1
            self._withdraw(ticket)
            self.sent += 1
            ticket.granted = True
            ticket.event.set()
        if self.backlog_since is not None:  # no call waits any more
            self.backlog_seconds += now - self.backlog_since
            self.backlog_since = None
            shared = self._shared_sent() if self.shared_at_start is not None else None
            if shared is not None and self.shared_at_start is not None:
                self.backlog_shared = (self.backlog_shared or 0) + shared - self.shared_at_start

    def _withdraw(self, ticket: Ticket) -> None:
        """The ticket leaves its cell's queue; a cell that got a call through goes to the back of the rotation."""
        queue = self.waiting.get(ticket.cell)
        if not queue or ticket not in queue:
            return
        first = queue[0] is ticket
        queue.remove(ticket)
        if first and self.turns and self.turns[0] == ticket.cell:
            self.turns.popleft()
            if queue:
                self.turns.append(ticket.cell)
        if not queue:
            del self.waiting[ticket.cell]
            if ticket.cell in self.turns:
                self.turns.remove(ticket.cell)


class OnServer:
    """The limits a call to a model takes when the server it lives on has limits of its own (two model ids on one
    llama.cpp server with one slot): the model's turn first, then the server's; given back in the other order. A
    stream cut short says the server has fewer slots than requests: only the server's limit is lowered."""

    def __init__(self, model: Limiter, server: Limiter):
        self.model, self.server = model, server

    def acquire(
        self, stopped: Callable[[], bool], cell: Hashable = None, tokens: int = 0
    ) -> tuple[str | None, str | None]:
        first = self.model.acquire(stopped, cell, tokens)
        with self.model.lock:  # past the model's limit, not yet at the server: the display says how many
            self.model.server_waits += 1
        try:
            return first, self.server.acquire(stopped, cell, tokens)
        except BaseException:
            self.model.release(lease=first)  # stopped or refused while it waited: the model's slot goes back
            raise
        finally:
            with self.model.lock:
                self.model.server_waits -= 1

    def release(
        self,
        pushed_back=None,
        pause=None,
        tokens_over: int = 0,
        lease: tuple[str | None, str | None] | None = None,
    ) -> None:
        first, second = lease or (None, None)
        self.server.release(pushed_back, pause, tokens_over, second)
        self.model.release(None if pushed_back == "slots" else pushed_back, pause, tokens_over, first)

    def fail(self, message: str) -> None:
        self.model.fail(message)

    def count_answer(self, status: int | None) -> None:
        self.server.count_answer(status)
        self.model.count_answer(status)

    def count_unavailable(self) -> None:
        self.model.count_unavailable()


def server_of(base_url: str) -> str:
    """A server's identity from a base URL, however it is spelled: scheme and host in lower case, a default port
    left out, slashes in the path collapsed and none at its end (a query, rare in a base URL, kept as given)."""
    parts = urllib.parse.urlsplit(base_url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port and port != {"http": 80, "https": 443}.get(scheme):
        host += f":{port}"
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{host}{re.sub('/+', '/', parts.path).rstrip('/')}{query}"


@dataclass(frozen=True)
class Endpoint:
    """An endpoint's identity, the one way the harness tells endpoints apart (limiters, pooled and grouped batches,
    clients): its base URL, its model id, and its key's hash (never the key)."""

    base_url: str
    model: str
    key: str

    @classmethod
    def of(cls, role: Role) -> Endpoint:
        """A role's endpoint, its base URL however spelled (server_of): `HTTP://Host:80//v1/` is `http://host/v1`."""
        return cls(server_of(role.base_url), role.model, key_digest(role.api_key))

    @property
    def account(self) -> tuple[str, str]:
        """What a client is made for: the base URL and the key (one client serves every model there)."""
        return self.base_url, self.key

    def parts(self) -> tuple[str, ...]:
        """Its fields in order: a shared limiter's Redis keys are named by their hash."""
        return self.base_url, self.model, self.key


class Endpoints:
    """The limiters a set of calls shares: one per base URL for a stage invocation (`per_model` False), one per
    endpoint for the grid. `ceiling(role)` is the most requests in flight a new limiter starts with (where no
    concurrency limit is given); `limits` holds the proactive limits by model id."""

    def __init__(
        self,
        ceiling: Callable[[Role], int],
        limits: dict[str, Limits] | None = None,
        per_model: bool = False,
        make: Callable | None = None,
        servers: dict[str, Limits] | None = None,
    ):
        self.ceiling, self.limits, self.per_model = ceiling, limits or {}, per_model
        # a server's limits (by server_of its base URL), shared by every model it serves, on top of each model's own
        self.servers = {server_of(url): lim for url, lim in (servers or {}).items()}
        # make(endpoint, ceiling, limits, name) -> a limiter: shared_limits.SharedLimiter for limits held in Redis
        self.make = make or (lambda endpoint, ceiling, limits, name: Limiter(ceiling, limits, name))
        self.limiters: dict[tuple, Limiter] = {}
        self.lock = threading.Lock()

    def of(self, role) -> Limiter | OnServer:
        """The limiter a call of this role takes: its endpoint's, and its server's too where the server has limits."""
        key = Endpoint.of(role).parts() if self.per_model else (server_of(role.base_url),)
        server = server_of(role.base_url)
        with self.lock:
            if key not in self.limiters:
                name = f"{role.model} at {role.host}" if self.per_model else role.host
                self.limiters[key] = self.make(
                    key, self.ceiling(role), self.limits.get(role.model, Limits()), name
                )
            if server not in self.servers:
                return self.limiters[key]
            if ("server", server) not in self.limiters:
                limits = self.servers[server]
                self.limiters[("server", server)] = self.make(
                    ("server", server), limits.concurrency or self.ceiling(role), limits, f"server {server}"
                )
            return OnServer(self.limiters[key], self.limiters[("server", server)])

    def all(self) -> list[Limiter]:
        with self.lock:
            return list(self.limiters.values())
