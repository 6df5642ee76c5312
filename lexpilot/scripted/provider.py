"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for trying the harness, the tests and the benchmarks.

It plays the three LexPilot roles from the prompt it receives (see `kind_of`), or follows a script
given by the test. Every request body is kept, so tests can check what each role was sent.
"""
from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# The scripted provider's name for the requests each prompt of lexpilot.benchmark.prompts.PROMPT_FILES fills (the
# tests count and answer requests by these names). A prompt declared there and not here is known by its own name,
# so a new stage's prompt is told apart as soon as it is declared (issue 37 item 3), never "unknown".
KIND_OF_PROMPT = {"judge_lca": "lca_judge", "judge_response_type": "type_judge", "behaviour_validation": "behaviour_judge",
                  "judge_simulator_audit": "audit_judge", "judge_focal_type": "focal_judge",
                  "behaviour_targeted": "targeted", "behaviour_off_target": "off_target", "judge_dcg": "dcg_judge",
                  "judge_ljp": "ljp_judge", **dict.fromkeys(("user_standard", "user_delayed", "user_self_correction",
                                                             "user_correction"), "user"),
                  "force_ask": "force_ask", "force_judge": "force_judge", "lexawn": "lexawn"}


def prompt_markers() -> tuple[tuple[str, str], ...]:
    """(kind, marker) for every declared prompt: the marker is the prompt's longest line that has no slot (so a
    filled prompt holds it as written) and that no other prompt has."""
    from lexpilot.benchmark.prompts import load_prompts
    prompts = load_prompts()
    markers = []
    for name, text in prompts.items():
        lines = [line.strip() for line in text.splitlines() if line.strip() and "{" not in line]
        own = [line for line in lines if not any(line in other for n, other in prompts.items() if n != name)]
        if not own:
            raise ValueError(f"prompts: {name} has no line of its own to tell its requests apart")
        markers.append((KIND_OF_PROMPT.get(name, name), max(own, key=len)))
    return tuple(markers)


KIND_MARKERS = prompt_markers()
ASK, PREDICT = "【追问】", "【预测】"
KEEP = object()  # usage as the provider counts it


PLAIN_STYLES = (("缺失识别", "您提供的信息还不足以判断，请补充借款的约定。"),
                ("条件性一般建议", "情形一：若有借条……情形二：若没有借条……"),
                ("无条件一般建议", "建议您保留证据，先协商，协商不成再起诉。"),
                ("过早预测", "您的诉请会得到支持。"))


def kind_of(prompt: str) -> str:
    """The role a request plays, from its prompt."""
    for kind, marker in KIND_MARKERS:
        if marker in prompt:
            return kind
    return "unknown"


def request_kind(body: dict) -> str:
    """A conversation of several messages is a plain consultation; one message is a filled prompt."""
    return "plain" if len(body["messages"]) > 1 else kind_of(body["messages"][0]["content"])


def between(prompt: str, tag: str) -> str:
    """The slot's content: the last <tag>…</tag> block (the instructions mention the tags too)."""
    end = prompt.rfind(f"</{tag}>")
    start = prompt.rfind(f"<{tag}>", 0, end)
    return prompt[start + len(tag) + 2:end].strip() if start >= 0 else ""


