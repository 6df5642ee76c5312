"""The quote for a grid (evaluated models × runs × stages) before any call: what each stage's dry run would count
for every (model, run), summed per stage and role and per endpoint; cost bounds and an expected figure at
synchronous and batch prices; and an estimated wall time from the calls, their longest chain per case, the
concurrency and each endpoint's rate limit. Cases saved under the output root are not counted again.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import re
from collections import Counter
from dataclasses import dataclass, field

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import load_prompts
from lexpilot.benchmark.vocabulary import CONDITION_SCRIPTS, ROLES
from lexpilot.errors import HarnessError, OneLineParser
from lexpilot.models.limits import requests_per_minute
from lexpilot.options import add_common_args, given_once, number, settings_from_args
from lexpilot.protocols.catalog import DEFAULT_STAGE_SET, GRID_STAGES, STAGE_SETS
from lexpilot.protocols.steps import Stage
from lexpilot.running.context import RunContext
from lexpilot.running.grid.cells import reads
from lexpilot.running.quote import (
    CARRIED_REPLIES,
    carried_limit,
    clock_lines,
    longest_chain,
    planned_calls,
    quoted_price,
    role_money,
    saved_usage_per_case,
)
from lexpilot.running.state import read_only_state
from lexpilot.settings import Settings
from lexpilot.storage.code import CodeNow
from lexpilot.windows import utc_now

BATCH_WINDOW_HOURS = 24  # OpenAI's batch completion window: a cycle takes at most this long


@dataclass
class Part:
    """One stage of one (evaluated model, run): what its dry run counts, and what it would cost."""

    model: str
    run_id: str
    stage: str
    settings: Settings
    pending: int = 0
    calls: Counter = field(default_factory=Counter)  # role -> calls at most
    chain: int = 0  # the most calls one case makes in a row
    reads: tuple[str, ...] = ()  # the quoted stages whose records it reads (they run before it)
    # (role, "sync"|"batch") -> (low, high, expected or None) or None
    money: dict = field(default_factory=dict)
    # for the roles whose model is priced by the clock: their money off-peak and at peak (the money above has its
    # high bound at peak unless the model is held for off-peak: the worst case)
    clock_money: dict = field(default_factory=dict)
    peak_money: dict = field(default_factory=dict)
    refused: str = ""  # why the stage would not run (its message), nothing counted


def quote_part(
    stage: Stage,
    settings: Settings,
    selected: list[Case],
    dataset_sha: str,
    prompts: dict,
    saved_usage: dict,
    code_now: CodeNow | None = None,
) -> Part:
    """The stage's dry-run figures for one (model, run); an unfinished upstream stage counts at the most calls."""
    part = Part(settings.roles["eval"].model, settings.run_id, stage.name, settings)
    try:
        context = RunContext.of(stage, settings, (selected, dataset_sha), check=False, code_now=code_now)
        state = read_only_state(context, whole_upstream=False)
    except HarnessError as e:
        part.refused = str(e)
        return part
    pending = state.pending()
    part.pending, part.chain = len(pending), longest_chain(state, pending)
    part.calls, chars, low = planned_calls(state, pending, prompts)
    for role, calls in part.calls.items():
        price, limit = quoted_price(settings, role), settings.roles[role].max_tokens
        # the batch columns send the roles --batch-roles names (every role by default) through a batch API
        batchable = 1.0 if role in settings.batching.asked else 0.0
        for mode, batched in (("sync", 0.0), ("batch", batchable)):
            counts = (
                low[role],
                chars[role] + calls * CARRIED_REPLIES * carried_limit(settings),
                calls * limit,
                saved_usage.get(role),
                part.pending,
                batched,
            )
            part.money[(role, mode)] = None if price is None else role_money(price, *counts)
            if price is not None and price.windows is not None:
                peak = part.peak_money[(role, mode)] = role_money(price.at_peak(), *counts)
                off = part.clock_money[(role, mode)] = part.money[(role, mode)]
                if price.windows.whole_day:  # every call is sent at peak: no bound is off-peak
                    part.money[(role, mode)] = peak
                elif settings.roles[role].model not in settings.spending.off_peak:
                    part.money[(role, mode)] = (off[0], peak[1], off[2])  # the worst case: every call at peak
    return part


