"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for trying the harness, the tests and the benchmarks:
the server, its chat answers (canned replies from replies.py, or a test's script) and what it saw. It plays the three
LexPilot roles from the prompt it receives (kinds.py), answers the batch API (batches.py), and keeps every request
body, so tests can check what each role was sent.
"""

from __future__ import annotations

import hashlib
import json
import select
import socket
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, TextIO

from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.scripted.batches import BatchEndpoints
from lexpilot.scripted.kinds import request_kind, run_of_path, stable
from lexpilot.scripted.replies import default_reply

KEEP = object()  # usage as the provider counts it
JSON_TYPE = {"Content-Type": "application/json"}


class ScriptedProvider(BatchEndpoints):
    """`script(kind, prompt, body)` may return a str (the reply), None (the default reply), or a dict:
    {"status": 429, "headers": {...}, "error": "...", "param": ..., "code": ...} for an HTTP error,
    {"content": ..., "finish_reason": "length", "reasoning_content": ..., "reasoning_tokens": N} for a given
    choice, {"sleep": seconds} to stall before the default reply, {"raw": bytes} for a 200 with that body,
    {"trickle": seconds} to send the body one byte at a time that far apart, {"endless": True} for a stream
    that never ends, and for a streamed request {"content": ..., "stall": seconds} to stop after the first
    event for that long. Trickles, endless streams and stalls need a socket (HTTP, not in memory).

    `one_slot`: like llama-cpp-python's server, one request at a time; a streamed request that arrives while
    another is being answered gets at once a stream with no content and no finish reason."""

    def __init__(
        self,
        script=None,
        latency: float = 0.0,
        jitter: float = 0.0,
        rate_limit: float | None = None,
        usage: bool = True,
        one_slot: bool = False,
    ):
        self.script, self.latency, self.jitter, self.rate_limit, self.usage = (
            script,
            latency,
            jitter,
            rate_limit,
            usage,
        )
        self.one_slot, self.active = one_slot, 0
        self.most_active = 0  # the most chat requests it was answering at once
        self._batch_api()
        self.requests: list[dict] = []
        # every request answered with a reply, synchronously or in a batch: (kind, digest of what it asks) -> times
        self.processed: Counter[tuple[str, str]] = Counter()
        # model -> calls, prompt_tokens and completion_tokens of every reply sent (refused or not): what it bills
        self.billed: dict = defaultdict(Counter)
        # `cache(prompt)`: extra usage fields a provider with a prompt cache reports (OpenAI's
        # prompt_tokens_details.cached_tokens, DeepSeek's prompt_cache_hit_tokens), or None
        self.cache: Callable[[str], dict | None] | None = None
        # any JSON value: the `usage` every reply carries instead of the true counts
        self.usage_as: Any = KEEP
        self._served_and_tiers()
        self.lock = threading.Lock()
        self.statuses: Counter[int | str] = Counter()  # HTTP status (or "cut": a stream cut) -> replies
        self._window: list[float] = []
        self.arrivals: list[float] = []  # the moment every chat request arrived, answered or refused (429)
        self.abandoned = 0  # streams the client closed while the server was still generating
        self.server: _Server | None = None
        # a file (text, appended): a JSON line per chat request, its model, role and settings
        self.log: TextIO | None = None
        self.port = 0  # 0: any free port
        self._request = threading.local()  # the run the request answered on this thread names (run_label)

    def _batch_api(self) -> None:
        """The batch API's state and faults."""
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
        self.batch_stall: dict[tuple[str, str], float] = {}  # (method, "files"|"batches") -> seconds, once
        # `batch_listed(batch)`: the metadata `GET /batches` shows for a batch (None: a provider that drops it; or
        # another batch's, a listing that lies); the default shows what the batch was created with
        self.batch_listed = None
        self.submitted = Counter()  # custom_id -> batches it was submitted in

    def _served_and_tiers(self) -> None:
        """The flex tier, and what a reply says served it."""
        # the flex tier (a request's service_tier "flex"): answered `flex_latency` seconds slower; `flex_unavailable`
        # of them (a share, spread evenly over the flex requests in arrival order) refused with OpenAI's 429
        # "resource unavailable"; the models in `flex_refused` refuse the tier with a 400, as a model without it does
        self.flex_latency, self.flex_unavailable = 0.0, 0.0
        self.flex_refused: set[str] = set()
        self.flex_asked = 0  # flex requests received
        self.tiers: Counter[tuple[str, str]] = Counter()  # (model, tier that served) -> replies
        # requested id -> the id its replies say served them, read at each request (a test may switch it at any moment;
        # sync, stream and batch alike); `fingerprint`: the system_fingerprint every reply carries (None: none)
        self.served_as: dict[str, str] = {}
        self.fingerprint: str | None = None

    # --- lifecycle
    def start(self) -> str:
        server = self.server = _Server(("127.0.0.1", self.port), _Handler)
        server.provider = self
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self):
        self.base_url = self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def in_memory_clients(self, run: str = "") -> dict:
        """OpenAI SDK clients per role that reach this provider in memory (the SDK's own HTTP transport
        replaced by a mock one): the same requests and replies as over HTTP, without a socket; `run`: the run
        their base URL names (run_of_path)."""
        import httpx2 as httpx  # what the openai 3.x SDK is built on (requirements.txt)
        import openai

        def handle(request):
            if not request.url.path.endswith("/chat/completions"):
                status, headers, payload = self.batch_api(  # raw_path: with its query (a listing's limit)
                    request.method, request.url.raw_path.decode(), request.headers, request.read()
                )
                if status == 0:  # a scripted connection reset
                    raise httpx.ConnectError("Connection reset by peer", request=request)
                return httpx.Response(status, headers=headers, content=payload)
            body = json.loads(request.content or b"{}")
            status, headers, payload = self.respond(request.url.path, body)
            headers.pop("X-Stall-After-First-Event", None)  # stalls need a socket: HTTP tests only
            return httpx.Response(status, headers=headers, content=payload)

        client = openai.OpenAI(
            base_url=self.base_url.removesuffix("/v1") + (f"/{run}/v1" if run else "/v1"),
            api_key="in-memory",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(handle)),
        )
        return {role: client for role in ROLES}

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
    def run_label(self) -> str:
        """The run the request being answered on this thread names by its base URL ("": none)."""
        return getattr(self._request, "run", "")

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

    def respond(self, path: str, body: dict):
        with self.lock:
            self.arrivals.append(time.monotonic())
        if self._rate_limited():
            with self.lock:
                self.statuses[429] += 1
            return (
                429,
                {**JSON_TYPE, "Retry-After": "0.2"},
                json.dumps({"error": {"message": "rate limit", "type": "rate_limit"}}).encode(),
            )
        refused = self._tier_refusal(body)
        if refused:
            return self._scripted_error(refused)
        with self.lock:
            self.requests.append(body)
            self.logged(body)
            busy = self.one_slot and self.active > 0
            if busy and body.get("stream"):
                self.statuses["cut"] += 1
                return 200, {"Content-Type": "text/event-stream"}, b"data: [DONE]\n\n"
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            return self._answer(body, run_of_path(path)[0])
        finally:
            with self.lock:
                self.active -= 1

    def _tier_refusal(self, body: dict) -> dict | None:
        """A flex request refused: by a model without the tier (400), or for want of room (429), as OpenAI says it."""
        if body.get("service_tier") != "flex":
            return None
        if body.get("model") in self.flex_refused:
            return {"status": 400, "error": "Unsupported service_tier: flex", "type": "invalid_request_error"}
        with self.lock:
            n, self.flex_asked = self.flex_asked, self.flex_asked + 1
        if int((n + 1) * self.flex_unavailable) > int(n * self.flex_unavailable):
            return {
                "status": 429,
                "error": "Resource unavailable. Please try again later.",
                "type": "invalid_request_error",
                "code": "resource_unavailable",
            }
        return None

    def tier_served(self, body: dict) -> dict:
        """The tier a reply says served it, when one was asked for (flex, else the standard tier, "default")."""
        tier = body.get("service_tier")
        if tier is None:
            return {}
        served = "flex" if tier == "flex" else "default"
        with self.lock:
            self.tiers[(str(body.get("model")), served)] += 1
        return {"service_tier": served}

    def logged(self, body: dict, batched: bool = False) -> None:
        """A line in the request log, if one is kept (under the lock): what was asked, never how (no header: the key
        is never written); a request answered in a batch says so."""
        if self.log is None:
            return
        self.log.write(
            json.dumps(
                {
                    "at": round(time.time(), 3),
                    "model": body.get("model"),
                    "kind": request_kind(body),
                    "max_tokens": body.get("max_tokens"),
                    "temperature": body.get("temperature"),
                    "stream": bool(body.get("stream")),
                    **({"service_tier": body["service_tier"]} if body.get("service_tier") else {}),
                    "prompt_sha256": hashlib.sha256(
                        json.dumps(body["messages"], ensure_ascii=False).encode()
                    ).hexdigest()[:16],
                    **({"batch": True} if batched else {}),
                },
                ensure_ascii=False,
            )
            + "\n"
        )
        self.log.flush()

    def _answer(self, body: dict, run: str = ""):
        self._request.run = run
        prompt = (
            body["messages"][0]["content"] if len(body["messages"]) == 1 else json.dumps(body["messages"])
        )
        kind = request_kind(body)
        outcome = self.script(kind, prompt, body) if self.script else None
        if isinstance(outcome, dict) and "sleep" in outcome:
            time.sleep(outcome["sleep"])
            outcome = None
        if isinstance(outcome, dict) and "status" in outcome:
            return self._scripted_error(outcome)
        if self.latency or self.jitter:
            time.sleep(self.latency + self.jitter * (stable(prompt) % 1000) / 1000)
        if self.flex_latency and body.get("service_tier") == "flex":
            time.sleep(self.flex_latency)
        if isinstance(outcome, dict) and "raw" in outcome:
            return 200, {"Content-Type": outcome.get("content_type", "application/json")}, outcome["raw"]
        if isinstance(outcome, dict) and outcome.get("endless"):
            return 200, {"X-Endless": "1"}, b""
        outcome_dict = outcome if isinstance(outcome, dict) else {}
        if isinstance(outcome, dict):
            content, finish = (
                outcome.get("content", default_reply(kind, prompt)),
                outcome.get("finish_reason", "stop"),
            )
        else:
            content, finish = (outcome if outcome is not None else default_reply(kind, prompt)), "stop"
        with self.lock:
            self.statuses[200] += 1
            self.processed[
                (kind, hashlib.sha256(json.dumps(body["messages"], ensure_ascii=False).encode()).hexdigest())
            ] += 1
        usage = self._usage(prompt, content, outcome_dict)
        served = self.served_fields(body)
        if isinstance(usage, dict) and self.usage_as is KEEP:  # the provider's own bill, per model
            with self.lock:
                self.billed[body.get("model")].update(
                    {k: usage[k] for k in ("prompt_tokens", "completion_tokens")} | {"calls": 1}
                )
        if body.get("stream"):
            stall = {"X-Stall-After-First-Event": outcome_dict["stall"]} if "stall" in outcome_dict else {}
            return (
                200,
                {"Content-Type": "text/event-stream", **stall},
                self._sse(served, content, finish, usage, body),
            )
        return self._completion(served, content, finish, usage, outcome_dict)

    def _scripted_error(self, outcome: dict):
        """A script's {"status": ...}: that HTTP error, with its message, type, code, param and headers."""
        with self.lock:
            self.statuses[outcome["status"]] += 1
        error = {
            "error": {
                "message": outcome.get("error", "scripted error"),
                "type": outcome.get("type", "test"),
                "code": outcome.get("code"),
                "param": outcome.get("param"),
            }
        }
        return outcome["status"], {**JSON_TYPE, **outcome.get("headers", {})}, json.dumps(error).encode()

    def _usage(self, prompt: str, content: str, outcome_dict: dict):
        """The usage a reply reports: counted in characters, or `usage_as`; with a prompt cache's and the
        reasoning's fields."""
        usage: dict[str, Any] | None = (
            {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(content),
                "total_tokens": len(prompt) + len(content),
            }
            if self.usage
            else None
        )
        if self.usage_as is not KEEP:  # a provider's malformed usage, as it sends it
            usage = self.usage_as
        if isinstance(usage, dict) and self.cache and self.usage_as is KEEP:
            usage |= self.cache(prompt) or {}
        if isinstance(usage, dict) and "reasoning_tokens" in outcome_dict:
            usage["completion_tokens_details"] = {"reasoning_tokens": outcome_dict["reasoning_tokens"]}
        return usage

    def served_fields(self, body: dict) -> dict:
        """What a reply says served it: the model (as `served_as` answers the requested id now) and the
        fingerprint, when one is set."""
        with self.lock:
            model = self.served_as.get(body["model"], body["model"])
        fingerprint = {"system_fingerprint": self.fingerprint} if self.fingerprint else {}
        return {"model": model} | fingerprint | self.tier_served(body)

    @staticmethod
    def _completion(served: dict, content: str, finish: str, usage, outcome_dict: dict):
        """A reply not streamed: one chat.completion (for a trickle, with the header saying how slowly)."""
        message = {"role": "assistant", "content": content}
        reasoning = outcome_dict.get("reasoning_content")
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        response = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            **served,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if usage is not None:
            response["usage"] = usage
        trickle = {"X-Trickle": outcome_dict["trickle"]} if "trickle" in outcome_dict else {}
        headers = {**JSON_TYPE, **trickle}
        return 200, headers, json.dumps(response, ensure_ascii=False).encode()

    @staticmethod
    def _sse(served: dict, content, finish, usage, body: dict) -> bytes:
        def chunk(choices, usage=None):
            data = {
                "id": "chatcmpl-test",
                "object": "chat.completion.chunk",
                "created": 0,
                **served,
                "choices": choices,
            }
            if usage is not None:
                data["usage"] = usage
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

        half = len(content) // 2
        # as llama.cpp's server and OpenAI do: the finish reason comes in a last chunk with an empty delta
        events = [
            chunk([{"index": 0, "delta": {"role": "assistant", "content": content[:half]}}]),
            chunk([{"index": 0, "delta": {"content": content[half:]}}]),
            chunk([{"index": 0, "delta": {}, "finish_reason": finish}]),
        ]
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            events.append(chunk([], usage))
        events.append("data: [DONE]\n\n")
        return "".join(events).encode()


