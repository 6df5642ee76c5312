"""The site's own web files (web/: the page template, its style and its scripts), read as package data and inlined
into every page, so that a written site stays one folder that opens from disk with no request of its own."""

from __future__ import annotations

import functools
from pathlib import Path

WEB = Path(__file__).resolve().parent / "web"


@functools.lru_cache(maxsize=None)
def web_file(name: str) -> str:
    """web/NAME's text, read once per process."""
    return (WEB / name).read_text(encoding="utf-8")
