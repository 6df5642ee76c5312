"""Batch mode across the grid (`run_grid.py --batch`): every cell's requests for one endpoint (base URL, key and
model) go into one shared batch per cycle, one upload per endpoint per cycle rather than one per cell.

The (model, run) chains advance in lockstep. A cycle's batches are made once every chain still running has handed
over the requests of its stages (a chain runs its independent stages side by side: running/grid/chain.py); a chain
that waits for its batches or replays its cases is waited for. So the grid takes as many cycles as its longest chain
of dependent steps, not their sum over cells.

What a kill could lose is recorded first, in each cell's own ledger (runs/<run>/<model>/batches.json):
- its share of the batch (phase `prepared`, with the pool's token) before the upload;
- the shared input file before the create: the batch is created only once every cell's ledger holds it;
- the batch after the create.
So each ledger alone says what was submitted, as a single stage's does: `prepared` was never sent, and `uploaded` is
found by its input file in the provider's list (running/batch/api.py). The batch carries the pool's token and the
output root's hash in its metadata. Each cell takes only its own lines from the shared output (its custom ids start
with its run's incarnation: running/batch/collect.py skips the others), and the output file is downloaded once for
all of them.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from lexpilot.models.limits import Endpoint
from lexpilot.running.batch.api import (
    batch_file,
    batch_lines,
    checked,
    chunks,
    create,
    provider_call,
    root_hash,
)
from lexpilot.running.batch.chain import Drained
from lexpilot.running.batch.ledger import LedgerBatch, LedgerRequest
from lexpilot.running.batch.run import BatchRun
from lexpilot.text import counted

KEPT_DOWNLOADS = 8  # output files kept for the cells still to take their lines (all collect within one poll)


def chain_of(settings) -> tuple[str, str]:
    """The (evaluated model, run id) chain a cell's settings belong to: its place in the lockstep."""
    return settings.roles["eval"].model, settings.run_id


@dataclass
class BatchPool:
    """The grid's barrier and its pooled submissions; `live` holds the chains that may still hand requests."""

    live: set
    draining: threading.Event
    wait: float = 0.2
    # chain -> [(a stage's BatchRun, its requests)] for the next cycle
    handed: dict = field(default_factory=dict)
    generation: int = 0  # cycles made so far
    made_at: list = field(default_factory=list)  # when each was made (time.monotonic), for the time left
    errors: dict = field(default_factory=dict)  # chain -> why its share of the last cycle was not submitted
    uploads: int = 0  # input files sent (or written) so far, for the tests and the summary
    cond: threading.Condition = field(default_factory=threading.Condition)
    downloads: OrderedDict = field(default_factory=OrderedDict)
    download_lock: threading.Lock = field(default_factory=threading.Lock)

    def hand(self, chain, shares: list[tuple]) -> None:
        """A chain's requests of this cycle, per stage: [(its BatchRun, [(custom id, ledger entry, body)])]; returns
        once the cycle's batches are made, or raises why the chain's share was not (Drained: a Ctrl-C came first)."""
        with self.cond:
            if self.draining.is_set():
                raise Drained
            self.handed[chain] = shares
            generation = self.generation
            self._flush_if_ready()
            while self.generation == generation:
                if self.draining.is_set():
                    self.handed.pop(chain, None)
                    raise Drained
                self.cond.wait(self.wait)
            error = self.errors.pop(chain, None)
        if error:
            raise error

    def leave(self, chain) -> None:
        """A chain has ended: the others no longer wait for it."""
        with self.cond:
            self.live.discard(chain)
            self.handed.pop(chain, None)
            self._flush_if_ready()

    def _flush_if_ready(self) -> None:
        # under the condition's lock: the cells waiting in hand() hold their ledgers still meanwhile
        if not self.handed or self.draining.is_set() or not self.live <= set(self.handed):
            return
        shares, self.handed = self.handed, {}
        try:
            self.errors = self._submit(shares)
        finally:  # whatever happened, no cell waits for this cycle any longer
            self.generation += 1
            self.made_at.append(time.monotonic())
            self.cond.notify_all()

    def _submit(self, shares: dict) -> dict:
        """One batch per endpoint (split at the provider's limits) holding every cell's requests for it; the
        chains whose share could not be made, with why. Every cell's share of every batch is in its ledger, and
        its manifest notes the cycle, before the first upload: a kill from there on leaves each ledger saying what
        its cell handed (with --batch-files, a file is written before the ledgers, as a stage's own is)."""
        batches, errors = pooled_batches(shares), {}
        files = next(iter(shares.values()))[0][0].settings.batching.files
        for chain, stages in shares.items() if not files else ():
            try:
                handing = {id(run): run for run, _ in stages}
                own = [(r, entry) for _, entries in batches for r, entry in entries if id(r) in handing]
                save_all(own, first=True, save=False)
                for ledger in {id(run.ledger): run.ledger for run in handing.values()}.values():
                    ledger.save()  # the chain's stages share their run's ledger
                for run in handing.values():
                    run.note_submission()
            except Exception as e:  # its share stays unsent: its ledger says `prepared` at most
                errors[chain] = e
        for items, runs in batches:
            alive = [item for item in items if item[3] not in errors]  # a chain stopped stops here
            try:
                kept = [(r, entry) for r, entry in runs if chain_of(r.settings) not in errors]
                if alive:
                    (self._write_file if files else self._upload)(alive, kept)
            except Exception as e:  # a refusal (HarnessError), or a bug: each cell of the batch stops on it
                errors.update(dict.fromkeys({item[3] for item in alive}, e))
        return errors

    def _upload(self, items: list, runs: list) -> None:
        """Upload the shared file, record it in every cell's ledger, create the batch, record it."""
        first, role = runs[0][0], items[0][1].role
        client = first.caller.clients[role]
        lines = batch_lines([(cid, meta, body) for cid, meta, body, _, _ in items])
        uploaded = provider_call(
            first,
            "uploading a pooled batch file",
            lambda: checked(client.files.create(file=("lexpilot_batch.jsonl", lines), purpose="batch"), "id"),
        )
        self.uploads += 1
        save_all(runs, file_id=uploaded.id, phase="uploaded")
        made = create(first, client, uploaded.id, pool_tag(first, runs[0][1].pool, len(runs)))
        save_all(runs, batch_id=made.id, phase="created")
        for run, entry in runs:
            run.log(
                f"submitted batch {made.id} ({entry.role}, {counted(len(entry.requests), 'request')}; "
                f"pooled with {counted(len(runs) - 1, 'other cell')}, {counted(len(items), 'request')} in all)"
            )

    def _write_file(self, items: list, runs: list) -> None:
        """--batch-files: one input file per model and cycle for `vllm run-batch`, then each cell's share."""
        first = runs[0][0]
        model = first.settings.roles[items[0][1].role].model
        path, output = batch_file(
            first.settings.batching.files, model, [(cid, meta, body) for cid, meta, body, _, _ in items]
        )
        self.uploads += 1
        save_all(runs, first=True, phase="written", path=str(path), output=str(output))
        for run, _ in runs:
            run.log(f"wrote {path}: run  vllm run-batch -i {path} -o {output} --model {model}  (then rerun)")

    def downloaded(self, file_id: str, fetch):
        """A batch output or error file, downloaded once for every cell whose lines it holds."""
        with self.download_lock:
            if file_id not in self.downloads:
                self.downloads[file_id] = fetch()
                while len(self.downloads) > KEPT_DOWNLOADS:
                    self.downloads.popitem(last=False)
            return self.downloads[file_id]


