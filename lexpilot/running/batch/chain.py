"""The one batch cycle loop: a run's stages side by side, cycle by cycle, until each is done, failed, in flight or
interrupted. A stage script's `--batch` is a chain of one stage (`run_stage_batches`); the grid's batch mode runs
each (model, run) chain of its cells through the same loop (running/grid/chain.py), so the grid takes as many
cycles as a chain's longest run of dependent steps, not their sum over its stages: on the README's stages that is
LexAwN_gen's 12 cycles, then Interaction-Based LJP's 1 (the only stage that reads LexAwN's records), 13 where one
stage after another took 12 + 5 + 2 + 2 + 1 = 22.

One thread holds the run's lock once. It opens each stage whose upstream is done as its script opens it (the
manifest checked, the stage prepared, its records read), as a BatchRun; the stages share the run's ledger, journal
writer, budget reservations and manifest (running/batch/run.py `Together`). Each cycle it takes them one after
another: each collects its own finished batches; then each replays its cases until they need replies, and a stage
that needs none is finished, its readers opened at once and replayed in the same cycle; then the requests of every
stage are handed over at once (a stage script submits its own; the grid pools every chain's per endpoint). The
journal's writer is closed after every turn (the next may rewrite the journal). Nothing touches the run's files
concurrently, so each stage keeps the guarantees running/batch/cycles.py's steps give it.

What differs between a script and the grid is the `Host`: where a stage's lines go, how a stopped stage is told,
and where the cycle's requests are submitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TextIO

from lexpilot.errors import Aborted, Draining, Stop, stop_of
from lexpilot.models.sharing import Sharing
from lexpilot.protocols.steps import Stage
from lexpilot.running.batch.cycles import (
    batch_summary,
    collect_own,
    cycle_requests,
    gather,
    left_in_flight,
    open_run,
    say_cycle,
    say_interrupted,
    send,
    start,
)
from lexpilot.running.batch.ledger import Ledger
from lexpilot.running.batch.run import BatchRun, Together, ledger_path, poll_wait
from lexpilot.running.context import RunContext, open_stage, run_lock
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import CheckpointWriter

# a stage's place in its chain: DONE, RUNNING, WAITING (for its upstream, or for a rerun), FAILED, NOT_RUN (its
# upstream stopped), INTERRUPTED (Ctrl-C, SIGTERM), IN_FLIGHT (--batch-detach or --batch-files: its batches submitted, its
# cases not all saved)
DONE, RUNNING, WAITING, FAILED, NOT_RUN, INTERRUPTED, IN_FLIGHT = (
    "done",
    "running",
    "waiting",
    "failed",
    "not run",
    "interrupted",
    "in flight",
)
STATUSES = (DONE, RUNNING, WAITING, FAILED, NOT_RUN, INTERRUPTED, IN_FLIGHT)
STOPPED = object()  # what a turn's step returns when it stopped its stage


class Drained(Exception):
    """The first Ctrl-C came before the cycle's batches were made: none is, and the chain leaves."""


class Link(Protocol):
    """A stage of a chain and how it went (the grid's `Cell`; a stage script's `Alone`)."""

    stage: Stage
    settings: Settings
    reads: tuple[str, ...]  # the stages of its chain whose records it reads
    status: str
    reason: str  # why it failed or did not run, in one line

    @property
    def label(self) -> str | None: ...


@dataclass(eq=False)  # a turn is itself: `in` compares identities
class Turn:
    """A stage of the chain open in batch mode: its link, its invocation and where its lines go."""

    link: Link
    run: BatchRun
    out: TextIO
    err: TextIO
    host: Host

    def step(self, action: Callable[..., Any], *args: Any) -> Any:
        """The stage's next step; STOPPED when it raised: the stage interrupted (the grid's first Ctrl-C came while a
        role left synchronous waited for a slot), or stopped with the line saying why (a refusal, the disk, a bug:
        the host says whether the others go on)."""
        try:
            return action(self.run, *args)
        except Aborted:
            interrupted([self], self.host.draining.by)
            return STOPPED
        except Exception as e:
            self.host.stopped(self.link, e)
            return STOPPED
        finally:  # whatever happened: the next turn may replace the journal, which an open writer would miss
            self.run.writer.close()


