"""A (model, run) chain of the grid in batch mode (`run_grid.py --batch`): its stages side by side, so that the grid
takes as many cycles as its longest chain of dependent steps, not their sum over the chain's stages. On the README's
stages that is LexAwN_gen's 12 cycles, then Interaction-Based LJP's 1 (the only stage that reads LexAwN's records):
13, where one stage after another took 12 + 5 + 2 + 2 + 1 = 22.

One thread holds the run's lock once. It opens each stage whose upstream is done as its script opens it (the
manifest checked, the stage prepared, its records read), as a BatchRun; the stages share the run's ledger, journal
writer, budget reservations and manifest (running/batch/run.py `Together`). Each cycle it takes them one after
another: each collects its own finished batches; then each replays its cases until they need replies, and a stage
that needs none is finished, its readers opened at once and replayed in the same cycle; then the requests of every
stage go to the pool (running/grid/pool.py) in one hand-over. The journal's writer is closed after every turn (the
next may rewrite the journal). Nothing touches the run's files concurrently, so each stage keeps the guarantees a
stage script's cycles give it (running/batch/cycles.py).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from lexpilot.errors import Aborted
from lexpilot.running.batch.cycles import (
    batch_summary,
    collect_own,
    cycle_requests,
    gather,
    left_in_flight,
    open_run,
    say_cycle,
    say_interrupted,
    start,
)
from lexpilot.running.batch.ledger import Ledger
from lexpilot.running.batch.run import BatchRun, Together, ledger_path, poll_wait
from lexpilot.running.grid.cells import (
    DONE,
    FAILED,
    IN_FLIGHT,
    INTERRUPTED,
    NOT_RUN,
    RUNNING,
    WAITING,
    Cell,
    Grid,
    reason_of,
    why,
)
from lexpilot.running.grid.pool import Drained, chain_of
from lexpilot.running.stage import open_stage, run_lock, stage_inputs
from lexpilot.running.state import run_case
from lexpilot.storage.checkpoints import CheckpointWriter

STOPPED = object()  # what a turn's step returns when it stopped its stage (the cell failed)


@dataclass(eq=False)  # a turn is itself: `in` compares identities
class Turn:
    """A stage of the chain open in batch mode: its cell, its invocation and its lines, kept apart."""

    cell: Cell
    run: BatchRun
    out: io.StringIO
    err: io.StringIO

    def step(self, action, *args):
        """The stage's next step; STOPPED when it raised: the cell interrupted (the grid's first Ctrl-C came while a
        role left synchronous waited for a slot), or failed with the line saying why (a refusal, the disk, a bug:
        this stage stops, the others go on)."""
        try:
            return action(self.run, *args)
        except Aborted:
            _interrupted([self])
            return STOPPED
        except Exception as e:
            self.cell.status, self.cell.reason = FAILED, reason_of(self.cell, e)
            return STOPPED
        finally:  # whatever happened: the next turn may replace the journal, which an open writer would miss
            self.run.writer.close()


def run_batch_chain(grid: Grid, chain: list[Cell]) -> None:
    """The chain's stages, side by side, until each is done, failed, in flight or interrupted."""
    try:
        with run_lock(chain[0].settings):
            together = Together(Ledger(ledger_path(chain[0].settings)), CheckpointWriter())
            _cycles(grid, chain, together)
    except Exception as e:  # the run's lock is another process's, or its ledger is unreadable: no stage runs
        for cell in chain:
            if cell.status in (WAITING, RUNNING):
                cell.status, cell.reason = FAILED, reason_of(cell, e)


def _cycles(grid: Grid, chain: list[Cell], together: Together) -> None:
    live: list[Turn] = []
    waited = 0  # looks at the run's batches in flight since its last submission
    while True:
        live = _opened(grid, chain, together, live)
        if not live:
            return
        waiting = [t for t in live if t.step(collect_own) is True]
        live = [t for t in live if t.cell.status == RUNNING]
        if waiting:
            # --batch-detach, --batch-files: each stage waiting says so, and the run leaves; a stage whose batches
            # were all collected waits for the rerun, which goes on with it
            if True in [t.step(left_in_flight) for t in waiting]:
                for turn in [t for t in live if t.cell.status == RUNNING]:
                    _leave(grid, turn, IN_FLIGHT if turn in waiting else WAITING)
                return
            if grid.sharing.draining.wait(poll_wait(chain[0].settings.batching.poll, waited)):
                return _interrupted(live)
            waited += 1
            continue
        waited = 0
        handed = _gathered(grid, chain, together, live)
        if handed and not _hand(grid, chain, handed, live):
            return


