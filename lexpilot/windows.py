"""Prices by the clock: a price file entry's peak windows (daily hours in an IANA time zone), the window a moment
falls in, when that next changes, and the share of a span of time that falls in peak. A call is billed at the
window it was sent in (docs/cost.md, "Prices by the clock"); what a peak call costs is pricing.py's.

Every moment here is an aware datetime; the time now comes from a clock passed in (`utc_now` unless a test gives
its own), never from a global.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

PEAK = "peak"  # the price class of a call sent in a peak window (pricing.price_class)
WINDOW_KEYS = ("tz", "peak", "peak_multiplier")
DAY = 86400
MAX_MULTIPLIER = 100  # a peak at more than 100 times the price is a typo
HOURS = re.compile(r"(\d\d):(\d\d)(?::(\d\d))?")

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The time now, aware (the clock every run uses; tests pass their own)."""
    return datetime.now(timezone.utc)


class BadWindow(ValueError):
    """A window of the price file that cannot be used: the message names the key and its value."""


@dataclass(frozen=True)
class Windows:
    """An entry's peak hours: (start, end) seconds after local midnight, sorted and apart, in the zone `zone`."""

    zone: str
    hours: tuple[tuple[int, int], ...]

    def at(self, moment: datetime) -> str:
        """The window a moment falls in: PEAK, or "" (off-peak)."""
        local = moment.astimezone(ZoneInfo(self.zone))
        second = local.hour * 3600 + local.minute * 60 + local.second + local.microsecond / 1e6
        return PEAK if any(start <= second < end for start, end in self.hours) else ""

    def next_change(self, moment: datetime) -> datetime:
        """The first moment after `moment` at which the window changes (a peak window opens or closes). A window's
        edges are local times, which the day daylight saving ends shows twice (fold 0 and 1), and the clock's jump
        itself can open or close a window (a window holding the hour that is skipped or repeated): each is a
        candidate, compared in UTC (aware datetimes of one zone compare by their wall time, fold aside)."""
        zone = ZoneInfo(self.zone)
        today = moment.astimezone(zone).date()
        edges = sorted({s for pair in self.hours for s in pair})
        candidates = [
            _local(day, edge, zone).replace(fold=fold).astimezone(timezone.utc)
            for day in (today + timedelta(days=n) for n in range(3))
            for edge in edges
            for fold in (0, 1)
        ] + _offset_changes(moment, zone, 3 * 24)
        after = moment.astimezone(timezone.utc)
        for at in sorted(c for c in candidates if c > after):
            if self._changes_at(at):
                return at
        return moment + timedelta(days=1)  # windows of a whole day: it never changes

    def _changes_at(self, at: datetime) -> bool:
        # 24:00 then 00:00 of two windows that touch across midnight is no change
        before = at - timedelta(microseconds=1)
        return self.at(before) != self.at(at)

    def peak_share(self, start: datetime, seconds: float) -> float:
        """The share of the span [start, start + seconds] that falls in peak windows (0 to 1)."""
        if seconds <= 0:
            return 1.0 if self.at(start) else 0.0
        end, at, peak = start + timedelta(seconds=seconds), start, 0.0
        while at < end:
            change = min(self.next_change(at), end)
            if self.at(at):
                peak += (change - at).total_seconds()
            at = change
        return peak / seconds

    def off_peak_end(self, start: datetime, seconds: float) -> datetime:
        """When `seconds` of off-peak time from `start` have passed: how long work done only off-peak takes (never,
        for windows covering the whole day, which --off-peak refuses)."""
        assert not self.whole_day, "no off-peak time to pass"
        at, left = start, seconds
        while True:
            change = self.next_change(at)
            span = (change - at).total_seconds()
            if not self.at(at):
                if span >= left:
                    return at + timedelta(seconds=left)
                left -= span
            at = change

    def opens_in(self, moment: datetime) -> float:
        """Seconds from `moment` until the next off-peak moment (0: off-peak now)."""
        return 0.0 if not self.at(moment) else (self.next_change(moment) - moment).total_seconds()

    @property
    def whole_day(self) -> bool:
        """Whether peak lasts all day (windows that touch end to end over 24 h): a hold would never open."""
        return sum(end - start for start, end in self.hours) >= DAY

    def describe(self) -> str:
        return f"{', '.join(f'{_clock(s)}-{_clock(e)}' for s, e in self.hours)} {self.zone}"