Handed = tuple[
    Turn, list, dict
]  # a stage's share of a cycle: (its turn, its pending cases, its requests by batch)


class Host(Protocol):
    """What the loop asks of whoever runs the chain (a stage script, or the grid)."""

    @property
    def draining(
        self,
    ) -> Draining: ...  # set by the grid's first Ctrl-C or a SIGTERM: no new call, no new cycle

    @property
    def sharing(self) -> Sharing | None: ...  # the grid's limiters and budget, for the roles left synchronous

    def context(self, link: Link) -> RunContext: ...  # the stage's, as it opens

    def clients(self, link: Link) -> dict | None: ...  # role -> client (None: built from the settings)

    def streams(self, link: Link) -> tuple[TextIO, TextIO]: ...  # where the stage's lines go

    def stopped(self, link: Link, error: Exception) -> None: ...  # the stage stopped on an exception

    def hand(
        self, handed: list[Handed]
    ) -> None: ...  # the cycle's requests submitted (Drained: a Ctrl-C first)

    def finished(self, turn: Turn, code: int) -> None: ...  # its closing lines said, with their exit status

    def left(self, turn: Turn, status: str) -> None: ...  # it leaves the cycles: done, in flight or waiting


def run_chain(host: Host, chain: list[Link]) -> None:
    """The chain's stages, side by side under the run's lock, until each is done, failed, in flight or
    interrupted."""
    try:
        with run_lock(chain[0].settings):
            together = Together(Ledger(ledger_path(chain[0].settings)), CheckpointWriter())
            _cycles(host, chain, together)
    except Exception as e:  # the run's lock is another process's, or its ledger is unreadable: no stage runs
        for link in chain:
            if link.status in (WAITING, RUNNING):
                host.stopped(link, e)


def _cycles(host: Host, chain: list[Link], together: Together) -> None:
    live: list[Turn] = []
    waited = 0  # looks at the run's batches in flight since its last submission
    while True:
        live = _opened(host, chain, together, live)
        if not live:
            return
        waiting = [t for t in live if t.step(collect_own) is True]
        live = [t for t in live if t.link.status == RUNNING]
        if waiting:
            # --batch-detach, --batch-files: each stage waiting says so, and the run leaves; a stage whose batches
            # were all collected waits for the rerun, which goes on with it
            if True in [t.step(left_in_flight) for t in waiting]:
                for turn in [t for t in live if t.link.status == RUNNING]:
                    host.left(turn, IN_FLIGHT if turn in waiting else WAITING)
                return
            if host.draining.wait(poll_wait(chain[0].settings.batching.poll, waited)):
                return interrupted(live, host.draining.by)
            waited += 1
            continue
        waited = 0
        handed = _gathered(host, chain, together, live)
        if handed and not _hand(host, handed, live):
            return


def _gathered(host: Host, chain: list[Link], together: Together, live: list[Turn]) -> list[Handed]:
    """Each stage replayed: (turn, its pending cases, its requests by batch) for those that need replies; a stage
    that needs none is finished, and its readers are opened and replayed in this cycle too (`live` grows)."""
    handed: list[Handed] = []
    later: list[Turn] = []
    i = 0
    while i < len(live):
        turn, i = live[i], i + 1
        gathered = turn.step(gather)
        if gathered is None or gathered is STOPPED:  # re-attached batches are collected first, next cycle
            continue
        pending, needs = gathered
        if needs:
            groups = turn.step(cycle_requests, needs)
            if groups is not STOPPED:
                handed.append((turn, pending, groups))
            continue
        code = turn.step(batch_summary, turn.out, turn.err)
        if code is not STOPPED:
            host.finished(turn, code)
        # its readers, opened now, are replayed in this cycle, unless batches of an earlier invocation are out
        known = {id(t) for t in live + later}
        for new in _opened(host, chain, together, live):
            if id(new) not in known:
                (live if new.step(collect_own) is False else later).append(new)
    live[:] = [t for t in live + later if t.link.status == RUNNING]
    return [h for h in handed if h[0].link.status == RUNNING]


def _hand(host: Host, handed: list[Handed], live: list[Turn]) -> bool:
    """The cycle's requests of every stage handed over at once; whether the chain goes on."""
    try:
        host.hand(handed)
    except Drained:
        interrupted(live, host.draining.by)
        return False
    except Exception as e:  # the chain's share was not submitted: the stages that handed one stop
        for turn, _, _ in handed:
            host.stopped(turn.link, e)
        return True
    for turn, pending, groups in handed:
        say_cycle(turn.run, pending, groups)
    return True


