"""Model calls for the three roles with the harness's retry rules, in one module: transient failures and
backoff, rate-limit push-back (Retry-After, a shared throttle per endpoint), empty or truncated replies, the
output-limit field a provider takes, usage per role and the budget of an invocation.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from lexpilot.errors import ONE_SLOT, Aborted, CaseFailed, CaseFailure, Draining, FatalError
from lexpilot.models import retries  # its caps read at each call: a test may lower them
from lexpilot.models.limits import Endpoints, request_tokens
from lexpilot.models.offpeak import Holds
from lexpilot.models.quirks import STOPS, Refusal, context_message, provider_error, refusal_of, stop_message
from lexpilot.models.replies import (
    TRUNCATED,
    DeadlineExceeded,
    MalformedReply,
    Reply,
    StreamCutShort,
    parse_completion,
    parse_stream,
    read_body,
    truncation_flag,
    unusable,
)
from lexpilot.models.retries import (
    TRANSIENT_STATUS,
    Attempt,
    Tries,
    _duration,
    retry_after_seconds,
)
from lexpilot.models.served import ServedCalls, ServedModels
from lexpilot.models.sharing import Sharing
from lexpilot.models.usage import FLEX_FALLBACK_CALLS, Usage, billed_class
from lexpilot.pricing import price_class
from lexpilot.settings import Role, Settings, key_variables
from lexpilot.spending import RootLedger
from lexpilot.text import counted
from lexpilot.windows import Clock, utc_now

RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"  # openai._constants': "stream" leaves the body to the caller

# ----------------------------------------------------------------------------- model calls


def tls_context():
    """The TLS context the SDK's HTTP client would make (the CA bundle, SSL_CERT_FILE and SSL_CERT_DIR honoured):
    one per process and setting, shared by every client (an SSL context is safe to share across threads)."""
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


# keyed by the variables that choose the CA bundle: each context parses it (~1 MB, ~30 ms), per client until now
@functools.lru_cache(maxsize=4)
def _tls_context(cert_file: str | None, cert_dir: str | None):
    import httpx2  # what the openai 3.x SDK is built on (requirements.txt)

    return httpx2.create_ssl_context()


def request_body(
    role: Role, prompt: str | list[dict], token_field: str = "max_tokens", tier: str | None = None
) -> dict:
    """The chat-completion request of a role: one user message (the filled prompt), or a conversation sent as
    it is (a list of messages); n=1, the role's output limit and temperature (none for 'default'); the service
    tier where one is asked (a synchronous call's: a batch's requests are priced by the batch API)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    body: dict[str, Any] = {"model": role.model, "messages": messages, "n": 1, token_field: role.max_tokens}
    if role.temperature is not None:
        body["temperature"] = role.temperature
    if tier is not None:
        body["service_tier"] = tier
    return body


def error_message(error, redact=None) -> str:
    """A provider's error (an exception, or a quirks.ProviderError) in one short line, redacted (with `redact`) before it is cut: a key cut in two would
    no longer be matched."""
    text = " ".join((getattr(error, "message", None) or str(error)).split())
    return (redact(text) if redact else text)[:240]


def malformed_usage(role: str, problem: str) -> str:
    """What a reply with malformed usage means for the run (said once per stage and role)."""
    return (
        f"{role}: a reply's {problem}; such replies are kept, their tokens counted as unreported and settled "
        "at the worst case for --max-cost"
    )


def default_token_fields(roles) -> dict[str, str]:
    """The output-limit field each role starts with: max_tokens (a role switches to max_completion_tokens when its
    model refuses max_tokens, and a run's manifest keeps what it switched to)."""
    return {role: "max_tokens" for role in roles}


