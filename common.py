"""Shared mechanics every stage uses to talk to a model: the prompts of prompts/ and how a history,
key details, focal points and claims are rendered into their slots, and the model calls for the three
roles with the harness's retry rules (transient failures, rate-limit push-back, empty or truncated replies).

Run as a script, it validates a dataset and prints its statistics (the paper's Table 1):
    python common.py [--dataset PATH]
"""
from __future__ import annotations

import os
import random
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path

from config import Role, Settings
from dataset import Case
from errors import Aborted, CaseFailed, FatalError

HERE = Path(__file__).resolve().parent
PROMPT_DIR = HERE / "prompts"

# ----------------------------------------------------------------------------- prompts and rendering

PROMPT_FILES = {
    "lexawn": "lexawn.txt",                  # Table 19
    "force_ask": "dcg_force_ask.txt",        # Table 20
    "force_judge": "force_judge.txt",        # Table 21: Direct, Gold-Standard, forced final prediction
    "user_standard": "user_standard.txt",    # Table 22
    # Appendix E.5 non-ideal users, written from the paper's description in the register of Table 22:
    "user_delayed": "user_delayed.txt",                  # the one hesitant, withholding reply
    "user_self_correction": "user_self_correction.txt",  # the one incomplete or mistaken reply
    "user_correction": "user_correction.txt",            # the spontaneous correction in the next user turn
    "judge_lca": "judge_lca.txt",            # Table 23
    "judge_dcg": "judge_dcg.txt",            # Table 24
    "judge_ljp": "judge_ljp_extract.txt",    # Table 25
}
SLOT = re.compile(r"\{(history|key_facts|ai_response|focus_text|claims)\}")


def load_prompts() -> dict[str, str]:
    return {name: (PROMPT_DIR / file).read_text(encoding="utf-8") for name, file in PROMPT_FILES.items()}


def fill(template: str, **slots: str) -> str:
    """Fill the template's slots in one pass: text inserted is never expanded again."""
    def value(match: re.Match) -> str:
        if match.group(1) not in slots:
            raise KeyError(f"prompt slot {{{match.group(1)}}} was given no value")
        return slots[match.group(1)]
    return SLOT.sub(value, template)


def render_history(messages) -> str:
    """Every message in order as 'User: …' / 'Assistant: …' lines (multi-line content kept)."""
    return "\n".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in messages)


def render_claims(case: Case) -> str:
    # One claim per line: the extraction prompt reads each line as one claim.
    return "\n".join(" ".join(claim.splitlines()) for claim in case.claims)


def render_key_facts(case: Case) -> str:
    """Key details alone (the User Model never sees focal-point text)."""
    details = case.key_details
    flat = [d for ds in details.values() for d in ds] if isinstance(details, dict) else details
    return "\n".join(flat)


def render_focal_points(case: Case) -> str:
    return "\n".join(case.focal_points)


def render_details_by_focal_point(case: Case) -> str:
    """Key details for the DCG judge, each focal point next to its details when they are mapped."""
    if not isinstance(case.key_details, dict):
        return "\n".join(case.key_details)
    return "\n".join(f"【{fp}】\n" + "\n".join(ds) for fp, ds in case.key_details.items())


# ----------------------------------------------------------------------------- model calls

TRANSIENT_STATUS = {408, 409, 429}
# HTTP 400 for a prompt longer than the context: OpenAI, vLLM and llama.cpp word it like this
CONTEXT_WINDOW = re.compile(r"context_length_exceeded|maximum context length|context window|context length", re.I)
MAX_BACKOFF = 60.0


def retry_after_seconds(headers) -> float | None:
    if headers is None:
        return None
    if headers.get("retry-after-ms"):
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def backoff_seconds(attempt: int, retry_after: float | None, base: float) -> float:
    if retry_after is not None:
        return min(retry_after, 10 * MAX_BACKOFF)
    return min(MAX_BACKOFF, base * 2 ** attempt) * random.uniform(0.5, 1.0)


