"""The grid's one display: cells done, running, waiting and failed; per endpoint the calls in flight, calls/s, 429s
and any pause; spending so far against the quote, and the time left. A terminal redraws it in place; anything else
gets a line every 30 s. And the closing summary: each failed cell with its one-line reason, one line for cells that
stopped for one reason.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

from lexpilot.pricing import Budget, usage_cost
from lexpilot.running.batch.chain import DONE, FAILED, IN_FLIGHT, INTERRUPTED, NOT_RUN, RUNNING, WAITING
from lexpilot.running.grid.cells import (
    Grid,
    grouped_reasons,
)
from lexpilot.text import counted

EVERY = 30.0  # seconds between lines when the display is not a terminal
PROGRESS = " calls answered, "  # in a stage's own progress line, which the grid's display replaces
RETRIES = re.compile(r" (?P<count>\d+) retries, .*?(?: \| last retry: (?P<last>.*))?$")  # in that line


@dataclass
class Quote:
    """What the grid's quote said before it started: calls at most, and the expected and highest cost (None: no
    prices or no saved run)."""

    calls: int = 0
    expected: float | None = None
    high: float | None = None
    cycles: int = 0  # with --batch: the most cycles the slowest (model, run) takes

    def __add__(self, other: Quote) -> Quote:
        """Two parts' quotes as one (a worker's grows by each chain it claims); the prices are the grid's, so a
        cost is known for both parts or for neither."""

        def money(a: float | None, b: float | None) -> float | None:
            return None if a is None and b is None else (a or 0.0) + (b or 0.0)

        return Quote(
            self.calls + other.calls,
            money(self.expected, other.expected),
            money(self.high, other.high),
            max(self.cycles, other.cycles),
        )


def spent(grid: Grid, prices: dict | None) -> float | None:
    """The cost of every call answered so far, batched ones at the batch price (None without a price for every
    model)."""
    with grid.sharing.lock:
        answered = {model: dict(e) for model, e in grid.sharing.answered.by_role.items()}
    if not prices or any(model not in prices for model in answered):
        return None
    # each price class at its rates (a call sent in a peak window at the peak price), batched calls at the batch's
    return sum(usage_cost(prices[m], e) for m, e in answered.items())


def budget_text(budget: Budget | None) -> str:
    """'; --max-cost 25: 12.40 spent, 0.85 reserved, 11.75 left (the grid's, every process's)', or '' without one:
    the ledger's, which counts every shard, rerun and stage script that shares it."""
    if budget is None:
        return ""
    totals = budget.ledger.totals()
    left = budget.amount - totals.spent - totals.reserved
    return (
        f"; --max-cost {budget.amount:g}: {totals.spent:.2f} spent, {totals.reserved:.2f} reserved, {left:.2f} left "
        "(every process's)"
    )


def answered_calls(grid: Grid) -> tuple[int, int]:
    """(calls answered, as the quote counts calls: each once; replies paid for besides: retries)."""
    with grid.sharing.lock:
        paid = sum(e["calls"] for e in grid.sharing.answered.by_role.values())
        return paid - grid.sharing.retried, grid.sharing.retried


def limits_text(limits, share: str) -> str:
    """', limits concurrency 2, rpm 450 (shard 1/2's 1/2 of the grid's)' for an endpoint with limits, else ''."""
    named = [f"{name} {getattr(limits, name):g}" for name in limits.NAMES if getattr(limits, name)]
    return f", limits {', '.join(named)}" + (f" ({share})" if share else "") if named else ""


