"""What the calls of many stages at once share (the grid): each endpoint's limiter, the budget, the holds for
off-peak, the served models each role accepts, the stop that lets no new call start, and the SDK clients of each
(model, run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lexpilot.errors import BY_CTRL_C, Draining, Stop
from lexpilot.models.limits import Endpoint, Endpoints
from lexpilot.models.offpeak import Holds
from lexpilot.models.replies import (
    Reply,
)
from lexpilot.models.served import ServedModels
from lexpilot.models.usage import Usage
from lexpilot.pricing import Budget
from lexpilot.settings import Role
from lexpilot.windows import Clock, utc_now


@dataclass
class Sharing:
    """What the calls of many stages at once share (the grid): each endpoint's limiter, the budget, and the stop that
    lets no new call start (a first Ctrl-C, a SIGTERM) while the calls in flight end and are journalled."""

    endpoints: Endpoints
    budget: Budget | None = None
    draining: Draining = field(default_factory=Draining)
    # by model id: every reply paid for (refused ones too), for the display's spending
    answered: Usage = field(default_factory=lambda: Usage())
    # of those, the replies that were not a call's first (a retry after a refused reply, a judge's output asked
    # again): the display counts calls answered as the quote counts calls, without retries, and these apart
    retried: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    # (base URL, key hash, timeout, (model, run)) -> the SDK client of one chain's cells: its connection pool is
    # locked and scanned on every request, so one pool for the hundreds of workers of a 10 x 5 grid cost more CPU
    # than the calls (docs/performance.md)
    clients: dict = field(default_factory=dict)
    # with --batch, the grid's pool of batches per endpoint (running/grid/pool.py `BatchPool`, which this layer
    # does not import)
    batches: Any = None
    # (cell label, CaseFailure) as each case of a cell fails: the grid keeps it, and its display says it at once
    on_case_failed: Callable | None = None
    # the served model ids each role accepts, per endpoint and per run, for every cell (models/served.py)
    served: ServedModels = field(default_factory=ServedModels)

    # the endpoints held for off-peak (models/offpeak.py), and the clock their windows and the bill are read by
    holds: Holds = field(default_factory=Holds)
    clock: Clock = utc_now

    def drain(self, by: Stop = BY_CTRL_C) -> None:
        """The grid's first Ctrl-C, or a SIGTERM: no new call starts, and the calls held for off-peak stop waiting
        now."""
        self.draining.start(by)
        self.holds.wake()

    def client(self, role: Role, timeout: float, chain: tuple[str, str], build):
        key = (*Endpoint.of(role).account, timeout, chain)
        with self.lock:
            if key not in self.clients:
                self.clients[key] = build(role)
            return self.clients[key]

    def close_chain(self, chain: tuple[str, str]) -> None:
        """A (model, run) has ended: its clients' connections are closed now, not when the grid ends (a 10 x 5 grid
        would hold a finished chain's sockets and files open for hours)."""
        with self.lock:
            ended = [key for key in self.clients if key[3] == chain]
            clients = [self.clients.pop(key) for key in ended]
        for client in clients:
            client.close()

    def count(self, model: str, reply: Reply, retry: bool = False, priced: str = "") -> None:
        with self.lock:
            self.retried += retry
            self.answered.add(
                model,
                reply.prompt_tokens or 0,
                reply.completion_tokens or 0,
                unreported=int(reply.prompt_tokens is None),
                cached_tokens=reply.cached_tokens or 0,
                priced=priced,
            )

    def count_batched(self, model: str, usage: dict, retry: bool = False) -> None:
        """A reply imported from a batch (its usage entry, `batched_calls` in it), for the display's counts."""
        with self.lock:
            self.retried += retry
            self.answered.merge({model: usage})
