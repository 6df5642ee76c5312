"""Token usage and cost per run, role and stage file, from the records' usage (batched calls at the batch price;
calls paid but never answered counted apart).
"""

from __future__ import annotations

from collections import Counter

from lexpilot.benchmark.vocabulary import ROLE_TABLE, ROLES
from lexpilot.pricing import usage_cost
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import Run
from lexpilot.reporting.tables.formats import number_cell
from lexpilot.reporting.tables.table import METRIC, PERCENT, Figure, Kind, Table, declares
from lexpilot.text import counted
from lexpilot.windows import PEAK


def role_cost(run: Run, role: str, used: dict, prices: dict | None) -> float | None:
    price = (prices or {}).get(run.manifest.model(role))
    if price is None:
        return None
    return usage_cost(price, used)


def uncached_usage(used: dict) -> dict:
    """A usage entry as if no prompt token had been served from the provider's cache, in every price class."""
    return {
        k: 0 if k == "cached_prompt_tokens" or k.endswith(":cached_prompt_tokens") else n
        for k, n in used.items()
    }


def peak_calls(used: dict) -> int:
    """The calls of a usage entry sent in a peak window, at whatever tier (the price classes "peak", "flex+peak")."""
    return sum(
        n for key, n in used.items() if key.endswith(":calls") and PEAK in key.rpartition(":")[0].split("+")
    )


def total_cost(costs: list[float | None]) -> float | None:
    """The sum of costs, unless one is unknown (a model without a price)."""
    known = [c for c in costs if c is not None]
    return sum(known) if len(known) == len(costs) else None


def money(value: float | None, unpriced: int = 0) -> str:
    """An amount; with `unpriced` calls whose replies reported no token counts (llama.cpp's streamed replies), said
    beside it: their tokens are not in it, so it is a lower bound, not the bill."""
    shown = "n/a" if value is None else f"{value:,.2f}" if value >= 1 else f"{value:.4f}"
    return shown + (
        f" (+{counted(unpriced, 'call')} without token counts)" if unpriced and value is not None else ""
    )


def role_usage(used: Counter, unanswered: int) -> Figure:
    """calls / prompt / completion tokens and what else was reported, as text; each count its own CSV column."""
    numbers = {
        "calls": used["calls"],
        "prompt tokens": used["prompt_tokens"],
        "completion tokens": used["completion_tokens"],
        "reasoning tokens": used["reasoning_tokens"],
        "cached prompt tokens": used["cached_prompt_tokens"],
        "unreported calls": used["unreported_calls"],
        "unanswered calls": unanswered,
    }
    text = f"{used['calls']} / {used['prompt_tokens']} / {used['completion_tokens']}"
    if used["reasoning_tokens"]:
        text += f" ({used['reasoning_tokens']} reasoning)"
    if used["cached_prompt_tokens"]:
        text += f" ({used['cached_prompt_tokens']} prompt tokens cached)"
    if used["unreported_calls"]:
        text += f" ({used['unreported_calls']} unreported)"
    return Figure(text + (f" (+{unanswered} unanswered)" if unanswered else ""), numbers)


@declares(
    Kind("usage_per_run", "the harness's", METRIC),
    Kind("usage_per_stage", "the harness's", METRIC),
    Kind("usage_grid_total", "the harness's", METRIC),
)
def usage_tables(groups: list[Group], prices: dict | None) -> list[Table]:
    """Tokens per run and role, and per stage file and role over each group's runs; cost when priced."""
    per_run, per_stage = [], []
    for g in groups:
        label = g.label
        stage_totals: dict[tuple, Counter] = {}
        stage_costs: dict[tuple, list] = {}
        for run in g.runs:
            by_role: dict[str, Counter] = {role: Counter() for role in ROLES}
            costs = []
            for stage, roles in run.usage.items():
                for role, used in roles.items():
                    by_role.setdefault(role, Counter()).update(used)
                    stage_totals.setdefault((stage, role), Counter()).update(used)
                    cost = role_cost(run, role, used, prices)
                    costs.append(cost)
                    stage_costs.setdefault((stage, role), []).append(cost)
            total = total_cost(costs) if costs else None
            per_run.append(
                [label, run.run_id]
                + [role_usage(by_role[r], run.unanswered.get(r, 0)) for r in ROLES]
                + [money(total, sum(by_role[r]["unreported_calls"] for r in by_role))]
            )
        for (stage, role), used in sorted(
            stage_totals.items(), key=lambda x: (x[0][0], ROLES.index(x[0][1]))
        ):
            costs = stage_costs[(stage, role)]
            per_stage.append(
                [
                    label,
                    stage,
                    role,
                    str(used["calls"]),
                    str(used["prompt_tokens"]),
                    str(used["completion_tokens"])
                    + (f" ({used['reasoning_tokens']} reasoning)" if used["reasoning_tokens"] else ""),
                    money(total_cost(costs), used["unreported_calls"]),
                ]
            )
    return [
        grid_total(groups, prices),
        Table(
            "usage_per_run",
            "Token usage per run (calls / prompt tokens / completion tokens, of which reasoning; saved records; "
            "'unreported': calls whose reply reported no token counts; 'unanswered': calls in flight when a "
            "process was killed, paid but never answered, not priced)",
            ["Model", "Run", *(r.display[:1].upper() + r.display[1:] for r in ROLE_TABLE), "Cost"],
            per_run,
        ),
        Table(
            "usage_per_stage",
            "Token usage per stage file, all runs of the group",
            ["Model", "Stage file", "Role", "Calls", "Prompt tokens", "Completion tokens", "Cost"],
            per_stage,
        ),
    ]