def _opened(host: Host, chain: list[Link], together: Together, live: list[Turn]) -> list[Turn]:
    """The stages still running, then those whose upstream is now done, opened; a stage whose upstream stopped is
    not run (none opens after a Ctrl-C)."""
    live = [t for t in live if t.link.status == RUNNING]
    for link in chain:
        if link.status != WAITING or host.draining.is_set():
            continue
        upstream = [c for c in chain if c.stage.name in link.reads]
        stopped = [c for c in upstream if c.status in (FAILED, NOT_RUN)]
        if stopped:
            link.status, link.reason = NOT_RUN, f"{stopped[0].stage.name} did not finish"
        elif all(c.status == DONE for c in upstream):
            turn = _open(host, link, together)
            if turn:
                live.append(turn)
    return live


def _open(host: Host, link: Link, together: Together) -> Turn | None:
    """The stage opened as its script opens it, under the lock the chain holds."""
    out, err = host.streams(link)
    name = link.stage.name
    link.status = RUNNING
    try:
        context = host.context(link)
        state = open_stage(context, err)
        log = lambda message: print(f"[{name}] {message}", file=err, flush=True)
        run = open_run(context, state, host.clients(link), log, together, host.sharing, link.label)
        start(run)
    except Exception as e:
        host.stopped(link, e)
        return None
    finally:
        together.writer.close()
    return Turn(link, run, out, err, host)


def interrupted(live: list[Turn], by: Stop) -> None:
    """The grid's first Ctrl-C, or a SIGTERM: the batches in flight stay recorded, and a rerun collects them."""
    for turn in live:
        say_interrupted(turn.link.stage.name, turn.err, by)
        turn.link.status, turn.link.reason = INTERRUPTED, f"stopped by {by.name}"


# --- a stage script's batch mode: a chain of one


@dataclass
class Alone:
    """A stage script's stage, the only link of its chain."""

    stage: Stage
    settings: Settings
    label: str | None = None  # its turn at the grid's sharing, when the grid runs it
    reads: tuple[str, ...] = ()
    status: str = WAITING
    reason: str = ""
    code: int = 0  # its exit status


@dataclass
class ScriptHost:
    """A stage script's side of the loop: its lines on its own streams, a stop raised as the script's error, its
    requests submitted by itself."""

    opened: RunContext
    out: TextIO
    err: TextIO
    given_clients: dict | None = None
    sharing: Sharing | None = None
    draining: Draining = field(default_factory=Draining)  # a script's Ctrl-C and SIGTERM raise instead

    def context(self, link: Link) -> RunContext:
        return self.opened

    def clients(self, link: Link) -> dict | None:
        return self.given_clients

    def streams(self, link: Link) -> tuple[TextIO, TextIO]:
        return self.out, self.err

    def stopped(self, link: Link, error: Exception) -> None:
        raise error  # the script says it in one line (stage_main)

    def hand(self, handed: list[Handed]) -> None:
        for turn, _, groups in handed:
            send(turn.run, groups)

    def finished(self, turn: Turn, code: int) -> None:
        turn.link.status = FAILED if code else DONE
        if isinstance(turn.link, Alone):
            turn.link.code = code

    def left(self, turn: Turn, status: str) -> None:
        turn.link.status = status


def run_stage_batches(
    context: RunContext,
    clients: dict | None,
    out: TextIO,
    err: TextIO,
    sharing: Sharing | None = None,
    cell: str | None = None,
) -> int:
    """A stage script's `--batch`: its stage as a chain of one; the exit status. Ctrl-C or SIGTERM leaves every
    recorded batch in flight (the loop records each before anything waits), and the same command re-attaches to
    them: the calls in flight are no more than the batches' own, which go on at the provider."""
    alone = Alone(context.stage, context.settings, cell)
    try:
        run_chain(ScriptHost(context, out, err, clients, sharing), [alone])
    except KeyboardInterrupt as interrupt:
        say_interrupted(context.name, err, stop_of(interrupt))
        return stop_of(interrupt).status
    return alone.code
