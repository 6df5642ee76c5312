"""Batch mode (--batch): the protocol advances in cycles through a provider's batch API (OpenAI's files and
batches endpoints, which others copy), at about half the price, and a batch is a checkpoint.

Each cycle replays every pending case's protocol from its saved records and call journal until the case needs
a reply it does not have; those requests (one per case and dialogue) go into one batch per endpoint. The
batch, its input file and every custom id are recorded in runs/<run>/<model>/batches.json (the ledger) before
anything waits, so a killed process, Ctrl-C or --batch-detach leaves them in flight: the next invocation
re-attaches to them (from the ledger, or from the provider's list of the run's batches when the ledger is lost)
and never submits a request twice. Collected replies are validated exactly as synchronous ones and go into the
call journal, from which the next cycle's replay reads them; the records are the same as a synchronous run's,
with `batched_calls` in their usage. Roles left out of --batch-roles are asked directly within the cycles, each
reply once.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lexpilot.benchmark.prompts import load_prompts
from lexpilot.errors import CaseFailed, FatalError
from lexpilot.models.calls import Usage, default_token_fields, request_body
from lexpilot.protocols.steps import CaseCalls
from lexpilot.running.batch_api import (
    FINISHED,
    adopt,
    chunks,
    listed,
    listing,
    provider_call,
    request_digest,
    submit,
    untagged,
    write_batch_file,
)
from lexpilot.running.batch_import import collect
from lexpilot.running.batch_pool import Drained, chain_of
from lexpilot.running.ledger import AT_ONCE, Ledger
from lexpilot.storage.checkpoints import (
    CallJournal,
    CheckpointWriter,
    journal_path,
    manifest_path,
    run_folder,
)
from lexpilot.storage.manifest import (
    Manifest,
    note_batches_submitted,
    read_manifest,
    record_transport,
    run_incarnation,
    submitted_batches,
)
from lexpilot.text import counted


class NeedsReply(Exception):
    """The case needs a reply that neither its records nor the journal hold: the next batch asks for it."""

    def __init__(self, role: str, prompt):
        super().__init__(role)
        self.role, self.prompt = role, prompt


@dataclass
class BatchCaller:
    """Stands for the model caller during a cycle's replay: every call it gets becomes a batch request."""

    settings: object
    progress: object
    batched = True

    def chat(self, role: str, prompt, usage: Usage, on_send=None):
        raise NeedsReply(role, prompt)


@dataclass
class ReplayRetries:
    """The progress of one replay of a case: an invalid output is said once, when its reply first comes in, not
    again at every later cycle's replay of the case (each replay starts from the first call of the case's
    pending steps), nor at a later invocation's (--batch-detach) for a reply the journal held when it began."""

    log: object
    reported: Counter  # (case, step) -> retries said so far
    # (case, step) -> replies held when the invocation began
    said_before: Counter = field(default_factory=Counter)
    calls: CaseCalls | None = None  # the replay's calls, for the step being run
    seen: Counter = field(default_factory=Counter)

    def update(self, **deltas) -> None:
        pass

    def retry(self, message: str) -> None:
        key = (self.calls.case.number, self.calls.step)
        self.seen[key] += 1
        taken = sum(1 for taken_key, _ in self.calls.journal.taken.get(key[0], []) if taken_key[1] == key[1])
        if taken <= self.said_before[key]:  # replayed from an earlier invocation, which said it
            self.reported[key] = max(self.reported[key], self.seen[key])
        if self.seen[key] > self.reported[key]:
            self.reported[key] = self.seen[key]
            self.log(f"case {key[0]}: asked again: {message}")


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
class BatchRun:
    """One batch-mode invocation of a stage: what every cycle reads and writes."""

    name: str
    state: object  # the StageState
    settings: object
    ledger: Ledger
    journal_path: Path
    writer: CheckpointWriter
    caller: object  # the ModelCaller: the roles left synchronous, the batch clients, the budget
    batched_roles: set
    prompts: dict
    run_case: object
    log: object
    failed: dict = field(default_factory=dict)  # case -> why it failed
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
    pool: object = None  # the grid's BatchPool (running/batch_pool.py): its batches are shared by every cell
    # custom id -> (model, its worst case) reserved in the budget by this invocation, settled when its reply comes
    reserved: dict = field(default_factory=dict)

    def note_submission(self) -> None:
        """Note in the manifest that this cycle of the stage submits batches, before its first submission (a
        ledger found later with fewer cycles of the stage was lost, or is a stale copy)."""
        cycle = self.ledger.cycles(self.name)
        if self.state.manifest and not self.settings.batching.files and self.noted_submission != cycle:
            self.state.manifest = note_batches_submitted(self.state.manifest, self.name, cycle)
            self.noted_submission = cycle

    def batch_clients(self) -> dict:
        """One client per endpoint of the batched roles (roles may share one)."""
        by_url = {}
        for role in sorted(self.batched_roles):
            by_url.setdefault(self.settings.roles[role].base_url, (role, self.caller.clients[role]))
        return dict(by_url.values())


