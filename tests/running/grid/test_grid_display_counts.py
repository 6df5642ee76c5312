"""What the grid's display counts per endpoint: every 429 (one whose Retry-After is over the cap too, which was shown
as 0 429s), and calls/s as the calls the endpoint answered in a window (an endpoint that was sent nothing, its
connection refused, was shown at 1.4 calls/s: slots taken counted as calls)."""

import io
import socket
import time
from types import SimpleNamespace

import pytest

from lexpilot.models.usage import Usage
from lexpilot.running.grid.display import Display, Quote
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.calls import make_caller, script_of


def display_of(caller) -> Display:
    """The grid's display over a caller's endpoints, begun now."""
    grid = SimpleNamespace(finished_lines=[], sharing=SimpleNamespace(endpoints=caller.endpoints))
    return Display(grid, Quote(), None, io.StringIO())  # type: ignore[arg-type]


def test_every_429_is_counted_whatever_its_retry_after_asks():
    """Three 429s over the cap (100,000 s: a transient failure, no pause), then one honoured (0.01 s), then a reply:
    four 429s, each once."""
    over, honoured = (
        {"status": 429, "headers": {"Retry-After": "100000"}},
        {"status": 429, "headers": {"Retry-After": "0.01"}},
    )
    with ScriptedProvider(script_of(over, over, over, honoured)) as p:
        caller = make_caller(p, retries=8)
        display = display_of(caller)
        caller.chat("eval", "x", Usage())
        limiter = caller.endpoints.limiters[(p.base_url,)]
        assert (limiter.rate_limited, limiter.answers, len(p.requests)) == (4, 5, 5)
        assert ", 4 429s" in display.endpoint_line(limiter, time.monotonic())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once it is closed


def test_an_endpoint_sent_nothing_shows_no_calls_a_second():
    provider = SimpleNamespace(base_url=f"http://127.0.0.1:{closed_port()}/v1")
    caller = make_caller(provider, retries=3)
    display = display_of(caller)
    with pytest.raises(Exception, match="connection error"):
        caller.chat("eval", "x", Usage())
    limiter = caller.endpoints.limiters[(provider.base_url,)]
    assert limiter.sent == 4 and limiter.answers == 0  # four slots taken, no call answered
    assert ", 0.0 calls/s, 0 429s" in display.endpoint_line(limiter, time.monotonic())


def test_calls_a_second_count_the_calls_answered_in_the_window():
    with ScriptedProvider() as p:
        caller = make_caller(p)
        display = display_of(caller)
        for _ in range(3):
            caller.chat("eval", "x", Usage())
        limiter = caller.endpoints.limiters[(p.base_url,)]
        assert ", 3.0 calls/s" in display.endpoint_line(limiter, display.start + 0.5)  # 3 in under a second
        assert ", 0.5 calls/s" in display.endpoint_line(
            limiter, display.start + 6
        )  # 3 in 6 s; the window moves on
        assert ", 0.0 calls/s" in display.endpoint_line(limiter, display.start + 12)  # none since
