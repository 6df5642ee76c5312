"""Off-peak holds (lexpilot/models/offpeak.py): a held call sleeps until its endpoint's peak window closes, reading
the clock a few times rather than polling it, and wakes at once on a stop; what a hold says while it holds."""

import threading
import time
from datetime import datetime

import pytest

from lexpilot.errors import Aborted
from lexpilot.models.offpeak import Hold, duration
from lexpilot.pricing import read_prices
from lexpilot.windows import utc_now
from tests.helpers.clock import price_file, seconds_until_change, windows_from_now
from tests.helpers.processes import wait_until


class CountingClock:
    """The real clock, counting how often it is read."""

    def __init__(self):
        self.reads = 0

    def __call__(self) -> datetime:
        self.reads += 1
        return utc_now()


def hold_for(tmp_path, *spans, clock=utc_now) -> Hold:
    path = price_file(
        tmp_path,
        {"judge-model": {"prompt": 1, "completion": 1, **windows_from_now(*spans), "peak_multiplier": 2}},
    )
    windows = read_prices(path)["judge-model"].windows
    return Hold("judge-model", windows, clock)


@pytest.mark.slow  # it waits for a window to close
def test_a_held_call_sleeps_until_the_window_closes_reading_the_clock_a_few_times(tmp_path):
    """The window closes in about 2 s: the call returns then, not before, and reads the clock twice (once to find
    the window open, once when its sleep ends) where a poll every 0.2 s would read it ten times."""
    clock = CountingClock()
    hold = hold_for(tmp_path, (-60, 2), clock=clock)
    left = seconds_until_change(hold.windows)
    start = time.monotonic()
    hold.wait(lambda: False)
    waited = time.monotonic() - start
    assert waited >= left - 0.05, (waited, left)
    assert hold.windows.at(utc_now()) == ""
    assert clock.reads <= 3, clock.reads
    assert hold.waiting == 0


def test_a_stop_wakes_a_held_call_at_once(tmp_path):
    """A window open for another minute; the stop comes once the call is held: the call leaves (Aborted) at once, far before
    the window closes, and while it waited the hold said so."""
    hold = hold_for(tmp_path, (-60, 60))
    stop, ended = threading.Event(), {}

    def call():
        try:
            hold.wait(stop.is_set)
        except Aborted:
            ended["at"] = time.monotonic()

    worker = threading.Thread(target=call)
    worker.start()
    wait_until(lambda: hold.waiting == 1)  # however late a busy machine runs the worker
    assert hold.status().startswith("held for off-peak, 1 call waiting, opens in ")
    stopped_at = time.monotonic()
    stop.set()
    hold.wake()
    worker.join(timeout=30)
    assert not worker.is_alive() and ended["at"] - stopped_at < 5  # against a minute's window
    assert hold.waiting == 0


def test_a_call_outside_the_peak_windows_is_not_held(tmp_path):
    hold = hold_for(tmp_path, (30, 60))
    start = time.monotonic()
    hold.wait(lambda: False)
    assert time.monotonic() - start < 10 and hold.status() == ""  # the window opens in 30 s


@pytest.mark.parametrize(
    "seconds, said", [(7800, "2 h 10 min"), (3600, "1 h 0 min"), (125, "2 min"), (12.4, "12 s"), (0.2, "0 s")]
)
def test_how_long_until_a_hold_opens_is_said_in_hours_and_minutes(seconds, said):
    assert duration(seconds) == said
