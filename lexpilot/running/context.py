"""What a stage opens with, made once (`RunContext`): its settings, the cases it runs on, the manifest its settings
make, where the run's files are, and, once it has opened under the run's lock, the run's manifest as saved and the
settings hash its new records carry. The synchronous path, the batch cycles and the grid's chains all open a stage
here, so each checks, prepares and reads it as its script does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from lexpilot.benchmark.dataset import Case, load_selection
from lexpilot.protocols.steps import Stage
from lexpilot.running.state import StageState, checked_manifest, load_state
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import run_folder
from lexpilot.storage.code import CodeNow
from lexpilot.storage.lock import RunLock
from lexpilot.storage.manifest import Manifest, build_manifest
from lexpilot.storage.manifest_notes import record_tiers, record_windows


@dataclass(frozen=True)
class RunPaths:
    """Where a (model, run)'s own files are: runs/<run>/<model>/."""

    folder: Path

    @classmethod
    def of(cls, settings: Settings) -> RunPaths:
        return cls(run_folder(settings.output_root, settings.run_id, settings.roles["eval"].model))

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.json"

    @property
    def journal(self) -> Path:  # every reply, before any record counts it
        return self.folder / "calls_journal.jsonl"

    @property
    def ledger(self) -> Path:  # the run's batches (batch mode)
        return self.folder / "batches.json"

    @property
    def lock(self) -> Path:  # held by the one process writing the run
        return self.folder / ".lock"


@dataclass(frozen=True)
class RunContext:
    """A stage of one (model, run), as it opens."""

    stage: Stage
    settings: Settings
    cases: list[Case]  # the cases it runs on: the dataset's first --limit
    dataset_sha: str
    manifest: Manifest  # what these settings make, compared with the run's saved one as the stage opens
    paths: RunPaths
    code_now: CodeNow  # the project's code as the manifest was built: compared with the run's from it
    saved: Manifest | None = (
        None  # the run's manifest as the stage opened it (None: not opened, or a dry run)
    )

    @classmethod
    def of(
        cls,
        stage: Stage,
        settings: Settings,
        selection: tuple[list[Case], str] | None = None,
        check: bool = True,
        code_now: CodeNow | None = None,
    ) -> RunContext:
        """The stage's cases (`selection`: already read, with the dataset's sha256) and the manifest its settings
        make, checked as the stage checks it first (`check`; a quote only counts), with the code as `code_now` read
        it (None: read now)."""
        cases, sha = selection or load_selection(settings.dataset, settings.limit)
        code_now = code_now or CodeNow.read()
        built = Manifest.of(build_manifest(settings, sha, cases, code_now))
        if check and stage.check_first:
            stage.check_first(settings, built)
        return cls(stage, settings, cases, sha, built, RunPaths.of(settings), code_now)

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def settings_hash(self) -> str:
        """The hash new records carry: of the run's settings as its manifest saved them when it started (a stage
        may go on while a prompt only another stage sends has changed since)."""
        return self.saved.settings_hash if self.saved else ""


def run_lock(settings: Settings) -> RunLock:
    """The lock that lets one process write the run (every stage of it)."""
    return RunLock(RunPaths.of(settings).lock)


def open_stage(context: RunContext, err: TextIO) -> StageState:
    """Under the run's lock: the run's manifest checked (written on first use), the stage prepared, and its saved
    records read; what it notes said on `err`."""
    stage, settings, name = context.stage, context.settings, context.name
    saved, note = checked_manifest(stage, settings, context.manifest, context.code_now, write=True)
    if note:
        print(f"[{name}] {note}", file=err)
    if saved is not None:
        called = {role for step in stage.steps for role in step.prompts}
        saved = record_windows(record_tiers(saved, settings), settings, called)
    if stage.prepare:
        note = stage.prepare(settings)
        if note:
            print(f"[{name}] {note}", file=err)
    state = load_state(dataclasses.replace(context, saved=saved))
    for note in state.notes:
        print(f"[{name}] {note}", file=err)
    return state
