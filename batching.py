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
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from checkpoints import CallJournal, CheckpointWriter, journal_path, run_folder
from common import Usage, load_prompts, request_body
from errors import CaseFailed, FatalError, HarnessError
from protocols import CaseCalls
from replies import MalformedReply, parse_completion

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
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, self.path)

    def open_batches(self) -> list[dict]:
        return [b for b in self.data["batches"] if b["phase"] != "imported"]

    def in_flight_keys(self) -> set[tuple]:
        return {(r["case"], r["step"], r["key"]) for b in self.open_batches() for r in b["requests"].values()}


def custom_id(number: str, step: str, key: str, occurrence: int) -> str:
    return hashlib.sha256(f"{number}\0{step}\0{key}\0{occurrence}".encode()).hexdigest()[:32]


def collect(ledger: Ledger, clients: dict, journal: Path, writer: CheckpointWriter, log) -> tuple[bool, int]:
    """Poll every open batch; import the finished ones. Returns (anything still in flight, replies imported)."""
    imported, waiting = 0, False
    known = CallJournal.custom_ids(journal)
    keeper = None  # the journal is opened once, and only when there is something to import
    for batch in ledger.open_batches():
        client = clients[batch["role"]]
        if batch["phase"] == "prepared":  # killed before the upload: nothing was submitted
            batch["phase"] = "imported"
            ledger.save()
            continue
        if batch["phase"] == "uploaded":  # killed around the create: find the batch made from our file, if any
            made = next((b for b in client.batches.list() if b.input_file_id == batch["file_id"]), None)
            if made is None:
                batch["phase"] = "imported"  # never created: its requests go into the next cycle
                ledger.save()
                continue
            batch["batch_id"], batch["phase"] = made.id, "created"
            ledger.save()
        remote = client.batches.retrieve(batch["batch_id"])
        batch["status"] = remote.status
        counts = remote.request_counts
        log(f"batch {batch['batch_id']} ({batch['role']}): {remote.status}, "
            f"{getattr(counts, 'completed', 0)}/{getattr(counts, 'failed', 0)}/{len(batch['requests'])} "
            "completed/failed/total")
        if remote.status not in FINISHED:
            waiting = True
            continue
        for file_id in (remote.output_file_id, remote.error_file_id):
            if not file_id:
                continue
            for line in client.files.content(file_id).read().splitlines():
                if not line.strip():
                    continue
                entry = json.loads(line)
                cid = entry.get("custom_id")
                request = batch["requests"].get(cid)
                if request is None or cid in known:
                    continue  # not ours, or imported before a kill
                text, usage, problem = reply_of(entry, batch["max_tokens"])
                if problem:
                    ledger.data["failures"][request["key"]] = ledger.data["failures"].get(request["key"], 0) + 1
                    log(f"case {request['case']}: {batch['role']} {problem}; asked again in the next cycle")
                    continue
                keeper = keeper or CallJournal(journal, writer, set())
                keeper.keep_key(request["case"], request["step"], request["key"], text, {batch["role"]: usage},
                                custom_id=cid)
                known.add(cid)
                imported += 1
        batch["phase"] = "imported"  # unanswered requests (expired, cancelled) go into the next cycle
        ledger.save()
    return waiting, imported


def reply_of(entry: dict, max_tokens: int) -> tuple[str, dict, str]:
    """(text, usage, problem) of one line of a batch output or error file, validated as a synchronous reply."""
    response = entry.get("response") or {}
    if entry.get("error") or response.get("status_code") != 200:
        error = entry.get("error") or (response.get("body") or {}).get("error") or {}
        return "", {}, f"failed in the batch ({str(error.get('message', response.get('status_code')))[:80]})"
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


