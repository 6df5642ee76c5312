"""Batch mode (--batch): the protocol advances in cycles through a provider's batch API (OpenAI's files and
batches endpoints, which others copy), at about half the price, and a batch is a checkpoint.

Each cycle replays every pending case's protocol from its saved records and call journal until the case needs
a reply it does not have; those requests (one per case and dialogue) go into one batch per role endpoint. The
batch, its input file and every custom id are recorded in runs/<run>/<model>/batches.json before anything
waits, so a killed process, Ctrl-C or --batch-detach leaves them in flight: the next invocation re-attaches to
the recorded batches and never submits a request twice. Collected replies are validated exactly as
synchronous ones (empty, cut at the output limit, malformed) and the accepted ones go into the call journal,
from which the next cycle's replay reads them; the records are the same as a synchronous run's, with
`batched_calls` in their usage.
"""
from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from lexpilot.storage.checkpoints import CallJournal, CheckpointWriter, journal_path, run_folder
from lexpilot.benchmark.records import model_folder
from lexpilot.models.calls import CONTEXT_WINDOW, Usage, request_body
from lexpilot.benchmark.prompts import load_prompts
from lexpilot.errors import CaseFailed, FatalError, HarnessError
from lexpilot.protocols.steps import CaseCalls
from lexpilot.models.replies import MalformedReply, parse_completion
from lexpilot.files import write_json


FINISHED = ("completed", "failed", "expired", "cancelled")
MAX_REQUESTS, MAX_BYTES = 50_000, 200_000_000  # per batch input file (the provider's limits)


class NeedsReply(Exception):
    """The case needs a reply that neither its records nor the journal hold: the next batch asks for it."""

    def __init__(self, role: str, prompt):
        super().__init__(role)
        self.role, self.prompt = role, prompt


@dataclass
class BatchCaller:
    """Stands for the model caller during a cycle's replay: every call it gets becomes a batch request."""
    settings: object
    progress: object
    batched = True

    def chat(self, role: str, prompt, usage: Usage):
        raise NeedsReply(role, prompt)


