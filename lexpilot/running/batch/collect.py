"""What a finished batch answered, taken into the call journal: each output line validated as a synchronous reply
would be (a line that is not a well-formed reply is counted and its request asked again), each accepted reply
imported once, even by a process killed while importing; a request left without an accepted reply counts as a
failed attempt, so that a provider whose batches keep failing ends the case rather than cycling for ever."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from lexpilot.errors import FatalError
from lexpilot.models.calls import error_message, malformed_usage
from lexpilot.models.quirks import STOPS, ProviderError, Refusal, provider_error, refusal_of, stop_message
from lexpilot.models.replies import MalformedReply, parse_completion, unusable
from lexpilot.models.served import ServedModelChanged
from lexpilot.models.usage import Usage
from lexpilot.pricing import counts_of
from lexpilot.running.batch.api import finished_lines
from lexpilot.running.batch.ledger import LedgerBatch, LedgerRequest
from lexpilot.running.batch.run import BatchRun
from lexpilot.storage.checkpoints import CallJournal, CheckpointWriter


def collect(run, clients: dict, journal: Path, writer: CheckpointWriter) -> tuple[bool, int]:
    """Poll every open batch of the stage; import the finished ones. Returns (anything still in flight, replies
    imported)."""
    imported, waiting = 0, False
    importer = None  # opened once, and only when a finished batch is there to import
    for batch in filter(run.owns, run.ledger.open_batches()):
        lines = finished_lines(run, batch, clients[batch.role])
        if lines is None:
            waiting = waiting or batch.phase != "imported"
            continue
        importer = importer or Importer(
            run, CallJournal(journal, writer, set(), run.state.settings_hash), CallJournal.custom_ids(journal)
        )
        imported += importer.import_batch(batch, lines)
        batch.phase = "imported"  # unanswered requests (expired, cancelled, failed) go into the next cycle
        run.ledger.save()
        if importer.stop:  # a refusal no cycle can mend: the stage stops now, as a synchronous one does
            raise FatalError(importer.stop)
        changed = run.caller.served.changed()
        if changed:  # the batch's replies are kept; no request of the role is submitted again
            raise ServedModelChanged(changed)
    return waiting, imported


@dataclass
class Importer:
    """`known`: the custom ids whose replies the journal holds already."""

    run: BatchRun
    journal: CallJournal
    known: set[str]
    malformed: int = 0
    duplicated: list[str] = field(default_factory=list)
    # the first refusal that stops the stage (models/quirks.py STOPS), said once the batch is in
    stop: str = ""

    def import_batch(self, batch: LedgerBatch, lines: list[bytes]) -> int:
        imported = 0
        seen: dict[str, dict] = {}  # custom id -> its first line
        for line in lines:
            entry = self.entry(line, batch)
            if entry is None:
                continue
            cid = entry["custom_id"]
            if cid in seen and seen[cid] != entry:
                self.duplicated.append(cid)
            seen.setdefault(cid, entry)
            request = batch.requests.get(cid)
            if request is None or cid in self.known:
                continue  # not ours, or imported before a kill
            imported += self.take(batch, cid, request, entry)
        self.report(batch)
        for cid, request in batch.requests.items():  # asked, never answered: a failed attempt each
            if cid not in seen and cid not in self.known:
                self.settle(cid, {})
                self.run.ledger.failed(
                    request.key, f"{batch.role_of(request)}: no reply in {batch.reason or 'the batch'}"
                )
        return imported

    def entry(self, line: bytes, batch: LedgerBatch) -> dict | None:
        """A line as {custom_id, response, error}; None (counted) for one that is not."""
        if not line.strip():
            return None
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            entry = None
        if not isinstance(entry, dict) or not isinstance(entry.get("custom_id"), str):
            self.malformed += 1
            return None
        return entry

    def take(self, batch: LedgerBatch, cid: str, request: LedgerRequest, entry: dict) -> int:
        role = batch.role_of(request)
        limit = f"{self.run.settings.roles[role].flags[1]} {request.max_tokens or batch.max_tokens}"
        text, usage, problem, reasoning = reply_of(entry, limit, self.say_usage(role))
        served = counts_of(usage, "served")
        for model, calls in served.items():  # held to the role's model, as a synchronous reply is
            self.run.caller.served.note(role, model, calls)
        retry = self.run.ledger.tries(request.key) > 0  # its request came back refused before
        # a provider may echo the key in a reply or an error: redacted before any file or message, as a synchronous
        # reply is
        text, problem = self.run.settings.redact(text), self.run.settings.redact(problem)[:300]
        reasoning = (
            self.run.settings.redact(reasoning) if role == "judge" or self.run.settings.keep_reasoning else ""
        )
        if problem:
            # a reply refused (cut at its limit, empty) was paid for at the batch price: settled and kept as not used
            self.settle(cid, usage, self.run.settings.roles[role].model)
            if usage:
                self.journal.not_used(request.case, request.step, {role: usage}, problem, cid)
                self.count(role, usage, retry)
            return self.refused(request, role, problem, line_error(entry))
        self.journal.keep_key(
            request.case,
            request.step,
            request.key,
            text,
            {role: usage},
            custom_id=cid,
            reasoning=reasoning,
        )
        self.known.add(cid)
        self.settle(cid, usage, self.run.settings.roles[role].model)
        self.count(role, usage, retry)
        return 1

    def count(self, role: str, usage: dict, retry: bool) -> None:
        """A reply paid for, accepted or not: the grid's display counts it, at the batch price."""
        if self.run.caller.sharing:
            self.run.caller.sharing.count_batched(self.run.settings.roles[role].model, usage, retry)

    def refused(self, request: LedgerRequest, role: str, problem: str, error: ProviderError | None) -> int:
        """A line without an accepted reply, classified as a synchronous call's error is (models/quirks.py)."""
        refusal = refusal_of(error) if error else None
        if refusal is Refusal.TOKEN_FIELD and (request.token_field or "max_tokens") == "max_tokens":
            # an OpenAI reasoning model refused the field the request carried: the role switches, as a synchronous
            # call does, and every such request is asked again with the new field; not a failed attempt
            if self.run.caller.token_fields[role] == "max_tokens":
                self.run.caller.token_fields[role] = "max_completion_tokens"
                self.run.log(
                    f"{role}: the model refuses max_tokens; its requests are asked again with "
                    "max_completion_tokens"
                )
            return 0
        if refusal in STOPS:
            self.stop = self.stop or stop_message(
                self.run.settings.roles[role], refusal, error_message(error, self.run.settings.redact)
            )
        at_once = refusal in (Refusal.CONTEXT_WINDOW, *STOPS)  # no retry helps, as with a synchronous call
        self.run.ledger.failed(request.key, f"{role}: {problem}", at_once)
        if refusal not in STOPS:
            self.run.log(
                f"case {request.case}: {role} {problem}"
                + ("" if at_once else "; asked again in the next cycle")
            )
        return 0

    def settle(self, cid: str, usage: dict, model: str | None = None) -> None:
        """The budget's reservation for a request this invocation submitted: settled at what its reply reports at
        the batch price (its worst case without token counts), or released when no reply is taken (a refused or
        unanswered request costs nothing; asked again, it is reserved again). A reply to a request an earlier
        invocation submitted (and gave its reservation back when it ended) is spent at what it reports."""
        model, worst = self.run.reserved.pop(cid, (model, 0.0))
        if model is None or not self.run.caller.budget:
            return
        reported = usage and not usage.get("unreported_calls")
        self.run.caller.budget.settle(
            worst,
            model,
            usage.get("prompt_tokens", 0) if reported else (None if usage else 0),
            usage.get("completion_tokens", 0),
            usage.get("cached_prompt_tokens", 0),
            batched=1.0,
        )

    def say_usage(self, role: str):
        """How a reply with malformed usage is said: once per stage and role, as a synchronous call says it."""
        describe = self.run.settings.roles[role].describe()
        return lambda problem: self.run.caller.say_once(
            f"usage:{role}", malformed_usage(describe, self.run.settings.redact(problem))
        )

    def report(self, batch: LedgerBatch) -> None:
        where = f"batch {batch.batch_id or batch.output}"
        if self.malformed:
            self.run.log(
                f"{where}: {self.malformed} output line(s) are not batch replies (no string custom_id, "
                "or not JSON); their requests are asked again"
            )
        if self.duplicated:
            self.run.log(
                f"{where}: {len(self.duplicated)} custom id(s) answered twice with different replies; "
                "the first accepted reply of each is kept"
            )
        self.malformed, self.duplicated = 0, []


