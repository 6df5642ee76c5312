"""A stage's state on disk as it resumes: the records already saved per step (checked against the records
they were built from) and running the pending steps of one case into new records.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.records import RECORD_KINDS, new_record, record_digest
from lexpilot.benchmark.vocabulary import CONDITION_SCRIPTS
from lexpilot.errors import HarnessError, first_of
from lexpilot.models.calls import ModelCaller
from lexpilot.models.usage import Usage
from lexpilot.pricing import counts_of
from lexpilot.protocols.steps import CaseCalls, Stage, Step
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import (
    CheckpointWriter,
    checkpoint_path,
    journal_path,
    journal_usages,
    manifest_path,
    read_checkpoint,
)
from lexpilot.storage.code import CodeNow
from lexpilot.storage.manifest import Manifest, check_manifest
from lexpilot.storage.manifest_notes import earlier_served, record_served

if TYPE_CHECKING:  # running/context.py opens a stage with this module's load_state
    from lexpilot.running.context import RunContext

# What a finished case's records are in memory: on disk they are whole, and nothing reads a finished case's records
# again (a step reads the records of its own case's pending steps). A 10 x 5 grid otherwise held every chain's
# records of a stage at once, about 8 MB a chain at 432 cases (docs/performance.md).
SAVED: Mapping[str, Any] = MappingProxyType({})


@dataclass
class StageState:
    """A stage's saved records as it resumes, and the run's manifest as it is now."""

    context: RunContext
    steps: list[Step]
    paths: dict[str, Path]
    records: dict[str, dict[str, Mapping[str, Any]]]  # step -> case_number -> record (SAVED: finished)
    # the run's: as the stage opened it, then as a stage rewrites it (None: a dry run's, unwritten)
    manifest: Manifest | None = None
    notes: list[str] = field(default_factory=list)  # what loading repaired, for stderr
    idle: tuple | None = None  # the stage's cases with nothing to ask (Stage.idle)
    # role -> calls per served id its saved records count (read before finished cases leave memory)
    served_saved: dict[str, Counter] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def cases(self) -> list[Case]:
        return self.context.cases

    @property
    def settings_hash(self) -> str:
        return self.context.settings_hash

    @property
    def asks(self) -> set[str]:
        """The roles its steps ask (their declared prompts')."""
        return {role for step in self.steps for role in step.prompts}

    def pending(self) -> list[Case]:
        return [c for c in self.cases if any(c.number not in self.records[s.name] for s in self.steps)]

    def finished(self, number: str) -> None:
        """Every step of the case is saved: its records (and the upstream ones it read) leave memory."""
        for records in self.records.values():
            if number in records:
                records[number] = SAVED


def load_state(context: RunContext, repair: bool = True, whole_upstream: bool = True) -> StageState:
    """The stage's saved records read and checked. `whole_upstream`: refuse a stage whose upstream stage is
    unfinished (a grid quote counts such cases at their most calls instead)."""
    stage, settings, cases = context.stage, context.settings, context.cases
    model = settings.roles["eval"].model
    by_number = {c.number: c for c in cases}
    kinds = stage.kinds(settings)
    paths = {k.name: checkpoint_path(settings.output_root, settings.run_id, model, k) for k in kinds}
    needs = {s.name: s.needs for s in stage.steps}
    records: dict[str, dict[str, Mapping[str, Any]]] = {}
    notes: list[str] = []
    for kind in kinds:
        loaded = read_checkpoint(
            paths[kind.name],
            kind,
            by_number,
            "Use the same --dataset and --limit as the rest of this run, or a new --run-id",
            notes,
            repair,
        )
        records[kind.name] = {n: r for n, (_, r) in loaded.items()}
        lines = {n: line for n, (line, _) in loaded.items()}
        # a record must have been built from the upstream records that exist now
        for need in needs.get(kind.name, ()):
            for number, record in records[kind.name].items():
                upstream = records[need].get(number)
                if upstream is None or record.get("upstream_hash", {}).get(need) != record_digest(upstream):
                    raise HarnessError(
                        f"{paths[kind.name]}:{lines[number]}: case {number} was built from a {need} record "
                        f"that {'no longer exists' if upstream is None else 'has changed'}. Delete this line "
                        "to have it redone, or use a new --run-id."
                    )
    for kind in (k for k in stage.upstream if k in kinds and whole_upstream):
        missing = [c.number for c in cases if c.number not in records[kind.name]]
        if missing:
            shown = ", ".join(first_of(missing, 5))
            raise HarnessError(
                f"{paths[kind.name]}: the {kind.name} stage is incomplete ({len(missing)} of "
                f"{len(cases)} cases missing: {shown}). Run {kind.producer} for this run first."
            )
    state = StageState(
        context, stage.enabled_steps(settings), paths, records, context.saved, notes=notes, idle=stage.idle
    )
    # the stage's own records: an upstream stage told the manifest when it ended (a re-judged run's, copied from its
    # source run, were served to that run)
    own = {step.name for step in state.steps}
    state.served_saved = served_counts(
        r.get("usage") for k, rs in records.items() if k in own for r in rs.values()
    )
    for number in {c.number for c in cases} - {c.number for c in state.pending()}:
        state.finished(number)
    return state


def read_only_state(context: RunContext, whole_upstream: bool = True) -> StageState:
    """The stage's saved state as a dry run or a quote sees it: the run's manifest compared (a run with other
    settings is refused as the stage would refuse it), the records read, no file changed."""
    checked_manifest(context.stage, context.settings, context.manifest, context.code_now, write=False)
    return load_state(context, repair=False, whole_upstream=whole_upstream)


def checked_manifest(
    stage: Stage, settings: Settings, manifest: Manifest, code_now: CodeNow, write: bool
) -> tuple[Manifest | None, str | None]:
    """The run's manifest checked against the one these settings make with the code `code_now` read (a run with
    other settings is refused), and written on first use when `write`: (the manifest as saved, a note for the
    user)."""
    model = settings.roles["eval"].model
    return check_manifest(
        manifest_path(settings.output_root, settings.run_id, model),
        manifest,
        code_now,
        stage.script,
        write=write,
        allow_code_change=settings.allow_code_change,
        record_files=[checkpoint_path(settings.output_root, settings.run_id, model, k) for k in RECORD_KINDS],
        prompt_files=stage.prompt_files(settings),
        condition_scripts=CONDITION_SCRIPTS,
    )


def seed_served(state: StageState, caller: ModelCaller) -> None:
    """The caller told what served the run's earlier calls, so that a change is seen on resume: its manifest's, and
    for a role the manifest has none for, what its records and journal say (an invocation killed before it told
    the manifest: its served ids noted there now, the id that served most of its calls accepted)."""
    earlier = earlier_served(state.manifest)
    found = unrecorded_served(state, set(earlier))
    if found and state.manifest:
        accepted = {role: [max(counts, key=lambda m: (counts[m], m))] for role, counts in found.items()}
        state.manifest = record_served(state.manifest, found, accepted, [])
        earlier = earlier_served(state.manifest)
    caller.served.seed(earlier)


def unrecorded_served(state: StageState, known: set[str]) -> dict[str, Counter]:
    """Role -> calls per served id in the run's records and journal, for the roles not in `known`."""
    settings = state.settings
    if set(settings.roles) <= known:  # the manifest knows every role: no file need be read
        return {}
    journal = journal_path(settings.output_root, settings.run_id, settings.roles["eval"].model)
    found = served_counts(journal_usages(journal))
    for role, counts in state.served_saved.items():
        found.setdefault(role, Counter()).update(counts)
    return {role: counts for role, counts in found.items() if role not in known}


def served_counts(usages: Iterable) -> dict[str, Counter]:
    """Role -> calls per served id, summed over usages (role -> counts; anything else left out)."""
    found: dict[str, Counter] = {}
    for usage in usages:
        for role, counts in (usage if isinstance(usage, dict) else {}).items():
            if isinstance(counts, dict):
                for model, n in counts_of(counts, "served").items():
                    found.setdefault(role, Counter())[model] += n
    return found


def keep_served(state: StageState, caller: ModelCaller) -> None:
    """The manifest told what served the calls made since it was last told (kept when a stage ends, and after each
    batch collected: a process killed before leaves its calls' served ids in the records and the journal only)."""
    if state.manifest:
        state.manifest = record_served(state.manifest, *caller.served.take())


def run_case(state: StageState, calls: CaseCalls, writer: CheckpointWriter) -> None:
    case = calls.case
    for step in state.steps:
        if case.number in state.records[step.name]:
            continue
        calls.usage, calls.replayed, calls.step, calls.reasoning = Usage(), Usage(), step.name, {}
        calls.served = []
        upstream = {need: state.records[need][case.number] for need in step.needs}
        try:
            body = step.run(calls, upstream)
        finally:
            calls.spent.merge(calls.usage.by_role)
        cost = Usage()  # what this record cost, including replies paid in an earlier run and replayed
        cost.merge(calls.usage.by_role)
        cost.merge(calls.replayed.by_role)
        record = new_record(
            case.number,
            case.input_hash,
            case.cause,
            body,
            upstream,
            cost.by_role,
            state.settings_hash,
            calls.reasoning,
            calls.served,
        )
        writer.append(state.paths[step.name], record)
        state.records[step.name][case.number] = record
    state.finished(case.number)
