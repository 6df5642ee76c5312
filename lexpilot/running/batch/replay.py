"""Batch mode's replay: every pending case run again from its records and the call journal until it needs a reply
the journal does not hold (`NeedsReply`: the next batch asks for it), the roles left synchronous answered on the
way, an invalid output said once, and the most calls a pending case may still need."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn

from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.errors import CaseFailed, CaseFailure
from lexpilot.models.replies import truncation_flag
from lexpilot.models.served import ServedModelChanged
from lexpilot.models.usage import Usage
from lexpilot.protocols.steps import CaseCalls
from lexpilot.running.batch.ledger import AT_ONCE
from lexpilot.running.batch.run import BatchRun
from lexpilot.running.state import run_case
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import CallJournal


class NeedsReply(Exception):
    """The case needs a reply that neither its records nor the journal hold: the next batch asks for it."""

    def __init__(self, role: str, prompt):
        super().__init__(role)
        self.role, self.prompt = role, prompt


@dataclass
class BatchCaller:
    """Stands for the model caller during a cycle's replay: every call it gets becomes a batch request."""

    settings: Settings
    progress: ReplayRetries
    batched = True

    def chat(self, role_name: str, prompt: str | list[dict], *_: Any, **__: Any) -> NoReturn:
        """The call, as ModelCaller.chat takes it, becomes a batch request."""
        raise NeedsReply(role_name, prompt)


@dataclass
class ReplayRetries:
    """The progress of one replay of a case: an invalid output is said once, when its reply first comes in, not
    again at every later cycle's replay of the case (each replay starts from the first call of the case's
    pending steps), nor at a later invocation's (--batch-detach) for a reply the journal held when it began."""

    log: Callable[[str], None]
    reported: Counter  # (case, step) -> retries said so far
    # (case, step) -> replies held when the invocation began
    said_before: Counter = field(default_factory=Counter)
    calls: CaseCalls | None = None  # the replay's calls, for the step being run
    seen: Counter = field(default_factory=Counter)

    def update(self, **deltas) -> None:
        pass

    def retry(self, message: str) -> None:
        assert self.calls and self.calls.journal, "a retry is said while a step's calls run, from the journal"
        key = (self.calls.case.number, self.calls.step)
        self.seen[key] += 1
        taken = sum(1 for taken_key, _ in self.calls.journal.taken.get(key[0], []) if taken_key[1] == key[1])
        if taken <= self.said_before[key]:  # replayed from an earlier invocation, which said it
            self.reported[key] = max(self.reported[key], self.seen[key])
        if self.seen[key] > self.reported[key]:
            self.reported[key] = self.seen[key]
            self.log(f"case {key[0]}: asked again: {message}")


def replay(run: BatchRun, pending: list) -> list[tuple]:
    """Replay every pending case from its records and the journal until it needs a reply: the requests of the
    next batches, as (case, step, NeedsReply, prompt key)."""
    journal = read_journal(run, pending)
    run.held = Counter(key[:2] for key, queue in journal.replies.items() for _ in queue)
    return [need for need in _each_case(run, lambda case: _replay_case(run, journal, case), pending) if need]


def _each_case(run: BatchRun, replay_case, pending: list) -> list:
    """Every pending case replayed. In the grid, where a role is asked directly (--batch-roles, or a model with
    batch = false), up to --concurrency cases at once, as a synchronous stage asks them: those calls take seconds
    each. A stage script replays one case after another, so that its Ctrl-C leaves at once (the grid's first
    Ctrl-C lets the calls in flight end, and starts none)."""
    workers = min(run.settings.transport.concurrency, len(pending))
    if run.pool is None or run.batched_roles >= set(ROLES) or workers <= 1:
        return [replay_case(case) for case in pending]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="replay")
    try:
        return list(pool.map(replay_case, pending))  # in the cases' order, as one after another
    finally:  # a case that raised (a refusal, a Ctrl-C) starts no other
        pool.shutdown(cancel_futures=True)


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
            run_case(run.state, calls, run.writer)
            return None
        except NeedsReply as need:
            key = CallJournal.key(need.role, need.prompt)
            if need.role not in run.batched_roles:
                try:
                    _ask_now(run, journal, calls, need, key)
                except CaseFailed as e:
                    _failed(run, case, str(e), e.change)
                    return None
                run.held[(case.number, calls.step)] += 1
                continue
            tries = run.ledger.tries(key)
            if tries <= settings.transport.retries:
                return (case.number, calls.step, need, key)
            reason = run.ledger.reason(key, need.role)
            if tries >= AT_ONCE:
                flag = settings.roles[need.role].flags[1]
                _failed(
                    run,
                    case,
                    f"{reason} (a prompt beyond the context window: lower {flag} or serve the model with a "
                    "longer context)",
                    flag,
                )
                return None
            _failed(run, case, f"{reason} (no accepted reply in {tries} batches)", truncation_flag(reason))
            return None
        except CaseFailed as e:
            _failed(run, case, str(e), e.change)
            return None


def _ask_now(run: BatchRun, journal: CallJournal, calls: CaseCalls, need: NeedsReply, key: str) -> None:
    """A role left synchronous answered at once, its reply journalled before the call's end mark (a kill between the
    two loses nothing); every attempt of a call that fails its case is kept as paid for and not used."""
    used = Usage()
    with journal.marked(need.role) as sent:  # in flight, as a synchronous stage's calls are
        try:
            reply = run.caller.chat(need.role, need.prompt, used, on_send=sent)
        except (CaseFailed, ServedModelChanged) as e:  # the replies it refused were paid too
            journal.not_used(calls.case.number, calls.step, used.by_role, str(e))
            raise
        journal.add(
            calls.case.number,
            calls.step,
            key,
            reply.text,
            used.by_role,
            reply.reasoning if need.role == "judge" or run.settings.keep_reasoning else "",
        )


def _failed(run: BatchRun, case, message: str, change: str) -> None:
    """The case failed: kept for the stage's closing lines, and said to the grid as it happens."""
    failure = CaseFailure(case.number, run.settings.redact(message), change)
    run.failed[case.number] = failure
    run.caller.case_failed(failure)


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
