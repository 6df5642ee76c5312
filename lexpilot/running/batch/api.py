"""The provider's side of batch mode: every call to the batch endpoints (files and batches) under the chat
calls' retry rule, submitting a batch tagged with its run, model and stage, re-attaching the batches of the run
that the ledger does not know, what a finished batch answered, and the files of vLLM's offline run-batch."""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

from lexpilot.benchmark.records import model_folder
from lexpilot.errors import FatalError
from lexpilot.files import check_input, write_atomic
from lexpilot.models.calls import error_message
from lexpilot.models.retries import TRANSIENT_STATUS, backoff_seconds
from lexpilot.running.batch.ledger import Ledger, LedgerBatch, LedgerRequest
from lexpilot.storage.checkpoints import journal_custom_ids
from lexpilot.text import counted

FINISHED = ("completed", "failed", "expired", "cancelled")
MAX_REQUESTS, MAX_BYTES = 50_000, 200_000_000  # per batch input file (the provider's limits)
ENDPOINT = "/v1/chat/completions"


class BatchEndpointError(FatalError):
    """The batch endpoints kept failing: the stage stops; every batch recorded stays in the ledger."""


def provider_call(run, what: str, call, missing_ok: bool = False):
    """One call to the batch endpoints. HTTP 408/409/429/5xx, a timeout or a reset is retried with backoff, as a
    chat call is (up to --retries times); a 404 gives None where `missing_ok`; any other refusal stops the stage."""
    openai, settings = run.caller.openai, run.settings
    attempts, problem = settings.transport.retries + 1, ""
    for attempt in range(attempts):
        try:
            return call()
        except openai.APIStatusError as e:
            if e.status_code == 404 and missing_ok:
                return None
            if e.status_code not in TRANSIENT_STATUS and e.status_code < 500:
                raise FatalError(
                    f"{what}: HTTP {e.status_code}: {error_message(e, settings.redact)}"
                ) from None
            problem = f"HTTP {e.status_code}"
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            problem = f"connection error ({error_message(e.__cause__ or e, settings.redact)})"
        # a 200 whose body is not the batch API's (a web page)
        except (ValueError, AttributeError, TypeError):
            raise FatalError(
                f"{what}: the endpoint's answer is not the batch API's; check the role's base URL "
                "(it must be an OpenAI-compatible API with /files and /batches)"
            ) from None
        if attempt + 1 < attempts:
            run.log(f"{what}: {problem}; asked again")
            time.sleep(backoff_seconds(attempt, None, settings.transport.backoff_base))
    raise BatchEndpointError(
        f"{what}: {problem} after {counted(attempts, 'attempt')}. Every batch submitted is recorded: "
        "rerun the same command later"
    )


def checked(answer, field: str):
    """An answer of the batch endpoints with the string field the harness reads (else: not the batch API)."""
    if not isinstance(getattr(answer, field, None), str):
        raise ValueError(field)
    return answer


