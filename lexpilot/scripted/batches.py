"""The scripted provider's batch API: OpenAI's files and batches endpoints (as vLLM and others copy them), with the
faults a test can script on them; each batch line is answered as a chat request is."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from lexpilot.scripted.kinds import run_of_path


def multipart_file(content_type: str, raw: bytes) -> tuple[str, bytes]:
    """The uploaded file of a multipart/form-data request: (file name, content)."""
    from email.message import Message
    from email.parser import BytesParser

    message = BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    for part in message.get_payload():
        if not isinstance(part, Message):  # a body that is no multipart is text, not parts
            break
        name = part.get_filename()
        if name:
            content = part.get_payload(decode=True)
            assert isinstance(content, bytes), "a part that is no multipart decodes to bytes"
            return name, content
    raise ValueError("no file in the upload")


def file_object(file_id: str, name: str, size: int) -> dict:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": 0,
        "filename": name,
        "purpose": "batch",
        "status": "processed",
    }


def listed_page(batches: list[dict], query: dict) -> tuple[list[dict], bool]:
    """A page of the batches as OpenAI lists them: the newest first, `limit` of them (20 unless asked, at most 100),
    after the batch `after` names; and whether more follow. (Every batch on one page made each stage's
    `batches.list(limit=1)` read and parse the whole history of a test's provider.)"""
    newest_first = batches[::-1]
    after = (query.get("after") or [""])[0]
    start = next((i + 1 for i, b in enumerate(newest_first) if b["id"] == after), 0) if after else 0
    limit = min(100, max(1, int((query.get("limit") or ["20"])[0])))
    return newest_first[start : start + limit], start + limit < len(newest_first)


def public(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if not k.startswith("_")}


class BatchEndpoints:
    """The files and batches endpoints of `ScriptedProvider`, which holds their state (`files`, `batches`, the
    `batch_*` faults) and answers each line with its chat handler (`_answer`)."""

    # what these endpoints use of ScriptedProvider, which sets each in its __init__ (described there)
    files: dict[str, bytes]
    batches: dict[str, dict]
    batch_delay: float
    batch_refuse: bool
    batch_fail: Callable[[str], object] | None  # custom_id -> a failure (True, or its message)
    batch_expire: bool
    batch_errors: list[tuple[str, str, int]]
    batch_lost_create: bool
    batch_final: str | None
    batch_final_message: str | None
    batch_output: Callable[[list[str]], list[str]] | None
    batch_forget: set[str]
    batch_stall: dict[tuple[str, str], float]
    batch_listed: Callable[[dict], object] | None  # a batch -> the metadata a listing shows for it
    submitted: Counter[str]
    lock: threading.Lock
    logged: Callable[..., None]
    _answer: Callable[..., tuple[int, dict, Any]]

    def batch_api(self, method: str, path: str, headers, raw: bytes):
        """The endpoint's answer; with `batch_stall[(method, first path part)]` seconds, given only after that pause
        (the work done first: a client killed meanwhile never learns the file or batch it made)."""
        run, path = run_of_path(path)
        answer = self._batch_answer(method, path, headers, raw, run)
        stall = self.batch_stall.pop((method, (path.split("?")[0].rstrip("/").split("/")[2:3] or [""])[0]), 0)
        time.sleep(stall)
        return answer

    def _batch_answer(self, method: str, path: str, headers, raw: bytes, run: str = ""):
        json_type = {"Content-Type": "application/json"}
        reply = lambda status, data: (status, json_type, json.dumps(data, ensure_ascii=False).encode())  # noqa: E731
        if self.batch_refuse:
            return reply(404, {"error": {"message": "Not Found", "type": "invalid_request_error"}})
        parts = path.split("?")[0].rstrip("/").split("/")[2:]  # after /v1
        with self.lock:
            fault = next((f for f in self.batch_errors if f[0] == method and f[1] == parts[0]), None)
            if fault:
                self.batch_errors.remove(fault)
                return reply(
                    fault[2], {"error": {"message": "scripted batch endpoint error", "type": "server_error"}}
                )
            if len(parts) >= 2 and parts[0] == "batches" and parts[1] in self.batch_forget:
                return reply(404, {"error": {"message": f"No batch found with id '{parts[1]}'"}})
            if parts == ["files"] and method == "POST":
                name, content = multipart_file(headers.get("content-type", ""), raw)
                file_id = f"file-{len(self.files) + 1}"
                self.files[file_id] = content
                return reply(200, file_object(file_id, name, len(content)))
            if len(parts) == 3 and parts[0] == "files" and parts[2] == "content":
                if parts[1] not in self.files:
                    return reply(404, {"error": {"message": "no such file"}})
                return 200, {"Content-Type": "application/jsonl"}, self.files[parts[1]]
            if parts == ["batches"] and method == "POST":
                return self._create(json.loads(raw), reply, run)
            if parts == ["batches"] and method == "GET":
                page, more = listed_page(list(self.batches.values()), parse_qs(urlsplit(path).query))
                shown = [public(b) for b in page]
                if self.batch_listed:
                    shown = [{**b, "metadata": self.batch_listed(b)} for b in shown]
                return reply(200, {"object": "list", "data": shown, "has_more": more})
            if len(parts) >= 2 and parts[0] == "batches" and parts[1] in self.batches:
                batch = self.batches[parts[1]]
                if parts[2:] == ["cancel"]:
                    batch["status"] = "cancelled"
                elif batch["status"] == "in_progress" and time.monotonic() >= batch["_ready"]:
                    # OpenAI's status while the output is written: a retrieve meanwhile (the chat handler
                    # answers each line without the lock) must not answer the lines a second time
                    batch["status"] = "finalizing"
                    self._finish(batch)
                return reply(200, public(batch))
        return reply(404, {"error": {"message": f"no route {method} {path}"}})

    def _create(self, body: dict, reply, run: str = ""):
        """POST /batches, under the lock: the batch of an uploaded file, ready `batch_delay` seconds from now; its
        lines answered as the run its base URL names (provider.run_of_path)."""
        batch_id = f"batch-{len(self.batches) + 1}"
        lines = [json.loads(x) for x in self.files[body["input_file_id"]].splitlines() if x.strip()]
        self.submitted.update(x["custom_id"] for x in lines)
        self.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "input_file_id": body["input_file_id"],
            "completion_window": "24h",
            "status": "in_progress",
            "created_at": int(time.time()),
            "_lines": lines,
            "_run": run,
            "_ready": time.monotonic() + self.batch_delay,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": body.get("metadata") or {},
        }
        models = {x.get("body", {}).get("model") for x in lines}
        if len(models) > 1:  # OpenAI: "each input file can only include requests to a single model"
            self.batches[batch_id] |= {
                "status": "failed",
                "errors": {
                    "object": "list",
                    "data": [
                        {
                            "code": "mismatched_model",
                            "message": f"models {sorted(map(str, models))} in one file",
                        }
                    ],
                },
            }
        if self.batch_lost_create:
            self.batch_lost_create = False
            return reply(500, {"error": {"message": "upstream timeout", "type": "server_error"}})
        return reply(200, public(self.batches[batch_id]))

    def _finish(self, batch: dict) -> None:
        if self.batch_final:
            batch["status"] = self.batch_final
            batch["errors"] = {
                "object": "list",
                "data": [
                    {"code": "scripted", "message": self.batch_final_message or f"batch {self.batch_final}"}
                ],
            }
            return
        lines = batch["_lines"][: max(1, len(batch["_lines"]) // 2)] if self.batch_expire else batch["_lines"]
        out, errors = [], []
        for i, line in enumerate(lines):
            failure = self.batch_fail(line["custom_id"]) if self.batch_fail else None
            if failure:  # True, or the error's message
                errors.append(
                    {
                        "id": f"req-{i}",
                        "custom_id": line["custom_id"],
                        "response": None,
                        "error": {
                            "code": "server_error",
                            "message": failure if isinstance(failure, str) else "scripted failure",
                        },
                    }
                )
                continue
            self.logged(line["body"], batched=True)
            self.lock.release()  # the chat handler takes the lock itself
            try:
                status, _, payload = self._answer(line["body"], batch["_run"])
            finally:
                self.lock.acquire()
            out.append(
                {
                    "id": f"req-{i}",
                    "custom_id": line["custom_id"],
                    "response": {
                        "status_code": status,
                        "request_id": f"req-{i}",
                        "body": json.loads(payload),
                    },
                    "error": None,
                }
            )
        for name, rows in (("output_file_id", out), ("error_file_id", errors)):
            if rows:
                file_id = f"file-{len(self.files) + 1}"
                text = [json.dumps(r, ensure_ascii=False) for r in rows]
                if name == "output_file_id" and self.batch_output:
                    text = self.batch_output(text)
                self.files[file_id] = "".join(line + "\n" for line in text).encode()
                batch[name] = file_id
        batch["status"] = "expired" if self.batch_expire else "completed"
        batch["request_counts"] = {
            "total": len(batch["_lines"]),
            "completed": len(out),
            "failed": len(errors),
        }
