"""Run configuration: the three roles (model, endpoint, key, temperature), the options every stage
takes on the command line and the environment variables behind them, and their validation.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lexpilot.benchmark.dataset import DEFAULT_DATASET
from lexpilot.benchmark.vocabulary import (
    HISTORY_TYPES,
    ROLE,
    ROLE_TABLE,
    ROLES,
    USER_CONDITIONS,
)
from lexpilot.errors import HarnessError
from lexpilot.paths import DEFAULT_OUTPUT_ROOT
from lexpilot.pricing import Budget, Price, read_prices

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

    def budget(self) -> Budget | None:
        """The invocation's hard budget (None: no --max-cost)."""
        if self.max_cost is None:
            return None
        assert self.prices is not None, "--max-cost is refused without --prices (settings_from_args)"
        return Budget(self.max_cost, self.prices)


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


def number(kind: type, low: float, high: float, default_word: bool = False):
    """An argparse type: a finite number in [low, high]; with `default_word`, also 'default' (None)."""

    def parse(text: str):
        if default_word and text == "default":
            return None
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a {'whole ' if kind is int else ''}number"
            ) from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is outside {shown(low)} to {shown(high)}")
        return value

    return parse


def shown(bound: float) -> str:
    """A bound as a reader writes it: 1000000, not 1e+06."""
    return (
        f"{bound:,}".replace(",", "") if float(bound).is_integer() and abs(bound) < 10**15 else f"{bound:g}"
    )


def rate_limits(entries: list[str]) -> dict[str, float]:
    """MODEL=RPM entries (--rate-limit) -> model id -> requests per minute; raises HarnessError on a bad one."""
    limits = {}
    for entry in entries:
        model, _, rpm = entry.rpartition("=")
        try:
            limits[model] = float(rpm)
            if not model or not math.isfinite(limits[model]) or limits[model] <= 0:
                raise ValueError
        except ValueError:
            raise HarnessError(
                f"--rate-limit {entry[:80]!r}: must be MODEL=REQUESTS_PER_MINUTE, a positive number"
            ) from None
    return limits


def given_once(flag: str, values: list[str]) -> list[str]:
    """The values of a list option, each given once (a model or run id named twice would be counted twice)."""
    seen = set()
    for value in values:
        if value in seen:
            raise HarnessError(f"{flag}: {value!r} is given twice; name each once")
        seen.add(value)
    return values


def role_list(text: str) -> tuple[str, ...]:
    chosen = {t.strip() for t in text.split(",") if t.strip()}
    if not chosen or chosen - set(ROLES):
        raise argparse.ArgumentTypeError(f"{text!r}: use eval, user and judge, comma-separated")
    return tuple(r for r in ROLES if r in chosen)


def histories(text: str) -> tuple[str, ...]:
    """--histories: a comma-separated subset of the history types, in the benchmark's order."""
    chosen = {t.strip() for t in text.split(",") if t.strip()}
    if not chosen or chosen - set(HISTORY_TYPES):
        raise argparse.ArgumentTypeError(f"{text!r}: use underspecified, complete or both, comma-separated")
    return tuple(t for t in ("underspecified", "complete") if t in chosen)


def add_common_args(
    parser: argparse.ArgumentParser,
    user_condition: bool = False,
    history_choice: bool = False,
    from_run: bool = False,
    probe_file: bool = False,
) -> None:
    """Every stage's options, in the order --help lists them; the flags add those only some stages take."""
    a = parser.add_argument
    _add_run_args(a)
    _add_sampling_args(a)
    _add_transport_args(a)
    _add_spending_args(a)
    _add_batch_args(a)
    a(
        "--keep-reasoning",
        action="store_true",
        help="save the evaluated model's separate reasoning in its records too (the judge's is always saved)",
    )
    a(
        "--allow-code-change",
        action="store_true",
        help="resume a run started by another version of the harness code (recorded in the manifest)",
    )
    a(
        "--allow-served-model-change",
        action="store_true",
        help="go on when a role's replies say another model served them than its earlier calls' (an alias "
        "re-pointed, a retired id; recorded in the manifest)",
    )
    if from_run:
        a(
            "--from-run",
            required=True,
            metavar="RUN_ID",
            help="the saved run whose generations and User Model replies are reused (same --model)",
        )
    if probe_file:
        a(
            "--probes",
            type=Path,
            required=True,
            help="the probe file the experts filled (user_probes.py template)",
        )
    if history_choice:
        a(
            "--histories",
            type=histories,
            default=("underspecified",),
            help="which histories to answer: underspecified (default), or underspecified,complete as a control",
        )
    if user_condition:
        a(
            "--user-condition",
            choices=USER_CONDITIONS,
            default="standard",
            help="simulated user behaviour (default standard)",
        )


