"""Run configuration: the three roles (model, endpoint, key, temperature), the options every stage
takes on the command line and the environment variables behind them, and their validation.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lexpilot.benchmark.vocabulary import (
    ROLE,
    ROLE_TABLE,
    ROLES,
)
from lexpilot.errors import HarnessError
from lexpilot.pricing import Budget, Price
from lexpilot.spending import Ledger

# Every default declared once, read by the dataclasses, the command line and its help (issue 37 item 7): the paper's
# generation settings (Appendix E.1: each role's temperature is in the roles' table, ROLE_TABLE), and how calls travel
PAPER_MAX_TOKENS = 8192
TIMEOUT = 120.0  # seconds of silence
FLEX_TIMEOUT = 900.0  # a flex call's: OpenAI's flex guide asks clients to wait 15 minutes
# the service tiers a role may ask for: the ones the price file can price (OpenAI's "priority" costs more than the
# standard tier and "auto" may be served at it: neither is offered, so no bill is under-counted)
SERVICE_TIERS = ("default", "flex")
DEADLINE_TIMEOUTS = 10  # one call's wall-clock deadline, in timeouts


BACKOFF_BASE = 1.0  # seconds: the first retry's backoff, doubling (LEXPILOT_BACKOFF_BASE)
BATCH_POLL = 30.0  # seconds: the longest wait between looks at batches in flight (--batch-poll)


@dataclass(frozen=True)
class Role:
    name: str  # eval | user | judge
    model: str
    base_url: str
    api_key: str = field(repr=False)  # never written anywhere
    temperature: float | None  # None: none sent, the provider's default applies ("default" in the manifest)
    max_tokens: int = PAPER_MAX_TOKENS
    # where its key came from, when not the role's own variables (a grid file's key_variable)
    key_variable: str = ""
    # the service tier its requests ask for (None: none sent, the provider's default); "flex" is billed at batch
    # prices, answers slower and is sometimes unavailable (docs/cost.md)
    service_tier: str | None = None

    @property
    def host(self) -> str:
        parts = urlsplit(self.base_url)
        assert parts.hostname is not None, "a base URL names a host (check_base_url)"
        return parts.hostname + (f":{parts.port}" if parts.port else "")

    @property
    def flex(self) -> bool:
        return self.service_tier == "flex"

    @property
    def flags(self) -> tuple[str, str]:
        """The command-line flags of this role's temperature and output limit."""
        return ROLE[self.name].flag("temperature"), ROLE[self.name].flag("max-tokens")

    def describe(self) -> str:
        return f"{ROLE[self.name].display} {self.model!r} at {self.host}"


@dataclass(frozen=True)
class Transport:
    """How calls travel (never what they ask): it may differ between invocations of the same run."""

    timeout: float = TIMEOUT
    retries: int = 3
    concurrency: int = 8  # cases at once
    stream: bool = False
    # wall-clock seconds one call may take, however its bytes trickle in
    call_deadline: float | None = None  # None: DEADLINE_TIMEOUTS x the call's timeout
    backoff_base: float = BACKOFF_BASE
    flex_timeout: float = FLEX_TIMEOUT  # a flex call's silence timeout (--flex-timeout)
    # a call refused this many times as unavailable at the flex tier is sent at the standard tier (None: never)
    flex_fallback: int | None = None

    def timeout_of(self, role: Role) -> float:
        """The seconds of silence a role's call waits: a flex call's are longer (FLEX_TIMEOUT)."""
        return self.flex_timeout if role.flex else self.timeout

    def deadline_of(self, role: Role) -> float:
        """The wall-clock seconds one call of a role may take in all."""
        return self.call_deadline or DEADLINE_TIMEOUTS * self.timeout_of(role)


@dataclass(frozen=True)
class Batching:
    """Batch mode (--batch and the options beside it)."""

    enabled: bool = False
    roles: tuple[str, ...] = ()  # the roles asked through batches (none given: all)
    detach: bool = False
    status: bool = False
    poll: float = BATCH_POLL
    files: Path | None = None  # vLLM run-batch files instead of a batch API
    resubmit: bool = False  # after a lost ledger, submit again what the provider cannot show as this run's

    @property
    def asked(self) -> tuple[str, ...]:
        """The roles sent in batches when batch mode is on: those --batch-roles names, every role by default."""
        return self.roles or ROLES


