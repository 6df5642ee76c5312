"""The grid's side of the one batch cycle loop (running/batch/chain.py) in `run_grid.py --batch`: each (model, run)
chain of cells runs through it as a stage script's stage does. The grid keeps each cell's lines apart, tells a cell
that stopped in one line while the chain's other stages go on, and hands every stage's requests of a cycle to the
pool (running/grid/pool.py), which puts every chain's requests for one endpoint into one batch.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TextIO

from lexpilot.errors import Aborted, Draining
from lexpilot.models.sharing import Sharing
from lexpilot.running.batch.chain import DONE, FAILED, Drained, Handed, Link, Turn, run_chain
from lexpilot.running.context import RunContext
from lexpilot.running.grid.cells import Cell, Grid, reason_of, why
from lexpilot.running.grid.pool import chain_of


@dataclass
class GridHost:
    """What the loop asks of the grid for one chain."""

    grid: Grid

    @property
    def draining(self) -> Draining:
        return self.grid.sharing.draining

    @property
    def sharing(self) -> Sharing:
        return self.grid.sharing

    def context(self, link: Link) -> RunContext:
        return RunContext.of(link.stage, link.settings)

    def clients(self, link: Link) -> dict | None:
        return self.grid.clients_of(link) if isinstance(link, Cell) else None

    def streams(self, link: Link) -> tuple[io.StringIO, io.StringIO]:
        return io.StringIO(), io.StringIO()  # the display shows a cell's lines when it ends

    def stopped(self, link: Link, error: Exception) -> None:
        link.status, link.reason = FAILED, reason_of(link, error)  # this stage stops, the others go on

    def hand(self, handed: list[Handed]) -> None:
        shares = [
            (turn.run, [r for requests in groups.values() for r in requests]) for turn, _, groups in handed
        ]
        if shares:
            self.held(shares)
            self.grid.sharing.batches.hand(chain_of(shares[0][0].settings), shares)

    def held(self, shares: list) -> None:
        """A chain whose cycle asks a model held for off-peak hands it over once that model's peak window has
        closed: the pooled cycle is made when every chain has handed its share, so it waits with it."""
        models = {
            run.settings.roles[entry.role].model for run, requests in shares for _, entry, _ in requests
        }
        for hold in filter(None, map(self.sharing.holds.get, sorted(models))):
            try:
                hold.wait(self.draining.is_set)
            except Aborted:
                raise Drained from None

    def finished(self, turn: Turn, code: int) -> None:
        if code:
            turn.link.status, turn.link.reason = FAILED, why(_said(turn.err), turn.link.stage.name)
        else:
            self.left(turn, DONE)

    def left(self, turn: Turn, status: str) -> None:
        turn.link.status = status
        if isinstance(turn.link, Cell):
            self.grid.said(turn.link, _said(turn.err) + _said(turn.out))  # its closing lines last


def _said(stream: TextIO) -> str:
    """What a stage said on one of the streams the grid gave it (`GridHost.streams`)."""
    return stream.getvalue() if isinstance(stream, io.StringIO) else ""


def run_batch_chain(grid: Grid, chain: list[Cell]) -> None:
    """A (model, run)'s stages side by side, cycle by cycle, their requests pooled with every other chain's."""
    run_chain(GridHost(grid), list(chain))
