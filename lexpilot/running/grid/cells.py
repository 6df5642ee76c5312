"""The grid in one process (`run_grid.py`): every (evaluated model, run, stage) cell. The stages of one (model, run)
run one after another, in the order their reads give (they share the run's lock, as the README's loop runs them; in
batch mode side by side, running/grid/chain.py);
every (model, run) chain runs at once, and all of them share each endpoint's limiter and one budget. A cell runs its
stage exactly as the stage's script does (`run_stage`), so it writes the same records, manifests and journals.

A cell that stops holds back only the cells of its chain that read it; an endpoint that refuses the settings (a
bad key, an unknown model) stops every cell that uses it with one message; the first Ctrl-C lets no new call start,
lets the calls in flight end and be journalled, then leaves; rerunning the same command resumes.
"""

from __future__ import annotations

import errno
import io
import re
import threading
from dataclasses import dataclass, field
from typing import AbstractSet, Callable

from lexpilot.errors import CaseFailure, HarnessError
from lexpilot.models.sharing import Sharing
from lexpilot.protocols.steps import Stage
from lexpilot.running.batch.chain import (
    DONE,
    FAILED,
    IN_FLIGHT,
    INTERRUPTED,
    NOT_RUN,
    RUNNING,
    STATUSES,
    WAITING,
    Link,
)
from lexpilot.running.batch.run import open_batches
from lexpilot.running.failures import Reasons
from lexpilot.running.grid.pool import chain_of
from lexpilot.running.stage import run_stage
from lexpilot.settings import Settings


@dataclass
class Cell:
    """One stage of one (evaluated model, run), and how it went."""

    model: str
    run_id: str
    stage: Stage
    settings: Settings
    reads: tuple[str, ...] = ()  # the stages of its chain whose records it reads
    status: str = WAITING
    reason: str = ""  # why it failed or did not run, in one line

    @property
    def label(self) -> str:
        return f"{self.model} {self.run_id} {self.stage.name}"


def reads(stage: Stage, earlier: Stage) -> bool:
    """Whether `stage` reads records `earlier` writes (its upstream record kinds)."""
    written = {step.kind.name for step in earlier.steps}
    return any(kind.name in written for kind in stage.upstream)


def in_order(stages: list[Stage]) -> list[Stage]:
    """The stages with each after every chosen stage it reads, otherwise in the order given."""
    left, ordered = list(stages), []
    while left:
        ready = next(s for s in left if not any(reads(s, other) for other in left if other is not s))
        ordered.append(ready)
        left.remove(ready)
    return ordered


