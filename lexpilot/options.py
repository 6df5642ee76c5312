"""The command line every stage takes: its options in the order --help lists them, the argparse types that check a
value as it is parsed, and the Settings an invocation's options make (`settings_from_args`), each refusal one line.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from lexpilot.benchmark.dataset import DEFAULT_DATASET
from lexpilot.benchmark.vocabulary import (
    HISTORY_TYPES,
    ROLE_TABLE,
    ROLES,
    USER_CONDITIONS,
)
from lexpilot.errors import HarnessError
from lexpilot.paths import DEFAULT_OUTPUT_ROOT
from lexpilot.pricing import Price, read_prices
from lexpilot.settings import (
    BACKOFF_BASE,
    BATCH_POLL,
    DEADLINE_TIMEOUTS,
    FLEX_TIMEOUT,
    PAPER_MAX_TOKENS,
    SERVICE_TIERS,
    Batching,
    Role,
    Settings,
    Spending,
    Transport,
    resolve_roles,
)


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
        help="a hard budget for the output root (with --prices): every invocation on it, a grid's every shard and "
        "rerun, counts against it; no call starts that could take the spending past it (docs/cost.md)",
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