class Ledger:
    """runs/<run>/<model>/batches.json: every batch of the run, written before each step that can be lost."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"batches": [], "failures": {}}
        except ValueError:
            raise HarnessError(f"{path}: unreadable; it records the batches in flight: restore it, or remove it "
                               "after checking at the provider that no batch of this run is in flight") from None

    def save(self) -> None:
        write_json(self.path, self.data)

    def open_batches(self) -> list[dict]:
        return [b for b in self.data["batches"] if b["phase"] != "imported"]

    def in_flight_keys(self) -> set[tuple]:
        return {(r["case"], r["step"], r["key"]) for b in self.open_batches() for r in b["requests"].values()}


def custom_id(number: str, step: str, key: str, occurrence: int) -> str:
    return hashlib.sha256(f"{number}\0{step}\0{key}\0{occurrence}".encode()).hexdigest()[:32]


def collect(ledger: Ledger, clients: dict, journal: Path, writer: CheckpointWriter,
            log) -> tuple[bool, int]:
    """Poll every open batch; import the finished ones. Returns (anything still in flight, replies imported)."""
    imported, waiting = 0, False
    importer = None  # opened once, and only when a finished batch is there to import
    for batch in ledger.open_batches():
        lines = _finished_lines(batch, ledger, clients[batch["role"]], log)
        if lines is None:
            waiting = waiting or batch["phase"] != "imported"
            continue
        importer = importer or Importer(ledger, CallJournal(journal, writer, set()), CallJournal.custom_ids(journal),
                                        log)
        imported += importer.import_lines(batch, lines)
        batch["phase"] = "imported"  # unanswered requests (expired, cancelled) go into the next cycle
        ledger.save()
    return waiting, imported


def _finished_lines(batch: dict, ledger: Ledger, client, log) -> list[bytes] | None:
    """The output (and error) lines of a finished batch; None while it is in flight, or when it never reached
    the provider (then it is marked imported: its requests go into the next cycle)."""
    if batch["phase"] == "written":  # a vLLM input file: imported once its output file is there
        output = Path(batch["output"])
        return output.read_bytes().splitlines() if output.exists() else None
    if batch["phase"] == "prepared":  # killed before the upload: nothing was submitted
        batch["phase"] = "imported"
        ledger.save()
        return None
    if batch["phase"] == "uploaded":  # killed around the create: find the batch made from our file, if any
        made = next((b for b in client.batches.list() if b.input_file_id == batch["file_id"]), None)
        if made is None:
            batch["phase"] = "imported"  # never created: its requests go into the next cycle
            ledger.save()
            return None
        batch["batch_id"], batch["phase"] = made.id, "created"
        ledger.save()
    remote = client.batches.retrieve(batch["batch_id"])
    batch["status"] = remote.status
    counts = remote.request_counts
    log(f"batch {batch['batch_id']} ({batch['role']}): {remote.status}, "
        f"{getattr(counts, 'completed', 0)}/{getattr(counts, 'failed', 0)}/{len(batch['requests'])} "
        "completed/failed/total")
    if remote.status not in FINISHED:
        return None
    return [line for file_id in (remote.output_file_id, remote.error_file_id) if file_id
            for line in client.files.content(file_id).read().splitlines()]


@dataclass
class Importer:
    """Takes a finished batch's lines into the call journal: each accepted reply once (`known`: the custom ids
    imported before, even by a process killed while importing), each rejected one counted against its request."""
    ledger: Ledger
    journal: CallJournal
    known: set
    log: object

    def import_lines(self, batch: dict, lines: list[bytes]) -> int:
        imported = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                cid = entry.get("custom_id")
            except (ValueError, AttributeError):
                self.log(f"batch {batch.get('batch_id', batch.get('output'))}: an unreadable output line skipped")
                continue
            request = batch["requests"].get(cid)
            if request is None or cid in self.known:
                continue  # not ours, or imported before a kill
            role = request.get("role", batch["role"])
            text, usage, problem = reply_of(entry, request.get("max_tokens", batch["max_tokens"]))
            if problem:
                self.rejected(request, role, problem)
                continue
            self.journal.keep_key(request["case"], request["step"], request["key"], text, {role: usage},
                                  custom_id=cid)
            self.known.add(cid)
            imported += 1
        return imported

    def rejected(self, request: dict, role: str, problem: str) -> None:
        failures = self.ledger.data["failures"]
        # a prompt beyond the context window fails its case at once, as a synchronous call does
        failures[request["key"]] = 10 ** 6 if CONTEXT_WINDOW.search(problem) else failures.get(request["key"], 0) + 1
        self.ledger.data.setdefault("reasons", {})[request["key"]] = f"{role}: {problem}"
        self.log(f"case {request['case']}: {role} {problem}" + ("" if CONTEXT_WINDOW.search(problem) else
                                                                "; asked again in the next cycle"))


def reply_of(entry: dict, max_tokens: int) -> tuple[str, dict, str]:
    """(text, usage, problem) of one line of a batch output or error file, validated as a synchronous reply."""
    response = entry.get("response") or {}
    if entry.get("error") or response.get("status_code") != 200:
        error = entry.get("error") or (response.get("body") or {}).get("error") or {}
        return "", {}, f"failed in the batch ({str(error.get('message', response.get('status_code')))[:240]})"
    try:
        reply = parse_completion(json.dumps(response.get("body")).encode())
    except MalformedReply as e:
        return "", {}, f"malformed reply: {e}"
    usage = Usage()
    usage.add("x", reply.prompt_tokens or 0, reply.completion_tokens or 0,
              unreported=int(reply.prompt_tokens is None), batched=1)
    if reply.finish_reason == "length":
        return "", {}, f"reply truncated at {max_tokens} output tokens"
    if not reply.text.strip():
        return "", {}, "empty reply"
    return reply.text, usage.by_role["x"], ""


def run_cycles(name: str, state, clients: dict, settings, out, err, run_case) -> int:
    """The batch-mode stage: cycles of replay, submission and collection until every case is saved or failed.
    Ctrl-C leaves every recorded batch in flight: the same command re-attaches to them."""
    try:
        return _cycles(name, state, clients, settings, out, err, run_case)
    except KeyboardInterrupt:
        print(f"\n[{name}] interrupted: the batches in flight stay recorded; rerun the same command to collect them",
              file=err, flush=True)
        return 130


class QuietProgress:
    """Counters for the synchronous calls of roles left out of the batches (the cycles print their own lines)."""

    def __init__(self, log):
        self.log, self.retries = log, 0

    def update(self, **deltas) -> None:
        pass

    def retry(self, message: str) -> None:
        self.retries += 1
        self.log(f"retry: {message}")


@dataclass
class BatchRun:
    """One batch-mode invocation of a stage: what every cycle reads and writes."""
    name: str
    state: object  # the StageState
    settings: object
    ledger: Ledger
    journal_path: Path
    writer: CheckpointWriter
    caller: object  # the ModelCaller for the roles left synchronous, and the batch clients
    batched_roles: set
    prompts: dict
    run_case: object
    log: object
    failed: dict = field(default_factory=dict)  # case -> why it failed


def _cycles(name: str, state, clients: dict, settings, out, err, run_case) -> int:
    from lexpilot.models.calls import ModelCaller
    log = (lambda message: print(f"[{name}] {message}", file=err, flush=True))
    model = settings.roles["eval"].model
    run = BatchRun(name, state, settings, Ledger(run_folder(settings.output_root, settings.run_id, model) / "batches.json"),
                   journal_path(settings.output_root, settings.run_id, model), CheckpointWriter(),
                   ModelCaller(settings, QuietProgress(log), threading.Event(), clients),
                   set(settings.batching.roles or ("eval", "user", "judge")), load_prompts(), run_case, log)
    cycles, started = 0, time.monotonic()
    if not settings.batching.files:
        check_endpoints(run.caller, settings, run.batched_roles)
    while True:
        waiting, _ = collect(run.ledger, run.caller.clients, run.journal_path, run.writer, log)
        if waiting:
            if settings.batching.detach or settings.batching.files:
                log("batches in flight; rerun the same command to collect them" + (
                    " once their output files are in --batch-files" if settings.batching.files else
                    " (--batch-status shows them)"))
                return 0
            time.sleep(settings.batching.poll)
            continue
        pending = [c for c in state.pending() if c.number not in run.failed]
        needs = _replay(run, pending)
        run.writer.close()
        if not needs:
            break
        cycles += 1
        groups = _requests(run, needs)
        _send(run, groups)
        log(f"cycle {cycles}: {sum(len(r) for r in groups.values())} requests in {len(groups)} batch(es); "
            f"{len(pending)} cases pending, at most "
            f"{remaining_depth(state, pending)} more calls in the longest; elapsed {time.monotonic() - started:.0f}s")
    return _batch_summary(run, cycles, time.monotonic() - started, out, err)


def _replay(run: BatchRun, pending: list) -> list[tuple]:
    """Replay every pending case from its records and the journal until it needs a reply: the requests of the
    next batches, as (case, step, NeedsReply, prompt key)."""
    needs = []
    # one read of the journal per cycle: its replies are queued per case, step and prompt
    journal = CallJournal(run.journal_path, run.writer, {(c.number, s.name) for c in pending for s in run.state.steps})
    for case in pending:
        need = _replay_case(run, journal, case)
        if need:
            needs.append(need)
    return needs


def _replay_case(run: BatchRun, journal: CallJournal, case) -> tuple | None:
    settings = run.settings
    while True:  # a role left synchronous is answered at once, and the replay goes on
        calls = CaseCalls(BatchCaller(settings, None), run.prompts, case, user_condition=settings.user_condition,
                          journal=journal)
        try:
            run.run_case(run.state, calls, run.writer)
            return None
        except NeedsReply as need:
            key = CallJournal.key(need.role, need.prompt)
            if need.role not in run.batched_roles:
                try:
                    used = Usage()
                    reply = run.caller.chat(need.role, need.prompt, used)
                except CaseFailed as e:
                    run.failed[case.number] = str(e)
                    return None
                journal.keep_key(case.number, calls.step, key, reply.text, used.by_role)
                journal.replies.setdefault((case.number, calls.step, key), deque()).append((reply.text, used.by_role))
                continue
            tries = run.ledger.data["failures"].get(key, 0)
            if tries <= settings.transport.retries:
                return (case.number, calls.step, need, key)
            reason = run.ledger.data.get("reasons", {}).get(key, f"{need.role}: failed")
            run.failed[case.number] = (f"{reason} (a prompt beyond the context window: lower the output limit or "
                                       "serve the model with a longer context)" if tries >= 10 ** 6 else
                                       f"{reason} (after {tries} batches)")
            return None
        except CaseFailed as e:
            run.failed[case.number] = str(e)
            return None


def _requests(run: BatchRun, needs: list[tuple]) -> dict[str, list]:
    """The cycle's requests by batch: one batch per endpoint (roles may share one), or per model for vLLM files;
    a request already in an open batch is never asked twice."""
    settings, caller = run.settings, run.caller
    in_flight = run.ledger.in_flight_keys()
    submission = len(run.ledger.data["batches"])  # makes every custom id of this cycle new
    groups: dict[str, list] = {}
    for number, step, need, key in needs:
        if (number, step, key) in in_flight:
            continue  # asked in a batch still open: never twice
        role = settings.roles[need.role]
        body = request_body(role, need.prompt, caller.token_fields[need.role])
        if caller.budget:  # the batch's worst case must fit the budget before it is submitted; it stays
            # reserved for the invocation (a batch's real cost is known only when it is collected)
            caller.budget.reserve(role.model, len(str(need.prompt)), role.max_tokens, batched=1.0)
        # vLLM's run-batch takes one model per file; the API one batch per endpoint (roles may share one)
        group = role.model if settings.batching.files else role.base_url
        groups.setdefault(group, []).append((custom_id(number, step, key, submission),
                                             {"case": number, "step": step, "key": key, "role": need.role,
                                              "max_tokens": role.max_tokens}, body))
    return groups


def _send(run: BatchRun, groups: dict[str, list]) -> None:
    settings = run.settings
    for group, requests in groups.items():
        role = requests[0][1]["role"]
        for chunk in chunks(requests):
            if settings.batching.files:
                write_batch_file(run.ledger, settings.batching.files, group, role, chunk,
                                 settings.roles[role].max_tokens, run.log)
            else:
                submit(run.ledger, run.caller.clients[role], role, chunk, settings.roles[role].max_tokens, run.log)


def _batch_summary(run: BatchRun, cycles: int, wall: float, out, err) -> int:
    state, name = run.state, run.name
    done = len(state.cases) - len(state.pending())
    print(f"[{name}] batch mode: {done} of {len(state.cases)} cases saved, {len(run.failed)} failed, {cycles} cycles; "
          f"wall {wall:.1f}s", file=out, flush=True)
    for number, message in sorted(run.failed.items()):
        print(f"[{name}] case {number} failed: {run.settings.redact(message)}", file=err)
    CallJournal(run.journal_path, run.writer, set()).compact({s.name: state.records[s.name] for s in state.steps})
    return 1 if run.failed else 0


def remaining_depth(state, pending) -> int:
    """The most calls a pending case may still need, one per cycle: the protocol's remaining depth."""
    depth = 0
    for case in pending:
        left = 0
        for step in state.steps:
            if case.number not in state.records[step.name]:
                upstream = {need: state.records[need].get(case.number) for need in step.needs}
                left += sum(step.calls_for(upstream, state.settings, case).values())
        depth = max(depth, left)
    return depth


