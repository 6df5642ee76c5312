"""--batch-status: what is in flight for a run, read without waiting: the ledger's open batches with their status at
the provider, and the run's batches the provider lists that the ledger does not know."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from lexpilot.models.calls import ModelCaller
from lexpilot.running.batch.api import FINISHED, listed, listing, provider_call, untagged
from lexpilot.running.batch.ledger import Ledger
from lexpilot.running.batch.run import BatchRun, QuietProgress, know_itself
from lexpilot.running.context import RunContext
from lexpilot.running.state import StageState
from lexpilot.storage.checkpoints import CheckpointWriter
from lexpilot.storage.manifest import read_manifest
from lexpilot.text import counted


def status(context: RunContext, clients: dict | None, out: TextIO = sys.stdout) -> int:
    """--batch-status: what is in flight for the run (the ledger's batches, and the run's batches the provider
    lists that the ledger does not know), without waiting."""
    settings = context.settings
    say = lambda m: print(m, file=out)
    run = BatchRun(
        context,
        StageState(
            context, [], {}, {}
        ),  # nothing of the stage is read: only the ledger and the provider's list
        Ledger(context.paths.ledger),
        CheckpointWriter(),
        ModelCaller(settings, QuietProgress(say), threading.Event(), clients),
        {},
        say,
    )
    path = context.paths.manifest
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
        line = f"{b.role}: {b.batch_id or '(not created)'}, {len(b.requests)} requests, phase {b.phase}"
        if b.batch_id:
            remote = provider_call(
                run,
                f"batch {b.batch_id}",
                lambda: run.caller.clients[b.role].batches.retrieve(b.batch_id),
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