def _offset_changes(start: datetime, zone: ZoneInfo, hours: int) -> list[datetime]:
    """The moments within `hours` after `start` at which the zone's UTC offset changes (daylight saving's jumps),
    to the second."""
    offset = lambda second: datetime.fromtimestamp(second, timezone.utc).astimezone(zone).utcoffset()  # noqa: E731
    first = int(start.timestamp())
    changes = []
    for hour in range(hours):
        low, high = first + 3600 * hour, first + 3600 * (hour + 1)
        if offset(low) == offset(high):
            continue
        while high - low > 1:  # the first second of the new offset
            middle = (low + high) // 2
            low, high = (middle, high) if offset(middle) == offset(low) else (low, middle)
        changes.append(datetime.fromtimestamp(high, timezone.utc))
    return changes


def _local(day: date, second: int, zone: ZoneInfo) -> datetime:
    if second >= DAY:
        return datetime.combine(day + timedelta(days=1), time(), zone)
    return datetime.combine(day, time(second // 3600, second // 60 % 60, second % 60), zone)


def _clock(second: int) -> str:
    h, m, s = second // 3600, second // 60 % 60, second % 60
    return f"{h:02}:{m:02}" + (f":{s:02}" if s else "")


def _second(text: str, range_text: str) -> int:
    match = HOURS.fullmatch(text.strip())
    h, m, s = (int(g or 0) for g in match.groups()) if match else (99, 0, 0)
    second = h * 3600 + m * 60 + s
    if not match or m > 59 or s > 59 or second > DAY:
        raise BadWindow(
            f'peak "{range_text}": write each window as HH:MM-HH:MM (or HH:MM:SS), from 00:00 to 24:00'
        )
    return second


def _zone(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise BadWindow(f'tz {name!r}: give the time zone as an IANA name, such as "Asia/Shanghai"')
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadWindow(
            f'tz "{name[:60]}": not a time zone this machine knows; give an IANA name such as "Asia/Shanghai" '
            "(without the system's zone data: pip install tzdata)"
        ) from None
    return name


def _hours(given: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(given, list) or not given or not all(isinstance(w, str) for w in given):
        raise BadWindow('peak: a list of daily windows, such as ["09:00-12:00", "14:00-18:00"]')
    hours = []
    for text in given:
        start, dash, end = text.partition("-")
        if not dash:
            raise BadWindow(f'peak "{text[:40]}": write each window as HH:MM-HH:MM (or HH:MM:SS)')
        pair = (_second(start, text[:40]), _second(end, text[:40]))
        if pair[1] <= pair[0]:
            raise BadWindow(
                f'peak "{text[:40]}": ends before it starts; a window past midnight is two, '
                'such as "22:00-24:00" and "00:00-06:00"'
            )
        hours.append((pair, text[:40]))
    hours.sort()
    for (first, first_text), (second, second_text) in zip(hours, hours[1:]):
        if second[0] < first[1]:
            raise BadWindow(f'peak "{first_text}" and "{second_text}" overlap; give each hour once')
    return tuple(pair for pair, _ in hours)


def multiplier(value: object, key: str = "peak_multiplier") -> float:
    """A peak multiplier: a positive finite number, at most MAX_MULTIPLIER."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 < value <= MAX_MULTIPLIER:  # type: ignore[operator]  # a number once ok
        raise BadWindow(
            f"{key} {json.dumps(value)[:40]}: must be a positive finite number, at most {MAX_MULTIPLIER} "
            "(2: twice the price in peak windows)"
        )
    return float(value)  # type: ignore[arg-type]  # a number once ok


def read_windows(entry: dict) -> Windows | None:
    """An entry's windows ("tz" and "peak" together; None when it has neither); BadWindow names what is wrong."""
    if "tz" not in entry and "peak" not in entry:
        return None
    if "peak" not in entry:
        raise BadWindow('tz without peak: give the peak windows too, such as "peak": ["09:00-12:00"]')
    if "tz" not in entry:
        raise BadWindow('peak without tz: give the time zone its hours are in, such as "tz": "Asia/Shanghai"')
    return Windows(_zone(entry["tz"]), _hours(entry["peak"]))