@dataclass
class Usage:
    """Calls and tokens per role, for one record or a whole stage."""
    by_role: dict = field(default_factory=dict)

    def add(self, role: str, prompt_tokens: int, completion_tokens: int, calls: int = 1, unreported: int = 0) -> None:
        """`unreported`: calls whose reply carried no token counts (e.g. llama.cpp's streamed replies)."""
        entry = self.by_role.setdefault(role, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        entry["calls"] += calls
        entry["prompt_tokens"] += prompt_tokens
        entry["completion_tokens"] += completion_tokens
        if unreported:
            entry["unreported_calls"] = entry.get("unreported_calls", 0) + unreported

    def merge(self, other: dict) -> None:
        for role, e in other.items():
            self.add(role, e["prompt_tokens"], e["completion_tokens"], e["calls"], e.get("unreported_calls", 0))


class Throttle:
    """Requests in flight to one endpoint: on HTTP 429 every worker waits out Retry-After and the limit
    halves; each success raises it again (AIMD), so a rate-limited provider is not hammered."""

    def __init__(self, limit: int):
        self.max_limit, self.limit, self.in_flight = limit, float(limit), 0
        self.resume_at = self.last_cut = 0.0
        self.cond = threading.Condition()

    def acquire(self, abort: threading.Event) -> None:
        with self.cond:
            while True:
                if abort.is_set():
                    raise Aborted()
                wait = self.resume_at - time.monotonic()
                if wait <= 0 and self.in_flight < int(self.limit):
                    self.in_flight += 1
                    return
                self.cond.wait(min(max(wait, 0.01), 0.5))

    def release(self, rate_limited: bool, retry_after: float | None) -> None:
        with self.cond:
            self.in_flight -= 1
            now = time.monotonic()
            if rate_limited:
                pause = retry_after if retry_after is not None else 1.0
                self.resume_at = max(self.resume_at, now + pause)
                if now - self.last_cut > pause:  # one cut per push-back, not one per rejected request
                    self.limit, self.last_cut = max(1.0, self.limit / 2), now
            else:
                self.limit = min(self.max_limit, self.limit + 1 / self.limit)
            self.cond.notify_all()


RATE_LIMITED_ATTEMPTS = 30  # 429s mean "slow down", not "failed": waited out under their own cap


def _message_of(error: Exception) -> str:
    text = getattr(error, "message", None) or str(error)
    return " ".join(text.split())[:160]


class ModelCaller:
    """Chat completions for the three roles, with the retry rules of the harness."""

    def __init__(self, settings: Settings, progress, abort: threading.Event,  # progress: runner.Progress
                 clients: dict | None = None, backoff_base: float | None = None):
        import openai  # imported here so that offline commands (validation, results) never need it
        self.openai = openai
        self.settings, self.progress, self.abort = settings, progress, abort
        self.backoff_base = backoff_base if backoff_base is not None else \
            float(os.environ.get("LEXPILOT_BACKOFF_BASE", "1.0"))
        self.throttles = {url: Throttle(settings.concurrency * 2)
                          for url in {r.base_url for r in settings.roles.values()}}
        self.clients = clients or {
            role: openai.OpenAI(base_url=r.base_url, api_key=r.api_key or "EMPTY",
                                timeout=settings.timeout, max_retries=0)
            for role, r in settings.roles.items()
        }

    def _request(self, role: Role, prompt: str):
        kwargs = dict(model=role.model, messages=[{"role": "user", "content": prompt}],
                      temperature=role.temperature, max_tokens=self.settings.max_tokens, n=1)
        client = self.clients[role.name]
        if not self.settings.stream:
            response = client.chat.completions.create(**kwargs)
            if not response.choices:
                return "", None, response.usage
            choice = response.choices[0]
            return choice.message.content or "", choice.finish_reason, response.usage
        parts, finish, usage = [], None, None
        stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
        try:
            for chunk in stream:
                if self.abort.is_set():
                    raise Aborted()
                usage = chunk.usage or usage
                for choice in chunk.choices or ():
                    if choice.delta and choice.delta.content:
                        parts.append(choice.delta.content)
                    finish = choice.finish_reason or finish
        finally:
            stream.close()
        return "".join(parts), finish, usage

    def chat(self, role_name: str, prompt: str, usage: Usage) -> str:
        """One non-empty, untruncated reply; transient failures are retried, permanent ones raise FatalError."""
        role = self.settings.roles[role_name]
        throttle = self.throttles[role.base_url]
        attempts = self.settings.retries + 1
        attempt = rate_limited = 0
        problem = ""
        while attempt < attempts:
            retry_after, problem = None, ""
            throttle.acquire(self.abort)
            self.progress.update(in_flight=1)
            try:
                text, finish, tokens = self._request(role, prompt)
            except self.openai.APIStatusError as e:
                status = e.status_code
                if status == 400 and CONTEXT_WINDOW.search(f"{getattr(e, 'code', '')} {e.message}"):
                    # this case's prompt is too long for this model: no retry helps, the other cases may fit
                    raise CaseFailed(f"{role.describe()}: the prompt plus --max-tokens {self.settings.max_tokens} "
                                     f"exceed the model's context window ({' '.join(e.message.split())[:240]}). "
                                     "Lower --max-tokens or serve the model with a longer context") from None
                if status not in TRANSIENT_STATUS and status < 500:
                    hint = {401: "check the API key variable for this role",
                            403: "check the API key's permissions",
                            404: "check the model id and the base URL"}.get(status, "check the request settings")
                    raise FatalError(f"{role.describe()}: HTTP {status}: {_message_of(e)} ({hint})") from None
                problem = f"HTTP {status}"
                retry_after = retry_after_seconds(e.response.headers)
            except self.openai.APITimeoutError:
                problem = f"no response within --timeout {self.settings.timeout:g}s"
            except self.openai.APIConnectionError as e:
                problem = f"connection error: {_message_of(e.__cause__ or e)}"
            else:
                if tokens is not None and tokens.prompt_tokens is not None:
                    usage.add(role_name, tokens.prompt_tokens or 0, tokens.completion_tokens or 0)
                else:
                    usage.add(role_name, 0, 0, unreported=1)
                if finish == "length":
                    problem = f"reply truncated at --max-tokens {self.settings.max_tokens}"
                elif not text.strip():
                    problem = "empty reply"
                else:
                    return text
            finally:
                self.progress.update(in_flight=-1)
                pushed_back = problem == "HTTP 429"
                throttle.release(pushed_back, retry_after)
            self.progress.retry(f"{role.describe()}: {problem}")
            if pushed_back and retry_after is not None and rate_limited < RATE_LIMITED_ATTEMPTS:
                rate_limited += 1  # the throttle makes every worker wait out Retry-After
                continue
            attempt += 1
            if attempt < attempts and self.abort.wait(backoff_seconds(attempt - 1, retry_after, self.backoff_base)):
                raise Aborted()
        hint = ("; raise --max-tokens if the model needs the room" if problem.startswith("reply truncated") else
                "; raise --timeout, or use --stream so that only a stalled connection times out"
                if problem.startswith("no response") else "")
        raise CaseFailed(f"{role.describe()}: {problem} (after {attempts} attempts"
                         + (f" and {rate_limited} rate-limited ones)" if rate_limited else ")") + hint)


if __name__ == "__main__":
    from dataset import main
    sys.exit(main())
