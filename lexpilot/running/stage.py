"""Running a stage: the command line, the manifest and lock, resuming from checkpoints, cases in parallel
with a progress line, failures and Ctrl-C, the dry run, and the closing summary.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import load_prompts
from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.errors import (
    BY_SIGTERM,
    STOPPED,
    Aborted,
    CaseFailed,
    CaseFailure,
    FatalError,
    HarnessError,
    OneLineParser,
    Terminated,
    own_interrupts,
    stop_of,
    stops_held,
)
from lexpilot.models.calls import ModelCaller, default_token_fields
from lexpilot.models.offpeak import Holds
from lexpilot.models.served import ServedModelChanged
from lexpilot.models.sharing import Sharing
from lexpilot.models.usage import FLEX_FALLBACK_CALLS, Usage
from lexpilot.options import add_common_args, settings_from_args
from lexpilot.pricing import counted_key
from lexpilot.protocols.steps import CaseCalls, Stage
from lexpilot.running.context import RunContext, open_stage, run_lock
from lexpilot.running.failures import failure_lines
from lexpilot.running.quote import dry_run_report
from lexpilot.running.state import StageState, keep_served, read_only_state, run_case, seed_served
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import (
    CallJournal,
    CheckpointWriter,
    journal_path,
)
from lexpilot.storage.manifest_notes import record_transport
from lexpilot.text import counted


class Progress:
    """Counters shared by the workers of a stage, drawn on stderr so retrying never looks like a hang."""

    def __init__(self, stage: str, total: int, stream=None):
        self.stage, self.total, self.stream = stage, total, stream or sys.stderr
        self.done = self.failed = self.in_flight = self.retries = 0
        self.answered = 0  # calls answered: progress within long cases, before any case is done
        self.last_error = ""
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.holds = Holds()  # the endpoints held for off-peak, which the line says while they are held
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_draw = self.start

    def update(self, **deltas) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def retry(self, message: str) -> None:
        with self.lock:
            self.retries += 1
            self.last_error = message

    def note(self, message: str) -> None:
        """A line of its own, above the progress line."""
        with self.lock:
            self.stream.write(("\r\033[K" if self.tty else "") + f"[{self.stage}] {message}\n")
            self.stream.flush()

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        finished = self.done + self.failed
        eta = f"{elapsed / finished * (self.total - finished):.0f}s" if finished else "?"
        text = (
            f"[{self.stage}] {self.done}/{self.total} done, {self.failed} failed, "
            f"{self.answered} calls answered, {self.in_flight} in flight, {self.retries} retries, "
            f"elapsed {elapsed:.0f}s, remaining ~{eta}"
        )
        text += "".join(f" | {model}: {held}" for model, held in self.holds.status())
        return text + (f" | last retry: {self.last_error}" if self.last_error else "")

    def draw(self, final: bool = False) -> None:
        if not self.total:
            return
        now = time.monotonic()
        if self.tty:
            if final or now - self._last_draw >= 0.2:
                self.stream.write("\r\033[K" + self.line()[:200] + ("\n" if final else ""))
                self.stream.flush()
                self._last_draw = now
        elif final or now - self._last_draw >= 30:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last_draw = now


def _format_usage(usage: Usage) -> str:
    parts = []
    for role in ROLES:
        e = usage.by_role.get(role)
        if e:
            said = [
                f"{e[key]} {what}"
                for key, what in (
                    ("unreported_calls", "calls without token counts"),
                    (counted_key("tier", "flex"), "served at the flex tier"),
                    (FLEX_FALLBACK_CALLS, "sent at the standard tier after the flex tier was unavailable"),
                )
                if e.get(key)
            ]
            parts.append(
                f"{role} {e['calls']} calls/{e['prompt_tokens']}+{e['completion_tokens']} tokens"
                + (f" ({', '.join(said)})" if said else "")
            )
    return "; ".join(parts) or "no calls"


def run_stage(
    stage: Stage,
    settings: Settings,
    clients: dict | None = None,
    out=None,
    err=None,
    sharing: Sharing | None = None,
    cell=None,
) -> int:
    """Load, resume, run every pending case of the stage's steps, save; returns the exit status.

    `clients` (role -> OpenAI-compatible client) replace the ones built from the settings (tests); `sharing` is
    what the grid's cells share (endpoint limiters, budget, draining), `cell` this stage's turn at them.
    """
    name = stage.name
    out, err = out or sys.stdout, err or sys.stderr
    context = RunContext.of(stage, settings)
    if settings.dry_run:
        print(dry_run_report(name, read_only_state(context), context.cases), file=out)
        return 0
    if settings.batching.status:  # it only reads: never refused while another process writes the run
        from lexpilot.running.batch.status import status  # the batch API is only touched when asked for

        return status(context, clients, out)
    if settings.batching.enabled:
        from lexpilot.running.batch.chain import run_stage_batches  # the batch API only when asked for

        return run_stage_batches(context, clients, out, err, sharing, cell)
    with run_lock(settings):
        return _execute(name, open_stage(context, err), clients, out, err, sharing, cell)


def refuse_with_batches_in_flight(state: StageState) -> None:
    """A synchronous run of a stage whose requests are in batches still open (an earlier --batch-detach, or a
    --batch run stopped) would pay for them twice: it is refused, naming how to collect them."""
    from lexpilot.running.batch.run import ledger_path, open_batches

    steps = {s.name for s in state.steps}
    open_requests = sum(
        1 for b in open_batches(state.settings) for r in b.requests.values() if r.step in steps
    )
    if open_requests:
        raise HarnessError(
            f"{ledger_path(state.settings)}: {counted(open_requests, 'request')} of this stage are in batches still in flight; rerun "
            "with --batch to collect them (asked again without it, they would be paid twice)"
        )


@dataclass
class Outcome:
    """What the workers of a stage report back, under one lock."""

    failures: list[CaseFailure] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    replays: int = 0
    idle: int = 0  # of the cases done, those the stage had nothing to ask about (Stage.idle)
    finished: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_finished: threading.Event = field(default_factory=threading.Event)


@dataclass
class Workers:
    """Everything a worker needs to run one case: shared by the pool's threads."""

    state: StageState
    caller: ModelCaller
    prompts: dict[str, str]
    journal: CallJournal
    writer: CheckpointWriter
    progress: Progress
    abort: threading.Event
    stop_new: threading.Event
    outcome: Outcome
    total: int

    def work(self, case: Case) -> None:
        try:
            if not self.stop_new.is_set():
                self.work_on(case)
        finally:
            with self.outcome.lock:
                self.outcome.finished += 1
                if self.outcome.finished == self.total:
                    self.outcome.all_finished.set()

    def work_on(self, case: Case) -> None:
        settings, outcome = self.state.settings, self.outcome
        calls = CaseCalls(
            self.caller,
            self.prompts,
            case,
            user_condition=settings.user_condition,
            journal=self.journal,
            keep_reasoning=settings.keep_reasoning,
            settings=settings,
        )
        try:
            run_case(self.state, calls, self.writer)
            self.progress.update(done=1)
            idle = self.state.idle
            if idle and idle[1](settings, case):
                with outcome.lock:
                    outcome.idle += 1
        except ServedModelChanged as e:  # the calls in flight end and are kept: no abort
            outcome.fatal.append(str(e))
            self.stop_new.set()
        except FatalError as e:
            outcome.fatal.append(str(e))
            self.abort.set()
            self.stop_new.set()
            self.caller.holds.wake()  # the calls held for off-peak stop waiting now
        except Aborted:
            pass
        except CaseFailed as e:
            self.failed(
                CaseFailure(case.number, settings.redact(str(e)), e.change), stop=not settings.keep_going
            )
        except Exception as e:  # a bug must not lose the other cases' work: report it like a failure
            self.failed(
                CaseFailure(case.number, settings.redact(f"internal error {type(e).__name__}: {e}")),
                stop=True,
            )
        finally:
            with outcome.lock:
                outcome.usage.merge(calls.spent.by_role)
                outcome.replays += calls.replays

    def failed(self, failure: CaseFailure, stop: bool) -> None:
        with self.outcome.lock:
            self.outcome.failures.append(failure)
        self.progress.update(failed=1)
        self.caller.case_failed(failure)
        if stop:
            self.stop_new.set()