def _add_run_args(a) -> None:
    """The run: its id, the three roles' models, the dataset and where results go."""
    a("--run-id", required=True, help="name of this run; rerunning with the same id resumes it")
    for info in ROLE_TABLE:
        what = info.display if info.display.lower().endswith("model") else f"{info.display} model"
        default = f", else {info.default_model}" if info.default_model else ""
        a(info.flag("model"), help=f"{what} id (else ${info.model_variable}{default})")
    a("--dataset", type=Path, default=DEFAULT_DATASET, help="dataset JSON (default: %(default)s)")
    a(
        "--output-root",
        type=Path,
        default=DEFAULT_OUTPUT_ROOT,
        help="where results go (default: next to the scripts)",
    )
    a("--limit", type=number(int, 1, 10**7), help="evaluate only the first N cases in file order")


def _add_sampling_args(a) -> None:
    """Temperatures and output limits per role (the paper's by default)."""
    temperature = number(float, 0, 2, default_word=True)
    first, *others = ROLE_TABLE  # the evaluated model's options are every role's default
    given, tokens_given = first.flag("temperature"), first.flag("max-tokens")
    borrowers = "".join(
        f", and {r.display} unless {r.flag('temperature')}" for r in others if r.temperature is None
    )
    a(
        given,
        type=temperature,
        default=first.temperature,
        help=f"{first.display}{borrowers} (default {first.temperature:g}; 'default': send none)",
    )
    for r in others:
        if r.temperature is None:
            a(r.flag("temperature"), type=temperature, help=f"{r.display} (default: {given})")
        else:
            a(
                r.flag("temperature"),
                type=temperature,
                default=r.temperature,
                help=f"{r.display} (default {r.temperature:g})",
            )
    tokens = number(int, 1, 10**7)
    a(
        tokens_given,
        type=tokens,
        default=PAPER_MAX_TOKENS,
        help=f"per call, every role unless set below (default {PAPER_MAX_TOKENS})",
    )
    for r in others:
        a(r.flag("max-tokens"), type=tokens, help=f"{r.display} (default: {tokens_given})")


def _add_transport_args(a) -> None:
    """How calls are made and retried, and what a failed case does."""
    transport = Transport()
    a(
        "--timeout",
        type=number(float, 0.001, 86400),
        default=transport.timeout,
        help=f"seconds without a byte before a call is retried (default {transport.timeout:g})",
    )
    a(
        "--call-deadline",
        type=number(float, 0.001, 10**6),
        help="wall-clock seconds one call may take in all before it is abandoned and retried "
        f"(default {DEADLINE_TIMEOUTS} x --timeout)",
    )
    a(
        "--retries",
        type=number(int, 0, 1000),
        default=transport.retries,
        help=f"retries of a transient failure per call (default {transport.retries})",
    )
    a(
        "--concurrency",
        type=number(int, 1, 4096),
        default=transport.concurrency,
        help=f"cases run at once (default {transport.concurrency})",
    )
    a("--keep-going", action="store_true", help="on a failed case, go on with the others")
    _add_tier_args(a)
    a(
        "--stream",
        action="store_true",
        help="stream replies, so --timeout bounds a stalled connection, not a long generation",
    )


