"""The sample's cases, and datasets written from them."""

import json
from pathlib import Path

from tests.helpers.paths import SAMPLE


def sample_cases() -> list[dict]:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def write_dataset(path: Path, cases) -> Path:
    path.write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    return path