def pooled_batches(shares: dict) -> list[tuple[list, list]]:
    """The cycle's batches: per endpoint, split at the provider's limits, (its requests as (custom id, ledger
    entry, body, chain, run), [(run, that cell's new ledger entry)])."""
    by_endpoint: dict[Endpoint, list] = {}
    for chain, stages in shares.items():
        for run, requests in stages:
            for cid, meta, body in requests:
                # one pooled batch per endpoint: one base URL and key, and one model (OpenAI's batch API takes one
                # model per input file)
                endpoint = Endpoint.of(run.settings.roles[meta.role or ""])
                by_endpoint.setdefault(endpoint, []).append((cid, meta, body, chain, run))
    batches = []
    for items in by_endpoint.values():
        for chunk in chunks(items):
            token = secrets.token_hex(8)
            entries: dict[int, tuple[BatchRun, LedgerBatch]] = {}
            for cid, meta, _, _, run in chunk:
                entry = entries.setdefault(id(run), (run, new_entry(meta, token)))[1]
                entry.requests[cid] = dataclasses.replace(meta)
            batches.append((chunk, list(entries.values())))
    return batches


def new_entry(meta: LedgerRequest, token: str) -> LedgerBatch:
    return LedgerBatch(meta.role or "", "prepared", {}, meta.max_tokens or 0, pool=token)


def save_all(runs: list, first: bool = False, save: bool = True, **changes: str) -> None:
    """Each stage's entry changed (`first`: added), then each ledger saved whole once (unless not `save`)."""
    ledgers = {}
    for run, entry in runs:
        if first:
            run.ledger.add(entry)
        entry.update(**changes)
        ledgers[id(run.ledger)] = run.ledger
    for ledger in ledgers.values() if save else ():
        ledger.save()


def pool_tag(run, token: str, cells: int) -> dict[str, str]:
    """A pooled batch's metadata: the pool's token, the output root's hash and how many cells it holds (no run,
    model or stage: it holds many)."""
    return {
        "lexpilot_pool": token,
        "lexpilot_root": root_hash(run.settings),
        "lexpilot_cells": str(cells),
    }
