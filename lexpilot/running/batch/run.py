"""One batch-mode invocation of a stage (`BatchRun`): what every cycle reads and writes, what the stages of one run
open side by side share (`Together`), the run's incarnation and whether its ledger was lost (`know_itself`), the
ledger's path, and the quiet progress of the roles left synchronous."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from lexpilot.errors import CaseFailure
from lexpilot.models.calls import ModelCaller
from lexpilot.models.limits import Endpoint
from lexpilot.running.batch.ledger import Ledger, LedgerBatch
from lexpilot.running.context import RunContext, RunPaths
from lexpilot.running.state import StageState
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import CheckpointWriter
from lexpilot.storage.manifest import Manifest
from lexpilot.storage.manifest_notes import note_batches_submitted, run_incarnation, submitted_batches


class QuietProgress:
    """Counters for the synchronous calls of roles left out of the batches (the cycles print their own lines)."""

    def __init__(self, log):
        self.log, self.retries = log, 0

    def update(self, **deltas) -> None:
        pass

    def note(self, message: str) -> None:
        self.log(message)

    def retry(self, message: str) -> None:
        self.retries += 1
        self.log(f"retry: {message}")


@dataclass
class Together:
    """What the batch-mode stages of one run share (a stage script's alone; the grid's batch chain opens several side
    by side in one thread): the run's ledger, its journal's writer, the budget reserved for the batches submitted,
    and its manifest, which a stage writing it hands to every other (none writes from an older copy)."""

    ledger: Ledger
    writer: CheckpointWriter
    reserved: dict[str, tuple[str, float]] = field(default_factory=dict)
    states: list[StageState] = field(default_factory=list)


class Pool(Protocol):
    """The grid's pool of batches across its cells (running/grid/pool.py), as a stage's cycles use it."""

    def downloaded(self, file_id: str, fetch: Callable[[], Any]) -> Any: ...


@dataclass
class BatchRun:
    """One batch-mode invocation of a stage: what every cycle reads and writes."""

    context: RunContext
    state: StageState  # --batch-status's has no steps: it reads only the ledger and the provider's list
    ledger: Ledger
    writer: CheckpointWriter
    caller: ModelCaller  # the roles left synchronous, the batch clients, the budget
    prompts: dict[str, str]
    log: Callable[[str], None]
    failed: dict[str, CaseFailure] = field(default_factory=dict)  # case -> its CaseFailure
    # (case, step) -> replies the journal holds for a pending step
    held: Counter = field(default_factory=Counter)
    retried: Counter = field(default_factory=Counter)  # (case, step) -> invalid outputs said so far
    # (case, step) -> replies the journal held at the start
    said_before: Counter = field(default_factory=Counter)
    depth: int | None = None  # the least upper bound on the remaining calls said so far
    incarnation: str = ""  # the run's own id (its manifest's): in every batch's metadata and custom id
    late: bool = False  # the run began before incarnations: its batches without one are its own too
    rebuilt: bool = False  # its manifest was rebuilt from its records: its batches carry the lost incarnation
    foreign_said: set = field(default_factory=set)  # the other runs' batches named so far
    # why the ledger does not hold the stage's batches the manifest counts ("": it does)
    ledger_lost: str = ""
    noted_submission: int = 0  # the stage's last cycle the manifest counts as submitting
    pool: Pool | None = None  # the grid's: its batches are shared by every cell
    # custom id -> (model, its worst case) reserved in the budget by this invocation, settled when its reply comes
    reserved: dict[str, tuple[str, float]] = field(default_factory=dict)
    together: Together | None = None
    started: float = 0.0  # when its first cycle began (time.monotonic)
    adopted: bool = False  # the provider's list of the run's batches was read for batches the ledger lost
    cycle: int = 0  # the stage's last cycle so far
    opened_pending: bool = False  # it had cases to finish when it opened (replies to replay, calls to make)

    @property
    def name(self) -> str:
        return self.context.name

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def journal_path(self) -> Path:
        return self.context.paths.journal

    @property
    def batched_roles(self) -> set[str]:
        return set(self.settings.batching.asked)

    @property
    def manifest(self) -> Manifest | None:
        return self.state.manifest

    @manifest.setter
    def manifest(self, manifest: Manifest | None) -> None:
        """The manifest as this stage just wrote it: every stage of the run open beside it holds it from now on."""
        for state in self.together.states if self.together else [self.state]:
            state.manifest = manifest

    def owns(self, batch: LedgerBatch) -> bool:
        """Whether a batch of the run's ledger is this stage's: it asks for the stage's steps, or the stage re-attached
        it (the run's other stages collect and re-attach theirs)."""
        steps = {s.name for s in self.state.steps}
        return batch.stage == self.name or any(r.step in steps for r in batch.requests.values())

    def note_submission(self) -> None:
        """Note in the manifest that this cycle of the stage submits batches, before its first submission (a
        ledger found later with fewer cycles of the stage was lost, or is a stale copy)."""
        cycle = self.ledger.cycles(self.name)
        if self.manifest and not self.settings.batching.files and self.noted_submission != cycle:
            self.manifest = note_batches_submitted(self.manifest, self.name, cycle)
            self.noted_submission = cycle

    def batch_clients(self) -> dict[str, Any]:
        """One client per base URL and key of the batched roles (roles may share one)."""
        by_account: dict[tuple[str, str], tuple[str, Any]] = {}
        for role in sorted(self.batched_roles):
            account = Endpoint.of(self.settings.roles[role]).account
            by_account.setdefault(account, (role, self.caller.clients[role]))
        return dict(by_account.values())


def know_itself(run: BatchRun, manifest: Manifest | None, read_only: bool = False) -> Manifest | None:
    """The run's incarnation (made now for a run from before incarnations, unless `read_only`), whether it began
    before them, and whether its ledger was lost: the stage submitted batches, and the ledger is gone. Returns the
    manifest, as it now is."""
    if manifest and not read_only:
        manifest = run_incarnation(manifest)
    run.incarnation = (manifest.incarnation if manifest else None) or ""
    run.late = manifest is not None and (manifest.incarnation_late or not run.incarnation)
    # a manifest rebuilt from the run's records got a new incarnation: the run's batches carry the lost one
    run.rebuilt = manifest is not None and manifest.rebuilt
    # the stage's batches as the manifest counts them, and the ledger does not: a lost ledger, another stage's new
    # one, or an old copy put back
    # (a rebuilt one cannot say: it may have)
    submitted = max(submitted_batches(manifest, run.name) if manifest else 0, int(run.rebuilt))
    run.ledger_lost = (
        ""
        if submitted <= run.ledger.cycles(run.name)
        else "the ledger is gone"
        if not run.ledger.found or not run.ledger.cycles(run.name)
        else "the ledger is older than the stage's last batches"
    )
    return manifest


def ledger_path(settings: Settings) -> Path:
    return RunPaths.of(settings).ledger


def open_batches(settings: Settings) -> list[LedgerBatch]:
    """The run's batches still in flight, as its ledger holds them (none without a ledger)."""
    path = ledger_path(settings)
    return Ledger(path).open_batches() if path.exists() else []


FIRST_POLL = 0.25  # seconds: a local server or a fast provider finishes a small batch within seconds


def poll_wait(poll: float, waited: int) -> float:
    """Seconds before the next look at the batches in flight, after `waited` looks since the last submission: soon
    at first, then doubling up to --batch-poll (a scripted 3 x 2 grid waited 30 s a cycle for batches done at
    once; a provider's hours-long batch costs a few more status requests in its first minute)."""
    return min(poll, FIRST_POLL * 2**waited)