def know_itself(run: BatchRun, manifest: Manifest | None, read_only: bool = False) -> Manifest | None:
    """The run's incarnation (made now for a run from before incarnations, unless `read_only`), whether it began
    before them, and whether its ledger was lost: the stage submitted batches, and the ledger is gone. Returns the
    manifest, as it now is."""
    if manifest and not read_only:
        manifest = run_incarnation(manifest)
    run.incarnation = (manifest.incarnation if manifest else None) or ""
    run.late = bool(manifest) and (manifest.incarnation_late or not run.incarnation)
    # a manifest rebuilt from the run's records got a new incarnation: the run's batches carry the lost one
    run.rebuilt = bool(manifest) and manifest.rebuilt
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


def ledger_path(settings) -> Path:
    return run_folder(settings.output_root, settings.run_id, settings.roles["eval"].model) / "batches.json"


def run_cycles(name: str, state, clients: dict, settings, out, err, run_case, sharing=None, cell=None) -> int:
    """The batch-mode stage: cycles of replay, submission and collection until every case is saved or failed.
    Ctrl-C leaves every recorded batch in flight: the same command re-attaches to them. In the grid (`sharing`),
    the calls of roles left synchronous share its limits and budget, and the batches are pooled with the other
    cells' (`sharing.batches`)."""
    from lexpilot.models.calls import ModelCaller

    log = lambda message: print(f"[{name}] {message}", file=err, flush=True)
    model = settings.roles["eval"].model
    transport = state.manifest.token_fields if state.manifest else None
    run = BatchRun(
        name,
        state,
        settings,
        Ledger(ledger_path(settings)),
        journal_path(settings.output_root, settings.run_id, model),
        CheckpointWriter(),
        ModelCaller(settings, QuietProgress(log), threading.Event(), clients, transport, sharing, cell),
        set(settings.batching.roles or ("eval", "user", "judge")),
        load_prompts(),
        run_case,
        log,
        pool=sharing.batches if sharing else None,
    )
    state.manifest = know_itself(run, state.manifest)
    try:
        return _cycles(run, out, err)
    except (KeyboardInterrupt, Drained):
        print(
            f"\n[{name}] interrupted: the batches in flight stay recorded; rerun the same command to collect them",
            file=err,
            flush=True,
        )
        return 130


def _cycles(run: BatchRun, out, err) -> int:
    settings, state, log = run.settings, run.state, run.log
    started, adopted = time.monotonic(), bool(settings.batching.files)  # vLLM files have no provider list
    if not settings.batching.files:
        check_endpoints(run)
    # what the journal holds before this invocation collects anything: its invalid outputs were said already
    journal = read_journal(run, state.pending())
    run.said_before.update(key[:2] for key, queue in journal.replies.items() for _ in queue)
    while True:
        waiting, _ = collect(run, run.caller.clients, run.journal_path, run.writer)
        if waiting:
            if settings.batching.detach or settings.batching.files:
                log(
                    "batches in flight; rerun the same command to collect them"
                    + (
                        " once their output files are in --batch-files"
                        if settings.batching.files
                        else ""
                        if run.pool is not None
                        else " (--batch-status shows them)"
                    )
                )
                return 0
            refuse_unanswered_files(run)
            if run.caller.draining.wait(settings.batching.poll):  # the grid's first Ctrl-C
                raise Drained
            continue
        pending = [c for c in state.pending() if c.number not in run.failed]
        needs = _replay(run, pending)
        run.writer.close()
        if not adopted:  # the provider may hold batches of this run the ledger does not know: never ask twice
            adopted = True
            pending_requests: dict[str, list] = {}
            for n in needs:
                pending_requests.setdefault(_digest(run, n), []).append(
                    (n[0], n[1], n[3], n[2].role, settings.roles[n[2].role].max_tokens)
                )
            if adopt(run, run.batch_clients(), pending_requests):
                continue
        if not needs:
            break
        cycle = run.ledger.next_cycle(run.name)
        groups = _requests(run, needs)
        _send(run, groups)
        log(
            f"cycle {cycle}: {counted(sum(len(r) for r in groups.values()), 'request')} in "
            f"{counted(len(groups), 'batch', 'batches')}; {counted(len(pending), 'case')} pending, at most "
            f"{counted(remaining_depth(run, pending), 'more call')} in the longest; "
            f"elapsed {time.monotonic() - started:.0f}s" + _spending(run)
        )
    return _batch_summary(run, time.monotonic() - started, out, err)