def stage_settings(stages: list[Stage], options: list[str], models: list[str] | None = None):
    """settings_of(stage, model, run_id): the settings each stage would run with, given the stage options of the
    command (each stage reads those it takes, as its own script would: --user-condition only where it applies); an
    option no chosen stage takes is refused. `--off-peak MODEL` naming another of the grid's evaluated `models`
    holds nothing in this cell (that model's cells hold it)."""
    taken = [o for o in options if o.split("=")[0] in ("--run-id", "--model")]
    if taken:
        raise HarnessError(f"{taken[0]}: a grid names its runs and models with --run-ids/--runs and --models")
    parsers = {}
    for stage in stages:  # no abbreviations: --mod must not stand for --model
        parser = argparse.ArgumentParser(prog=stage.script, add_help=False, allow_abbrev=False)
        add_common_args(
            parser, stage.user_condition, stage.history_choice, stage.source_run, stage.probe_file
        )
        parsers[stage.name] = parser
    unknown = None
    for parser in parsers.values():
        _, left = parsed(parser, ["--run-id", "x", *options])
        unknown = set(left) if unknown is None else unknown & set(left)
    if unknown:
        raise HarnessError(
            f"{' '.join(o for o in options if o in unknown)}: not an option of any chosen stage "
            "(see python LexAwN_gen.py --help)"
        )

    def settings_of(stage: Stage, model: str, run_id: str) -> Settings:
        args, _ = parsed(parsers[stage.name], ["--run-id", run_id, "--model", model, *options])
        others = set(models or ()) - {model}
        args.off_peak = [name for name in args.off_peak or [] if name not in others]
        return settings_from_args(args)

    return settings_of


def parsed(parser: argparse.ArgumentParser, argv: list[str]):
    """A stage parser's known options; its complaint (a bad value) as one line, not its whole usage."""
    complaint = io.StringIO()
    try:
        with contextlib.redirect_stderr(complaint):
            return parser.parse_known_args(argv)
    except SystemExit:
        message = complaint.getvalue().strip().splitlines()[-1:] or ["bad option"]
        raise HarnessError(message[0].split("error: ", 1)[-1]) from None


def grid_parser(description: str) -> OneLineParser:
    """The command line quote_grid.py and run_grid.py start from: the grid's models, runs and stages. Every other
    option is a stage option, passed to each stage as its script takes it (--run-id too: not --run-ids)."""
    parser = OneLineParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    add_grid_args(parser)
    return parser


def add_grid_args(parser: argparse.ArgumentParser) -> None:
    """The options run_grid.py and quote_grid.py share, first in both: the grid's evaluated models, runs and
    stages."""
    # a flag given twice adds to the first (argparse would keep only the last, quoting half the grid in
    # silence)
    parser.add_argument(
        "--models", nargs="+", action="extend", help="the evaluated model ids (default: the grid file's)"
    )
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument(
        "--runs", type=number(int, 1, 1000), default=5, help="run1 .. runN (default 5, as the paper)"
    )
    runs.add_argument("--run-ids", nargs="+", action="extend", help="these run ids instead")
    parser.add_argument(
        "--stages",
        nargs="+",
        default=[DEFAULT_STAGE_SET],
        metavar="NAME",
        help=f"entry points or sets: {', '.join([*STAGE_SETS, *GRID_STAGES])} (default: "
        f"{DEFAULT_STAGE_SET}; paper: what LexAwN_gen.py, eval_DCG.py and eval_LJP.py run; "
        "all: the later stages too)",
    )


def grid_run_ids(args: argparse.Namespace) -> list[str]:
    """The grid's run ids: --run-ids, else run1 .. runN (--runs); a model or run id named twice is refused."""
    given_once("--models", args.models or [])
    given_once("--run-ids", args.run_ids or [])
    return args.run_ids or [f"run{i}" for i in range(1, args.runs + 1)]


def allowed_rates(limits: dict, settings: Settings) -> dict[str, float]:
    """Model id -> the requests a minute its Limits allow (a request counted at its role's output limit against
    tpm), for the wall time; models limited only in concurrency are left out."""
    tokens = {r.model: r.max_tokens for r in settings.roles.values()}
    allowed = {m: requests_per_minute(lim, tokens.get(m, settings.max_tokens)) for m, lim in limits.items()}
    return {m: rpm for m, rpm in allowed.items() if rpm is not None}


def check_rate_limits(parts: list[Part], limits: dict) -> None:
    """A --rate-limit must name an endpoint of the grid (a misspelt model id would silently change nothing)."""
    endpoints = set(endpoint_calls(parts)) | {p.settings.roles[r].model for p in parts for r in ROLES}
    unknown = sorted(set(limits) - endpoints)
    if unknown:
        raise HarnessError(
            f"--rate-limit {', '.join(unknown)}: no role of this grid uses that model id (the grid's: "
            f"{', '.join(sorted(endpoints))})"
        )