def reply_of(entry: dict, limit: str, say_usage=lambda problem: None) -> tuple[str, dict, str, str]:
    """(text, usage, problem, reasoning) of one line of a batch output or error file, validated as a synchronous reply
    (malformed usage is handed to `say_usage`, and the reply kept with its counts unreported)."""
    response = entry.get("response")
    if response is not None and not isinstance(response, dict):
        return "", {}, "malformed reply: the line's response is not an object", ""
    response = response or {}
    refused = line_error(entry)
    if refused:  # whole here: the caller redacts the key before it cuts the text
        return "", {}, f"failed in the batch ({refused.message})", ""
    try:
        reply = parse_completion(json.dumps(response.get("body")).encode())
    except MalformedReply as e:
        return "", {}, f"malformed reply: {e.said(lambda text: text)}", ""  # redacted by the caller, uncut
    if reply.usage_problem:
        say_usage(reply.usage_problem)
    usage = Usage()
    usage.add(
        "x",
        reply.prompt_tokens or 0,
        reply.completion_tokens or 0,
        unreported=int(reply.prompt_tokens is None),
        batched=1,
        cached_tokens=reply.cached_tokens or 0,
        served=reply.served,
    )
    problem = unusable(reply, limit)
    if problem:  # paid for all the same: its usage is kept
        return "", usage.by_role["x"], problem, ""
    return reply.text, usage.by_role["x"], "", reply.reasoning


def line_error(entry: dict) -> ProviderError | None:
    """The provider's refusal a batch line carries: an error-file line's error, or a response whose status is not
    200 (its body as a synchronous error's); None for a reply."""
    response, error = entry.get("response"), entry.get("error")
    response = response if isinstance(response, dict) else {}
    if not error and response.get("status_code") == 200:
        return None
    status = response.get("status_code")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    if error:
        return provider_error(None if isinstance(error, dict) else status, {"error": error}, str(error)[:300])
    return provider_error(status, response.get("body"), str(status))
