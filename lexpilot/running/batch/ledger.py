"""The batch ledger, runs/<run>/<model>/batches.json: every batch of a run (its phase, its file and batch ids and
the request behind each custom id), how often each request failed and why, and the cycles so far. It is written
before every step a kill could lose; when it is lost or stale, the provider's list of the run's batches (tagged
with the run, model and stage when created) re-attaches them."""

from __future__ import annotations

import json
from pathlib import Path

from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.errors import HarnessError
from lexpilot.files import check_input, write_json

PHASES = ("prepared", "uploaded", "created", "written", "imported")
NEEDED = {
    "prepared": (),
    "uploaded": ("file_id",),
    "created": ("batch_id",),
    "written": ("path", "output"),
    "imported": (),  # what a batch in each phase must record
}
AT_ONCE = 10**6  # a failure no retry can mend (a prompt beyond the context window): the case fails at once


def _problem(data) -> str | None:
    """What is wrong with a ledger's shape, or None."""
    if not isinstance(data, dict) or not isinstance(data.get("batches"), list):
        return "not an object with a list of batches"
    for i, batch in enumerate(data["batches"]):
        if (
            not isinstance(batch, dict)
            or batch.get("phase") not in PHASES
            or batch.get("role") not in ROLES
            or not isinstance(batch.get("requests"), dict)
            or not all(
                isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("case", "step", "key"))
                for r in batch["requests"].values()
            )
            or not all(isinstance(batch.get(k), str) for k in NEEDED[batch["phase"]])
            or not all(
                isinstance(batch[k], str) for k in ("batch_id", "file_id", "path", "output") if k in batch
            )
        ):
            return f"batch {i + 1} is malformed"
    for name in ("failures", "reasons"):
        if not isinstance(data.get(name, {}), dict):
            return f"{name} is not an object"
    if not isinstance(data.get("cycles", {}), dict) or not all(
        isinstance(n, int) for n in data.get("cycles", {}).values()
    ):
        return "cycles is not an object of counts per stage"
    return None


class Ledger:
    """runs/<run>/<model>/batches.json, read and checked once, written whole (never half) at each save."""

    def __init__(self, path: Path):
        self.path = path
        self.found = path.exists()  # a ledger that was there (a missing one may have been lost)
        if self.found:
            check_input(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8")) if self.found else {"batches": []}
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            data, problem = None, "unreadable"
        else:
            problem = _problem(data)
        if problem:
            raise HarnessError(
                f"{path}: {problem}; it records this run's batches in flight. Restore it, or remove "
                "it: the next run re-attaches to the run's batches from the provider's list"
            )
        self.data = {"failures": {}, "reasons": {}, "cycles": {}, **data}

    def save(self) -> None:
        write_json(self.path, self.data)

    def open_batches(self) -> list[dict]:
        return [b for b in self.data["batches"] if b["phase"] != "imported"]

    def in_flight_keys(self) -> set[tuple]:
        """(case, step, prompt key) of every request in an open batch: what is never asked twice."""
        return {(r["case"], r["step"], r["key"]) for b in self.open_batches() for r in b["requests"].values()}

    def known_batch_ids(self) -> set[str]:
        return {b["batch_id"] for b in self.data["batches"] if b.get("batch_id")}

    def known_file_ids(self) -> set[str]:
        return {b["file_id"] for b in self.data["batches"] if b.get("file_id")}

    def failed(self, key: str, reason: str, at_once: bool = False) -> None:
        """A request came back without an accepted reply (rejected, failed, in a failed, expired or cancelled
        batch, or in one the provider lost)."""
        failures = self.data["failures"]
        failures[key] = AT_ONCE if at_once else failures.get(key, 0) + 1
        self.data["reasons"][key] = reason

    def tries(self, key: str) -> int:
        return self.data["failures"].get(key, 0)

    def reason(self, key: str, role: str) -> str:
        return self.data["reasons"].get(key, f"{role}: failed")

    def next_cycle(self, stage: str) -> int:
        """Cycles are counted per stage over the run, not per invocation."""
        self.data["cycles"][stage] = self.cycles(stage) + 1
        return self.data["cycles"][stage]

    def cycles(self, stage: str) -> int:
        return self.data["cycles"].get(stage, 0)
