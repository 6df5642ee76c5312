"""Off-peak scheduling (--off-peak ROLE|MODEL, `off_peak = true` in a grid file): the calls to a held endpoint start
only outside its peak windows (the price file's, windows.py). A held call sleeps on a condition until the window
closes (a timeout to the window's end, not a poll) and wakes at once on a stop (Ctrl-C, the grid draining, a fatal
error); a call already sent is never abandoned. One hold per model id, shared by every call of a stage or of the
grid's cells, so the display can say how many calls wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from lexpilot.errors import Aborted
from lexpilot.pricing import Price
from lexpilot.windows import Clock, Windows, utc_now

# the longest one sleep lasts: the clock is read again after it, so a suspended laptop or a clock set by hand
# is caught up with within this many seconds (a wake-up every ten minutes costs no CPU to speak of)
LONGEST_SLEEP = 600.0


def duration(seconds: float) -> str:
    """'2 h 10 min', '4 min', '12 s': how long until a hold opens, as the display and the progress line say it."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    return f"{int(seconds // 60)} min" if seconds >= 60 else f"{max(0, round(seconds))} s"


@dataclass
class Hold:
    """The calls of one model id held outside its peak windows."""

    model: str
    windows: Windows
    clock: Clock = utc_now
    waiting: int = 0  # calls asleep here now
    condition: threading.Condition = field(default_factory=threading.Condition)

    def wait(self, stopped: Callable[[], bool], say: Callable[[str], None] | None = None) -> None:
        """Return once the endpoint is off-peak; Aborted when `stopped()` turns true first (woken by `wake`)."""
        with self.condition:
            while True:
                if stopped():
                    raise Aborted()
                now = self.clock()
                left = self.windows.opens_in(now)
                if left <= 0:
                    return
                if say:
                    say(f"{self.model}: held for off-peak until {self.windows.next_change(now):%H:%M:%S %Z}")
                    say = None
                self.waiting += 1
                try:
                    self.condition.wait(min(left, LONGEST_SLEEP))
                finally:
                    self.waiting -= 1

    def wake(self) -> None:
        """A stop was set: every call asleep here looks at it now."""
        with self.condition:
            self.condition.notify_all()

    def status(self) -> str:
        """'held for off-peak, 3 calls waiting, opens in 2 h 10 min' while the endpoint is in a peak window, else ''."""
        left = self.windows.opens_in(self.clock())
        if left <= 0:
            return ""
        calls = "1 call" if self.waiting == 1 else f"{self.waiting} calls"
        return f"held for off-peak, {calls} waiting, opens in {duration(left)}"


@dataclass
class Holds:
    """The holds of one stage or grid, by model id (only the models held for off-peak have one)."""

    by_model: dict[str, Hold] = field(default_factory=dict)

    @classmethod
    def of(cls, held: tuple[str, ...], prices: dict[str, Price] | None, clock: Clock = utc_now) -> Holds:
        """A hold for each model id held (settings.off_peak_models checked that each has windows)."""
        windows = {m: (prices or {})[m].windows for m in held}
        return cls({m: Hold(m, w, clock) for m, w in windows.items() if w is not None})

    def get(self, model: str) -> Hold | None:
        return self.by_model.get(model)

    def wake(self) -> None:
        for hold in self.by_model.values():
            hold.wake()

    def status(self) -> list[tuple[str, str]]:
        """(model id, what its hold says) of each endpoint held now."""
        said = [(m, hold.status()) for m, hold in self.by_model.items()]
        return [(m, text) for m, text in said if text]
