"""The dry run's figures before any call: calls per role at most, the known prompt text, and the cost quote
(bounds per role and an expected figure from saved runs).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import (
    SLOT,
    load_prompts,
    render_claims,
    render_details_by_focal_point,
    render_focal_points,
    render_history,
)
from lexpilot.benchmark.records import readable_records
from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.models.offpeak import duration
from lexpilot.pricing import Price, cost, price_class
from lexpilot.protocols.steps import Step
from lexpilot.running.state import StageState
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import NOT_USED_FILE, add_usage, not_used_entries
from lexpilot.windows import Windows, utc_now

# a call's time for the wall-time estimates (the stage's dry run, the grid's; quote_grid.py --seconds-per-call)
SECONDS_PER_CALL = 30.0


def case_steps(state: StageState, case: Case):
    """(step, calls per role at most) of each step still to run for a case, from its upstream records as saved
    (a missing upstream record counts at the most calls)."""
    for step in state.steps:
        if case.number in state.records[step.name]:
            continue
        upstream = {need: state.records[need].get(case.number) for need in step.needs}
        yield step, step.calls_for(upstream, state.settings, case)


def longest_chain(state: StageState, cases: list[Case]) -> int:
    """The most calls one case makes in a row (a case's calls are made one after another): a wave of cases takes
    this many call times, and batch mode this many cycles."""
    return max((sum(sum(planned.values()) for _, planned in case_steps(state, c)) for c in cases), default=0)


def planned_calls(
    state: StageState, cases: list[Case], prompts: dict[str, str] | None = None
) -> tuple[Counter, Counter, Counter]:
    """Calls per role at most, and the characters of the known prompt text they would send: the prompt and
    the case's inputs, with the longer of the two histories (for an upper bound), and with the shorter and only
    the calls surely made (a lower bound); earlier replies carried into a prompt are not known."""
    calls: Counter[str] = Counter()
    chars: Counter[str] = Counter()
    low: Counter[str] = Counter()
    for case in cases:
        histories = [len(render_history(h)) for h in (case.complete, case.underspecified)]
        inputs = {
            "key_facts": len(render_details_by_focal_point(case)),
            "focus_text": len(render_focal_points(case)),
            "claims": len(render_claims(case)),
        }
        for step, planned in case_steps(state, case):
            calls.update(planned)
            for role in planned:
                template = (prompts or {}).get(step.prompts.get(role), "")
                fixed = len(SLOT.sub("", template)) + sum(
                    inputs.get(slot, 0) for slot in SLOT.findall(template)
                )
                # the judges' {history} slot holds a reply to judge, not the case's history
                history = "history" in SLOT.findall(template) and role != "judge"
                chars[role] += planned[role] * (fixed + (max(histories) if history else 0))
                low[role] += step.surely_made().get(role, 0) * (fixed + (min(histories) if history else 0))
    return calls, chars, low


def carried_limit(settings: Settings) -> int:
    """The longest reply a prompt can carry: the evaluated model's and the User Model's replies are carried."""
    return max(settings.roles["eval"].max_tokens, settings.roles["user"].max_tokens)


# the most earlier replies any prompt of these protocols carries (a forced prediction: 3 + 3)
CARRIED_REPLIES = 6


def cost_quote(
    state: StageState, settings: Settings, calls: Counter, chars: Counter, low_chars: Counter, pending: int
) -> str:
    """The cost of the pending work per role: bounds and, where runs of this stage were saved under the output
    root, an expected figure from their usage per case (see `role_money`)."""
    lines = [
        "cost quote (money per the price file; a model priced by the clock: low and expected off-peak, high at peak "
        "unless held for off-peak, each window below):"
    ]
    # when the calls would be sent, for a model priced by the clock: from now, over the stage's estimated wall time
    schedule_seconds = stage_seconds(state, settings)
    expected_usage = saved_usage_per_case(settings.output_root, state.steps)
    total = [0.0, 0.0, 0.0]
    for role in ROLES:
        if not calls.get(role):
            continue
        model, limit = settings.roles[role].model, settings.roles[role].max_tokens
        price = quoted_price(settings, role)
        if price is None:
            lines.append(f"  {role} ({model}): no price in the price file")
            continue
        # at batch prices
        batched = 1.0 if settings.batching.enabled and role in settings.batching.asked else 0.0
        counts = (
            low_chars[role],
            chars[role] + calls[role] * CARRIED_REPLIES * carried_limit(settings),
            calls[role] * limit,
            expected_usage.get(role),
            pending,
            batched,
        )
        low, high, expected = off = role_money(price, *counts)
        clock: list[str] = []
        if price.windows is not None:  # the high bound at peak (the worst case) unless held for off-peak
            peak, held = role_money(price.at_peak(), *counts), model in settings.spending.off_peak
            share = 0.0 if held else price.windows.peak_share(utc_now(), schedule_seconds)
            high = high if held else peak[1]
            if price.windows.whole_day:  # every call is sent at peak: no bound is off-peak
                low, expected = peak[0], peak[2]
            clock = clock_lines(price.windows, off, peak, held, share, schedule_seconds)
        total = [total[0] + low, total[1] + high, total[2] + (expected or 0)]
        lines.append(
            f"  {role} ({model}{tier_said(settings, role)}): between {low:,.4f} and {high:,.4f}"
            + (f"; expected ~{expected:,.4f} from saved runs of this stage" if expected is not None else "")
        )
        lines += clock
    lines.append(
        f"  total: between {total[0]:,.4f} and {total[1]:,.4f}"
        + (f"; expected ~{total[2]:,.4f}" if expected_usage else "")
    )
    return "\n".join(lines)


def tier_said(settings: Settings, role: str) -> str:
    """What the quote says of a role's tier: its prices are that tier's (the standard ones with --flex-fallback)."""
    tier = settings.roles[role].service_tier
    if tier != "flex":
        return ""
    return (
        ", flex tier at standard prices: --flex-fallback"
        if settings.transport.flex_fallback
        else ", flex tier"
    )


def quoted_price(settings: Settings, role: str) -> Price | None:
    """A role's prices as its synchronous calls are billed: at its service tier's (flex: the flex prices). With
    --flex-fallback a flex call may be billed at the standard prices: the quote then uses those, never less."""
    price = (settings.spending.prices or {}).get(settings.roles[role].model)
    tier = settings.roles[role].service_tier
    if price is None or settings.transport.flex_fallback:
        return price
    return price.at(price_class(tier))


def stage_seconds(state: StageState, settings: Settings) -> float:
    """The stage's estimated wall time: waves of --concurrency cases, each its longest chain of calls at
    SECONDS_PER_CALL (as quote_grid.py estimates a (model, run) job's)."""
    pending = state.pending()
    waves = math.ceil(len(pending) / settings.transport.concurrency)
    return waves * longest_chain(state, pending) * SECONDS_PER_CALL


def mixed(off: tuple, peak: tuple, share: float) -> tuple:
    """(low, high, expected) with `share` of the calls sent at peak, the rest off-peak."""
    return tuple(None if o is None else (1 - share) * o + share * p for o, p in zip(off, peak))


def clock_lines(
    windows: Windows, off: tuple, peak: tuple, held: bool, share: float, seconds: float
) -> list[str]:
    """A model priced by the clock: its (low, high, expected) off-peak and at peak, and as the calls would fall with
    `share` of the next `seconds` in peak (none when the model is held for off-peak)."""
    scheduled, when = (
        mixed(off, peak, share),
        f"{share:.0%} in peak of the estimated wall time, {duration(seconds)}",
    )
    if held:  # its calls go on off-peak only: the estimated wall time, counted in off-peak hours
        now = utc_now()
        done = (windows.off_peak_end(now, seconds) - now).total_seconds()
        when = (
            f"held for off-peak: every call off-peak; the estimated {duration(seconds)} of calls, made off-peak "
            f"only, end in {duration(done)}"
        )
    return [
        f"    off-peak: {money_text(off)}",
        f"    at peak ({windows.describe()}): {money_text(peak)}",
        f"    as scheduled ({when}): {money_text(scheduled)}",
    ]


def money_text(money: tuple) -> str:
    low, high, expected = money
    return f"between {low:,.4f} and {high:,.4f}" + (
        f"; expected ~{expected:,.4f}" if expected is not None else ""
    )


def role_money(
    price: Price,
    low_chars: int,
    high_prompt: int,
    high_completion: int,
    per_case,
    pending: int,
    batched: float,
) -> tuple[float, float, float | None]:
    """(low, high, expected) for one role: the known prompt text of the calls surely made, at the cached-input price
    and with no completion; every
    prompt with the longer history, every carried reply and every completion at the output limit; the saved runs'
    usage per case (cached share included) times the cases to do (None without saved runs)."""
    expected = expected_cost(price, per_case, pending, batched) if per_case else None
    # the low bound prices every known prompt token as if the provider's cache served it (the cheapest it can be)
    low = cost(price, low_chars, 0, batched, cached_tokens=low_chars)
    return low, cost(price, high_prompt, high_completion, batched), expected


def expected_cost(price, per_case: tuple[float, float, float], cases: int, batched: float) -> float:
    """The cost of `cases` more cases at the saved usage per case (prompt, completion, cached prompt tokens)."""
    prompt, completion, cached = (tokens * cases for tokens in per_case)
    return cost(price, prompt, completion, batched, cached)


def saved_usage_per_case(root: Path, steps: list[Step]) -> dict[str, tuple[float, float, float]]:
    """Role -> (prompt, completion, cached prompt) tokens per case in the records of these steps saved under the
    root (every run and model), for an expected cost: each step's usage over the cases that step saved, summed
    over the steps (a stage stopped part-way does not dilute it); a run that reported no cached tokens counts none."""
    per_case: dict[str, list[float]] = {}
    not_used = not_used_by_step(root)
    for step in steps:
        totals: dict[str, list[float]] = {}
        cases = 0
        for path in root.glob(f"{step.kind.top}/*/*/{step.kind.file}"):
            for record in readable_records(path):
                try:
                    used_by_role = {
                        role: [
                            float(used.get(f, 0) if f == "cached_prompt_tokens" else used[f])
                            for f in ("prompt_tokens", "completion_tokens", "cached_prompt_tokens")
                        ]
                        for role, used in record["usage"].items()
                    }
                except (KeyError, TypeError, AttributeError, ValueError):  # a record is untrusted input
                    continue
                cases += 1
                for role, tokens in used_by_role.items():
                    entry = totals.setdefault(role, [0.0, 0.0, 0.0])
                    for i, n in enumerate(tokens):
                        entry[i] += n
        if not cases:
            continue
        # paid for and refused: part of a case's cost too
        for role, used in not_used.get(step.name, {}).items():
            entry = totals.setdefault(role, [0.0, 0.0, 0.0])
            for i, f in enumerate(("prompt_tokens", "completion_tokens", "cached_prompt_tokens")):
                entry[i] += used[f]
        for role, tokens in totals.items():
            entry = per_case.setdefault(role, [0.0, 0.0, 0.0])
            for i, n in enumerate(tokens):
                entry[i] += n / cases
    return {role: (tokens[0], tokens[1], tokens[2]) for role, tokens in per_case.items()}


def not_used_by_step(root: Path) -> dict[str, dict[str, Counter]]:
    """Step -> role -> the usage of the replies paid for and not used in that step, in every run under the root
    (each file read once)."""
    totals: dict[str, dict[str, Counter]] = {}
    for path in root.glob(f"runs/*/*/{NOT_USED_FILE}"):
        for entry in not_used_entries(path)[0]:
            add_usage(totals.setdefault(entry["step"], {}), entry["usage"])
    return totals


def dry_run_report(name: str, state: StageState, selected: list[Case]) -> str:
    """What a --dry-run prints: the cases to do, the calls per role at most, the tokens and, with a price file,
    the cost quote."""
    settings, model = state.settings, state.settings.roles["eval"].model
    pending = state.pending()
    calls, chars, low = planned_calls(state, pending, load_prompts())
    lines = [
        f"[{name}] dry run: {len(pending)} of {len(selected)} selected cases to do "
        f"(run {settings.run_id}, model {model!r})",
        "cases: " + (", ".join(c.number for c in pending) or "none"),
        "calls at most (not counting retries): "
        + ", ".join(f"{role} {calls.get(role, 0)}" for role in ROLES),
        "tokens, estimated: "
        + "; ".join(
            f"{role} prompt ~{chars.get(role, 0):,}, "
            f"completion <= {calls.get(role, 0) * settings.roles[role].max_tokens:,}"
            for role in ROLES
            if calls.get(role)
        ),
        "  (prompt: the prompts and case inputs at one token per character, about right for Chinese; "
        "replies carried into later prompts come on top, up to --max-tokens each)",
    ]
    if settings.spending.prices:
        lines.append(cost_quote(state, settings, calls, chars, low, len(pending)))
    return "\n".join(lines)