def spent_by_role(groups: list[Group], prices: dict | None) -> tuple[dict, dict, dict, Counter]:
    """Per role over every run shown: the usage summed, each run's cost, each run's cost had no prompt token been
    cached, and the calls paid but never answered."""
    by_role: dict[str, Counter] = {role: Counter() for role in ROLES}
    costs: dict[str, list] = {role: [] for role in ROLES}
    uncached: dict[str, list] = {role: [] for role in ROLES}
    unanswered: Counter[str] = Counter()
    for g in groups:
        for run in g.runs:
            unanswered.update(run.unanswered)
            for roles in run.usage.values():
                for role, used in roles.items():
                    by_role.setdefault(role, Counter()).update(used)
                    costs.setdefault(role, []).append(role_cost(run, role, used, prices))
                    uncached.setdefault(role, []).append(role_cost(run, role, uncached_usage(used), prices))
    return by_role, costs, uncached, unanswered


def unwindowed_runs(groups: list[Group], prices: dict | None) -> int:
    """The runs with a role whose model the price file prices by the clock, called in some invocation without those
    windows (the run's manifest says which roles; a run made before it said is counted)."""
    clocked = {model for model, price in (prices or {}).items() if price.windows is not None}
    return sum(
        any(
            run.manifest.model(role) in clocked
            and (run.manifest.unwindowed is None or role in run.manifest.unwindowed)
            for role in run.usage_roles()
        )
        for g in groups
        for run in g.runs
    )


def grid_total(groups: list[Group], prices: dict | None) -> Table:
    """What every run and model shown has used and cost, per role and in all: with a grid quote for the rest
    (quote_grid.py, which leaves saved cases out), spent + quote = the grid's total. Calls paid but never answered
    are counted apart: their tokens were never reported, so they are not priced."""
    by_role, costs, uncached, unanswered = spent_by_role(groups, prices)
    rows = []
    # the share of calls sent in a price window's peak (windows.py), shown where any was
    at_peak = any(peak_calls(used) for used in by_role.values())
    for role in [r for r in by_role if by_role[r]["calls"] or unanswered.get(r)] + ["all"]:
        used = sum(by_role.values(), Counter()) if role == "all" else by_role[role]
        spent = [c for r in (ROLES if role == "all" else [role]) for c in costs.get(r, [])]
        full = [c for r in (ROLES if role == "all" else [role]) for c in uncached.get(r, [])]
        priced = bool(prices) and None not in spent
        paid = unanswered.total() if role == "all" else unanswered.get(role, 0)
        batch = (
            number_cell(used["batched_calls"] / used["calls"], PERCENT, percent=True)
            if used["calls"]
            else "-"
        )
        peak = number_cell(peak_calls(used) / used["calls"], PERCENT, percent=True) if used["calls"] else "-"
        rows.append(
            [
                role,
                str(used["calls"]),
                str(paid),
                batch,
                *([peak] if at_peak else []),
                str(used["prompt_tokens"]),
                str(used["cached_prompt_tokens"]),
                str(used["completion_tokens"]),
                money(sum(spent) if priced else None, used["unreported_calls"]),
                money(sum(full) - sum(spent) if priced else None),
            ]
        )
    runs = sum(len(g.runs) for g in groups)
    unwindowed = unwindowed_runs(groups, prices)
    return Table(
        "usage_grid_total",
        f"Spent so far: every run and model shown ({counted(runs, 'run')}, saved records)"
        + (
            f"; {counted(unwindowed, 'run')} called a model priced by the clock without its windows (no --prices "
            "at run time): those calls are priced off-peak, whatever the hour they were sent"
            if unwindowed
            else ""
        ),
        [
            "Role",
            "Calls",
            "Unanswered (paid, not priced)",
            "Batch share",
            *(["Sent at peak"] if at_peak else []),
            "Prompt tokens",
            "of which cached",
            "Completion tokens",
            "Cost",
            "Saved by the cache",
        ],
        rows,
    )