def write_batch_file(ledger: Ledger, folder: Path, model: str, role: str, requests: list, max_tokens: int, log):
    """--batch-files: the cycle's input for `vllm run-batch` (one model per file), recorded, then the command."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"cycle{len(ledger.data['batches']) + 1:04d}-{model_folder(model)}"
    path, output = folder / f"{stem}.jsonl", folder / f"{stem}.out.jsonl"
    path.write_text("".join(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                                        "body": body}, ensure_ascii=False) + "\n" for cid, _, body in requests),
                    encoding="utf-8")
    ledger.data["batches"].append({"role": role, "phase": "written", "max_tokens": max_tokens, "path": str(path),
                                   "output": str(output), "requests": {cid: meta for cid, meta, _ in requests}})
    ledger.save()
    log(f"wrote {path}: run  vllm run-batch -i {path} -o {output} --model {model}  (then rerun this command)")


def chunks(requests: list) -> list[list]:
    """Split at the provider's limits: requests and bytes per input file."""
    out, current, size = [], [], 0
    for request in requests:
        line = len(json.dumps(request[2], ensure_ascii=False).encode()) + 200
        if current and (len(current) >= MAX_REQUESTS or size + line > MAX_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(request)
        size += line
    return out + ([current] if current else [])


def submit(ledger: Ledger, client, role: str, requests: list, max_tokens: int, log) -> None:
    """Record, upload, create: the ledger is written before each step that a kill could lose."""
    batch = {"role": role, "phase": "prepared", "max_tokens": max_tokens,
             "requests": {cid: meta for cid, meta, _ in requests}}
    ledger.data["batches"].append(batch)
    ledger.save()
    lines = "".join(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body},
                               ensure_ascii=False) + "\n" for cid, _, body in requests)
    uploaded = client.files.create(file=("lexpilot_batch.jsonl", lines.encode("utf-8")), purpose="batch")
    batch["file_id"], batch["phase"] = uploaded.id, "uploaded"
    ledger.save()
    created = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                    completion_window="24h")
    batch["batch_id"], batch["phase"] = created.id, "created"
    ledger.save()
    log(f"submitted batch {created.id} ({role}, {len(requests)} requests)")


def check_endpoints(caller, settings, roles: set[str]) -> None:
    """An endpoint that refuses the batch API stops the stage before any submission, naming the fallback."""
    for role in sorted(roles):
        try:
            caller.clients[role].batches.list()
        except caller.openai.APIStatusError as e:
            raise FatalError(f"{settings.roles[role].describe()}: the endpoint refuses the batch API (HTTP "
                             f"{e.status_code}); leave the role synchronous (--batch-roles without {role}) or run "
                             "without --batch") from None


def status(settings, clients: dict, out=sys.stdout) -> int:
    """--batch-status: what is in flight for the run, without waiting."""
    ledger = Ledger(run_folder(settings.output_root, settings.run_id, settings.roles["eval"].model) / "batches.json")
    open_batches = ledger.open_batches()
    if not open_batches:
        print("no batch in flight for this run", file=out)
        return 0
    for b in open_batches:
        line = f"{b['role']}: {b.get('batch_id', '(not created)')}, {len(b['requests'])} requests, phase {b['phase']}"
        if b.get("batch_id"):
            remote = clients[b["role"]].batches.retrieve(b["batch_id"])
            line += f", status {remote.status}"
        print(line, file=out)
    return 0