def request_digest(body: dict) -> str:
    """What a request asks (model, messages, settings): how a re-attached batch's requests are matched."""
    return hashlib.sha256(json.dumps(body, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:32]


def root_hash(settings) -> str:
    """The output root as a batch's metadata names it: another copy of the run elsewhere is not this one."""
    return hashlib.sha256(str(settings.output_root).encode()).hexdigest()[:16]


def tag(run) -> dict[str, str]:
    """The metadata every batch of this run, model and stage carries (and the output root, so that another copy
    of the run elsewhere is not mistaken for this one, and the run's incarnation, so that a later run made under
    the same root, id, model and stage is not either)."""
    settings = run.settings
    return {
        "lexpilot_run": settings.run_id,
        "lexpilot_model": settings.roles["eval"].model[:500],
        "lexpilot_stage": run.name,
        "lexpilot_root": root_hash(settings),
        "lexpilot_incarnation": run.incarnation,
    }


def tagged(remote, run) -> str | None:
    """ "ours" for a batch tagged with this run, "pooled" for one the grid pooled under this output root, "foreign" for one of the same run id, root, model and stage made
    by another incarnation (an earlier run moved away, or one from before incarnations), else None. A run that
    began before incarnations (its manifest says so) owns the batches of its root, id, model and stage that carry
    none: it made them before it had one. A run whose manifest was rebuilt from its records (the manifest was
    lost, the records are there: not a new run under a moved root) owns every batch of its root, id, model and
    stage: the incarnation they carry was in the lost manifest."""
    metadata = getattr(remote, "metadata", None) or {}
    if not isinstance(metadata, dict):
        return None
    if (
        "lexpilot_pool" in metadata
    ):  # the grid's, holding many cells' requests: which are this run's, its lines say
        return "pooled" if metadata.get("lexpilot_root") == root_hash(run.settings) else None
    ours = tag(run)
    if any(metadata.get(k) != v for k, v in ours.items() if k != "lexpilot_incarnation"):
        return None
    if ("lexpilot_incarnation" not in metadata and run.late) or run.rebuilt:
        return "ours"  # made before the run had an incarnation, or under the one its lost manifest held
    return "ours" if metadata.get("lexpilot_incarnation") == ours["lexpilot_incarnation"] else "foreign"


def foreign(run, remote, why: str) -> None:
    """A batch left alone, said once per invocation."""
    if remote.id not in run.foreign_said:
        run.foreign_said.add(remote.id)
        run.log(f"batch {remote.id}: {why}; left alone (not this run's)")


def batch_lines(requests: list) -> bytes:
    return "".join(
        json.dumps({"custom_id": cid, "method": "POST", "url": ENDPOINT, "body": body}, ensure_ascii=False)
        + "\n"
        for cid, _, body in requests
    ).encode("utf-8")


def submit(run, client, role: str, requests: list, max_tokens: int) -> None:
    """Record, upload, create: the ledger is written before each step that a kill could lose. A create whose
    reply was lost is found by its input file before it is asked again, so no request goes out twice."""
    ledger = run.ledger
    batch = ledger.add(LedgerBatch(role, "prepared", {cid: meta for cid, meta, _ in requests}, max_tokens))
    ledger.save()
    uploaded = provider_call(
        run,
        "uploading a batch file",
        lambda: checked(
            client.files.create(file=("lexpilot_batch.jsonl", batch_lines(requests)), purpose="batch"), "id"
        ),
    )
    batch.file_id, batch.phase = uploaded.id, "uploaded"
    ledger.save()
    created = create(run, client, uploaded.id)
    batch.batch_id, batch.phase = created.id, "created"
    ledger.save()
    run.log(f"submitted batch {created.id} ({role}, {counted(len(requests), 'request')})")


def create(run, client, file_id: str, metadata: dict | None = None):
    """Create the batch of an uploaded file, once: after a failed create, the provider's list is searched for a
    batch made from the file before the create is repeated. Its metadata is the run's tag, or a pool's."""
    tried: list[bool] = []

    def attempt():
        made = made_from(run, client, file_id) if tried else None  # a repeat: did the failed create make it?
        tried.append(True)
        return made or checked(
            client.batches.create(
                input_file_id=file_id,
                endpoint=ENDPOINT,
                completion_window="24h",
                metadata=metadata or tag(run),
            ),
            "id",
        )

    return provider_call(run, "creating a batch", attempt)


def made_from(run, client, file_id: str):
    """The batch made from our input file, if any (the file id is ours alone: no metadata needed)."""
    return next(
        (b for b in client.batches.list(limit=100) if getattr(b, "input_file_id", None) == file_id), None
    )


def listing(run, client) -> list:
    """Every batch the provider lists."""
    return provider_call(
        run, "listing batches", lambda: [checked(b, "id") for b in client.batches.list(limit=100)]
    )


def listed(run, client, batches: list | None = None) -> list:
    """This run's batches (this model and stage) that the provider lists, and after a lost ledger the grid's pooled
    batches under this root (their lines say which requests are the run's); one of an earlier run of the same id, model and stage
    under this root is named in one line and left alone (unless the ledger knows it already: the run's own, then,
    whatever its tag says)."""
    ours, known = [], run.ledger.known_batch_ids()
    for remote in listing(run, client) if batches is None else batches:
        whose = tagged(remote, run)
        if whose == "foreign" and remote.id not in known:
            foreign(
                run, remote, "tagged with this run id, model and stage by another run (another incarnation)"
            )
        elif whose == "ours" or (whose == "pooled" and run.ledger_lost):
            # an intact ledger knows every pooled batch its cell took part in: it wrote each before the upload
            ours.append(remote)
    return ours


def finished_lines(run, batch: LedgerBatch, client) -> list[bytes] | None:
    """The output (and error) lines of a finished batch; None while it is in flight, or when it never reached the
    provider or the provider no longer has it (then it is marked imported: its requests go into the next cycle,
    each counted as a failed attempt)."""
    if batch.phase == "written":  # a vLLM input file: imported once its output file is there
        output = Path(batch.output or "")
        if not output.exists():
            return None
        check_input(output)
        return output.read_bytes().splitlines()
    if not created(run, batch, client):
        return None
    remote = provider_call(
        run,
        f"batch {batch.batch_id}",
        lambda: checked(client.batches.retrieve(batch.batch_id), "status"),
        missing_ok=True,
    )
    if remote is None:
        lost(run, batch, f"the provider no longer knows batch {batch.batch_id} (HTTP 404)")
        return None
    batch.status = remote.status
    counts = remote.request_counts
    done = f"{getattr(counts, 'completed', 0)}/{getattr(counts, 'failed', 0)}"
    run.log(
        f"batch {batch.batch_id} ({batch.role}): {remote.status}, "
        + (
            f"{done}/{getattr(counts, 'total', 0)} completed/failed/total, {len(batch.requests)} of them this run's"
            if batch.pool
            else f"{done}/{len(batch.requests)} completed/failed/total"
        )
    )
    if remote.status not in FINISHED:
        return None
    why = provider_errors(remote, run.settings.redact)  # a provider's own words may hold the key
    batch.reason = f"batch {remote.status}" + (f" ({why})" if why else "")
    return result_lines(run, batch, client, remote)


def created(run, batch: LedgerBatch, client) -> bool:
    """Whether the batch was created at the provider; one a kill left before its create is found by its input file,
    or marked imported (never created: its requests go into the next cycle)."""
    if batch.phase == "prepared":  # killed before the upload: nothing was submitted
        lost(run, batch, None)
        return False
    if batch.phase == "uploaded":  # killed around the create: find the batch made from our file, if any
        uploaded = batch.file_id or ""  # an uploaded batch records its file (NEEDED)
        made = provider_call(run, "listing batches", lambda: made_from(run, client, uploaded))
        if made is None:
            lost(run, batch, None)  # never created
            return False
        batch.batch_id, batch.phase = made.id, "created"
        run.ledger.save()
    return True


def result_lines(run, batch: LedgerBatch, client, remote) -> list[bytes]:
    """The lines of a finished batch's output and error files; a file the provider no longer has is said, and
    the requests it answered are asked again in the next cycle."""
    lines: list[bytes] = []
    for name, file_id in (("output", remote.output_file_id), ("error", remote.error_file_id)):
        content = file_id and downloaded(
            run,
            file_id,
            lambda: provider_call(
                run,
                f"downloading the {name} file of batch {batch.batch_id}",
                lambda: client.files.content(file_id).read(),
                missing_ok=True,
            ),
        )
        if file_id and content is None:
            run.log(
                f"the {name} file {file_id} of batch {batch.batch_id} cannot be downloaded (HTTP 404): the "
                "requests it answered are asked again in the next cycle"
            )
        lines += content.splitlines() if isinstance(content, bytes) else []
    return lines


def downloaded(run, file_id: str, fetch):
    """A batch's file: fetched once for every cell of the grid's pool that shares the batch, else directly."""
    return fetch() if run.pool is None else run.pool.downloaded(file_id, fetch)


def provider_errors(remote, redact) -> str:
    """The provider's first errors of a batch, each redacted whole, then cut (a key cut in two is never matched)."""
    errors = getattr(getattr(remote, "errors", None), "data", None) or []
    return "; ".join(
        redact(str(getattr(e, "message", "") or getattr(e, "code", "")))[:200] for e in errors[:3]
    )


def lost(run, batch: LedgerBatch, why: str | None) -> None:
    """A batch that never reached the provider (why None) or that it lost: its requests go into the next cycle."""
    if why:
        run.log(f"{why}: its {len(batch.requests)} requests are asked again in the next cycle")
        for request in batch.requests.values():
            run.ledger.failed(request.key, f"{batch.role_of(request)}: {why}")
    batch.phase = "imported"
    run.ledger.save()


def adopt(run, clients: dict, pending: dict[str, list[tuple]]) -> int:
    """Re-attach the batches of this run, model and stage that the provider lists and the ledger does not know
    (the ledger was lost, or is a stale copy): their requests are matched by what they ask to the requests the
    cases need now (`pending`: request digest -> [(case, step, key, role, max_tokens), ...]), and never submitted
    again."""
    ledger, adopted = run.ledger, 0
    known, files = known_to(run)
    collected = journal_custom_ids(run.journal_path)  # lines of a batch imported already: never matched again
    for role, client in clients.items():
        batches = listing(run, client)
        ours = listed(run, client, batches)
        refuse_if_lost(run, pending, batches, ours)
        for remote in ours:
            ended_unanswered = (
                remote.status in ("failed", "expired", "cancelled") and not remote.output_file_id
            )
            if remote.id in known or remote.input_file_id in files or ended_unanswered:
                continue
            content = provider_call(
                run,
                f"reading the input of batch {remote.id}",
                lambda: client.files.content(remote.input_file_id).read(),
                missing_ok=True,
            )
            lines = (content or b"").splitlines()
            if tagged(remote, run) == "pooled":  # the grid's: this run's lines only (none: another cell's)
                lines = [line for line in lines if carries(line, run)]
                if not lines:
                    continue
            elif not all(carries(line, run) for line in lines if line.strip()):
                foreign(run, remote, "its metadata names this run, but its requests carry another run's ids")
                continue
            requests = _matched_requests(lines, pending, collected)
            # a batch every line of which was collected already is known from now on, and nothing more
            # named by the role its requests ask (roles sharing an endpoint share its client, not their batches)
            asked_role = next(iter(requests.values())).role if requests else role
            ledger.add(
                LedgerBatch(
                    asked_role or role,
                    "created" if requests else "imported",
                    requests,
                    batch_id=remote.id,
                    file_id=remote.input_file_id,
                    adopted=True,
                    stage=run.name,  # known to the stage from now on, even with no request left
                )
            )
            known.add(remote.id)
            if not requests:
                ledger.save()
                continue
            adopted += 1
            run.log(
                f"re-attached batch {remote.id} from the provider's list ({len(requests)} requests of this run): "
                "the ledger did not know it"
            )
    if adopted:
        ledger.save()
    return adopted


def known_to(run) -> tuple[set, set]:
    """The batch and input file ids the stage's entries of the ledger hold: a pooled batch may hold requests of the
    run's other stages too, and each re-attaches its own."""
    mine = [b for b in run.ledger.batches if run.owns(b)]
    return {b.batch_id for b in mine}, {b.file_id for b in mine}


def _matched_requests(
    lines: list[bytes], pending: dict[str, list], collected: set[str]
) -> dict[str, LedgerRequest]:
    """An adopted batch's requests the cases need now (custom id -> its ledger entry), each taken from
    `pending` by what it asks; lines collected already, or not asked now, are left out."""
    requests = {}
    for line in lines:
        try:
            entry = json.loads(line)
            if entry["custom_id"] in collected:
                continue  # answered and collected before the ledger was lost (a re-ask asks the same)
            # identical requests of different cases (a judge prompt holding only a reply) each take one
            case, step, key, request_role, max_tokens = pending[request_digest(entry["body"])].pop(0)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            continue  # not a request the cases need now (answered already, or not ours)
        requests[entry["custom_id"]] = LedgerRequest(case, step, key, request_role, max_tokens)
    return requests


def refuse_if_lost(run, pending: dict, batches: list, ours: list) -> None:
    """After a lost or stale ledger, with requests still to make: a provider whose list has no metadata, or lists
    none of this run's batches (another key or project?), cannot show what was submitted; stop rather than pay
    twice, unless --batch-resubmit."""
    asked = sum(len(requests) for requests in pending.values())
    if not run.ledger_lost or not asked or run.settings.batching.resubmit:
        return
    why = (
        "the provider does not return batch metadata"
        if untagged(batches)
        else "the provider lists no batch of this run, model and stage (another API key or project?)"
        if not ours
        else ""
    )
    if why:
        raise FatalError(
            f"{run.ledger.path}: {run.ledger_lost} and {why}; "
            f"{asked} requests may already be paid. Restore the ledger, or rerun with --batch-resubmit "
            "to submit them again"
        )


def untagged(batches: list) -> bool:
    """The provider lists batches but none with its metadata: which of them are this run's cannot be told."""
    return bool(batches) and not any(getattr(b, "metadata", None) for b in batches)


def carries(line: bytes, run) -> bool:
    """Whether a batch input line's custom id is this run's: it starts with the run's incarnation, or, for a run
    that began before incarnations, it is one of the 32-digit ids made then."""
    try:
        cid = json.loads(line).get("custom_id")
    except (ValueError, AttributeError, RecursionError):
        return False
    if not isinstance(cid, str):
        return False
    if (run.late or run.rebuilt) and re.fullmatch(r"[0-9a-f]{32}", cid):
        return True
    if run.rebuilt and re.fullmatch(r"[0-9a-f]{12}-[0-9a-f]{32}", cid):
        return True  # the run's own, made under the incarnation its lost manifest held
    return bool(run.incarnation) and cid.startswith(f"{run.incarnation}-")


def write_batch_file(
    ledger: Ledger, folder: Path, model: str, role: str, requests: list, max_tokens: int, log
):
    """--batch-files: the cycle's input for `vllm run-batch` (one model per file), recorded, then the command."""
    path, output = batch_file(folder, model, requests, len(ledger.batches))
    written = {cid: meta for cid, meta, _ in requests}
    ledger.add(LedgerBatch(role, "written", written, max_tokens, path=str(path), output=str(output)))
    ledger.save()
    log(f"wrote {path}: run  vllm run-batch -i {path} -o {output} --model {model}  (then rerun this command)")


def batch_file(folder: Path, model: str, requests: list, after: int = 0) -> tuple[Path, Path]:
    """Write a cycle's input file for `vllm run-batch`: (its path, the output path the command is to write).
    Numbered after every file already there (and `after`), so an old output file is never read for new requests."""
    folder.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[5:9]) for p in folder.glob("cycle[0-9][0-9][0-9][0-9]-*") if p.name[5:9].isdigit()]
    stem = f"cycle{max([after, *taken]) + 1:04d}-{model_folder(model)}"
    path, output = folder / f"{stem}.jsonl", folder / f"{stem}.out.jsonl"
    write_atomic(path, batch_lines(requests))
    return path, output


def chunks(requests: list) -> list[list]:
    """Split at the provider's limits: requests and bytes per input file."""
    out: list[list] = []
    current: list = []
    size = 0
    for request in requests:
        line = len(json.dumps(request[2], ensure_ascii=False).encode()) + 200
        if current and (len(current) >= MAX_REQUESTS or size + line > MAX_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(request)
        size += line
    return out + ([current] if current else [])