def refuse_unanswered_files(run: BatchRun) -> None:
    """Files written for `vllm run-batch` (--batch-files) are answered only by their output files: without
    --batch-files, waiting for them would never end."""
    written = [b for b in run.ledger.open_batches() if b["phase"] == "written"]
    if written:
        raise FatalError(
            f"{written[0]['path']}: written for vllm run-batch, and its output {written[0]['output']} is not there "
            f"yet ({counted(len(written), 'file')} in all); run the command docs/batch.md gives, then rerun with "
            f"--batch-files {Path(written[0]['path']).parent}"
        )


def _digest(run: BatchRun, need: tuple) -> str:
    role = run.settings.roles[need[2].role]
    return request_digest(request_body(role, need[2].prompt, run.caller.token_fields[need[2].role]))


def _spending(run: BatchRun) -> str:
    budget = run.caller.budget
    if not budget:
        return ""
    return (
        f"; --max-cost {budget.amount:g}: {budget.spent:.4f} spent, {budget.reserved:.4f} reserved for the "
        f"batches submitted, {budget.amount - budget.spent - budget.reserved:.4f} left"
    )


def _replay(run: BatchRun, pending: list) -> list[tuple]:
    """Replay every pending case from its records and the journal until it needs a reply: the requests of the
    next batches, as (case, step, NeedsReply, prompt key)."""
    needs = []
    journal = read_journal(run, pending)
    run.held = Counter(key[:2] for key, queue in journal.replies.items() for _ in queue)
    for case in pending:
        need = _replay_case(run, journal, case)
        if need:
            needs.append(need)
    return needs


def read_journal(run: BatchRun, pending: list) -> CallJournal:
    """One read of the journal: the replies of the pending cases' unfinished steps, queued per case, step and
    prompt."""
    return CallJournal(
        run.journal_path,
        run.writer,
        {
            (c.number, s.name)
            for c in pending
            for s in run.state.steps
            if c.number not in run.state.records[s.name]
        },
        run.state.settings_hash,
    )


def _replay_case(run: BatchRun, journal: CallJournal, case) -> tuple | None:
    settings = run.settings
    while True:  # a role left synchronous is answered at once, and the replay goes on
        journal.rewind(case.number)  # each replay starts from the case's first call again
        retries = ReplayRetries(run.log, run.retried, run.said_before)
        calls = retries.calls = CaseCalls(
            BatchCaller(settings, retries),
            run.prompts,
            case,
            user_condition=settings.user_condition,
            journal=journal,
            settings=settings,
        )
        try:
            run.run_case(run.state, calls, run.writer)
            return None
        except NeedsReply as need:
            key = CallJournal.key(need.role, need.prompt)
            if need.role not in run.batched_roles:
                try:
                    used = Usage()
                    with journal.marked(need.role) as sent:  # in flight, as a synchronous stage's calls are
                        reply = run.caller.chat(need.role, need.prompt, used, on_send=sent)
                except CaseFailed as e:
                    run.failed[case.number] = str(e)
                    return None
                journal.add(
                    case.number,
                    calls.step,
                    key,
                    reply.text,
                    used.by_role,
                    reply.reasoning if need.role == "judge" or settings.keep_reasoning else "",
                )
                run.held[(case.number, calls.step)] += 1
                continue
            tries = run.ledger.tries(key)
            if tries <= settings.transport.retries:
                return (case.number, calls.step, need, key)
            reason = run.ledger.reason(key, need.role)
            run.failed[case.number] = (
                f"{reason} (a prompt beyond the context window: lower the output limit or "
                "serve the model with a longer context)"
                if tries >= AT_ONCE
                else f"{reason} (no accepted reply in {tries} batches)"
            )
            return None
        except CaseFailed as e:
            run.failed[case.number] = str(e)
            return None


