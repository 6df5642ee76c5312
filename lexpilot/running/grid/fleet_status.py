"""`run_grid.py --status --workers redis://…`: the fleet of a grid as Redis holds it, from any machine, without
running anything: which worker holds which chain and its lease's age, the chains done, waiting and failed, the grid's
spending (with a budget kept) and each endpoint's load (its calls in flight, its window, what it sent and the 429s).
"""

from __future__ import annotations

from lexpilot.models.limits import Endpoint, Limits
from lexpilot.models.shared_limits import RedisStore, SharedLimiter
from lexpilot.models.shared_spending import RedisLedger
from lexpilot.running.grid.workers import Fleet, Survey
from lexpilot.text import counted


def fleet_status(grid) -> list[str]:
    """The status lines of `grid` (a run.GridRun given --workers): one line per fact, nothing run."""
    chains = grid.chains()
    first = chains[0][0].settings
    store = RedisStore(grid.workers_url, say=lambda line: None)
    fleet = Fleet(store, grid.grid_key(first), chains)
    survey = fleet.reach()
    limits = (
        store if grid.limits_url == grid.workers_url else RedisStore(grid.limits_url, say=lambda line: None)
    )
    return [
        *status_lines(fleet, survey),
        *spending_lines(RedisLedger(limits, grid.budget_key(first)), first.spending.max_cost),
        *endpoint_lines(limits, [role for chain in chains for role in chain[0].settings.roles.values()]),
    ]


def status_lines(fleet: Fleet, survey: Survey) -> list[str]:
    """Every chain's state, held ones with their worker and the lease's age."""
    held = {c: h for c, h in survey.held.items() if c in fleet.chains}
    failed = {c: f for c, f in survey.failed.items() if c in fleet.chains and c not in held}
    waiting = [c for c in fleet.chains if c not in survey.done and c not in held and c not in failed]
    done = sum(c in survey.done for c in fleet.chains)
    lines = [
        f"[grid] fleet at {fleet.store.where}: {len(fleet.chains)} chains: {done} done, {len(held)} held, "
        f"{len(waiting)} waiting, {len(failed)} failed; {counted(survey.workers, 'worker')} alive"
    ]
    for chain, (worker, age, left) in sorted(held.items()):
        lease = (
            f"lease {left:.0f}s left"
            if left >= 0
            else f"lease expired {-left:.0f}s ago: the next worker takes it"
        )
        lines.append(f"  held: {chain} by {worker} for {age:.0f}s, {lease}")
    for chain, (_, worker, reason) in sorted(failed.items()):
        lines.append(f"  failed: {chain} (worker {worker}): {reason}")
    if waiting:
        lines.append(f"  waiting: {', '.join(waiting[:20])}" + (" …" if len(waiting) > 20 else ""))
    return lines


def spending_lines(ledger: RedisLedger, max_cost: float | None) -> list[str]:
    """The grid's spending, every process's, where a budget is kept (its keys exist)."""
    if not ledger.store.client.exists(ledger.keys[0], ledger.keys[1]):
        return []
    totals = (
        ledger.totals()
    )  # a process gone counts its reservations as spent, as every worker's next call would
    left = (
        f", {max_cost - totals.spent - totals.reserved:.2f} left of --max-cost {max_cost:g}"
        if max_cost
        else ""
    )
    return [f"  spending: {totals.spent:.2f} spent, {totals.reserved:.2f} reserved{left}"]


def endpoint_lines(store: RedisStore, roles: list) -> list[str]:
    """Each endpoint the grid's roles use, with its load in Redis: calls in flight (leases not expired), the shared
    window, the calls it let out and the 429s it was answered."""
    lines = []
    for endpoint, name in sorted({(Endpoint.of(r).parts(), f"{r.model} at {r.host}") for r in roles}):
        slots, state = SharedLimiter(store, endpoint, 1, Limits(), name).keys[:2]
        seconds, micros = store.client.time()
        in_flight = store.client.zcount(slots, seconds * 1000 + micros // 1000, "+inf")
        shared = {text(k): text(v) for k, v in store.client.hgetall(state).items()}
        if not shared and not in_flight:
            lines.append(f"  {name}: no call yet")
            continue
        window = f"window {float(shared['limit']):.1f}, " if "limit" in shared else ""
        lines.append(
            f"  {name}: {in_flight} in flight, {window}{shared.get('sent', 0)} sent, "
            f"{shared.get('rate_limited', 0)} answered 429"
        )
    return lines


def text(value: bytes | str) -> str:
    """A Redis reply as text (the client answers bytes)."""
    return value.decode() if isinstance(value, bytes) else value