@dataclass(frozen=True)
class Spending:
    prices: dict[str, Price] | None = None  # model id -> its prices per million tokens
    max_cost: float | None = None  # the invocation's hard budget
    # the model ids whose calls start only outside their peak windows (--off-peak, a grid file's off_peak)
    off_peak: tuple[str, ...] = ()

    def budget(self, ledger: Ledger | None = None) -> Budget | None:
        """The hard budget (None: no --max-cost), its spending kept in `ledger` (spending.py; None: this
        invocation's alone)."""
        if self.max_cost is None:
            return None
        assert self.prices is not None, "--max-cost is refused without --prices (settings_from_args)"
        return Budget(self.max_cost, self.prices, ledger)


@dataclass(frozen=True)
class Settings:
    """One invocation of a stage: the run and what decides its records, then how calls travel, batch mode and
    spending, each grouped apart."""

    run_id: str
    dataset: Path
    output_root: Path
    limit: int | None
    roles: dict[str, Role]
    max_tokens: int
    user_condition: str = "standard"
    histories: tuple[str, ...] = ("underspecified",)
    source_run: str | None = None  # a re-judged run: the run whose generations it reuses
    probes: Path | None = None  # the probe study's filled probe file
    keep_going: bool = False
    dry_run: bool = False
    allow_code_change: bool = False
    allow_served_model_change: bool = False
    keep_reasoning: bool = False
    transport: Transport = Transport()
    batching: Batching = Batching()
    spending: Spending = Spending()

    @property
    def secrets(self) -> tuple[str, ...]:
        # a real key is long; a placeholder such as EMPTY is not a secret, and replacing it would mangle paths
        return tuple({r.api_key for r in self.roles.values() if len(r.api_key) >= 8})

    def redact(self, text: str) -> str:
        """The text with every configured API key replaced, for messages and files."""
        return redact(text, self.secrets)


def redact(text: str, secrets) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted key]")
    return text


def check_base_url(url: str, variable: str) -> str:
    """An http(s)://host[:port]/... URL, or a one-line error naming the variable (before any call)."""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        parts, port_ok = urlsplit(""), False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok or parts.username:
        shown = url if len(url) < 12 and not any(c.isalnum() for c in url[4:]) else f"{url[:8]}…"
        raise HarnessError(
            f"{variable}: {shown!r} is not an http(s)://host[:port]/… base URL "
            "(is a key in the URL variable?)"
        )
    return url


DEFAULT_BASE_URL = "https://api.openai.com/v1"


def resolve_roles(args: argparse.Namespace, env=os.environ) -> dict[str, Role]:
    """Model ids, endpoints and keys per role, with the documented fallbacks."""
    roles = {}
    for info in ROLE_TABLE:
        model = getattr(args, info.key("model")) or env.get(info.model_variable) or info.default_model
        if not model:
            raise HarnessError(
                f"no {info.display} chosen: pass {info.flag('model')} MODEL_ID or set {info.model_variable}"
            )
        # would look like another id
        if model.strip() != model or not model.isprintable() or "\u200b" in model:
            raise HarnessError(
                f"{info.flag('model')} / {info.model_variable} {model!r}: a model id with surrounding spaces or "
                "invisible characters; pass the id alone"
            )
        prefix = info.env
        variable = next((v for v in (f"{prefix}_BASE_URL", "OPENAI_BASE_URL") if env.get(v)), "the default")
        base_url = check_base_url(
            env.get(f"{prefix}_BASE_URL") or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL, variable
        )
        key_variable = next((v for v in (f"{prefix}_API_KEY", "OPENAI_API_KEY") if env.get(v)), None)
        api_key = check_api_key(env[key_variable], key_variable) if key_variable else ""
        temperature = getattr(args, info.key("temperature"))
        if (
            temperature is None and info.temperature is None
        ):  # the User Model's: --temperature's unless its own
            temperature = args.temperature
        max_tokens = getattr(args, info.key("max-tokens")) or args.max_tokens
        tier = getattr(args, info.key("service-tier"), None)
        roles[info.name] = Role(
            info.name, model, base_url, api_key, temperature, max_tokens, service_tier=tier
        )
    return roles


def check_api_key(key: str, variable: str) -> str:
    """A key as an HTTP header can carry it, or a one-line error naming the variable (never the key)."""
    problem = (
        "ends with a line break"
        if key.rstrip("\r\n") != key
        else "begins or ends with spaces"
        if key.strip() != key
        else "holds non-ASCII or control characters"
        if not key.isascii() or not key.isprintable()
        else None
    )
    if problem:
        raise HarnessError(
            f"{variable}: the API key {problem} (not shown); set the variable to the key alone"
        )
    return key


def key_variables(role: str) -> str:
    """Where a role's key is read from, for messages."""
    return f"{ROLE[role].env}_API_KEY, then OPENAI_API_KEY"