def quote_grid(
    stages: list[Stage],
    settings_of,
    models: list[str],
    run_ids: list[str],
    selected: list[Case],
    dataset_sha: str,
    code_now: CodeNow | None = None,
) -> list[Part]:
    """Every (model, run, stage) part; `settings_of(stage, model, run_id)` gives the settings the stage would run
    with; every part's manifest is built with the code as `code_now` read it (None: read here, once)."""
    prompts, parts = load_prompts(), []
    code_now = code_now or CodeNow.read()
    # the grid's users: a stage that takes no --user-condition belongs to standard runs, and refuses the others
    condition = next(
        (settings_of(s, models[0], run_ids[0]).user_condition for s in stages if s.user_condition), "standard"
    )
    for stage in stages:
        saved_usage = None
        for model in models:
            for run_id in run_ids:
                settings = settings_of(stage, model, run_id)
                if condition != "standard" and not stage.user_condition:
                    part = Part(model, run_id, stage.name, settings)
                    part.refused = (
                        f"a run with the {condition} user takes only {', '.join(CONDITION_SCRIPTS)}; "
                        "the other stages belong to standard runs (leave them out of --stages)"
                    )
                    parts.append(part)
                    continue
                if saved_usage is None:  # the same steps and root for every part of a stage
                    saved_usage = saved_usage_per_case(
                        settings.output_root, list(stage.enabled_steps(settings))
                    )
                parts.append(
                    quote_part(stage, settings, selected, dataset_sha, prompts, saved_usage, code_now)
                )
                parts[-1].reads = tuple(e.name for e in stages if e is not stage and reads(stage, e))
    return parts


# ----------------------------------------------------------------------------- sums


def endpoint_calls(parts: list[Part]) -> Counter:
    """Calls per model id: the User Model and the judge are one endpoint for every evaluated model."""
    calls: Counter[str] = Counter()
    for part in parts:
        for role, n in part.calls.items():
            calls[part.settings.roles[role].model] += n
    return calls


def summed_money(parts: list[Part], key) -> dict:
    """key(part, role) -> {mode: [low, high, expected]}, None where a price is missing; expected None where no
    saved run gives one for some part."""
    sums: dict = {}
    for part in parts:
        for (role, mode), money in part.money.items():
            entry = sums.setdefault(key(part, role), {}).setdefault(mode, [0.0, 0.0, 0.0])
            if money is None or entry[0] is None:
                sums[key(part, role)][mode] = [None, None, None]
                continue
            low, high, expected = money
            entry[0] += low
            entry[1] += high
            entry[2] = None if expected is None or entry[2] is None else entry[2] + expected
    return sums


@dataclass(frozen=True)
class Timing:
    seconds_per_call: float
    concurrency: int
    jobs: int  # (model, run) jobs at once; 0: all
    rate_limits: dict  # model id -> requests per minute


def wall_time(parts: list[Part], timing: Timing) -> tuple[float, float, dict]:
    """(seconds from the calls' chains, seconds from the busiest endpoint's rate limit, seconds per limited
    endpoint). A (model, run) job runs its stages one after another, each in waves of `concurrency` cases, a
    wave taking its longest chain of calls; jobs run side by side (`jobs` at once, all by default)."""
    per_job: dict[tuple[str, str], float] = {}
    for part in parts:
        waves = math.ceil(part.pending / timing.concurrency) if part.pending else 0
        job = (part.model, part.run_id)
        per_job[job] = per_job.get(job, 0.0) + waves * part.chain * timing.seconds_per_call
    at_once = timing.jobs or len(per_job) or 1
    chains = (
        max(per_job.values(), default=0.0) if at_once >= len(per_job) else sum(per_job.values()) / at_once
    )
    limited = {
        model: calls / timing.rate_limits[model] * 60
        for model, calls in endpoint_calls(parts).items()
        if model in timing.rate_limits
    }
    return chains, max(limited.values(), default=0.0), limited


def batch_cycles(parts: list[Part]) -> tuple[int, int]:
    """Batch mode's cycles for the slowest (model, run), each cycle sending every case's next call: (with its stages
    side by side, as run_grid.py --batch runs them: its longest chain of stages each reading the one before; one
    stage after another, as the README's loop of stage scripts runs them: their sum)."""
    jobs: dict[tuple, dict[str, Part]] = {}
    for part in parts:
        jobs.setdefault((part.model, part.run_id), {})[part.stage] = part

    def longest(job: dict[str, Part], name: str) -> int:
        return job[name].chain + max((longest(job, r) for r in job[name].reads if r in job), default=0)

    side = max((longest(job, name) for job in jobs.values() for name in job), default=0)
    return side, max((sum(p.chain for p in job.values()) for job in jobs.values()), default=0)