def _open_journal(
    name: str, state: StageState, pending: list[Case], writer: CheckpointWriter, err
) -> CallJournal:
    settings = state.settings
    journal = CallJournal(
        journal_path(settings.output_root, settings.run_id, settings.roles["eval"].model),
        writer,
        {(c.number, s.name) for c in pending for s in state.steps if c.number not in state.records[s.name]},
        state.settings_hash,
    )
    if journal.other_settings:
        print(
            f"[{name}] {journal.path}: {journal.other_settings} repl(ies) were made with other settings than this "
            "run's; they are not replayed, and those calls are made again",
            file=err,
        )
    if journal.edited:
        print(
            f"[{name}] {journal.path}: {journal.edited} repl(ies) changed after they were saved (their digest does "
            "not match); those calls are made again",
            file=err,
        )
    if journal.unreadable:
        print(
            f"[{name}] {journal.path}: {journal.unreadable} unreadable line(s) ignored (probably torn by a "
            "crash); those calls are made again",
            file=err,
        )
    if journal.unanswered:
        print(
            f"[{name}] calls in flight when an earlier process stopped (paid, never answered): "
            + ", ".join(f"{role} {n}" for role, n in journal.unanswered.items())
            + "; counted in show_results.py --usage",
            file=err,
        )
    return journal


