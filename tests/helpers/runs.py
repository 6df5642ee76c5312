"""A run's folders and records, found and edited by hand as a user or a crash leaves them."""

import json
from pathlib import Path

from lexpilot.benchmark.records import LJP_GOLD


def case_records(root: Path, top: str, name: str, model: str, run: str) -> dict[str, dict]:
    """A run's records of one file (`top`/`run`/`model`-*/`name` under the output root), by case number."""
    (path,) = (root / top / run).glob(f"{model}-*/{name}")
    return {r["case_number"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def run_folder(h):
    """The harness's run folder under runs/ (its manifest, journal and lock)."""
    return next((h.root / "runs" / h.run_id).glob("*/"))


def break_record(field, value):
    """An edit of a harness's run: the first gold record's `field` set to `value`, the other records dropped."""

    def edit(h):
        path = h.file(LJP_GOLD)
        record = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        record[field] = value
        path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")

    return edit