# --- over HTTP: the server and its handler; the provider they answer for is the server's `provider`


# what the scripted provider answers at <base URL>/lexpilot-scripted, so that a try-out can tell it from another
# program listening on its port (`python -m lexpilot.scripted --check URL`)
IDENTITY_PATH = "/lexpilot-scripted"
IDENTITY = {"provider": "lexpilot-scripted"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    provider: ScriptedProvider


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if (
            self.path.split("?")[0].rstrip("/").endswith(IDENTITY_PATH)
        ):  # `--check`: which provider answers here
            status, headers, payload = 200, dict(JSON_TYPE), json.dumps(IDENTITY).encode()
        else:
            status, headers, payload = self.server.provider.batch_api("GET", self.path, self.headers, b"")
        head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}"] + [
            f"{k}: {v}" for k, v in headers.items()
        ]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        self.wfile.flush()

    def do_POST(self):
        provider = self.server.provider
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self.path.endswith("/chat/completions"):
            status, headers, payload = provider.batch_api("POST", self.path, self.headers, raw)
            self.wfile.write(
                f"HTTP/1.1 {status} X\r\nContent-Length: {len(payload)}\r\n".encode()
                + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
                + b"\r\n"
                + payload
            )
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
        self._stalled(head, payload, float(stall))

    def _stalled(self, head, payload, stall):
        """A stream that stops after its first event, as a stuck generation does."""
        first_event = payload.index(b"\n\n") + 2
        self.wfile.write(head + payload[:first_event])
        self.wfile.flush()
        time.sleep(stall)
        ready, _, _ = select.select([self.connection], [], [], 0)
        if ready and self.connection.recv(1, socket.MSG_PEEK) == b"":
            self._abandoned()  # the client closed the connection: a server would stop here
            return
        self.wfile.write(payload[first_event:])
        self.wfile.flush()

    def _abandoned(self):
        """The client gave up on a reply still being sent: counted, and the connection closed."""
        with self.server.provider.lock:
            self.server.provider.abandoned += 1
        self.close_connection = True

    def _trickle(self, status, headers, payload, pause):
        head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}"] + [
            f"{k}: {v}" for k, v in headers.items()
        ]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode())
        try:
            for i in range(len(payload)):
                self.wfile.write(payload[i : i + 1])
                self.wfile.flush()
                time.sleep(pause)
        except OSError:  # the client gave up
            self._abandoned()

    def _endless(self):
        self.wfile.write(
            b"HTTP/1.1 200 X\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        event = b'data: {"choices": [{"index": 0, "delta": {"content": "..."}}]}\n\n'
        frame = f"{len(event):x}\r\n".encode() + event + b"\r\n"
        try:
            for _ in range(100000):  # bounded: about 100 s at most
                self.wfile.write(frame)
                self.wfile.flush()
                time.sleep(0.001)
        except OSError:
            self._abandoned()
        self.close_connection = True
