"""The batch ledger, runs/<run>/<model>/batches.json: every batch of a run (its phase, its file and batch ids and
the request behind each custom id), how often each request failed and why, and the cycles so far. It is written
before every step a kill could lose; when it is lost or stale, the provider's list of the run's batches (tagged
with the run, model and stage when created) re-attaches them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class LedgerRequest:
    """A request of a batch, behind its custom id: what it asks for which case."""

    case: str
    step: str
    key: str  # the digest of its prompt
    role: str | None = None  # None: a ledger written before requests named theirs (the batch's role)
    max_tokens: int | None = None
    token_field: str | None = None  # the output-limit field its body sent
    extra: dict = field(default_factory=dict)  # fields this version does not know, kept as read

    @classmethod
    def read(cls, saved: dict) -> LedgerRequest:
        known = {k: saved[k] for k in REQUEST_FIELDS if k in saved}
        return cls(**known, extra={k: v for k, v in saved.items() if k not in REQUEST_FIELDS})

    def saved(self) -> dict:
        return _saved(self, REQUEST_FIELDS)


@dataclass
class LedgerBatch:
    """A batch of the run: its phase, what identifies it at the provider, and its requests by custom id."""

    role: str
    phase: str  # PHASES
    requests: dict[str, LedgerRequest]
    max_tokens: int = 0
    file_id: str | None = None  # its input file, once uploaded
    batch_id: str | None = None  # once created
    path: str | None = None  # --batch-files: the input file written for vLLM's run-batch
    output: str | None = None  # and the output file it answers in
    pool: str | None = None  # the grid's pool token of a batch shared by cells
    adopted: bool = False  # re-attached from the provider's list (the ledger had lost it)
    stage: str | None = None  # the stage that re-attached it
    status: str | None = None  # the provider's status, when last looked at
    reason: str | None = None  # why it ended without every answer
    extra: dict = field(default_factory=dict)  # fields this version does not know, kept as read

    @classmethod
    def read(cls, saved: dict) -> LedgerBatch:
        known = {k: saved[k] for k in BATCH_FIELDS if k in saved and k != "requests"}
        requests = {cid: LedgerRequest.read(r) for cid, r in saved["requests"].items()}
        return cls(
            **known, requests=requests, extra={k: v for k, v in saved.items() if k not in BATCH_FIELDS}
        )

    def saved(self) -> dict:
        entry = _saved(self, BATCH_FIELDS)
        entry["requests"] = {cid: r.saved() for cid, r in self.requests.items()}
        return entry

    def update(self, **changes: str) -> None:
        """Its phase and the ids or files that phase records (`NEEDED`), as a pooled batch's cells record them."""
        for name, value in changes.items():
            if name not in ("phase", "file_id", "batch_id", "path", "output"):
                raise ValueError(f"a batch's {name} is not changed with its phase")
            setattr(self, name, value)

    def role_of(self, request: LedgerRequest) -> str:
        return request.role or self.role


REQUEST_FIELDS = ("case", "step", "key", "role", "max_tokens", "token_field")
BATCH_FIELDS = (
    "role",
    "phase",
    "max_tokens",
    "file_id",
    "batch_id",
    "path",
    "output",
    "pool",
    "adopted",
    "stage",
    "status",
    "reason",
    "requests",
)


def _saved(entry: LedgerRequest | LedgerBatch, names: tuple[str, ...]) -> dict:
    """An entry as the ledger file holds it: the fields it has (none unset), then those this version did not know."""
    values = {name: getattr(entry, name) for name in names if name != "requests"}
    kept = {name: value for name, value in values.items() if value is not None and value is not False}
    return kept | entry.extra


class Ledger:
    """runs/<run>/<model>/batches.json, read and checked once, written whole (never half) at each save."""

    def __init__(self, path: Path):
        self.path = path
        self.found = path.exists()  # a ledger that was there (a missing one may have been lost)
        if self.found:
            check_input(path)
        data: Any  # JSON as read, checked by _problem
        problem: str | None
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
        self.failures: dict[str, int] = data.get("failures", {})
        self.reasons: dict[str, str] = data.get("reasons", {})
        self.cycle_counts: dict[str, int] = data.get("cycles", {})
        self.batches = [LedgerBatch.read(b) for b in data["batches"]]
        self.extra = {k: v for k, v in data.items() if k not in ("failures", "reasons", "cycles", "batches")}

    def save(self) -> None:
        write_json(
            self.path,
            {
                "failures": self.failures,
                "reasons": self.reasons,
                "cycles": self.cycle_counts,
                **self.extra,
                "batches": [b.saved() for b in self.batches],
            },
        )

    def add(self, batch: LedgerBatch) -> LedgerBatch:
        self.batches.append(batch)
        return batch

    def open_batches(self) -> list[LedgerBatch]:
        return [b for b in self.batches if b.phase != "imported"]

    def in_flight_keys(self) -> set[tuple[str, str, str]]:
        """(case, step, prompt key) of every request in an open batch: what is never asked twice."""
        return {(r.case, r.step, r.key) for b in self.open_batches() for r in b.requests.values()}

    def known_batch_ids(self) -> set[str]:
        return {b.batch_id for b in self.batches if b.batch_id}

    def known_file_ids(self) -> set[str]:
        return {b.file_id for b in self.batches if b.file_id}

    def failed(self, key: str, reason: str, at_once: bool = False) -> None:
        """A request came back without an accepted reply (rejected, failed, in a failed, expired or cancelled
        batch, or in one the provider lost)."""
        self.failures[key] = AT_ONCE if at_once else self.failures.get(key, 0) + 1
        self.reasons[key] = reason

    def tries(self, key: str) -> int:
        return self.failures.get(key, 0)

    def reason(self, key: str, role: str) -> str:
        return self.reasons.get(key, f"{role}: failed")

    def next_cycle(self, stage: str) -> int:
        """Cycles are counted per stage over the run, not per invocation."""
        self.cycle_counts[stage] = self.cycles(stage) + 1
        return self.cycle_counts[stage]

    def cycles(self, stage: str) -> int:
        return self.cycle_counts.get(stage, 0)
