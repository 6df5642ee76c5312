"""Price windows relative to now, for tests whose windows open and close within seconds: the time zone is chosen so
that local time is near noon (a window a few seconds from now never crosses midnight), and a window is written to
the second."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from lexpilot.pricing import read_prices
from lexpilot.windows import Windows


def windows_from_now(*spans: tuple[float, float]) -> dict:
    """{"tz": ..., "peak": [...]}: a peak window per (start, end), in seconds from now (negative: already open)."""
    now = datetime.now(timezone.utc)
    offset = 12 - now.hour  # a fixed-offset zone whose local time is near noon
    zone = "Etc/GMT" if offset == 0 else f"Etc/GMT{-offset:+d}"  # Etc/GMT-8 is UTC+8
    local = now + timedelta(hours=offset)

    def at(seconds: float) -> str:
        return (local + timedelta(seconds=seconds)).strftime("%H:%M:%S")

    return {"tz": zone, "peak": [f"{at(start)}-{at(end)}" for start, end in spans]}


def price_file(folder: Path, prices: dict) -> Path:
    path = folder / "prices.json"
    path.write_text(json.dumps(prices), encoding="utf-8")
    return path


def windows_of(path: Path, model: str) -> Windows:
    """The windows the harness reads for a model from a price file."""
    windows = read_prices(path)[model].windows
    assert windows is not None
    return windows


def seconds_until_change(windows: Windows) -> float:
    """Seconds from now until the window now changes (a peak window closes or opens)."""
    now = datetime.now(timezone.utc)
    return (windows.next_change(now) - now).total_seconds()