def custom_id(incarnation: str, number: str, step: str, key: str, occurrence: int) -> str:
    """A request's id in a batch: the run's incarnation, then what it asks for which case (a batch is adopted only
    when every custom id in it starts with this run's incarnation)."""
    return (
        f"{incarnation}-" + hashlib.sha256(f"{number}\0{step}\0{key}\0{occurrence}".encode()).hexdigest()[:32]
    )


def _requests(run: BatchRun, needs: list[tuple]) -> dict[str, list]:
    """The cycle's requests by batch: one batch per endpoint (roles may share one), or per model for vLLM files;
    a request already in an open batch (the same case, step and prompt) is never asked twice."""
    settings, caller = run.settings, run.caller
    in_flight = run.ledger.in_flight_keys()
    submission = len(run.ledger.data["batches"])  # makes every custom id of this cycle new
    groups: dict[str, list] = {}
    for number, step, need, key in needs:
        if (number, step, key) in in_flight:
            continue  # asked in a batch still open: never twice
        role = settings.roles[need.role]
        body = request_body(role, need.prompt, caller.token_fields[need.role])
        cid = custom_id(run.incarnation, number, step, key, submission)
        # the batch's worst case must fit the budget before it is submitted; it is settled at its real cost when
        # its reply is collected (released when none comes: it is reserved again if re-asked)
        if caller.budget:
            worst = caller.budget.reserve(role.model, len(str(need.prompt)), role.max_tokens, batched=1.0)
            run.reserved[cid] = (role.model, worst)
        # vLLM's run-batch takes one model per file; the API one batch per endpoint (roles may share one)
        group = role.model if settings.batching.files else role.base_url
        groups.setdefault(group, []).append(
            (
                cid,
                {
                    "case": number,
                    "step": step,
                    "key": key,
                    "role": need.role,
                    "max_tokens": role.max_tokens,
                    "token_field": caller.token_fields[need.role],
                },
                body,
            )
        )
    return groups


def _send(run: BatchRun, groups: dict[str, list]) -> None:
    settings = run.settings
    if run.pool is not None:  # the grid's: one batch per endpoint for every cell, once every chain has handed
        run.pool.hand(chain_of(settings), run, [r for requests in groups.values() for r in requests])
        return
    if groups:
        run.note_submission()
    for group, requests in groups.items():
        role = requests[0][1]["role"]
        for chunk in chunks(requests):
            if settings.batching.files:
                write_batch_file(
                    run.ledger,
                    settings.batching.files,
                    group,
                    role,
                    chunk,
                    settings.roles[role].max_tokens,
                    run.log,
                )
            else:
                submit(run, run.caller.clients[role], role, chunk, settings.roles[role].max_tokens)


def _batch_summary(run: BatchRun, wall: float, out, err) -> int:
    state, name = run.state, run.name
    done = len(state.cases) - len(state.pending())
    print(
        f"[{name}] batch mode: {done} of {len(state.cases)} cases saved, {len(run.failed)} failed, "
        f"{counted(run.ledger.cycles(name), 'cycle')} in this run; elapsed {wall:.1f}s",
        file=out,
        flush=True,
    )
    for number, message in sorted(run.failed.items()):
        print(f"[{name}] case {number} failed: {run.settings.redact(message)}", file=err)
    if state.manifest and run.caller.token_fields != (
        state.manifest.token_fields or default_token_fields(run.settings.roles)
    ):
        # a resumed run starts with the field
        state.manifest = record_transport(state.manifest, run.caller.token_fields)
    CallJournal(run.journal_path, run.writer, set()).compact(
        {s.name: state.records[s.name] for s in state.steps}
    )
    return 1 if run.failed else 0