# ----------------------------------------------------------------------------- what the quote prints

MODES = ("sync", "batch")


def money_cells(sums: dict) -> list:
    """Low, high and expected, synchronous then batch, as numbers ("n/a": a model without a price; "none": no saved
    run); the report draws them (reporting/tables/quote_tables.py)."""
    cells = []
    for mode in MODES:
        low, high, expected = sums.get(mode, (None, None, None))
        cells += ["n/a"] * 3 if low is None else [low, high, "none" if expected is None else expected]
    return cells


NOTHING = {mode: (0.0, 0.0, 0.0) for mode in MODES}  # the money of no call
MONEY_HEADERS = ["Sync low", "Sync high", "Sync expected", "Batch low", "Batch high", "Batch expected"]


def quote_tables(parts: list[Part]) -> list[tuple[str, str, list[str], list[list]]]:
    """(id, title, headers, rows) of the quote's tables, per stage and role, per evaluated model, per endpoint;
    counts as ints and money as floats (none when nothing is counted)."""
    counted = [p for p in parts if not p.refused]
    if not counted:
        return []
    return [
        (
            "grid_quote_stages",
            "Calls at most (retries not counted) and cost per stage and role, every model "
            "and run of the grid; cases saved under the output root are not counted",
            ["Stage", "Role", "Cases to do", "Calls"] + MONEY_HEADERS,
            _stage_rows(counted),
        ),
        (
            "grid_quote_models",
            "Per evaluated model (its User Model and judge calls included)",
            ["Evaluated model", "Calls"] + MONEY_HEADERS,
            _model_rows(counted),
        ),
        (
            "grid_quote_endpoints",
            "Calls per endpoint (model id): the User Model and the judge serve every evaluated model",
            ["Model id", "Roles", "Calls"],
            _endpoint_rows(counted),
        ),
    ]


def _stage_rows(counted: list[Part]) -> list[list]:
    """A row per stage and role, in the grid's order, and the total row."""
    stage_order = list(dict.fromkeys(p.stage for p in counted))
    per_stage = summed_money(counted, lambda p, role: (p.stage, role))
    calls: Counter[tuple[str, str]] = Counter()
    for part in counted:
        for role, n in part.calls.items():
            calls[(part.stage, role)] += n
    stage_rows = [
        [
            stage,
            role,
            sum(p.pending for p in counted if p.stage == stage),
            calls[(stage, role)],
            *money_cells(per_stage[(stage, role)]),
        ]
        for stage in stage_order
        for role in ROLES
        if (stage, role) in per_stage
    ]
    total = summed_money(counted, lambda p, role: "all")
    stage_rows.append(["total", "", "", sum(calls.values()), *money_cells(total.get("all", NOTHING))])
    return stage_rows


def _model_rows(counted: list[Part]) -> list[list]:
    """A row per evaluated model: its calls and money, its User Model's and judge's included."""
    per_model = summed_money(counted, lambda p, role: p.model)
    return [
        [
            model,
            sum(sum(p.calls.values()) for p in counted if p.model == model),
            *money_cells(per_model.get(model, NOTHING)),
        ]
        for model in dict.fromkeys(p.model for p in counted)
    ]


def _endpoint_rows(counted: list[Part]) -> list[list]:
    """A row per endpoint (model id), the busiest first: the roles it serves and its calls."""
    endpoints = endpoint_calls(counted)
    return [
        [
            model,
            ", ".join(
                sorted({role for p in counted for role in p.calls if p.settings.roles[role].model == model})
            ),
            n,
        ]
        for model, n in endpoints.most_common()
    ]


def refusal_lines(parts: list[Part]) -> list[str]:
    """The parts not counted, one line per reason (compared without the run folder it names first) with its stages
    and how many parts it holds: a grid refused for one reason in every cell is one line."""
    reasons: dict[str, list[Part]] = {}
    for part in (p for p in parts if p.refused):
        reasons.setdefault(RUN_PATH.sub("", part.refused), []).append(part)
    lines = []
    for refused in reasons.values():
        first = refused[0]
        if len(refused) == 1:
            lines.append(
                f"not counted: {first.stage}, model {first.model!r}, run {first.run_id}: {first.refused}"
            )
            continue
        stages = ", ".join(dict.fromkeys(p.stage for p in refused))
        lines.append(
            f"not counted: {len(refused)} of {len(parts)} parts ({stages}), for one reason; the first, model "
            f"{first.model!r}, run {first.run_id}: {first.refused}"
        )
    return lines


