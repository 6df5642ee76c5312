"""Batch mode (--batch): the protocol advances in cycles through a provider's batch API (OpenAI's files and
batches endpoints, which others copy), at about half the price, and a batch is a checkpoint.

Each cycle replays every pending case's protocol from its saved records and call journal until the case needs
a reply it does not have; those requests (one per case and dialogue) go into one batch per endpoint (base URL
and model). The batch, its input file and every custom id are recorded in runs/<run>/<model>/batches.json (the
ledger) before anything waits, so a killed process, Ctrl-C or --batch-detach leaves them in flight: the next
invocation re-attaches to them (from the ledger, or from the provider's list of the run's batches when the ledger
is lost) and never submits a request twice. Collected replies are validated exactly as synchronous ones and go into the
call journal, from which the next cycle's replay reads them; the records are the same as a synchronous run's,
with `batched_calls` in their usage. Roles left out of --batch-roles are asked directly within the cycles, each
reply once. This module holds the steps of a cycle (start, collect, gather, request, send, sum up), which the one
cycle loop (chain.py) takes each stage through; the replay is replay.py's, the invocation's state run.py's, the
provider's side api.py's, collecting collect.py's.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Callable

from lexpilot.benchmark.prompts import load_prompts
from lexpilot.errors import BY_CTRL_C, FatalError, Stop
from lexpilot.models.calls import ModelCaller, default_token_fields, request_body
from lexpilot.models.limits import Endpoint
from lexpilot.models.served import ServedModelChanged
from lexpilot.models.sharing import Sharing
from lexpilot.running.batch.api import (
    adopt,
    chunks,
    provider_call,
    request_digest,
    submit,
    write_batch_file,
)
from lexpilot.running.batch.collect import collect
from lexpilot.running.batch.ledger import LedgerRequest
from lexpilot.running.batch.replay import read_journal, remaining_depth, replay
from lexpilot.running.batch.run import (
    BatchRun,
    QuietProgress,
    Together,
    know_itself,
)
from lexpilot.running.context import RunContext
from lexpilot.running.failures import failure_lines
from lexpilot.running.state import StageState, keep_served, seed_served
from lexpilot.storage.checkpoints import (
    CallJournal,
)
from lexpilot.storage.manifest_notes import record_transport
from lexpilot.text import counted


def open_run(
    context: RunContext,
    state: StageState,
    clients: dict | None,
    log: Callable[[str], None],
    together: Together,
    sharing: Sharing | None = None,
    cell: str | None = None,
) -> BatchRun:
    """A stage's batch-mode invocation, knowing its run's incarnation. `together`: what it shares with the other
    stages of its run open side by side (running/batch/chain.py). In the grid (`sharing`), the calls of roles left
    synchronous share its limits and budget, as `cell`."""
    together.states.append(state)
    caller = ModelCaller(
        context.settings,
        QuietProgress(log),
        threading.Event(),
        clients,
        state.manifest.token_fields if state.manifest else None,
        sharing,
        cell,
    )
    run = BatchRun(
        context,
        state,
        together.ledger,
        together.writer,
        caller,
        load_prompts(),
        log,
        pool=sharing.batches if sharing else None,
        reserved=together.reserved,
        together=together,
    )
    run.manifest = know_itself(run, state.manifest)
    seed_served(state, caller)
    return run


def say_interrupted(name: str, err, by: Stop = BY_CTRL_C) -> None:
    print(
        f"\n[{name}] {by.said}: the batches in flight stay recorded; rerun the same command to collect them",
        file=err,
        flush=True,
    )


def start(run: BatchRun) -> None:
    """Before the first cycle: the endpoints checked, and the replies the journal holds said before."""
    run.started, run.adopted = time.monotonic(), bool(run.settings.batching.files)  # vLLM files: no list
    if not run.settings.batching.files:
        check_endpoints(run)
    # what the journal holds before this invocation collects anything: its invalid outputs were said already
    pending = run.state.pending()
    run.opened_pending = bool(pending)
    journal = read_journal(run, pending)
    run.said_before.update(key[:2] for key, queue in journal.replies.items() for _ in queue)


def collect_own(run: BatchRun) -> bool:
    """The stage's finished batches collected into the journal; whether any of its batches is still in flight."""
    try:
        waiting, _ = collect(run, run.caller.clients, run.journal_path, run.writer)
    finally:
        run.writer.close()  # another stage of the run may rewrite the journal next
        keep_served_in_run(run)
    return waiting