def remaining_depth(run: BatchRun, pending) -> int:
    """The most calls a pending case may still need, one per cycle: the protocol's remaining depth, less the
    replies the journal already holds for its steps not saved yet (a step the replay has just saved holds none)."""
    state, depth = run.state, 0
    for case in pending:
        left = 0
        for step in state.steps:
            if case.number not in state.records[step.name]:
                upstream = {need: state.records[need].get(case.number) for need in step.needs}
                bound = sum(step.calls_for(upstream, state.settings, case).values())
                left += max(0, bound - run.held[(case.number, step.name)])  # rejected replies held count too
        depth = max(depth, left)
    # both are upper bounds (a step's bound can grow once its upstream record is known): the tighter one holds
    run.depth = depth if run.depth is None else min(depth, run.depth)
    return run.depth


def check_endpoints(run: BatchRun) -> None:
    """An endpoint that refuses the batch API stops the stage before any submission, naming the fallback."""
    for role, client in run.batch_clients().items():
        try:
            client.batches.list(limit=1)
        except run.caller.openai.APIStatusError as e:
            if e.status_code in (404, 405, 501):
                raise FatalError(
                    f"{run.settings.roles[role].describe()}: the endpoint refuses the batch API (HTTP "
                    f"{e.status_code}); leave the role synchronous (--batch-roles without {role}) or "
                    "run without --batch"
                ) from None
            provider_call(run, "listing batches", lambda: client.batches.list(limit=1))  # transient: retried
        except (run.caller.openai.APIConnectionError, run.caller.openai.APITimeoutError):
            provider_call(run, "listing batches", lambda: client.batches.list(limit=1))


def status(name: str, settings, clients: dict, out=sys.stdout) -> int:
    """--batch-status: what is in flight for the run (the ledger's batches, and the run's batches the provider
    lists that the ledger does not know), without waiting."""
    from lexpilot.models.calls import ModelCaller

    run = BatchRun(
        name,
        None,
        settings,
        Ledger(ledger_path(settings)),
        Path(),
        CheckpointWriter(),
        ModelCaller(settings, QuietProgress(lambda m: print(m, file=out)), threading.Event(), clients),
        set(settings.batching.roles or ("eval", "user", "judge")),
        {},
        None,
        lambda m: print(m, file=out),
    )
    path = manifest_path(settings.output_root, settings.run_id, settings.roles["eval"].model)
    know_itself(run, read_manifest(path) if path.exists() else None, read_only=True)
    shown = _ledger_status(run, out)
    if not settings.batching.files:
        shown += _listed_status(run, out)
    if not shown:
        print("no batch in flight for this run", file=out)
    return 0


def _ledger_status(run: BatchRun, out) -> int:
    """A line per batch the ledger holds open, with its status at the provider; how many lines."""
    shown = 0
    for b in run.ledger.open_batches():
        line = f"{b['role']}: {b.get('batch_id', '(not created)')}, {len(b['requests'])} requests, phase {b['phase']}"
        if b.get("batch_id"):
            remote = provider_call(
                run,
                f"batch {b['batch_id']}",
                lambda: run.caller.clients[b["role"]].batches.retrieve(b["batch_id"]),
                missing_ok=True,
            )
            line += f", status {remote.status}" if remote else ", unknown to the provider (HTTP 404)"
        print(line, file=out)
        shown += 1
    return shown


def _listed_status(run: BatchRun, out) -> int:
    """A line per batch of the run the provider lists and the ledger does not know (or, after a lost ledger,
    why what is in flight cannot be told); how many lines."""
    shown = 0
    known = run.ledger.known_batch_ids()
    for role, client in run.batch_clients().items():
        batches = listing(run, client)
        ours = listed(run, client, batches)
        if run.ledger_lost and (untagged(batches) or not ours):
            lists = (
                f"lists {counted(len(batches), 'batch', 'batches')} without metadata"
                if untagged(batches)
                else "lists no batch of this run, model and stage"
            )
            print(
                f"{role}: cannot tell what is in flight: {run.ledger_lost} and the provider {lists} (restore "
                f"{run.ledger.path}, or see docs/batch.md)",
                file=out,
            )
            shown += 1
        for remote in ours:
            # a completed batch the ledger does not know was never collected into it (a lost ledger): its
            # replies are still to be taken
            answered = remote.status == "completed" or getattr(remote, "output_file_id", None)
            if remote.id not in known and (answered or remote.status not in FINISHED):
                print(
                    f"{role}: {remote.id}, status {remote.status}: listed by the provider for this run, not in "
                    "the ledger (the next run re-attaches to it"
                    + (" and collects what the run's records do not hold yet)" if answered else ")"),
                    file=out,
                )
                shown += 1
    return shown