def plan(
    stages: list[Stage], settings_of: Callable, models: list[str], run_ids: list[str]
) -> list[list[Cell]]:
    """The grid's chains: per (model, run), its cells in dependency order."""
    ordered = in_order(stages)
    return [
        [
            Cell(
                model,
                run_id,
                stage,
                settings_of(stage, model, run_id),
                tuple(e.name for e in ordered[:i] if reads(stage, e)),
            )
            for i, stage in enumerate(ordered)
        ]
        for model in models
        for run_id in run_ids
    ]


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), 1 <= K <= N; a HarnessError otherwise."""
    k, _, n = text.partition("/")
    try:
        shard = int(k), int(n)
        if not 1 <= shard[0] <= shard[1]:
            raise ValueError
    except ValueError:
        raise HarnessError(f"--shard {text[:40]!r}: use K/N with 1 <= K <= N, e.g. --shard 2/4") from None
    return shard


def shard_of(chains: list[list[Cell]], shard: tuple[int, int] | None) -> list[list[Cell]]:
    """The chains of shard K of N: whole (model, run) chains, dealt in turn in the order of (model id, run id), so
    every machine given the same grid splits it the same way, whatever order --models names them in."""
    if shard is None:
        return chains
    k, n = shard
    ordered = sorted(chains, key=lambda chain: (chain[0].model, chain[0].run_id))
    return [chain for i, chain in enumerate(ordered) if i % n == k - 1]


@dataclass
class Grid:
    """The chains, what their calls share, and the clients per cell: the one test seam (None: built from the
    settings; tests pass in-memory ones)."""

    chains: list[list[Cell]]
    sharing: Sharing
    clients_of: Callable[[Cell], dict | None] = lambda cell: None
    reasons: Reasons = field(default_factory=Reasons)  # every failed case, by stage and reason, as they fail
    # the closing lines of every cell that finished, in order: the display says each once
    finished_lines: list[tuple[Cell, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self):
        self.sharing.on_case_failed = self.case_failed
        self.by_label = {cell.label: cell for cell in self.cells}

    def case_failed(self, label: str, failure: CaseFailure) -> None:
        """A case of the cell `label` failed (said by its stage as it happens): counted by reason."""
        cell = self.by_label[label]
        with self.lock:
            self.reasons.add(cell.stage.name, cell.model, label, failure)

    def said(self, cell: Cell, lines: str) -> None:
        """A cell that finished: its own closing lines, for the display."""
        with self.lock:
            self.finished_lines.append((cell, lines))

    def add(self, chain: list[Cell]) -> None:
        """A chain this process took on as it runs (a worker's claim: run_grid.py --workers)."""
        with self.lock:
            self.chains.append(chain)
            self.by_label |= {cell.label: cell for cell in chain}

    @property
    def cells(self) -> list[Cell]:
        return [cell for chain in self.chains for cell in chain]

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for cell in self.cells:
            counts[cell.status] += 1
        return counts


def run_in_order(grid: Grid, chain: list[Cell]) -> None:
    """A (model, run)'s cells one after another; a cell whose upstream did not finish is not run."""
    for cell in chain:
        if grid.sharing.draining.is_set():
            return  # the rest stay waiting: a rerun starts them
        held = [c for c in chain if c.stage.name in cell.reads and c.status != DONE]
        if any(c.status == IN_FLIGHT for c in held):
            return  # the rest wait for the batches in flight: a rerun collects them, then starts these
        if held:
            cell.status, cell.reason = NOT_RUN, f"{held[0].stage.name} did not finish"
            continue
        cell.status = RUNNING
        code, reason = run_cell(grid, cell)
        if code == 0 and batches_in_flight(cell.settings):  # --batch-detach, --batch-files
            cell.status = IN_FLIGHT
            return  # the chain's later stages would only wait for its run's ledger: the rerun goes on
        elif code == 0:  # every case saved, a Ctrl-C or not
            cell.status = DONE
        elif grid.sharing.draining.is_set() and code == grid.sharing.draining.by.status:
            cell.status, cell.reason = INTERRUPTED, f"stopped by {grid.sharing.draining.by.name}"
        else:
            cell.status, cell.reason = FAILED, reason


def batches_in_flight(settings: Settings) -> bool:
    """Whether a batch-mode cell left batches in flight, as --batch-detach and --batch-files do."""
    return settings.batching.enabled and bool(open_batches(settings))


def run_cell(grid: Grid, cell: Cell) -> tuple[int, str]:
    """The stage as its script runs it, its lines kept apart; (exit status, the line saying why it stopped)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        code = run_stage(cell.stage, cell.settings, grid.clients_of(cell), out, err, grid.sharing, cell.label)
        if code == 0:  # a cell that stopped is said once in the summary, with every cell that stopped alike
            grid.said(cell, err.getvalue() + out.getvalue())  # its closing lines last
    except Exception as e:  # a bug in one cell must not stop the others
        return 2, reason_of(cell, e)
    return code, why(err.getvalue(), cell.stage.name) if code else ""


def reason_of(cell: Link, e: Exception) -> str:
    """The line saying why a cell stopped on an exception: a refusal's own line, the disk's, or a bug's."""
    if isinstance(e, HarnessError):
        return cell.settings.redact(str(e))
    if isinstance(e, OSError):
        what = "no space left on device" if e.errno == errno.ENOSPC else (e.strerror or str(e)).lower()
        return f"{what}: {e.filename or cell.settings.output_root}; nothing was lost"
    return cell.settings.redact(f"internal error {type(e).__name__}: {e}")


def why(err: str, name: str) -> str:
    """The line of a stage's messages that says why it stopped, without its [stage] prefix."""
    lines = [line.removeprefix(f"[{name}] ") for line in err.splitlines() if line.startswith(f"[{name}] ")]
    for marker in ("stopped: ", "error: "):
        for line in lines:
            if line.startswith(marker):
                return line.removeprefix(marker)
    failed = [line for line in lines if " failed (" in line]
    return (failed or lines or ["stopped"])[-1]


def start_chains(grid: Grid, run_one: Callable[[Grid, list[Cell]], None]) -> list[threading.Event]:
    """Every chain at once, each on its own thread, run by `run_one` (`run_in_order`, or in batch mode the batch cycle
    loop's `run_batch_chain`); an event per chain, set when it has ended (however it ended)."""
    return [start_chain(grid, run_one, chain) for chain in grid.chains]


def start_chain(
    grid: Grid, run_one: Callable[[Grid, list[Cell]], None], chain: list[Cell]
) -> threading.Event:
    """One chain on its own thread; its event is set when it has ended (however it ended)."""
    done = threading.Event()

    def run() -> None:
        try:
            run_one(grid, chain)
        finally:
            if grid.sharing.batches is not None:  # the other chains' batches no longer wait for this one
                grid.sharing.batches.leave(chain_of(chain[0].settings))
            grid.sharing.close_chain(chain_of(chain[0].settings))
            done.set()

    name = f"chain-{chain[0].model}-{chain[0].run_id}"
    threading.Thread(target=run, name=name, daemon=True).start()
    return done


def wait_for(chains: list[threading.Event], tick: Callable[[], None], wait: float = 0.2) -> None:
    """Until every chain has ended (each sets its event as it ends), `tick` (the display) meanwhile. A
    KeyboardInterrupt reaches the caller (signals go to the main thread), which drains the grid and waits again, or
    leaves. An event the chain sets itself, not Thread.join and is_alive: join waits on a lock that a
    KeyboardInterrupt interrupts, and in about one of seven full suites under load the drain ended with a cell
    shown running."""
    for ended in chains:
        while not ended.wait(wait):
            tick()
        tick()


def grouped_reasons(
    cells: list[Cell], cases_said: AbstractSet[str] = frozenset()
) -> list[tuple[str, list[Cell]]]:
    """Failed or held-back cells by reason: an endpoint's refusal met by every cell is one entry. Cells in
    `cases_said` failed because some of their cases did, which the grid says per reason instead."""
    reasons: dict[str, tuple[str, list[Cell]]] = {}
    for cell in cells:
        if cell.status in (FAILED, NOT_RUN) and not (cell.status == FAILED and cell.label in cases_said):
            said = f"{cell.status}: {cell.reason}"
            # one reason with other amounts (the budget's spent and left at each cell's stop) is one reason
            reasons.setdefault(re.sub(r"\d+\.\d+", "#", said), (said, []))[1].append(cell)
    return list(reasons.values())