def _cycles(name: str, state, clients: dict, settings, out, err, run_case) -> int:
    from common import ModelCaller  # for the clients and token fields, as a synchronous run builds them
    log = (lambda message: print(f"[{name}] {message}", file=err, flush=True))
    model = settings.roles["eval"].model
    ledger = Ledger(run_folder(settings.output_root, settings.run_id, model) / "batches.json")
    jpath = journal_path(settings.output_root, settings.run_id, model)
    writer = CheckpointWriter()
    caller = ModelCaller(settings, None, None, clients)
    prompts = load_prompts()
    failed: dict[str, str] = {}
    cycles, started = 0, time.monotonic()
    if settings.batch_roles and not set(settings.batch_roles) >= {"eval", "user", "judge"}:
        raise HarnessError("--batch with some roles left synchronous is not supported yet: use --batch-roles "
                           "eval,user,judge, or run without --batch")
    check_endpoints(caller, settings)
    while True:
        waiting, imported = collect(ledger, caller.clients, jpath, writer, log)
        if waiting:
            if settings.batch_detach:
                log("batches in flight; rerun the same command to collect them (--batch-status shows them)")
                return 0
            time.sleep(settings.batch_poll)
            continue
        needs = []
        pending = [c for c in state.pending() if c.number not in failed]
        # one read of the journal per cycle: its replies are queued per case, step and prompt
        journal = CallJournal(jpath, writer, {(c.number, s.name) for c in pending for s in state.steps})
        for case in pending:
            calls = CaseCalls(BatchCaller(settings, None), prompts, case, user_condition=settings.user_condition,
                              journal=journal)
            try:
                run_case(state, calls, writer)
            except NeedsReply as need:
                key = CallJournal.key(need.role, need.prompt)
                tries = ledger.data["failures"].get(key, 0)
                if tries > settings.retries:
                    failed[case.number] = f"{need.role} request failed in {tries} batches"
                    continue
                needs.append((case.number, calls.step, need, key))
            except CaseFailed as e:
                failed[case.number] = str(e)
        writer.close()
        if not needs:
            break
        cycles += 1
        in_flight = ledger.in_flight_keys()
        submission = len(ledger.data["batches"])  # makes every custom id of this cycle new
        by_role: dict[str, list] = {}
        for number, step, need, key in needs:
            if (number, step, key) in in_flight:
                continue  # asked in a batch still open: never twice
            cid = custom_id(number, step, key, submission)
            role = settings.roles[need.role]
            body = request_body(role, need.prompt, caller.token_fields[need.role])
            by_role.setdefault(need.role, []).append((cid, {"case": number, "step": step, "key": key}, body))
        for role, requests in by_role.items():
            for chunk in chunks(requests):
                submit(ledger, caller.clients[role], role, chunk, settings.roles[role].max_tokens, log)
        log(f"cycle {cycles}: {len(needs)} requests submitted in {sum(len(r) for r in by_role.values())} "
            f"({', '.join(f'{r} {len(v)}' for r, v in by_role.items())}); elapsed {time.monotonic() - started:.0f}s")
    done = len(state.cases) - len(state.pending())
    print(f"[{name}] batch mode: {done} of {len(state.cases)} cases saved, {len(failed)} failed, {cycles} cycles; "
          f"wall {time.monotonic() - started:.1f}s", file=out, flush=True)
    for number, message in sorted(failed.items()):
        print(f"[{name}] case {number} failed: {settings.redact(message)}", file=err)
    CallJournal(jpath, writer, set()).compact({s.name: state.records[s.name] for s in state.steps})
    return 1 if failed else 0


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


def check_endpoints(caller, settings) -> None:
    """An endpoint that refuses the batch API stops the stage before any submission, naming the fallback."""
    for role in {r for r in settings.batch_roles or ("eval", "user", "judge")}:
        try:
            caller.clients[role].batches.list()
        except caller.openai.APIStatusError as e:
            raise FatalError(f"{settings.roles[role].describe()}: the endpoint refuses the batch API (HTTP "
                             f"{e.status_code}); run without --batch (synchronous calls) for this role") from None


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