def keep_served_in_run(run: BatchRun) -> None:
    """The served counts of the replies collected (and of the roles asked directly) into the run's manifest, which
    every stage of the run open beside this one holds from now on."""
    state = run.state
    keep_served(state, run.caller)
    run.manifest = state.manifest


def left_in_flight(run: BatchRun) -> bool:
    """With batches in flight: whether the invocation leaves them (--batch-detach, --batch-files), said once; else
    it waits for them (refused when no wait can end)."""
    settings = run.settings
    if settings.batching.detach or settings.batching.files:
        run.log(
            "batches in flight; rerun the same command to collect them"
            + (
                " once their output files are in --batch-files"
                if settings.batching.files
                else ""
                if run.pool is not None
                else " (--batch-status shows them)"
            )
        )
        return True
    refuse_unanswered_files(run)
    return False


def gather(run: BatchRun) -> tuple[list, list] | None:
    """Every pending case replayed until it needs a reply: (the pending cases, their needs); no needs: the stage is
    done. None: batches of the run the ledger did not know were re-attached, to be collected first."""
    settings = run.settings
    pending = [c for c in run.state.pending() if c.number not in run.failed]
    needs = replay(run, pending)
    run.writer.close()
    if not run.adopted:  # the provider may hold batches of this run the ledger does not know: never ask twice
        run.adopted = True
        pending_requests: dict[str, list] = {}
        for n in needs:
            pending_requests.setdefault(_digest(run, n), []).append(
                (n[0], n[1], n[3], n[2].role, settings.roles[n[2].role].max_tokens)
            )
        if adopt(run, run.batch_clients(), pending_requests):
            return None
    return pending, needs


def cycle_requests(run: BatchRun, needs: list) -> dict:
    """The stage's next cycle, counted, and its requests by batch."""
    run.cycle = run.ledger.next_cycle(run.name)
    return _requests(run, needs)


def say_cycle(run: BatchRun, pending: list, groups: dict) -> None:
    log = run.log
    log(
        f"cycle {run.cycle}: {counted(sum(len(r) for r in groups.values()), 'request')} in "
        f"{counted(len(groups), 'batch', 'batches')}; {counted(len(pending), 'case')} pending, at most "
        f"{counted(remaining_depth(run, pending), 'more call')} in the longest; "
        f"elapsed {time.monotonic() - run.started:.0f}s" + _spending(run)
    )


def refuse_unanswered_files(run: BatchRun) -> None:
    """Files written for `vllm run-batch` (--batch-files) are answered only by their output files: without
    --batch-files, waiting for them would never end."""
    written = [b for b in run.ledger.open_batches() if b.phase == "written"]
    if written:
        raise FatalError(
            f"{written[0].path}: written for vllm run-batch, and its output {written[0].output} is not there "
            f"yet ({counted(len(written), 'file')} in all); run the command docs/batch.md gives, then rerun with "
            f"--batch-files {Path(written[0].path or '').parent}"
        )


def _digest(run: BatchRun, need: tuple) -> str:
    role = run.settings.roles[need[2].role]
    return request_digest(request_body(role, need[2].prompt, run.caller.token_fields[need[2].role]))


def _spending(run: BatchRun) -> str:
    budget = run.caller.budget
    if not budget:
        return ""
    totals = budget.ledger.totals()  # one read of the spending every process shares, not one per figure
    return (
        f"; --max-cost {budget.amount:g}: {totals.spent:.4f} spent, {totals.reserved:.4f} reserved for the "
        f"batches submitted, {budget.amount - totals.spent - totals.reserved:.4f} left"
    )


def custom_id(incarnation: str, number: str, step: str, key: str, occurrence: int) -> str:
    """A request's id in a batch: the run's incarnation, then what it asks for which case (a batch is adopted only
    when every custom id in it starts with this run's incarnation)."""
    return (
        f"{incarnation}-" + hashlib.sha256(f"{number}\0{step}\0{key}\0{occurrence}".encode()).hexdigest()[:32]
    )