def _gathered(grid: Grid, chain: list[Cell], together: Together, live: list[Turn]) -> list[tuple]:
    """Each stage replayed: (turn, its pending cases, its requests by batch) for those that need replies; a stage
    that needs none is finished, and its readers are opened and replayed in this cycle too (`live` grows)."""
    handed, later, i = [], [], 0
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
        _finish(grid, turn)
        # its readers, opened now, are replayed in this cycle, unless batches of an earlier invocation are out
        known = {id(t) for t in live + later}
        for new in _opened(grid, chain, together, live):
            if id(new) not in known:
                (live if new.step(collect_own) is False else later).append(new)
    live[:] = [t for t in live + later if t.cell.status == RUNNING]
    return [h for h in handed if h[0].cell.status == RUNNING]


def _hand(grid: Grid, chain: list[Cell], handed: list[tuple], live: list[Turn]) -> bool:
    """The cycle's requests of every stage to the pool at once; whether the chain goes on."""
    shares = [(turn.run, [r for requests in groups.values() for r in requests]) for turn, _, groups in handed]
    try:
        grid.sharing.batches.hand(chain_of(chain[0].settings), shares)
    except Drained:
        _interrupted(live)
        return False
    except Exception as e:  # the chain's share was not submitted: the stages that handed one stop
        for turn, _, _ in handed:
            turn.cell.status, turn.cell.reason = FAILED, reason_of(turn.cell, e)
        return True
    for turn, pending, groups in handed:
        say_cycle(turn.run, pending, groups)
    return True


def _opened(grid: Grid, chain: list[Cell], together: Together, live: list[Turn]) -> list[Turn]:
    """The stages still running, then those whose upstream is now done, opened; a stage whose upstream stopped is
    not run (none opens after a Ctrl-C)."""
    live = [t for t in live if t.cell.status == RUNNING]
    for cell in chain:
        if cell.status != WAITING or grid.sharing.draining.is_set():
            continue
        upstream = [c for c in chain if c.stage.name in cell.reads]
        stopped = [c for c in upstream if c.status in (FAILED, NOT_RUN)]
        if stopped:
            cell.status, cell.reason = NOT_RUN, f"{stopped[0].stage.name} did not finish"
        elif all(c.status == DONE for c in upstream):
            turn = _open(grid, cell, together)
            if turn:
                live.append(turn)
    return live


def _open(grid: Grid, cell: Cell, together: Together) -> Turn | None:
    """The stage opened as its script opens it, under the lock the chain holds."""
    out, err, name = io.StringIO(), io.StringIO(), cell.stage.name
    cell.status = RUNNING
    try:
        selected, manifest = stage_inputs(cell.stage, cell.settings)
        state = open_stage(cell.stage, cell.settings, selected, manifest, err)
        log = lambda message: print(f"[{name}] {message}", file=err, flush=True)
        clients = grid.clients_of(cell)
        run = open_run(name, state, clients, cell.settings, log, run_case, grid.sharing, cell.label, together)
        start(run)
    except Exception as e:
        cell.status, cell.reason = FAILED, reason_of(cell, e)
        return None
    finally:
        together.writer.close()
    return Turn(cell, run, out, err)


def _finish(grid: Grid, turn: Turn) -> None:
    """A stage that needs no more replies: its closing lines, and done, or failed with the line saying why."""
    code = turn.step(batch_summary, turn.out, turn.err)
    if code is STOPPED:
        return
    if code:
        turn.cell.status, turn.cell.reason = FAILED, why(turn.err.getvalue(), turn.cell.stage.name)
    else:
        _leave(grid, turn, DONE)


def _leave(grid: Grid, turn: Turn, status: str) -> None:
    """The stage leaves the run's cycles (done, in flight, or waiting for a rerun): its lines are said."""
    turn.cell.status = status
    grid.report(turn.cell, turn.err.getvalue() + turn.out.getvalue())  # its closing lines last


def _interrupted(live: list[Turn]) -> None:
    """The grid's first Ctrl-C: the batches in flight stay recorded, and a rerun collects them."""
    for turn in live:
        say_interrupted(turn.cell.stage.name, turn.err)
        turn.cell.status, turn.cell.reason = INTERRUPTED, "stopped by Ctrl-C"