def _add_tier_args(a) -> None:
    """The service tier each role asks for, and what a flex call waits and falls back to (docs/cost.md)."""
    for info in ROLE_TABLE:
        a(
            info.flag("service-tier"),
            choices=SERVICE_TIERS,
            help=f"{info.display}: the service tier its requests ask for (flex: batch prices, slower, "
            "sometimes unavailable; default: the standard tier; without the option no tier is sent)",
        )
    a(
        "--flex-timeout",
        type=number(float, 0.001, 86400),
        default=FLEX_TIMEOUT,
        help=f"seconds without a byte before a flex call is retried (default {FLEX_TIMEOUT:g}, as OpenAI advises)",
    )
    a(
        "--flex-fallback",
        type=number(int, 1, 1000),
        metavar="N",
        help="send a call at the standard tier after N 'resource unavailable' answers at the flex tier "
        "(default: never; such a call is recorded, and billed as the reply says it was served)",
    )


def _add_spending_args(a) -> None:
    """The dry run, its quote, and the budget."""
    a("--dry-run", action="store_true", help="print the cases and calls the stage would make; call nothing")
    a(
        "--prices",
        type=Path,
        metavar="FILE",
        help='JSON {"model id": {"prompt": P, "completion": C}} per million '
        "tokens: --dry-run then quotes the cost; needed by --max-cost",
    )
    a(
        "--max-cost",
        type=number(float, 0, 10**9),
        metavar="AMOUNT",
        help="a hard budget for this invocation (with --prices): no call starts that could take the spending past it",
    )
    a(
        "--off-peak",
        action="append",
        default=[],
        metavar="ROLE|MODEL",
        help="start this role's (or model id's) calls only outside its peak windows in --prices (repeatable)",
    )


def _add_batch_args(a) -> None:
    """--batch and its options: the provider's batch API, or offline batch files."""
    a(
        "--batch",
        action="store_true",
        help="advance in cycles through the provider's batch API (about half the "
        "price; answers within 24 h); a batch survives its process: rerun to re-attach",
    )
    a("--batch-detach", action="store_true", help="with --batch: submit the cycle's batches, then exit 0")
    a("--batch-status", action="store_true", help="print the run's batches in flight and exit")
    a(
        "--batch-poll",
        type=number(float, 0.01, 86400),
        default=BATCH_POLL,
        help=f"the most seconds between batch polls, at least 0.01 (default {BATCH_POLL:g}; the first looks "
        "after a submission come sooner: 0.25 s, then doubling)",
    )
    a(
        "--batch-roles",
        type=role_list,
        help="with --batch: the roles sent in batches, e.g. eval,judge (default all); "
        "the others are called synchronously within the same cycles",
    )
    a(
        "--batch-resubmit",
        action="store_true",
        help="with --batch, after a lost batches.json at a provider that "
        "lists batches without their metadata: submit the pending requests again (they may already be paid)",
    )
    a(
        "--batch-files",
        type=Path,
        metavar="DIR",
        help="offline batches for `vllm run-batch`: write each cycle's "
        "input files there and stop; rerun with their output files there to go on",
    )


MAX_RUN_ID = 100  # a run id is a folder name under three folders: keep paths well inside OS limits


def check_run_id(run_id: str, flag: str) -> None:
    """A run id is a folder name under three folders: plain characters, never a path."""
    if len(run_id) > MAX_RUN_ID:
        raise HarnessError(f"{flag} is {len(run_id)} characters long; use at most {MAX_RUN_ID}")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", run_id):
        raise HarnessError(f"{flag} {run_id!r}: use letters, digits, '.', '_' or '-' only")