def _requests(run: BatchRun, needs: list[tuple]) -> dict:
    """The cycle's requests by batch: one per base URL and model (roles of one model share it), or per model for
    vLLM files; a request already in an open batch (the same case, step and prompt) is never asked twice."""
    settings, caller = run.settings, run.caller
    in_flight = run.ledger.in_flight_keys()
    submission = len(run.ledger.batches)  # makes every custom id of this cycle new
    groups: dict = {}  # endpoint, or model for vLLM files -> its requests
    for number, step, need, key in needs:
        if (number, step, key) in in_flight:
            continue  # asked in a batch still open: never twice
        caller.served.check(need.role)  # a role whose served model changed is asked no more
        role = settings.roles[need.role]
        body = request_body(role, need.prompt, caller.token_fields[need.role])
        cid = custom_id(run.incarnation, number, step, key, submission)
        # the batch's worst case must fit the budget before it is submitted; it is settled at its real cost when
        # its reply is collected (released when none comes: it is reserved again if re-asked)
        if caller.budget:
            worst = caller.budget.reserve(role.model, len(str(need.prompt)), role.max_tokens, batched=1.0)
            run.reserved[cid] = (role.model, worst)
        # one model per input file: OpenAI's batch API ("each input file can only include requests to a single
        # model") as vLLM's run-batch; roles asking one model at one URL share a batch
        group = role.model if settings.batching.files else Endpoint.of(role)
        groups.setdefault(group, []).append(
            (
                cid,
                LedgerRequest(number, step, key, need.role, role.max_tokens, caller.token_fields[need.role]),
                body,
            )
        )
    return groups


def send(run: BatchRun, groups: dict) -> None:
    """The cycle's requests submitted (or written for vLLM's run-batch), batch by batch; a batch of a model held for
    off-peak last, once its peak window has closed (the others are not kept waiting)."""
    settings = run.settings
    if groups:
        run.note_submission()
    holds = run.caller.holds
    for group, requests in sorted(groups.items(), key=lambda g: bool(holds.get(held_model(run, g[1])))):
        role = requests[0][1].role
        hold = holds.get(settings.roles[role].model)
        if hold:
            hold.wait(run.caller.stopped, run.log)
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


def held_model(run: BatchRun, requests: list) -> str:
    """The model a batch's requests ask (one per batch)."""
    return run.settings.roles[requests[0][1].role].model


def batch_summary(run: BatchRun, out, err) -> int:
    """The stage's closing lines, its transport noted and its journal compacted; the exit status."""
    state, name = run.state, run.name
    done = len(state.cases) - len(state.pending())
    print(
        f"[{name}] batch mode: {done} of {len(state.cases)} cases saved, {len(run.failed)} failed, "
        f"{counted(run.ledger.cycles(name), 'cycle')} in this run; elapsed {time.monotonic() - run.started:.1f}s",
        file=out,
        flush=True,
    )
    answered_as = run.caller.served.answered_as()
    if answered_as:  # an alias, a dated snapshot, a re-pointed id: said, whether accepted or not
        print(f"[{name}] served: {answered_as}", file=out)
    if run.failed:
        for line in failure_lines(name, list(run.failed.values())):
            print(line, file=err)
    keep_served_in_run(run)
    if run.manifest and run.caller.token_fields != (
        run.manifest.token_fields or default_token_fields(run.settings.roles)
    ):
        # a resumed run starts with the field
        run.manifest = record_transport(run.manifest, run.caller.token_fields)
    run.writer.close()  # the compaction rewrites the journal
    CallJournal(run.journal_path, run.writer, set()).compact(
        {s.name: state.records[s.name] for s in state.steps}
    )
    # seen in its last replies (asked directly), or in replies it replayed: said as its stop (a stage that had
    # nothing left to do when it opened replayed none)
    changed = run.caller.served.changed(state.asks if run.opened_pending else ())
    if changed:
        raise ServedModelChanged(changed)
    return 1 if run.failed else 0


def check_endpoints(run: BatchRun) -> None:
    """An endpoint that refuses the batch API stops the stage before any submission, naming the fallback."""
    for role, client in run.batch_clients().items():
        try:
            client.batches.list(limit=1)
        except run.caller.openai.APIStatusError as e:
            if e.status_code in (404, 405, 501):
                in_grid = (
                    "; in a grid, batch = false in its [models] table" if run.pool and role == "eval" else ""
                )
                raise FatalError(
                    f"{run.settings.roles[role].describe()}: the endpoint refuses the batch API (HTTP "
                    f"{e.status_code}); leave the role synchronous (--batch-roles without {role}{in_grid}) or "
                    "run without --batch"
                ) from None
            provider_call(run, "listing batches", lambda: client.batches.list(limit=1))  # transient: retried
        except (run.caller.openai.APIConnectionError, run.caller.openai.APITimeoutError):
            provider_call(run, "listing batches", lambda: client.batches.list(limit=1))
