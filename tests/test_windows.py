"""Prices by the clock (lexpilot/windows.py, lexpilot/pricing.py): a price file entry's peak windows, the window a
moment falls in, and what a call sent in one pays; every bad window refused in one line naming the file, the entry
and the value, by the dry run and quote_grid.py alike, before any call."""

import json
from datetime import datetime, timedelta, timezone

import pytest

from lexpilot.errors import HarnessError
from lexpilot.pricing import call_cost, read_prices
from lexpilot.windows import Windows
from tests.helpers.reports import refused_by

DEEPSEEK = {
    "prompt": 0.28,
    "completion": 0.42,
    "cached_prompt": 0.028,
    "tz": "Asia/Shanghai",
    "peak": ["09:00-12:00", "14:00-18:00"],
    "peak_multiplier": 2,
}
BEIJING = timezone(timedelta(hours=8))


def deepseek(tmp_path, **changes):
    path = tmp_path / "prices.json"
    entry = {k: v for k, v in (DEEPSEEK | changes).items() if v is not None}
    path.write_text(json.dumps({"DeepSeek-R1": entry}), encoding="utf-8")
    return read_prices(path)["DeepSeek-R1"]


def test_deepseeks_windows_in_beijing_time(tmp_path):
    """DeepSeek bills 2x from 09:00 to 12:00 and from 14:00 to 18:00 Beijing time, by the request's start."""
    windows = deepseek(tmp_path).windows
    at = {
        (h, m, s): windows.at(datetime(2026, 7, 20, h, m, s, tzinfo=BEIJING))
        for h, m, s in [
            (8, 59, 59),
            (9, 0, 0),
            (11, 59, 59),
            (12, 0, 0),
            (13, 59, 59),
            (14, 0, 0),
            (17, 59, 59),
            (18, 0, 0),
        ]
    }
    assert at == {
        (8, 59, 59): "", (9, 0, 0): "peak", (11, 59, 59): "peak", (12, 0, 0): "",
        (13, 59, 59): "", (14, 0, 0): "peak", (17, 59, 59): "peak", (18, 0, 0): "",
    }  # fmt: skip
    # 01:30 UTC is 09:30 in Beijing: peak until 12:00 there, 04:00 UTC
    moment = datetime(2026, 7, 20, 1, 30, tzinfo=timezone.utc)
    assert windows.next_change(moment) == datetime(2026, 7, 20, 4, 0, tzinfo=timezone.utc)
    assert windows.opens_in(moment) == 2.5 * 3600
    # after 18:00 the next change is 09:00 the next day
    evening = datetime(2026, 7, 20, 19, 0, tzinfo=BEIJING)
    assert windows.next_change(evening) == datetime(2026, 7, 21, 9, 0, tzinfo=BEIJING)
    assert windows.opens_in(evening) == 0
    # a whole day holds 3 + 4 = 7 peak hours; 08:00 to 10:00 holds one
    assert windows.peak_share(datetime(2026, 7, 20, 0, 0, tzinfo=BEIJING), 86400) == pytest.approx(7 / 24)
    assert windows.peak_share(datetime(2026, 7, 20, 8, 0, tzinfo=BEIJING), 7200) == pytest.approx(0.5)
    # two hours of work done off-peak only, from 08:00: 08:00-09:00, then 12:00-13:00; ten hours: 08:00-09:00,
    # 12:00-14:00, 18:00-01:00
    assert windows.off_peak_end(datetime(2026, 7, 20, 8, 0, tzinfo=BEIJING), 7200) == datetime(
        2026, 7, 20, 13, 0, tzinfo=BEIJING
    )
    assert windows.off_peak_end(datetime(2026, 7, 20, 8, 0, tzinfo=BEIJING), 36000) == datetime(
        2026, 7, 21, 1, 0, tzinfo=BEIJING
    )


def test_a_peak_call_pays_the_multiplier_on_output_cache_miss_and_cache_hit_input(tmp_path):
    """1,000,000 prompt tokens of which 400,000 cached, 100,000 completion tokens: off-peak 0.6 x 0.28 + 0.4 x
    0.028 + 0.1 x 0.42 = 0.2212; at peak twice that, 0.4424; at the flex tier in a peak window, the flex prices
    (here the batch discount's half) twice."""
    price = deepseek(tmp_path, batch_discount=0.5)
    assert call_cost(price, 1e6, 1e5, 4e5) == pytest.approx(0.2212)
    assert call_cost(price, 1e6, 1e5, 4e5, priced="peak") == pytest.approx(0.4424)
    assert call_cost(price, 1e6, 1e5, 4e5, priced="flex") == pytest.approx(0.1106)
    assert call_cost(price, 1e6, 1e5, 4e5, priced="flex+peak") == pytest.approx(0.2212)
    # explicit peak prices: 0.56 and 0.84, the cached price at the prompt's ratio (0.056)
    explicit = deepseek(tmp_path, peak_multiplier=None, peak_prompt=0.56, peak_completion=0.84)
    assert explicit.rates("peak") == pytest.approx((0.56, 0.84, 0.056))