@dataclass
class Display:
    grid: Grid
    quote: Quote
    prices: dict | None
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    start: float = field(default_factory=time.monotonic)
    drawn_lines: int = 0
    last: float = 0.0
    # limiter name -> (time, calls the endpoint had answered then), for calls/s: calls answered in a window, not slots
    # taken (a call refused by the budget, or never connected, takes one and sends nothing)
    answers_before: dict = field(default_factory=dict)
    share: str = ""  # whose share of the grid's limits this process holds ("shard 1/2's 1/2"), when not all
    reasons_said: int = (
        0  # the grid's reasons for failed cases said so far (each new one is said as it comes)
    )
    cells_said: int = 0  # the finished cells whose closing lines are said so far
    # what the head line says of a shared store out of reach ("": nothing), e.g. "; Redis at h:p out of reach for 12s"
    away: Callable[[], str] = lambda: ""

    def __post_init__(self):
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last = self.start
        self.cells_said = len(self.grid.finished_lines)  # a display says the cells that finish while it shows
        self.lock = threading.Lock()
        self.answers_before = {
            lim.name: (self.start, lim.answers) for lim in self.grid.sharing.endpoints.all()
        }

    def note(self, line: str) -> None:
        """A line of its own, above the display (which is drawn again below it)."""
        with self.lock:
            if self.tty and self.drawn_lines:
                self.stream.write(f"\033[{self.drawn_lines}F\033[J")
                self.drawn_lines = 0
            self.stream.write(line + "\n")
            self.stream.flush()

    def cell_lines(self, cell, text: str) -> None:
        """A finished cell's own closing lines and notes, each marked with the cell. Its progress lines are left
        out, but not the retries the last one counted (an output asked again, a transient error), which a stage
        run by hand shows there."""
        lines = [line for line in text.splitlines() if line.strip()]
        retries = [RETRIES.search(line) for line in lines if PROGRESS in line][-1:]
        if retries and retries[0] and retries[0]["count"] != "0":
            lines.append(
                f"{counted(int(retries[0]['count']), 'retry', 'retries')}"
                + (f", the last: {retries[0]['last']}" if retries[0]["last"] else "")
            )
        for line in lines:
            if PROGRESS not in line:
                self.note(f"[{cell.label}] {line.removeprefix(f'[{cell.stage.name}] ')}")

    def lines(self) -> list[str]:
        now, counts = time.monotonic(), self.grid.counts()
        with self.grid.lock:
            failed_cases = self.grid.reasons.cases
        (calls, retries), elapsed = answered_calls(self.grid), now - self.start
        left = max(0, self.quote.calls - calls)
        # nothing left to run here: every cell ended, or the rest wait for a rerun after a Ctrl-C
        over = not counts[RUNNING] and (not counts[WAITING] or self.grid.sharing.draining.is_set())
        eta = "0s" if over else self.time_left(elapsed, calls, left)
        money = spent(self.grid, self.prices)
        spending = (
            ""
            if money is None
            else f"; spent {'here ' if self.grid.sharing.budget else ''}{money:.2f}"
            + (f" of the quote's {self.quote.high:.2f} at most" if self.quote.high is not None else "")
            + (f", {self.quote.expected:.2f} expected" if self.quote.expected is not None else "")
        ) + budget_text(self.grid.sharing.budget)
        head = (
            f"[grid] cells: {counts[DONE]} done, {counts[RUNNING]} running, {counts[WAITING]} waiting, "
            f"{counts[FAILED] + counts[NOT_RUN]} failed or held back"
            + (f" ({counted(failed_cases, 'case')} failed)" if failed_cases else "")
            + (
                f", {counts[INTERRUPTED]} stopped by {self.grid.sharing.draining.by.name}"
                if counts[INTERRUPTED]
                else ""
            )
            + (f", {counts[IN_FLIGHT]} with batches in flight" if counts[IN_FLIGHT] else "")
            + f"; {calls} of at most {self.quote.calls} calls answered (retries not counted, as the quote counts"
            + (f"; {counted(retries, 'retry', 'retries')} paid besides)" if retries else ")")
            + f"{spending}{self.away()}; elapsed {elapsed:.0f}s, remaining {eta}"
        )
        pool = self.grid.sharing.batches
        batches = (
            [
                f"  batches: {counted(pool.generation, 'cycle')} made, {counted(pool.uploads, 'batch', 'batches')}; "
                f"{len(pool.handed)} of {counted(len(pool.live), 'chain')} ready for the next"
            ]
            if pool is not None
            else []
        )
        held = dict(self.grid.sharing.holds.status())
        return [head, *batches] + [
            self.endpoint_line(
                lim, now, next((h for m, h in held.items() if lim.name.startswith(f"{m} at ")), "")
            )
            for lim in self.grid.sharing.endpoints.all()
        ]

    def time_left(self, elapsed: float, calls: int, left: int) -> str:
        """From the calls left at the pace so far; in batch mode from the cycles left at the observed length of a
        cycle (calls come in bursts a cycle apart, so a pace of calls would grow as each cycle waits)."""
        pool = self.grid.sharing.batches
        if pool is not None and self.quote.cycles:
            return batch_time_left(pool.made_at, self.quote.cycles, time.monotonic())
        return f"~{elapsed / calls * left:.0f}s" if calls else "?"

    def endpoint_line(self, limiter, now: float, held: str = "") -> str:
        """One endpoint's line; `held`: what its hold for off-peak says while it holds calls."""
        then, before = self.answers_before.get(limiter.name, (self.start, 0))
        rate = (limiter.answers - before) / max(now - then, 1.0)  # not a burst's first milliseconds as a rate
        if now - then >= 5:  # calls/s over the last few seconds, not since the start
            self.answers_before[limiter.name] = (now, limiter.answers)
        pause = limiter.resume_at - now
        return (
            f"  {limiter.name}: {limiter.in_flight} in flight"
            + (f" ({limiter.server_waits} waiting for the server)" if limiter.server_waits else "")
            + f", {rate:.1f} calls/s, {counted(limiter.rate_limited, '429')}"
            + limits_text(limiter.limits, self.share)
            + (f", paused {pause:.0f}s" if pause > 0 else "")
            + (f", {held}" if held else "")
            + (f", stopped: {limiter.failure[:120]}" if limiter.failure else "")
        )

    def draw(self, final: bool = False) -> None:
        self.new_failures()
        self.finished_cells()
        with self.lock:
            self._draw(final)

    def finished_cells(self) -> None:
        """The closing lines of the cells that finished since the last draw, each said once."""
        with self.grid.lock:
            finished = self.grid.finished_lines[self.cells_said :]
        for cell, text in finished:
            self.cell_lines(cell, text)
        self.cells_said += len(finished)

    def new_failures(self) -> None:
        """The first case to fail for each new reason, said as it happens; the others are counted in the head line
        and said per reason in the summary."""
        with self.grid.lock:
            reasons = list(self.grid.reasons.by_key.values())
        for reason in reasons[self.reasons_said :]:
            self.note(
                reason.first + ("; later cases failing for this reason are counted" if not self.tty else "")
            )
        self.reasons_said = len(reasons)

    def _draw(self, final: bool) -> None:
        now = time.monotonic()
        if self.tty:
            if not final and now - self.last < 0.5:
                return
            lines = self.lines()
            up = f"\033[{self.drawn_lines}F" if self.drawn_lines else ""
            self.stream.write(up + "".join(f"\033[K{line[:200]}\n" for line in lines))
            self.drawn_lines = len(lines)
        elif final or now - self.last >= EVERY:
            self.stream.write("\n".join(self.lines()) + "\n")
        else:
            return
        self.stream.flush()
        self.last = now