RUN_PATH = re.compile(r"^\S*?manifest\.json: |^\S*/runs/\S*?: ")


def clock_notes(counted: list[Part], seconds: float) -> list[str]:
    """Each endpoint priced by the clock, at synchronous prices: off-peak (the tables' figures), at peak, and as its
    calls would fall over the estimated wall time from now (all off-peak when the grid holds it for off-peak)."""
    lines = []
    for model in sorted({p.settings.roles[r].model for p in counted for (r, _) in p.peak_money}):
        mine = [(p, role) for p in counted for (role, mode) in p.peak_money if mode == "sync"]
        mine = [(p, role) for p, role in mine if p.settings.roles[role].model == model]
        price = (mine[0][0].settings.spending.prices or {})[model]
        assert price.windows is not None, "only a model with windows has peak money"
        off, peak = (
            summed_windows([getattr(p, kind)[(role, "sync")] for p, role in mine])
            for kind in ("clock_money", "peak_money")
        )
        held = any(model in p.settings.spending.off_peak for p, _ in mine)
        roles = ", ".join(sorted({role for _, role in mine}))
        lines.append(f"{model} ({roles}) is priced by the clock; at synchronous prices:")
        share = 0.0 if held else price.windows.peak_share(utc_now(), seconds)
        lines += clock_lines(price.windows, off, peak, held, share, seconds)
    return lines


def summed_windows(money: list[tuple]) -> tuple:
    """(low, high, expected) summed over parts (expected None where any part has none)."""
    return tuple(None if any(m[i] is None for m in money) else sum(m[i] for m in money) for i in range(3))


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.1f} min"


@dataclass(frozen=True)
class GridQuote:
    """A grid's quote as printed: its tables (id, title, headers, rows of numbers), its notes, and whether a stage
    would refuse to run (then not counted, and the exit status is 1)."""

    tables: list[tuple[str, str, list[str], list[list]]]
    notes: list[str]
    refused: bool


def grid_quote(parts: list[Part], timing: Timing) -> GridQuote:
    """The quote quote_grid.py and run_grid.py --dry-run print, for these parts at this timing."""
    return GridQuote(quote_tables(parts), quote_notes(parts, timing), any(p.refused for p in parts))


def quote_notes(parts: list[Part], timing: Timing) -> list[str]:
    """The wall-time estimate, batch cycles, and the parts not counted (a stage that would refuse to run)."""
    counted = [p for p in parts if not p.refused]
    if not counted:
        return ["nothing counted: every stage of every (model, run) would be refused"] + refusal_lines(parts)
    chains, limited, per_endpoint = wall_time(counted, timing)
    jobs = len({(p.model, p.run_id) for p in counted})
    lines = [
        f"synchronous wall time, estimated: {hours(max(chains, limited))} — calls in a row per case at "
        f"{timing.seconds_per_call:g} s each, {timing.concurrency} cases at once per job, "
        f"{timing.jobs or jobs} of {jobs} (model, run) jobs at once: {hours(chains)}"
        + "".join(
            f"; {model} at {timing.rate_limits[model]:g} requests/min: {hours(s)}"
            for model, s in sorted(per_endpoint.items())
        )
    ]
    lines += clock_notes(counted, max(chains, limited))
    side, serial = batch_cycles(counted)
    lines.append(
        f"batch mode: at most {side} cycles for the slowest job with run_grid.py --batch"
        + (f", {serial} with its stages one after another (stage scripts)" if serial != side else "")
        + f" (each cycle sends every case's next call and waits for the batch: up to {BATCH_WINDOW_HOURS} h "
        "each at OpenAI, usually far less)"
    )
    missing = sorted(
        {
            m
            for p in counted
            for (role, _), v in p.money.items()
            if v is None
            for m in [p.settings.roles[role].model]
        }
    )
    if counted and not counted[0].settings.spending.prices:
        lines.append("cost: give --prices FILE (price per million tokens of each model id; see docs/cost.md)")
    elif missing:
        lines.append(f"no price for {', '.join(missing)}: their cost shows as n/a (add them to --prices)")
    return lines + refusal_lines(parts)