BAD_WINDOWS = {
    "an unknown zone": ({"tz": "Asia/Shangai"}, 'tz "Asia/Shangai": not a time zone'),
    "overlapping hours": (
        {"peak": ["09:00-12:00", "11:30-18:00"]},
        'peak "09:00-12:00" and "11:30-18:00" overlap',
    ),
    "an end before its start": ({"peak": ["18:00-14:00"]}, 'peak "18:00-14:00": ends before it starts'),
    "an empty window": ({"peak": ["09:00-09:00"]}, 'peak "09:00-09:00": ends before it starts'),
    "a multiplier of 0": ({"peak_multiplier": 0}, "peak_multiplier 0: must be a positive finite number"),
    "a negative multiplier": (
        {"peak_multiplier": -2},
        "peak_multiplier -2: must be a positive finite number",
    ),
    "an infinite multiplier": (
        {"peak_multiplier": "Infinity"},
        "peak_multiplier Infinity: must be a positive finite",
    ),
    # said as the file wrote it: text in quotes, so that the fix (write a number) shows
    "a multiplier as text": (
        {"peak_multiplier": "2"},
        'peak_multiplier "2": must be a positive finite number',
    ),
    "a multiplier true": (
        {"peak_multiplier": True},
        "peak_multiplier true: must be a positive finite number",
    ),
    "hours past 24:00": ({"peak": ["09:00-25:00"]}, 'peak "09:00-25:00": write each window as HH:MM-HH:MM'),
    "windows without a zone": ({"tz": None}, "peak without tz"),
}


def bad_file(tmp_path, changes: dict):
    entry = {k: v for k, v in (DEEPSEEK | changes).items() if v is not None}
    text = json.dumps({"DeepSeek-R1": entry}).replace('"Infinity"', "Infinity")  # JSON readers take Infinity
    path = tmp_path / "prices.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", BAD_WINDOWS)
@pytest.mark.parametrize("reader", ["--dry-run", "quote_grid.py"])
def test_a_bad_window_is_refused_in_one_line_naming_file_entry_and_value(
    harness, provider, tmp_path, capsys, name, reader
):
    changes, message = BAD_WINDOWS[name]
    path = bad_file(tmp_path, changes)
    said = refused_by(reader, harness, path, capsys)
    assert f"--prices {path}: entry 'DeepSeek-R1': {message}" in said, said
    assert not provider.requests


def test_a_batch_line_carries_no_window_and_a_zero_price_takes_only_a_multiplier(tmp_path):
    """Batches carry no window (docs/cost.md): at peak, the batch prices stay half the off-peak ones, 0.14 and 0.21.
    A model free off-peak (a local one) cannot be given a peak price by ratio: one line says to give the multiplier."""
    at_peak = deepseek(tmp_path, batch_discount=0.5).at_peak()
    assert (at_peak.prompt, at_peak.completion) == pytest.approx((0.56, 0.84))
    assert (at_peak.batch_prompt, at_peak.batch_completion) == pytest.approx((0.14, 0.21))
    with pytest.raises(
        HarnessError, match="peak_prompt 1: the standard price is 0, so give peak_multiplier instead"
    ):
        deepseek(tmp_path, prompt=0, peak_multiplier=None, peak_prompt=1, peak_completion=0.84)


def test_a_window_holding_the_hour_daylight_saving_repeats_or_skips_changes_when_the_clock_jumps():
    """A window's edges are local times: on the day New York's clocks go back (2027-11-07, 02:00 EDT -> 01:00 EST)
    01:30-02:30 is peak from 05:30 to 06:00 UTC (EDT), closes at the jump, opens again at 01:30 EST (06:30 UTC) and
    closes at 02:30 EST (07:30 UTC); on the day they go forward (2027-03-14, 02:00 EST -> 03:00 EDT) it opens at 01:30
    EST (06:30 UTC) and closes at the jump (07:00 UTC), 02:30 never coming."""
    windows = Windows("America/New_York", ((5400, 9000),))
    utc = lambda *parts: datetime(*parts, tzinfo=timezone.utc)  # noqa: E731

    def changes(start: datetime, n: int) -> list[datetime]:
        found = [windows.next_change(start)]
        while len(found) < n:
            found.append(windows.next_change(found[-1]))
        return found

    assert changes(utc(2027, 11, 7, 5, 45), 3) == [
        utc(2027, 11, 7, 6),
        utc(2027, 11, 7, 6, 30),
        utc(2027, 11, 7, 7, 30),
    ]
    assert changes(utc(2027, 3, 14, 5), 2) == [utc(2027, 3, 14, 6, 30), utc(2027, 3, 14, 7)]
    # the fall-back day's peak: 30 min of EDT and a whole hour of EST, 1.5 h of its 25 h
    assert windows.peak_share(utc(2027, 11, 7, 4), 25 * 3600) == pytest.approx(1.5 / 25)