class ModelCaller:
    """Chat completions for the three roles, with the retry rules of the harness.

    Every request is one user message (the filled prompt), n=1, the role's temperature (none for 'default')
    and output limit. Replies are read within the call deadline and validated by `replies`; every message
    and reply passes through the settings' redaction of API keys."""

    def __init__(
        self,
        settings: Settings,
        progress,
        abort: threading.Event,  # progress: runner.Progress
        clients: dict | None = None,
        token_fields: dict | None = None,
        sharing: Sharing | None = None,
        cell=None,
        clock: Clock = utc_now,
    ):
        import openai  # imported here so that offline commands (validation, results) never need it

        self.openai = openai
        self.settings, self.progress, self.abort = settings, progress, abort
        # one limiter per base URL for a stage on its own; the grid's, per endpoint, shared by all its cells
        self.endpoints = (
            sharing.endpoints if sharing else Endpoints(lambda role: settings.transport.concurrency * 2)
        )
        self.limiters = {role: self.endpoints.of(r) for role, r in settings.roles.items()}
        self.cell, self.sharing = cell, sharing
        self.draining = sharing.draining if sharing else Draining()  # a stage script's SIGTERM sets its own
        # the price windows and off-peak holds are read by one clock: the grid's, else this stage's
        self.clock = sharing.clock if sharing else clock
        spending = settings.spending
        self.holds = sharing.holds if sharing else Holds.of(spending.off_peak, spending.prices, self.clock)

        # Every client is built here, before any worker starts: nothing is built lazily across threads. The grid's
        # cells of one (model, run) share theirs (Sharing.client): building one reads the whole environment for proxies.
        def build(r: Role):
            return openai.OpenAI(
                base_url=r.base_url,
                api_key=r.api_key or "EMPTY",
                timeout=settings.transport.timeout_of(r),
                max_retries=0,
                http_client=openai.DefaultHttpxClient(follow_redirects=False, verify=tls_context()),
            )

        chain = (settings.roles["eval"].model, settings.run_id)
        self.clients = clients or {
            role: sharing.client(r, settings.transport.timeout_of(r), chain, build) if sharing else build(r)
            for role, r in settings.roles.items()
        }
        # The output-limit field per role: OpenAI's reasoning models refuse max_tokens, so a role switches to
        # max_completion_tokens on that refusal and keeps it (a transport detail; it does not change results).
        self.token_fields = default_token_fields(settings.roles) | (token_fields or {})
        self.lock = threading.Lock()
        self.said: set[str] = set()  # the topics of lines said once (malformed usage, per role)
        # a stage script's spending is its output root's, shared with every invocation on it (spending.py)
        root = settings.output_root if settings.spending.max_cost is not None else None
        self.budget = (
            sharing.budget if sharing else settings.spending.budget(RootLedger(root) if root else None)
        )
        # what served its calls, held to what served the role before (models/served.py; the grid's, for every cell)
        self.served = ServedCalls.of(settings, sharing.served if sharing else ServedModels())
        import httpx2  # what the openai 3.x SDK is built on (requirements.txt)

        self.transport_errors = (httpx2.TimeoutException, httpx2.TransportError)
        self.raw_response = httpx2.Response

    def _request(self, role: Role, prompt: str | list[dict], token_field: str, tier: str | None) -> Reply:
        kwargs = request_body(role, prompt, token_field, tier)
        if self.settings.transport.stream:
            kwargs |= {"stream": True, "stream_options": {"include_usage": True}}
        deadline = time.monotonic() + self.settings.transport.deadline_of(role)
        # The SDK's own route for a request it has no method for (its README: "undocumented endpoints"), with the
        # body the harness built (request_body): chat.completions.create would validate and transform every
        # parameter again, half of the client's CPU per call at the grid's scale (docs/performance.md). Errors,
        # timeouts and the client's headers are the SDK's as before; the body is streamed, not read by the SDK,
        # so that the call's deadline holds while bytes trickle.
        response = self.clients[role.name].post(
            "/chat/completions",
            cast_to=self.raw_response,
            body=kwargs,
            options={"headers": {RAW_RESPONSE_HEADER: "stream"}},
        )
        try:
            if self.settings.transport.stream:
                return parse_stream(response.iter_lines(), deadline, self.abort.is_set)
            return parse_completion(read_body(response.iter_bytes(), deadline))
        finally:
            response.close()

    def _refusal(self, role: Role, error, token_field: str) -> Refusal | None:
        """What a 400 means for the request, when the harness can act on it (models/quirks.py): TOKEN_FIELD (the
        output-limit field the request carried is refused: repeated with max_completion_tokens) or
        CONTEXT_WINDOW; raises for a temperature or output limit the model does not accept."""
        said = provider_error(error.status_code, error.body, error_message(error))
        refusal = refusal_of(said)
        if refusal is Refusal.TOKEN_FIELD and token_field != "max_tokens":
            return None  # refused again after the switch: nothing more the harness can do
        if refusal is Refusal.TOKEN_FIELD:
            with self.lock:  # whichever worker's refusal arrives first switches the role; all repeat
                self.token_fields[role.name] = "max_completion_tokens"
        if refusal in STOPS:
            raise FatalError(stop_message(role, refusal, error_message(said, self.settings.redact)))
        return refusal

    def chat(
        self,
        role_name: str,
        prompt: str | list[dict],
        usage: Usage,
        on_send: Callable[[], None] | None = None,
        retry: bool = False,
    ) -> Reply:
        """One non-empty, untruncated reply; transient failures are retried, permanent ones raise FatalError.
        `on_send` is called as each request goes out (its slot taken, its cost reserved); `retry`: the call asks
        again for an output refused before (a judge's invalid one), so every reply it gets counts as a retry."""
        role = self.settings.roles[role_name]
        tries = Tries(self.settings.transport.retries + 1, role.service_tier)
        last = Attempt()
        while tries.attempt < tries.attempts:
            last = self._attempt(role, prompt, usage, on_send, retry, tries.tier)
            retry = retry or last.answered is not None  # a call's later replies are retries
            if last.repeat:
                continue  # repeated at once with max_completion_tokens: not a failed attempt
            if last.reply is not None:
                if tries.tier != role.service_tier:
                    usage.note(role.name, FLEX_FALLBACK_CALLS)
                return last.reply
            self.progress.retry(f"{role.describe()}: {last.problem}")
            pause = tries.after(last, self.settings.transport)
            if pause is not None and self._paused(pause):
                raise Aborted()
        raise CaseFailed(
            f"{role.describe()}: {last.problem} (after {counted(tries.attempts, 'attempt')}"
            + (f" and {tries.rate_limited} rate-limited ones" if tries.rate_limited else "")
            + (f" and {tries.unavailable} unavailable at the flex tier" if tries.unavailable else "")
            + ")"
            + self._failure_hint(role, last),
            change=truncation_flag(last.problem) or (ONE_SLOT if last.pushed_back == "slots" else ""),
        )

    def case_failed(self, failure: CaseFailure) -> None:
        """A case of this stage failed: in a grid, said to the grid as it happens, not only when the cell ends."""
        if self.sharing and self.sharing.on_case_failed:
            self.sharing.on_case_failed(self.cell, failure)

    def stopped(self) -> bool:
        """No new call: the stage is stopping, or the grid is draining."""
        return self.abort.is_set() or self.draining.is_set()

    def _paused(self, seconds: float) -> bool:
        """Wait out a backoff; True when a stop came first."""
        deadline = time.monotonic() + seconds
        while not self.stopped():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.abort.wait(min(left, 0.2))
        return True

    def _attempt(
        self,
        role: Role,
        prompt: str | list[dict],
        usage: Usage,
        on_send=None,
        retry: bool = False,
        tier: str | None = None,
    ) -> Attempt:
        """One request, within the endpoint's limiter and the budget; what came of it."""
        self.served.check(role.name)  # a role whose served model changed starts no new call
        limiter, counted_tokens = self.limiters[role.name], request_tokens(len(str(prompt)), role.max_tokens)
        # before the budget: waiting reserves nothing; the window it is sent in is noted as it goes (the bill's)
        lease, window = self._turn(role, limiter, counted_tokens)
        reserved = self._reserve(role, prompt, window, limiter, lease)
        token_field, outcome = self.token_fields[role.name], Attempt()
        if on_send:
            on_send()
        self.progress.update(in_flight=1)
        try:
            outcome = self._accepted(role, self._request(role, prompt, token_field, tier), usage, window)
        except self.openai.APIStatusError as e:
            outcome = Attempt(status=e.status_code)  # what is counted when the status stops the call
            try:
                outcome = dataclasses.replace(
                    self._status_error(role, e, token_field, tier), status=e.status_code
                )
            except FatalError as fatal:
                limiter.fail(str(fatal))  # every call to the endpoint would meet it: the grid's cells stop
                raise
        except (self.openai.APITimeoutError, TimeoutError, self.transport_errors[0]):
            flag = "--flex-timeout" if role.flex else "--timeout"
            outcome = Attempt(
                problem=f"no response within {flag} {self.settings.transport.timeout_of(role):g}s"
            )
        except DeadlineExceeded:
            deadline = self.settings.transport.deadline_of(role)
            outcome = Attempt(problem=f"no complete reply within the call deadline of {deadline:g}s")
        except StreamCutShort as e:
            outcome = Attempt(problem=str(e), pushed_back="slots", hint=self._one_slot_hint(role))
        except MalformedReply as e:
            outcome = Attempt(problem=f"malformed reply: {e.said(self.settings.redact)}")
        except self.openai.APIConnectionError as e:
            outcome = Attempt(
                problem=f"connection error: {error_message(e.__cause__ or e, self.settings.redact)}"
            )
        except self.transport_errors[1] as e:  # raised while reading a body the SDK handed over
            outcome = Attempt(problem=f"connection error: {error_message(e, self.settings.redact)}")
        except InterruptedError:
            raise Aborted() from None
        finally:
            self._settle(role, outcome, limiter, lease, counted_tokens, reserved, retry, window)
        if self.budget and outcome.answered:  # the model's tokens per character, for its next worst cases
            answered = outcome.answered
            chars = len(str(prompt))
            self.budget.learn(
                role.model, chars, role.max_tokens, answered.prompt_tokens, answered.completion_tokens
            )
        return outcome

    def _reserve(self, role: Role, prompt: str | list[dict], window: str, limiter, lease) -> float:
        """The call's worst case reserved in the budget, at the price of the window it is sent in (its slot given
        back when the budget refuses it)."""
        if not self.budget:
            return 0.0
        try:
            return self.budget.reserve(
                role.model,
                len(str(prompt)),
                role.max_tokens,
                priced=price_class(None, window),
                stopped=self.stopped,
            )
        except (FatalError, Aborted):
            limiter.release(lease=lease)  # its own lease (a Limiter's or an OnServer's)
            raise

    def window(self, role: Role) -> str:
        """The price window a call of this role sent now falls in ("peak", or "": off-peak or no windows)."""
        price = (self.settings.spending.prices or {}).get(role.model)
        return price.windows.at(self.clock()) if price and price.windows else ""

    def _turn(self, role: Role, limiter, tokens: int) -> tuple[Any, str]:
        """The call's turn at its endpoint (the limiter's lease) and the window it is sent in; a call held for
        off-peak first waits for its window to close, and waits again if one opened while it waited for its turn."""
        hold = self.holds.get(role.model)
        while True:
            if hold:
                hold.wait(self.stopped, lambda line: self.say_once(f"hold:{role.model}", line))
            lease = limiter.acquire(self.stopped, self.cell, tokens)
            window = self.window(role)
            if not hold or not window:
                return lease, window
            limiter.release(lease=lease)  # never sent: its slot goes back

    def _settle(
        self,
        role: Role,
        outcome: Attempt,
        limiter,
        lease,
        counted_tokens: int,
        reserved: float,
        retry: bool = False,
        window: str = "",
    ) -> None:
        """An attempt's end, however it ended: the progress, the endpoint's lease (with the tokens it used),
        the counts shared with the grid and the budget."""
        self.progress.update(in_flight=-1, **({"answered": 1} if outcome.answered else {}))
        answered = outcome.answered
        used = (answered.prompt_tokens or 0) + (answered.completion_tokens or 0) if answered else 0
        limiter.release(outcome.pushed_back, outcome.retry_after, used - counted_tokens, lease)
        if answered or outcome.status:  # the endpoint answered (a connection refused or a timeout did not)
            # a flex tier's "no room now" (OpenAI's 429) is no rate limit: the display counts it apart
            limiter.count_answer(None if outcome.unavailable else outcome.status)
        if outcome.unavailable:
            limiter.count_unavailable()
        if self.sharing and answered:
            self.sharing.count(role.model, answered, retry, billed_class(answered, window))
        if self.budget:  # an answered call costs what it reports; an unanswered one its worst case
            reply = outcome.answered
            uncharged = 0 if outcome.unavailable else None  # the flex tier's refusal is not charged
            self.budget.settle(
                reserved,
                role.model,
                reply.prompt_tokens if reply else uncharged,
                reply.completion_tokens if reply else uncharged,
                (reply.cached_tokens or 0) if reply else 0,
                priced=billed_class(reply, window) if reply else "",
            )

    def _accepted(self, role: Role, reply: Reply, usage: Usage, window: str = "") -> Attempt:
        """A reply counts as spent whatever it says; it is accepted when it is complete and not empty."""
        if reply.prompt_tokens is not None:
            usage.add(
                role.name,
                reply.prompt_tokens,
                reply.completion_tokens or 0,
                reasoning_tokens=reply.reasoning_tokens or 0,
                cached_tokens=reply.cached_tokens or 0,
                priced=billed_class(reply, window),
                served=reply.served,
            )
        else:
            usage.add(role.name, 0, 0, unreported=1, served=reply.served)
        self.served.note(role.name, reply.served.model if reply.served else None)
        self._say_tier(role, reply)
        if reply.usage_problem:
            self.say_once(
                f"usage:{role.name}",
                malformed_usage(role.describe(), self.settings.redact(reply.usage_problem)),
            )
        problem = unusable(reply, f"{role.flags[1]} {role.max_tokens}")
        if problem:
            return Attempt(problem=problem, answered=reply)
        reply.text, reply.reasoning = self.settings.redact(reply.text), self.settings.redact(reply.reasoning)
        return Attempt(reply=reply, answered=reply)

    def _say_tier(self, role: Role, reply: Reply) -> None:
        """Once per role: a flex call whose reply names no tier (the endpoint may have ignored it: billed at the
        standard price), or a reply served at a tier the price file cannot price (billed at the standard price)."""
        served = reply.served.service_tier if reply.served else None
        if role.flex and served is None:
            self.say_once(
                f"tier:{role.name}",
                f"{role.describe()}: flex asked, but the replies name no service tier (the endpoint may ignore it); "
                "they are billed at the standard price",
            )
        elif served not in (None, "default", "flex"):
            self.say_once(
                f"tier:{role.name}",
                f"{role.describe()}: a reply says it was served at tier {served!r}, which the price file cannot "
                "price; billed at the standard price",
            )

    def say_once(self, topic: str, message: str) -> None:
        """A line said once per invocation (a stage) on the progress stream."""
        with self.lock:
            if topic in self.said:
                return
            self.said.add(topic)
        self.progress.note(message)

    def _status_error(self, role: Role, e, token_field: str, tier: str | None) -> Attempt:
        """An HTTP error status: a transient one is an attempt to retry; a permanent one stops the stage (or,
        for a prompt beyond the context window, fails the case)."""
        redact, status = self.settings.redact, e.status_code
        if tier == "flex" and status != 400:
            said = provider_error(status, e.body, error_message(e))
            if refusal_of(said) is Refusal.UNAVAILABLE:  # no room at the flex tier now; not a rate limit
                wait = retry_after_seconds(e.response.headers)
                return Attempt(
                    problem=f"HTTP {status}: unavailable at the flex tier ({error_message(said, redact)[:80]})",
                    retry_after=wait if wait is not None and 0 < wait <= retries.MAX_RETRY_AFTER else None,
                    unavailable=True,
                )
        refusal = self._refusal(role, e, token_field) if status == 400 else None
        if refusal is Refusal.CONTEXT_WINDOW:
            # this case's prompt is too long for this model: no retry helps, the other cases may fit
            raise CaseFailed(context_message(role, error_message(e, redact)), change=role.flags[1]) from None
        if refusal is Refusal.TOKEN_FIELD:
            return Attempt(repeat=True)
        if 300 <= status < 400:
            raise FatalError(
                f"{role.describe()}: the endpoint redirects to "
                f"{redact(e.response.headers.get('location') or '?')}; redirects are not "
                "followed (the prompt would go there): set the base URL to that address "
                "if you trust it"
            ) from None
        if status not in TRANSIENT_STATUS and status < 500:
            hint = {
                401: f"check the key in {role.key_variable} (the grid file's key_variable)"
                if role.key_variable
                else "check the API key variable for this role"
                if role.api_key
                else f"no API key is set for this role: set {key_variables(role.name)}",
                403: "check the API key's permissions",
                404: "check the model id and the base URL",
            }.get(status, "check the request settings")
            raise FatalError(
                f"{role.describe()}: HTTP {status}: {error_message(e, redact)} ({hint})"
            ) from None
        wait = retry_after_seconds(e.response.headers)
        # a Retry-After of 0, negative or in the past asks nothing usable: the usual backoff applies
        outcome = Attempt(
            problem=f"HTTP {status}", retry_after=wait if wait is not None and wait > 0 else None
        )
        if status == 429:
            outcome.pushed_back = "rate"
        if outcome.retry_after is not None and outcome.retry_after > retries.MAX_RETRY_AFTER:
            # longer than the harness ever waits (a quota, a bogus header), on a 429 or a 5xx alike: a transient
            # failure of this call, with the usual backoff, and no pause for the other workers
            outcome.problem += (
                f" (provider asks to wait {_duration(outcome.retry_after)}, more than the "
                f"{retries.MAX_RETRY_AFTER:.0f} s the harness waits)"
            )
            outcome.retry_after, outcome.pushed_back = None, None
        return outcome

    def _one_slot_hint(self, role: Role) -> str:
        """What to do about a server that cut a stream short: fewer slots than requests (in a grid, every model and
        role served there shares them)."""
        fix = (
            f'[servers."{role.base_url}"] concurrency = 1 in the grid file'
            if self.sharing
            else "--concurrency 1"
        )
        return f"; the server may serve one request at a time: {fix}, or serve it with more slots (llama.cpp's llama-server: --parallel N)"

    def _failure_hint(self, role: Role, last: Attempt) -> str:
        if last.unavailable:
            return "; pass --flex-fallback N to send such a call at the standard tier after N refusals, or rerun later"
        if last.problem.startswith(TRUNCATED):
            return f"; raise {role.flags[1]} if the model needs the room"
        if "provider asks to wait" in last.problem:
            return "; rerun the same command when the provider accepts requests again"
        if last.problem.startswith("no response") or last.problem.startswith("no complete reply"):
            if role.flex:  # a flex call waits longer than the others by default (--flex-timeout)
                return "; raise --flex-timeout or --call-deadline"
            return (
                "; raise --timeout or --call-deadline"
                if self.settings.transport.stream
                else "; raise --timeout, or use --stream so that only a stalled connection times out"
            )
        return last.hint