def batch_time_left(made_at: list[float], cycles: int, now: float) -> str:
    """The time a batch grid has left: a cycle lasts what the cycles so far took, one made to the next; the last
    one made is answered that long after it was made, then each not yet made takes as long, the last one's answer
    included. Never less than the cycles not yet made: a slow cycle does not count down to nothing."""
    if len(made_at) < 2:
        return "?"  # no cycle has been answered yet: nothing observed
    cycle = (made_at[-1] - made_at[0]) / (len(made_at) - 1)
    after = max(0, cycles - len(made_at))
    return f"~{max(made_at[-1] + cycle * (after + 1) - now, cycle * after):.0f}s"


def endpoint_lines(grid: Grid) -> list[str]:
    """What the closing lines say of each endpoint: its flex requests that found no room (and that its window was
    not narrowed for them), and the share of its rpm limit used while calls waited for it."""
    lines = []
    for limiter in grid.sharing.endpoints.all():
        if limiter.unavailable:
            lines.append(
                f"[grid] {limiter.name}: {counted(limiter.unavailable, 'flex request')} found no room (resource "
                f"unavailable), each waited out and asked again; {counted(limiter.rate_limited, 'rate limit')} (429), "
                f"window {limiter.limit:g} of {limiter.max_limit:g}"
            )
        busy = limiter.busy()
        if busy is not None:
            lines.append(
                f"[grid] {limiter.name}: {limiter.sent} calls; {100 * busy:.0f}% of its rpm limit used"
                + (" by every process sharing it" if limiter.backlog_shared is not None else "")
                + " while calls waited for it"
            )
    return lines


def summary(grid: Grid, interrupted: bool) -> list[str]:
    """The closing lines: the counts, then each failed cell with its reason (cells that stopped for one reason on
    one line), and what to do."""
    counts = grid.counts()
    lines = [
        f"[grid] {counted(len(grid.cells), 'cell')}: {counts[DONE]} done, {counts[FAILED]} failed, "
        f"{counts[NOT_RUN]} not run (an upstream stage did not finish)"
        + (
            f", {counts[WAITING] + counts[INTERRUPTED]} stopped before they ended"
            if counts[WAITING] + counts[INTERRUPTED]
            else ""
        )
    ]
    with grid.lock:
        lines += grid.reasons.lines()
        cases_said, case_advice = grid.reasons.labels(), grid.reasons.advice()
    stopped = grouped_reasons(grid.cells, cases_said)
    for reason, cells in stopped:
        if len(cells) == 1:
            lines.append(f"[grid] {cells[0].label}: {reason}")
        else:
            shown = ", ".join(c.label for c in cells[:4]) + (
                f" and {len(cells) - 4} more" if len(cells) > 4 else ""
            )
            lines.append(f"[grid] {len(cells)} cells {reason} ({shown})")
    pool = grid.sharing.batches
    if pool is not None:
        lines.append(
            f"[grid] batch mode: {counted(pool.generation, 'cycle')}, {counted(pool.uploads, 'batch', 'batches')} "
            "(each cycle, one batch per endpoint holding every cell's requests for it)"
        )
    if counts[IN_FLIGHT]:
        lines.append(
            f"[grid] {counted(counts[IN_FLIGHT], 'cell')} with batches in flight: rerun the same command to "
            "collect them and go on"
        )
    lines += endpoint_lines(grid)
    if grid.sharing.budget:
        lines.append(f"[grid] {budget_text(grid.sharing.budget).removeprefix('; ')}")
    if interrupted:
        lines.append(
            f"[grid] {grid.sharing.draining.by.said}: every answered call is saved or journalled; rerun the same "
            "command to resume"
        )
    elif case_advice:
        lines.append(f"[grid] {case_advice}")
    elif counts[FAILED] or counts[NOT_RUN]:
        lines.append(
            "[grid] fix what the lines above name, then rerun the same command; saved cases are kept"
        )
    return lines