def _run_pool(name: str, pending: list[Case], workers: Workers, err) -> None:
    """Every pending case on the pool. Ctrl-C stops at once with every completed record saved. SIGTERM (Slurm's,
    before its SIGKILL) drains: no new call starts, the calls in flight end and are saved or journalled, then the
    summary says how many cases were not finished; a second signal stops at once."""
    pool = ThreadPoolExecutor(
        max_workers=workers.state.settings.transport.concurrency, thread_name_prefix="case"
    )
    try:
        try:
            # a stop while the cases are queued is handled once all are: each is then counted
            with stops_held():
                for case in pending:
                    pool.submit(workers.work, case)
            _wait_for_cases(workers)
        except Terminated:
            workers.stop_new.set()
            workers.caller.draining.start(BY_SIGTERM)
            workers.caller.holds.wake()  # the calls held for off-peak stop waiting now
            workers.progress.note(
                "SIGTERM: no new call starts; the calls in flight end and are saved or journalled "
                "(a second signal leaves at once)"
            )
            _wait_for_cases(workers)
    except KeyboardInterrupt as interrupt:
        workers.abort.set()
        workers.stop_new.set()
        with workers.writer.lock:  # no record is half-written when we leave
            workers.progress.draw(final=True)
            print(
                f"\n[{name}] {stop_of(interrupt).said}: completed cases are saved; rerun the same command to "
                "resume.",
                file=err,
                flush=True,
            )
            os._exit(stop_of(interrupt).status)
    pool.shutdown()


def _wait_for_cases(workers: Workers) -> None:
    # A counter, not wait() over every future: that would cost O(cases) per completion.
    while not workers.outcome.all_finished.wait(0.2):
        workers.progress.draw()