def stable(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


def multipart_file(content_type: str, raw: bytes) -> tuple[str, bytes]:
    """The uploaded file of a multipart/form-data request: (file name, content)."""
    from email.parser import BytesParser
    message = BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    for part in message.get_payload():
        if part.get_filename():
            return part.get_filename(), part.get_payload(decode=True)
    raise ValueError("no file in the upload")


def file_object(file_id: str, name: str, size: int) -> dict:
    return {"id": file_id, "object": "file", "bytes": size, "created_at": 0, "filename": name, "purpose": "batch",
            "status": "processed"}


def public(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def fault_record(prompt: str) -> str:
    """The structured record a self-correcting user's faulty reply ends with, when its prompt asks for one:
    an incomplete answer about the first key detail."""
    if "<故障记录>{" not in prompt:
        return ""
    detail = between(prompt, "案件客观事实").split("\n")[0].strip()
    return "\n<故障记录>" + json.dumps({"类型": "不完整", "涉及": detail}, ensure_ascii=False) + "</故障记录>"


def default_reply(kind: str, prompt: str) -> str:
    """Deterministic replies that exercise every path: some LexAwN replies ask, some predict."""
    if kind == "lexawn":
        history = between(prompt, "对话历史")
        first = history.split("\n", 1)[0]
        # Ask until the history holds a case-dependent number of assistant turns (0 to 4).
        patience = stable(first) % 5
        return (PREDICT + "结合现有事实，诉请预测：支持。" if history.count("Assistant:") >= patience
                else ASK + "请问还需要核实哪一点事实？")
    if kind == "force_ask":
        return ASK + "请问借款是否有转账记录？"
    if kind == "force_judge":
        return PREDICT + "法律分析……各项诉请预测：支持。"
    if kind == "user":
        return "这个我记得，具体情况是这样的。" + fault_record(prompt)
    if kind in ("targeted", "off_target"):
        return {"targeted": "【定向】请问还有哪些事实？", "off_target": "【无关】请问您是怎么找到我们的？"}[kind]
    if kind == "behaviour_judge":  # targeted dialogues recover every fact, off-target ones none
        n = len(between(prompt, "案件关键事实").split("\n"))
        status = "recovered" if "【定向】" in between(prompt, "对话") else "absent"
        last = between(prompt, "对话").count("次发言）")  # a recovered fact cites the last user turn
        return json.dumps({"facts": [{"id": i, "status": status, "turns": [last] if status == "recovered" else []}
                                     for i in range(1, n + 1)],
                           "unsupported_assertion": False, "question_reveals_answer": False, "beyond_scope": False})
    if kind == "audit_judge":  # a clean reply
        return json.dumps({"超范围披露": [], "不实陈述": "否", "回答了问题": "是"}, ensure_ascii=False)
    if kind == "focal_judge":
        return "归责逻辑类"
    if kind == "plain":  # one of the four C.2 response types, by the consultation
        return PLAIN_STYLES[stable(prompt) % 4][1]
    if kind == "type_judge":
        reply = between(prompt, "待评估回复")
        return next((name for name, text in PLAIN_STYLES if text == reply), "过早预测")
    if kind == "lca_judge":
        return "策略一" if PREDICT in between(prompt, "待评估回复") else "策略二"
    if kind == "dcg_judge":
        return "是" if stable(between(prompt, "AI提问内容") + between(prompt, "裁判文书争议焦点")) % 2 else "否"
    if kind == "ljp_judge":
        claims = between(prompt, "正式诉请").split("\n")
        labels = ["支持", "部分支持", "驳回"]
        return json.dumps({"results": [labels[stable(c) % 3] for c in claims]}, ensure_ascii=False)
    return "?"


def models_differ(kind: str, prompt: str, body: dict) -> str | None:
    """A script under which evaluated models answer differently (`--models-differ`), so that the comparison page,
    the rankings and the case list have differences to show: each model asks for a number of turns of its own
    before it predicts, tags its replies with its id (so the DCG judge, which hashes the question, judges them
    apart), and the LJP judge reads each model's reply as verdicts of its own. Every other request is as by default."""
    model = body.get("model", "")
    if kind == "lexawn":
        history = between(prompt, "对话历史")
        patience = stable(history.split("\n", 1)[0] + model) % 5
        return (PREDICT + f"结合现有事实（{model}），诉请预测：支持。" if history.count("Assistant:") >= patience
                else ASK + f"请问还需要核实哪一点事实？（{model}）")
    if kind in ("force_ask", "force_judge"):
        return default_reply(kind, prompt) + f"（{model}）"
    if kind == "ljp_judge":
        reply, labels = between(prompt, "待提取回复"), ["支持", "部分支持", "驳回"]
        claims = between(prompt, "正式诉请").split("\n")
        return json.dumps({"results": [labels[stable(c + reply) % 3] for c in claims]}, ensure_ascii=False)
    return None


class PrefixCache:
    """A provider's automatic prefix cache, as OpenAI documents it: a prompt of at least `minimum` tokens is served
    from the cache for the longest prefix it shares with an earlier prompt, counted in steps of `step` tokens past
    the minimum (one token a character, as this provider counts them). Entries never expire here: the best case.
    Use as `provider.cache = PrefixCache()`; it reports OpenAI's usage field."""

    def __init__(self, minimum: int = 1024, step: int = 128):
        self.minimum, self.step, self.seen, self.lock = minimum, step, [], threading.Lock()

    def __call__(self, prompt: str) -> dict:
        with self.lock:
            shared = max((len(os.path.commonprefix([earlier, prompt])) for earlier in self.seen), default=0)
            self.seen.append(prompt)
        cached = 0 if shared < self.minimum else self.minimum + (shared - self.minimum) // self.step * self.step
        return {"prompt_tokens_details": {"cached_tokens": cached}}


class FakeProvider:
    """`script(kind, prompt, body)` may return a str (the reply), None (the default reply), or a dict:
    {"status": 429, "headers": {...}, "error": "...", "param": ..., "code": ...} for an HTTP error,
    {"content": ..., "finish_reason": "length", "reasoning_content": ..., "reasoning_tokens": N} for a given
    choice, {"sleep": seconds} to stall before the default reply, {"raw": bytes} for a 200 with that body,
    {"trickle": seconds} to send the body one byte at a time that far apart, {"endless": True} for a stream
    that never ends, and for a streamed request {"content": ..., "stall": seconds} to stop after the first
    event for that long. Trickles, endless streams and stalls need a socket (HTTP, not in memory).

    `one_slot`: like llama-cpp-python's server, one request at a time; a streamed request that arrives while
    another is being answered gets at once a stream with no content and no finish reason."""

    def __init__(self, script=None, latency: float = 0.0, jitter: float = 0.0, rate_limit: float | None = None,
                 usage: bool = True, one_slot: bool = False):
        self.script, self.latency, self.jitter, self.rate_limit, self.usage = script, latency, jitter, rate_limit, usage
        self.one_slot, self.active = one_slot, 0
        # the batch API: files and batches, answered `batch_delay` seconds after creation; `batch_refuse` answers
        # 404 on /files and /batches; `batch_fail(custom_id)` puts a request in the error file (a string: its message); `batch_expire`
        # ends each batch expired with only its first half answered
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.batch_delay, self.batch_refuse, self.batch_fail, self.batch_expire = 0.0, False, None, False
        # faults of the batch endpoints: `batch_errors` answers the next matching calls (method, first path part,
        # status) with that status instead (0: a connection reset, in memory); `batch_lost_create` creates the next batch but answers 500 (a create
        # reply lost on the way back); `batch_final` ends every batch with that status and no output;
        # `batch_forget` answers 404 for those batch ids; `batch_output` rewrites the lines of each output file
        self.batch_errors: list[tuple[str, str, int]] = []
        self.batch_lost_create, self.batch_final, self.batch_output = False, None, None
        self.batch_final_message = None  # the message of `batch_final`'s error (default: "batch <status>")
        self.batch_forget: set[str] = set()
        # `batch_listed(batch)`: the metadata `GET /batches` shows for a batch (None: a provider that drops it; or
        # another batch's, a listing that lies); the default shows what the batch was created with
        self.batch_listed = None
        self.submitted = Counter()  # custom_id -> batches it was submitted in
        self.requests: list[dict] = []
        # every request answered with a reply, synchronously or in a batch: (kind, digest of what it asks) -> times
        self.processed = Counter()
        # `cache(prompt)`: extra usage fields a provider with a prompt cache reports (OpenAI's
        # prompt_tokens_details.cached_tokens, DeepSeek's prompt_cache_hit_tokens), or None
        self.cache = None
        self.usage_as = KEEP  # any JSON value: the `usage` every reply carries instead of the true counts
        self.lock = threading.Lock()
        self.statuses = Counter()
        self._window: list[float] = []
        self.arrivals: list[float] = []  # the moment every chat request arrived, answered or refused (429)
        self.abandoned = 0  # streams the client closed while the server was still generating
        self.server = None
        self.log = None  # a file (text, appended): a JSON line per chat request, its model, role and settings
        self.port = 0  # 0: any free port

    # --- lifecycle
    def start(self) -> str:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                status, headers, payload = provider.batch_api("GET", self.path, self.headers, b"")
                head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}"] + \
                    [f"{k}: {v}" for k, v in headers.items()]
                self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
                self.wfile.flush()

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.endswith("/chat/completions"):
                    status, headers, payload = provider.batch_api("POST", self.path, self.headers, raw)
                    self.wfile.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(payload)}\r\n".encode()
                                     + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode() + b"\r\n"
                                     + payload)
                    self.wfile.flush()
                    return
                body = json.loads(raw or b"{}")
                status, headers, payload = provider.respond(self.path, body)
                stall = headers.pop("X-Stall-After-First-Event", None)
                trickle = headers.pop("X-Trickle", None)
                if headers.pop("X-Endless", None):
                    self._endless()
                    return
                if trickle is not None:
                    self._trickle(status, headers, payload, float(trickle))
                    return
                head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}"]
                head += [f"{k}: {v}" for k, v in headers.items()]
                head = ("\r\n".join(head) + "\r\n\r\n").encode()
                if stall is None:
                    # One write: status line, headers and body together (no delayed-ACK stall).
                    self.wfile.write(head + payload)
                    self.wfile.flush()
                    return
                # A stream that stops after its first event, as a stuck generation does.
                first_event = payload.index(b"\n\n") + 2
                self.wfile.write(head + payload[:first_event])
                self.wfile.flush()
                time.sleep(float(stall))
                ready, _, _ = select.select([self.connection], [], [], 0)
                if ready and self.connection.recv(1, socket.MSG_PEEK) == b"":
                    with provider.lock:
                        provider.abandoned += 1  # the client closed the connection: a server would stop here
                    self.close_connection = True
                    return
                self.wfile.write(payload[first_event:])
                self.wfile.flush()

            def _trickle(self, status, headers, payload, pause):
                head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}"] + \
                    [f"{k}: {v}" for k, v in headers.items()]
                self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode())
                try:
                    for i in range(len(payload)):
                        self.wfile.write(payload[i:i + 1])
                        self.wfile.flush()
                        time.sleep(pause)
                except OSError:  # the client gave up
                    with provider.lock:
                        provider.abandoned += 1
                    self.close_connection = True

            def _endless(self):
                self.wfile.write(b"HTTP/1.1 200 X\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
                event = b'data: {"choices": [{"index": 0, "delta": {"content": "..."}}]}\n\n'
                frame = f"{len(event):x}\r\n".encode() + event + b"\r\n"
                try:
                    for _ in range(100000):  # bounded: about 100 s at most
                        self.wfile.write(frame)
                        self.wfile.flush()
                        time.sleep(0.001)
                except OSError:
                    with provider.lock:
                        provider.abandoned += 1
                self.close_connection = True

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        self.server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self):
        self.base_url = self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def in_memory_clients(self) -> dict:
        """OpenAI SDK clients per role that reach this provider in memory (the SDK's own HTTP transport
        replaced by a mock one): the same requests and replies as over HTTP, without a socket."""
        import openai
        try:
            import httpx2 as httpx  # what the openai 3.x SDK is built on
        except ImportError:
            import httpx

        def handle(request):
            if not request.url.path.endswith("/chat/completions"):
                status, headers, payload = self.batch_api(request.method, request.url.path, request.headers,
                                                          request.read())
                if status == 0:  # a scripted connection reset
                    raise httpx.ConnectError("Connection reset by peer", request=request)
                return httpx.Response(status, headers=headers, content=payload)
            body = json.loads(request.content or b"{}")
            status, headers, payload = self.respond(request.url.path, body)
            headers.pop("X-Stall-After-First-Event", None)  # stalls need a socket: HTTP tests only
            return httpx.Response(status, headers=headers, content=payload)
        client = openai.OpenAI(base_url=self.base_url, api_key="in-memory", max_retries=0,
                               http_client=httpx.Client(transport=httpx.MockTransport(handle)))
        return {role: client for role in ("eval", "user", "judge")}

    # --- inspection
    def prompts(self, kind: str | None = None) -> list[str]:
        with self.lock:
            requests = list(self.requests)
        return [r["messages"][0]["content"] for r in requests if kind is None or request_kind(r) == kind]

    def busiest_second(self) -> int:
        """The most requests that arrived within any one second (the window `rate_limit` counts in)."""
        with self.lock:
            times = sorted(self.arrivals)
        most, first = 0, 0
        for last, t in enumerate(times):
            while t - times[first] >= 1.0:
                first += 1
            most = max(most, last - first + 1)
        return most

    def kinds(self) -> Counter:
        with self.lock:
            return Counter(request_kind(r) for r in self.requests)

    # --- behaviour
    def _rate_limited(self) -> bool:
        if self.rate_limit is None:
            return False
        with self.lock:
            now = time.monotonic()
            self._window = [t for t in self._window if now - t < 1.0]
            if len(self._window) >= self.rate_limit:
                return True
            self._window.append(now)
            return False

    # --- the batch API (OpenAI's files and batches endpoints, as vLLM and others copy them)
    def batch_api(self, method: str, path: str, headers, raw: bytes):
        json_type = {"Content-Type": "application/json"}
        reply = lambda status, data: (status, json_type, json.dumps(data, ensure_ascii=False).encode())  # noqa: E731
        if self.batch_refuse:
            return reply(404, {"error": {"message": "Not Found", "type": "invalid_request_error"}})
        parts = path.split("?")[0].rstrip("/").split("/")[2:]  # after /v1
        with self.lock:
            fault = next((f for f in self.batch_errors if f[0] == method and f[1] == parts[0]), None)
            if fault:
                self.batch_errors.remove(fault)
                return reply(fault[2], {"error": {"message": "scripted batch endpoint error", "type": "server_error"}})
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
                body = json.loads(raw)
                batch_id = f"batch-{len(self.batches) + 1}"
                lines = [json.loads(x) for x in self.files[body["input_file_id"]].splitlines() if x.strip()]
                self.submitted.update(x["custom_id"] for x in lines)
                self.batches[batch_id] = {"id": batch_id, "object": "batch", "endpoint": body["endpoint"],
                                          "input_file_id": body["input_file_id"], "completion_window": "24h",
                                          "status": "in_progress", "created_at": int(time.time()), "_lines": lines,
                                          "_ready": time.monotonic() + self.batch_delay,
                                          "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                                          "metadata": body.get("metadata") or {}}
                if self.batch_lost_create:
                    self.batch_lost_create = False
                    return reply(500, {"error": {"message": "upstream timeout", "type": "server_error"}})
                return reply(200, public(self.batches[batch_id]))
            if parts == ["batches"] and method == "GET":
                shown = [public(b) for b in self.batches.values()]
                if self.batch_listed:
                    shown = [{**b, "metadata": self.batch_listed(b)} for b in shown]
                return reply(200, {"object": "list", "data": shown, "has_more": False})
            if len(parts) >= 2 and parts[0] == "batches" and parts[1] in self.batches:
                batch = self.batches[parts[1]]
                if parts[2:] == ["cancel"]:
                    batch["status"] = "cancelled"
                elif batch["status"] == "in_progress" and time.monotonic() >= batch["_ready"]:
                    self._finish(batch)
                return reply(200, public(batch))
        return reply(404, {"error": {"message": f"no route {method} {path}"}})

    def _finish(self, batch: dict) -> None:
        if self.batch_final:
            batch["status"] = self.batch_final
            batch["errors"] = {"object": "list", "data": [{"code": "scripted", "message": self.batch_final_message
                                                           or f"batch {self.batch_final}"}]}
            return
        lines = batch["_lines"][:max(1, len(batch["_lines"]) // 2)] if self.batch_expire else batch["_lines"]
        out, errors = [], []
        for i, line in enumerate(lines):
            failure = self.batch_fail(line["custom_id"]) if self.batch_fail else None
            if failure:  # True, or the error's message
                errors.append({"id": f"req-{i}", "custom_id": line["custom_id"], "response": None,
                               "error": {"code": "server_error",
                                         "message": failure if isinstance(failure, str) else "scripted failure"}})
                continue
            self.lock.release()  # the chat handler takes the lock itself
            try:
                status, _, payload = self._answer(line["body"])
            finally:
                self.lock.acquire()
            out.append({"id": f"req-{i}", "custom_id": line["custom_id"],
                        "response": {"status_code": status, "request_id": f"req-{i}", "body": json.loads(payload)},
                        "error": None})
        for name, rows in (("output_file_id", out), ("error_file_id", errors)):
            if rows:
                file_id = f"file-{len(self.files) + 1}"
                text = [json.dumps(r, ensure_ascii=False) for r in rows]
                if name == "output_file_id" and self.batch_output:
                    text = self.batch_output(text)
                self.files[file_id] = "".join(line + "\n" for line in text).encode()
                batch[name] = file_id
        batch["status"] = "expired" if self.batch_expire else "completed"
        batch["request_counts"] = {"total": len(batch["_lines"]), "completed": len(out), "failed": len(errors)}

    def respond(self, path: str, body: dict):
        json_type = {"Content-Type": "application/json"}
        with self.lock:
            self.arrivals.append(time.monotonic())
        if self._rate_limited():
            with self.lock:
                self.statuses[429] += 1
            return 429, {**json_type, "Retry-After": "0.2"}, json.dumps(
                {"error": {"message": "rate limit", "type": "rate_limit"}}).encode()
        with self.lock:
            self.requests.append(body)
            if self.log is not None:  # what was asked, never how (no header: the key is never written)
                self.log.write(json.dumps({"at": round(time.time(), 3), "model": body.get("model"),
                                           "kind": request_kind(body), "max_tokens": body.get("max_tokens"),
                                           "temperature": body.get("temperature"), "stream": bool(body.get("stream")),
                                           "prompt_sha256": hashlib.sha256(json.dumps(
                                               body["messages"], ensure_ascii=False).encode()).hexdigest()[:16]},
                                          ensure_ascii=False) + "\n")
                self.log.flush()
            busy = self.one_slot and self.active > 0
            if busy and body.get("stream"):
                self.statuses["cut"] += 1
                return 200, {"Content-Type": "text/event-stream"}, b"data: [DONE]\n\n"
            self.active += 1
        try:
            return self._answer(body)
        finally:
            with self.lock:
                self.active -= 1

    def _answer(self, body: dict):
        json_type = {"Content-Type": "application/json"}
        prompt = body["messages"][0]["content"] if len(body["messages"]) == 1 else json.dumps(body["messages"])
        kind = request_kind(body)
        outcome = self.script(kind, prompt, body) if self.script else None
        if isinstance(outcome, dict) and "sleep" in outcome:
            time.sleep(outcome["sleep"])
            outcome = None
        if isinstance(outcome, dict) and "status" in outcome:
            with self.lock:
                self.statuses[outcome["status"]] += 1
            error = {"error": {"message": outcome.get("error", "scripted error"), "type": outcome.get("type", "test"),
                               "code": outcome.get("code"), "param": outcome.get("param")}}
            return outcome["status"], {**json_type, **outcome.get("headers", {})}, json.dumps(error).encode()
        if self.latency or self.jitter:
            time.sleep(self.latency + self.jitter * (stable(prompt) % 1000) / 1000)
        if isinstance(outcome, dict) and "raw" in outcome:
            return 200, {"Content-Type": outcome.get("content_type", "application/json")}, outcome["raw"]
        if isinstance(outcome, dict) and outcome.get("endless"):
            return 200, {"X-Endless": "1"}, b""
        outcome_dict = outcome if isinstance(outcome, dict) else {}
        if isinstance(outcome, dict):
            content, finish = outcome.get("content", default_reply(kind, prompt)), outcome.get("finish_reason", "stop")
        else:
            content, finish = (outcome if outcome is not None else default_reply(kind, prompt)), "stop"
        reasoning = outcome_dict.get("reasoning_content")
        with self.lock:
            self.statuses[200] += 1
            self.processed[(kind, hashlib.sha256(json.dumps(body["messages"], ensure_ascii=False).encode()).hexdigest())] += 1
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(content),
                 "total_tokens": len(prompt) + len(content)} if self.usage else None
        if self.usage_as is not KEEP:  # a provider's malformed usage, as it sends it
            usage = self.usage_as
        if isinstance(usage, dict) and self.cache and self.usage_as is KEEP:
            usage |= self.cache(prompt) or {}
        if isinstance(usage, dict) and "reasoning_tokens" in outcome_dict:
            usage["completion_tokens_details"] = {"reasoning_tokens": outcome_dict["reasoning_tokens"]}
        if body.get("stream"):
            stall = {"X-Stall-After-First-Event": outcome["stall"]} if "stall" in outcome_dict else {}
            return 200, {"Content-Type": "text/event-stream", **stall}, self._sse(body, content, finish, usage)
        message = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        response = {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
        if usage is not None:
            response["usage"] = usage
        headers = {**json_type, **({"X-Trickle": outcome_dict["trickle"]} if "trickle" in outcome_dict else {})}
        return 200, headers, json.dumps(response, ensure_ascii=False).encode()

    @staticmethod
    def _sse(body, content, finish, usage) -> bytes:
        def chunk(choices, usage=None):
            data = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
                    "model": body["model"], "choices": choices}
            if usage is not None:
                data["usage"] = usage
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
        half = len(content) // 2
        # as llama.cpp's server and OpenAI do: the finish reason comes in a last chunk with an empty delta
        events = [chunk([{"index": 0, "delta": {"role": "assistant", "content": content[:half]}}]),
                  chunk([{"index": 0, "delta": {"content": content[half:]}}]),
                  chunk([{"index": 0, "delta": {}, "finish_reason": finish}])]
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            events.append(chunk([], usage))
        events.append("data: [DONE]\n\n")
        return "".join(events).encode()


def main(argv=None) -> int:
    """`python -m lexpilot.scripted --port P`: the scripted provider as a server on 127.0.0.1, to try every stage
    without a provider (OPENAI_BASE_URL=http://127.0.0.1:P/v1, any OPENAI_API_KEY). Ctrl-C stops it."""
    import argparse
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--jitter", type=float, default=0.0, help="up to this many seconds more, per prompt")
    parser.add_argument("--rate-limit", type=float, help="requests a second it answers; beyond, HTTP 429 with "
                        "Retry-After (as a provider's rate limit counts)")
    parser.add_argument("--models-differ", action="store_true", help="each evaluated model answers in its own way, "
                        "so that comparisons and rankings have something to show (the replies stay canned)")
    parser.add_argument("--log", type=Path, metavar="FILE", help="append a JSON line per chat request there: its "
                        "model, role, output limit, temperature and a digest of its prompt")
    args = parser.parse_args(argv)
    provider = FakeProvider(models_differ if args.models_differ else None, latency=args.latency, jitter=args.jitter,
                            rate_limit=args.rate_limit)
    if args.log:
        try:
            provider.log = args.log.open("a", encoding="utf-8")
        except OSError as e:
            print(f"scripted provider: --log {args.log}: cannot write there ({e.strerror or e})", file=sys.stderr)
            return 2
    provider.port = args.port
    try:
        url = provider.start()
    except OSError as e:
        print(f"scripted provider: cannot listen on 127.0.0.1:{args.port} ({e.strerror or e})", file=sys.stderr)
        return 2
    print(f"scripted provider at {url} (every role; any key); Ctrl-C stops it", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        provider.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