def off_peak_models(
    names: list[str], roles: dict[str, Role], prices: dict[str, Price] | None, where: str, prices_path=None
) -> tuple[str, ...]:
    """The model ids held for off-peak, from role names or model ids (`where`: the option or the grid file's key,
    for the one-line refusal): each a model of these roles with peak windows in the price file."""
    held = []
    for name in names:
        model = roles[name].model if name in roles else name
        if model not in {r.model for r in roles.values()}:
            raise HarnessError(
                f"{where} {name!r}: not a role (eval, user, judge) nor a model id of this run "
                f"({', '.join(sorted({r.model for r in roles.values()}))})"
            )
        if prices is None:
            raise HarnessError(
                f"{where} {name}: off-peak needs --prices FILE, whose entry for {model!r} gives its peak windows "
                "(tz and peak, docs/cost.md)"
            )
        if prices.get(model) is None or prices[model].windows is None:
            raise HarnessError(
                f"{where} {name}: {prices_path or '--prices'} gives no peak windows for {model!r} (tz and peak, "
                "docs/cost.md); drop the option or add its windows"
            )
        if prices[model].windows.whole_day:  # type: ignore[union-attr]  # checked above
            raise HarnessError(
                f"{where} {name}: the peak windows of {model!r} cover the whole day, so its calls would never "
                "start; drop the option"
            )
        held.append(model)
    return tuple(dict.fromkeys(held))


def transport_of(args: argparse.Namespace, env) -> Transport:
    """How calls travel, from the command line and LEXPILOT_BACKOFF_BASE."""
    backoff = env.get("LEXPILOT_BACKOFF_BASE", str(BACKOFF_BASE))
    try:
        backoff_base = float(backoff)
        if not 0 <= backoff_base <= 3600:
            raise ValueError
    except ValueError:
        raise HarnessError(
            f"LEXPILOT_BACKOFF_BASE={backoff[:20]!r}: must be a number of seconds from 0 to 3600"
        ) from None
    return Transport(
        timeout=args.timeout,
        retries=args.retries,
        concurrency=args.concurrency,
        stream=args.stream,
        call_deadline=args.call_deadline,
        backoff_base=backoff_base,
        flex_timeout=args.flex_timeout,
        flex_fallback=args.flex_fallback,
    )


def settings_from_args(args: argparse.Namespace, env=os.environ) -> Settings:
    check_run_id(args.run_id, "--run-id")
    if getattr(args, "from_run", None) is not None:
        check_run_id(args.from_run, "--from-run")
    prices = read_prices(args.prices) if args.prices else None
    if args.max_cost is not None and prices is None:
        raise HarnessError("--max-cost needs --prices FILE (the price per million tokens of each model id)")
    roles = resolve_roles(args, env)
    unpriced = sorted({r.model for r in roles.values()} - set(prices)) if prices else []
    if args.max_cost is not None and unpriced:
        raise HarnessError(f"--max-cost: {args.prices} has no price for {', '.join(unpriced)}")
    return Settings(
        run_id=args.run_id,
        dataset=args.dataset.resolve(),
        output_root=args.output_root.resolve(),
        limit=args.limit,
        roles=roles,
        max_tokens=args.max_tokens,
        user_condition=getattr(args, "user_condition", "standard"),
        histories=getattr(args, "histories", ("underspecified",)),
        source_run=getattr(args, "from_run", None),
        probes=args.probes.resolve() if getattr(args, "probes", None) else None,
        keep_going=args.keep_going,
        dry_run=args.dry_run,
        allow_code_change=args.allow_code_change,
        allow_served_model_change=args.allow_served_model_change,
        keep_reasoning=args.keep_reasoning,
        transport=transport_of(args, env),
        batching=Batching(
            enabled=bool(
                args.batch or args.batch_detach or args.batch_files or args.batch_roles or args.batch_resubmit
            ),
            roles=args.batch_roles or (),
            detach=args.batch_detach,
            status=args.batch_status,
            poll=args.batch_poll,
            files=args.batch_files.resolve() if args.batch_files else None,
            resubmit=args.batch_resubmit,
        ),
        spending=Spending(
            prices=prices,
            max_cost=args.max_cost,
            off_peak=off_peak_models(args.off_peak, roles, prices, "--off-peak", args.prices),
        ),
    )