def _execute(
    name: str, state: StageState, clients, out, err, sharing: Sharing | None = None, cell=None
) -> int:
    refuse_with_batches_in_flight(state)
    settings = state.settings
    pending = state.pending()
    skipped = len(state.cases) - len(pending)
    writer = CheckpointWriter()
    saved = {s.name: state.records[s.name] for s in state.steps}
    if not pending:  # nothing to do: no client, no pool; a journal left by an earlier crash is emptied
        CallJournal(
            journal_path(settings.output_root, settings.run_id, settings.roles["eval"].model), writer, set()
        ).compact(saved)
        print(f"[{name}] cases: 0 done, {skipped} skipped (already saved), 0 failed; no calls", file=out)
        return 0
    progress = Progress(name, len(pending), err)
    abort = threading.Event()
    transport = state.manifest.token_fields if state.manifest else None
    caller = ModelCaller(settings, progress, abort, clients, transport, sharing, cell)
    seed_served(state, caller)
    progress.holds = caller.holds
    journal = _open_journal(name, state, pending, writer, err)
    workers = Workers(
        state,
        caller,
        load_prompts(),
        journal,
        writer,
        progress,
        abort,
        threading.Event(),
        Outcome(),
        len(pending),
    )
    _run_pool(name, pending, workers, err)
    keep_served(state, caller)
    changed = caller.served.changed(state.asks)
    if changed and not workers.outcome.fatal:  # the change came with its last calls, or its replies replayed
        workers.outcome.fatal.append(changed)
    writer.close()
    journal.compact(saved)
    if state.manifest and caller.token_fields != (transport or default_token_fields(settings.roles)):
        state.manifest = record_transport(state.manifest, caller.token_fields)
    progress.draw(final=True)
    answered_as = caller.served.answered_as()
    if answered_as:  # an alias, a dated snapshot, a re-pointed id: said, whether accepted or not
        print(f"[{name}] served: {answered_as}", file=out)
    # as the progress line counts
    return _summary(name, workers, skipped, time.monotonic() - progress.start, out, err)


def _summary(name: str, workers: Workers, skipped: int, wall: float, out, err) -> int:
    """The closing lines and the exit status: STOPPED when the stage stopped, 1 when a case failed."""
    outcome, progress = workers.outcome, workers.progress
    idle = workers.state.idle
    print(
        f"[{name}] cases: {progress.done - outcome.idle} done, "
        + (f"{outcome.idle} {idle[0]}, " if idle and outcome.idle else "")
        + f"{skipped} skipped (already saved), "
        f"{len(outcome.failures)} failed; {_format_usage(outcome.usage)}"
        + (f"; {outcome.replays} replies paid in an earlier run replayed" if outcome.replays else "")
        + f"; elapsed {wall:.1f}s",
        file=out,
        flush=True,
    )
    if outcome.fatal:
        print(f"[{name}] stopped: {outcome.fatal[0]}", file=err)
        return STOPPED
    if outcome.failures:
        unfinished = workers.total - progress.done - len(outcome.failures)
        for line in failure_lines(name, outcome.failures, unfinished):
            print(line, file=err)
        return 1
    unfinished = workers.total - progress.done
    # draining (the grid's first Ctrl-C, a SIGTERM): the cases it did not start or finish are left for a rerun (a
    # started one's answered calls are journalled, and replayed then)
    if unfinished > 0:
        by = workers.caller.draining.by
        print(
            f"[{name}] {counted(unfinished, 'case')} not finished ({by.name}); rerun the same command to resume",
            file=err,
        )
        return by.status
    return 0


def stage_main(stage: Stage, doc: str, argv=None, clients: dict | None = None) -> int:
    """Parse the common flags and run a stage; errors are one clear message and a non-zero status."""
    parser = OneLineParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, stage.user_condition, stage.history_choice, stage.source_run, stage.probe_file)
    args = parser.parse_args(argv)
    settings = None
    own_interrupts()  # the stage's handling of Ctrl-C and SIGTERM from here (below, and in the cases' pool)
    try:
        settings = settings_from_args(args)
        return run_stage(stage, settings, clients)
    except HarnessError as e:
        message = str(e)
    except OSError as e:  # the output root is a file, read-only or full, before any record was written
        path = e.filename or args.output_root
        what = "no space left on device" if e.errno == errno.ENOSPC else (e.strerror or str(e)).lower()
        message = f"{what}: {path}. Check --output-root ({args.output_root}); nothing was lost"
    except (
        KeyboardInterrupt
    ) as interrupt:  # before the cases' pool handles it (loading the SDK, reading the run)
        print(
            f"\n[{stage.name}] {stop_of(interrupt).said}: completed cases are saved; rerun the same command to "
            "resume.",
            file=sys.stderr,
            flush=True,
        )
        return stop_of(interrupt).status
    print(f"[{stage.name}] error: {settings.redact(message) if settings else message}", file=sys.stderr)
    return STOPPED
