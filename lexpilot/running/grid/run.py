"""Setting the grid up and running it (`run_grid.py`): each cell's settings, with an evaluated model's endpoint from
the grid file; the limits by model id (grid file, then --limit); one limiter per endpoint and one budget for every
cell; the quote the display measures against; and Ctrl-C or SIGTERM: the first lets no new call start and waits for
the calls in flight, the second leaves at once.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from lexpilot.benchmark.dataset import load_selection
from lexpilot.benchmark.vocabulary import ROLE
from lexpilot.errors import STORE_AWAY, HarnessError, Stop, stop_of, stops_held
from lexpilot.models.limits import Endpoints, Limits, server_of
from lexpilot.models.offpeak import Holds
from lexpilot.models.shared_limits import DEFAULT_AWAY, RedisStore
from lexpilot.models.sharing import Sharing
from lexpilot.options import off_peak_models
from lexpilot.protocols.steps import Stage
from lexpilot.running.grid.cells import (
    FAILED,
    NOT_RUN,
    Cell,
    Grid,
    parse_shard,
    plan,
    run_in_order,
    shard_of,
    start_chains,
    wait_for,
)
from lexpilot.running.grid.chain import run_batch_chain
from lexpilot.running.grid.display import Display, Quote, summary
from lexpilot.running.grid.file import GridFile, ModelEndpoint, command_limits, read_grid_file
from lexpilot.running.grid.pool import BatchPool, chain_of
from lexpilot.running.grid.quote import (
    allowed_rates,
    batch_cycles,
    quote_grid,
    stage_settings,
    summed_money,
)
from lexpilot.running.grid.workers import Dealer, Fleet, nothing_left, workers_url
from lexpilot.settings import Settings
from lexpilot.spending import BothLedgers, Ledger, RootLedger
from lexpilot.storage.code import CodeNow


def drain(grid: Grid, display: Display, by: Stop, ended: list) -> None:
    """The first Ctrl-C or SIGTERM: no new call starts, the calls in flight end and are saved or journalled, and the
    chains end. A second (Slurm's SIGTERM at the time limit, a second Ctrl-C) leaves at once, as safe as kill -9:
    what was in flight is counted as paid, never answered."""
    try:  # a second stop before the wait, too, leaves at once
        grid.sharing.drain(by)
        display.note(
            f"[grid] {by.name}: no new call starts; the calls in flight end and are saved or journalled "
            f"({by.name} again leaves at once)"
        )
        wait_for(ended, display.draw)
    except KeyboardInterrupt as second:
        display.note(
            f"[grid] {stop_of(second).said} at once: completed cases are saved; rerun the same command to resume"
        )
        os._exit(stop_of(second).status)


def with_endpoint(settings: Settings, endpoint: ModelEndpoint | None, env) -> Settings:
    """The settings with the evaluated model on its grid-file endpoint (no key sent without a key variable), and
    out of the batches where that endpoint takes none (`batch = false`)."""
    if endpoint is None:
        return settings
    # out of the batches with --batch, and out of the quote's batch columns without it
    batched = tuple(r for r in settings.batching.asked if r != "eval" or endpoint.batch)
    if not batched and settings.batching.enabled:
        raise HarnessError(
            f"--batch-roles eval: {settings.roles['eval'].model} takes no batches (batch = false in the grid "
            "file), so none of its roles would be batched; run it in a grid without --batch"
        )
    if batched and not endpoint.batch:
        settings = dataclasses.replace(
            settings, batching=dataclasses.replace(settings.batching, roles=batched)
        )
    key = env[endpoint.key_variable] if endpoint.key_variable else ""
    roles = {
        **settings.roles,
        "eval": dataclasses.replace(
            settings.roles["eval"],
            base_url=endpoint.base_url,
            api_key=key,
            key_variable=endpoint.key_variable or "",
        ),
    }
    return dataclasses.replace(settings, roles=roles)


def with_tiers(settings: Settings, tiers: dict[str, str]) -> Settings:
    """The settings with each role whose model id the grid file gives a service tier asking for it; a role given
    another tier on the command line too is refused (which one was meant would be a guess)."""
    roles = dict(settings.roles)
    for name, role in settings.roles.items():
        tier = tiers.get(role.model)
        if tier is None or tier == role.service_tier:
            continue
        if role.service_tier is not None:
            raise HarnessError(
                f"{ROLE[name].flag('service-tier')} {role.service_tier} and the grid file's service_tier = "
                f"{tier!r} for {role.model!r} disagree; give the tier in one place"
            )
        roles[name] = dataclasses.replace(role, service_tier=tier)
    return dataclasses.replace(settings, roles=roles)


def with_off_peak(settings: Settings, off_peak: dict[str, str]) -> Settings:
    """The settings with the grid file's `off_peak = true` models of this cell's roles held too (each checked: a
    model with peak windows in --prices)."""
    used = {r.model for r in settings.roles.values()}
    held = list(settings.spending.off_peak)
    for model, where in off_peak.items():
        if model in used:
            held += off_peak_models([model], settings.roles, settings.spending.prices, where)
    if tuple(dict.fromkeys(held)) == settings.spending.off_peak:
        return settings
    spending = dataclasses.replace(settings.spending, off_peak=tuple(dict.fromkeys(held)))
    return dataclasses.replace(settings, spending=spending)


@dataclass
class GridRun:
    stages: list[Stage]
    models: list[str]
    run_ids: list[str]
    settings_of: Callable[[Stage, str, str], Settings]
    limits: dict[str, Limits]
    err: TextIO | None = None
    clients_of: Callable[[Cell], dict | None] | None = None  # tests: cell -> in-memory clients
    grid: Grid | None = field(default=None, repr=False)
    shard: tuple[int, int] | None = None  # (K, N): this process runs shard K of N
    limits_url: str | None = None  # redis://…: every endpoint's limiter shared through it
    redis_wait: float = DEFAULT_AWAY  # --redis-wait: seconds a Redis out of reach is waited for
    store: RedisStore | None = field(default=None, repr=False)  # its connection, once the endpoints are made
    servers: dict[str, Limits] = field(
        default_factory=dict
    )  # base URL -> limits its models share (grid file)
    workers_url: str | None = (
        None  # redis://…: this process is one worker of a fleet that claims chains there
    )
    chains_cap: int = 0  # --chains N: a worker runs at most N chains at once (0: its equal share)

    def chains(self) -> list[list[Cell]]:
        return shard_of(plan(self.stages, self.settings_of, self.models, self.run_ids), self.shard)

    def endpoints(self, chains: list[list[Cell]], say) -> Endpoints:
        """One limiter per endpoint: in Redis with --limits; else this process's, holding its shard's share."""
        first = chains[0][0].settings
        users: dict[
            str, int
        ] = {}  # model id -> chains whose calls reach it, for an endpoint's starting ceiling
        for chain in chains:
            for model in {r.model for r in chain[0].settings.roles.values()}:
                users[model] = users.get(model, 0) + 1
        limits, make = self.limits, None
        if self.limits_url:
            from lexpilot.models.shared_limits import RedisStore, SharedLimiter

            # one connection for the fleet and the limits when --workers names the Redis of both
            store = self.store = self.store or RedisStore(self.limits_url, say)
            store.reachable()

            def make(endpoint, ceiling, lim, name):
                return SharedLimiter(store, endpoint, ceiling, lim, name)
        elif self.shard and self.share_text():  # a shard without a shared store: its 1/N of each limit
            n = self.shard[1]
            limits = {
                m: Limits(
                    max(1, lim.concurrency // n) if lim.concurrency else None,
                    lim.rpm / n if lim.rpm else None,
                    lim.tpm / n if lim.tpm else None,
                )
                for m, lim in limits.items()
            }
            if limits:
                say(
                    f"[grid] shard {self.shard[0]}/{n} without --limits: each endpoint's limits here are 1/{n} of "
                    "the grid's (with --limits redis://… the shards share them instead)"
                )
        return Endpoints(
            lambda role: 2 * first.transport.concurrency * users.get(role.model, 1),
            limits,
            per_model=True,
            make=make,
            servers=self.servers,
        )

    def ledger(self, first: Settings) -> Ledger:
        """Where the grid's spending is kept: in the output root (every rerun's and stage script's on it), and with
        --limits in Redis too (every shard's and worker's)."""
        if self.store is None:
            return RootLedger(first.output_root)
        from lexpilot.models.shared_spending import RedisLedger

        return BothLedgers(RootLedger(first.output_root), RedisLedger(self.store, self.budget_key(first)))

    def budget_key(self, first: Settings) -> str:
        """The grid's budget's name in Redis, whatever stages an invocation runs (a grid run stage by stage is one
        grid)."""
        from lexpilot.models.shared_spending import grid_key

        _, sha = load_selection(first.dataset, first.limit)
        return grid_key(sha, self.models, self.run_ids, [])

    def grid_key(self, first: Settings) -> str:
        """The grid's name in Redis, the same for every shard, worker and rerun of one grid command."""
        from lexpilot.models.shared_spending import grid_key

        _, sha = load_selection(first.dataset, first.limit)
        return grid_key(sha, self.models, self.run_ids, [s.name for s in self.stages])

    def fleet(self, first: Settings, chains: list[list[Cell]], say) -> Fleet:
        """This worker's side of the fleet (--workers), Redis reached or refused in one line."""
        store = RedisStore(self.workers_url or "", say, flag="--workers")
        if self.limits_url == self.workers_url:
            self.store = store
        fleet = Fleet(store, self.grid_key(first), chains, self.chains_cap)
        fleet.reach()
        return fleet

    def share_text(self) -> str:
        """Whose share of the grid's limits this process holds, when a shard without a shared store holds 1/N."""
        if self.limits_url or not self.shard or self.shard[1] == 1:
            return ""
        return f"shard {self.shard[0]}/{self.shard[1]}'s 1/{self.shard[1]} of the grid's"

    def held(self, chains: list[list[Cell]]) -> tuple[str, ...]:
        """The model ids any cell holds for off-peak (--off-peak, the grid file's off_peak = true)."""
        return tuple(
            dict.fromkeys(m for chain in chains for cell in chain for m in cell.settings.spending.off_peak)
        )

    def rate_limits(self, first: Settings) -> dict[str, float]:
        """Model id -> the requests a minute its limits allow, for the quote's wall time."""
        return allowed_rates(self.limits, first)

    def run(self) -> int:
        err = self.err or sys.stderr
        chains = self.chains()
        if not chains:  # a shard whose share of the grid is empty
            shard = f"shard {self.shard[0]}/{self.shard[1]}" if self.shard else "the grid"
            print(f"[grid] {shard} has no (model, run) of this grid", file=err)
            return 0
        first = chains[0][0].settings
        notes: list[str] = [open_files_for(self.chains_cap or len(chains), first.transport.concurrency)]
        speaker = {"say": notes.append}  # until the display is drawn, then the display
        fleet = self.fleet(first, chains, lambda line: speaker["say"](line)) if self.workers_url else None
        finished = nothing_left(fleet, fleet.survey()) if fleet is not None else ""
        if finished:  # a worker that came after the grid ended
            print(finished, file=err)
            return 0
        endpoints = self.endpoints(chains, lambda line: speaker["say"](line))
        budget = first.spending.budget(self.ledger(first))
        sharing = Sharing(endpoints, budget)
        sharing.holds = Holds.of(self.held(chains), first.spending.prices, sharing.clock)
        if first.batching.enabled:  # every cell's batches pooled per endpoint, the chains in lockstep
            sharing.batches = BatchPool({chain_of(chain[0].settings) for chain in chains}, sharing.draining)
        grid = self.grid = Grid([] if fleet else chains, sharing, self.clients_of or (lambda cell: None))
        quote = Quote() if fleet else self.quote(first, chains)  # a worker's grows with each chain it claims
        display = Display(grid, quote, first.spending.prices, err, share=self.share_text())
        for note in filter(None, notes):
            display.note(note)
        speaker["say"] = display.note  # what the shared store says from here on (Redis gone, or back)
        self.watch_store(sharing, display)
        return self.wait(grid, display, budget, lambda: self.start(grid, fleet, display, first))

    def watch_store(self, sharing: Sharing, display: Display) -> None:
        """A Redis out of reach: the display counts the seconds; past --redis-wait the grid stops as after a Ctrl-C
        (no new call; the calls in flight end and are saved or journalled), and leaves with STORE_AWAY."""
        store = self.store
        if store is None:
            return
        store.away_limit = self.redis_wait
        stop = Stop(
            "Redis", STORE_AWAY, f"stopped: Redis at {store.where} was out of reach for {self.redis_wait:g} s"
        )

        def give_up() -> None:
            display.note(
                f"[grid] {stop.said}: no new call starts; the calls in flight end and are saved or journalled"
            )
            sharing.drain(stop)

        store.on_away = give_up
        display.away = lambda: (
            f"; Redis at {store.where} out of reach for {store.away():.0f}s (the grid stops at {self.redis_wait:g}s)"
            if store.away()
            else ""
        )

    def start(self, grid: Grid, fleet: Fleet | None, display: Display, first: Settings) -> list:
        """Every chain at once, or a worker's as it claims them; in batch mode a chain's independent stages run side
        by side, cycle by cycle."""
        if fleet is None:
            return start_chains(grid, run_batch_chain if first.batching.enabled else run_in_order)

        def claimed(chain: list[Cell]) -> None:
            display.quote = display.quote + self.quote(first, [chain])

        fleet.start()
        return [Dealer(grid, fleet, run_in_order, claimed, display.note).start()]

    def wait(self, grid: Grid, display: Display, budget, start: Callable[[], list]) -> int:
        """The chains started, then until every one has ended, or a Ctrl-C or SIGTERM has drained them: the summary,
        the exit status."""
        err, interrupted, ended = self.err or sys.stderr, False, []
        try:
            # a stop while they start is drained once all have started: none is left unwaited
            with stops_held():
                ended = start()
            wait_for(ended, display.draw)
        except KeyboardInterrupt as first:
            interrupted = True
            drain(grid, display, stop_of(first), ended)
        try:
            with stops_held():  # the money still reserved is given back and the summary said whole
                interrupted = interrupted or grid.sharing.draining.is_set()  # drained by a Redis out of reach
                return self.close(grid, display, budget, interrupted)
        except KeyboardInterrupt as late:
            print(f"[grid] {stop_of(late).said} after every chain had ended: nothing was lost", file=err)
            return stop_of(late).status

    def close(self, grid: Grid, display: Display, budget, interrupted: bool) -> int:
        """Every chain has ended: the last display, what is left reserved (batches submitted, collected by a later
        run) given back, the summary; the exit status."""
        display.draw(final=True)
        if budget:
            budget.ledger.close()
        for line in summary(grid, interrupted):
            print(line, file=self.err or sys.stderr)
        counts = grid.counts()
        return (
            grid.sharing.draining.by.status if interrupted else 1 if counts[FAILED] or counts[NOT_RUN] else 0
        )

    def quote_parts(self, chains: list[list[Cell]]) -> list:
        """The quote's parts for what is left of these chains (a shard's, or the whole grid's)."""
        first = chains[0][0].settings
        selected, sha = load_selection(first.dataset, first.limit)
        code_now = CodeNow.read()  # the code every part is quoted with, read once
        return [
            p
            for chain in chains
            for p in quote_grid(
                self.stages, self.settings_of, [chain[0].model], [chain[0].run_id], selected, sha, code_now
            )
        ]

    def all_parts(self) -> list:
        """The quote's parts for what is left of the whole grid (every shard's), as quote_grid.py counts it."""
        first = self.settings_of(self.stages[0], self.models[0], self.run_ids[0])
        selected, sha = load_selection(first.dataset, first.limit)
        return quote_grid(self.stages, self.settings_of, self.models, self.run_ids, selected, sha)

    def quote(self, first: Settings, chains: list[list[Cell]]) -> Quote:
        """The quote for what is left of these chains, as run_grid.py --dry-run prints it, for the display."""
        parts = [p for p in self.quote_parts(chains) if not p.refused]
        mode = "batch" if first.batching.enabled else "sync"  # the prices the grid pays
        low, high, expected = summed_money(parts, lambda p, role: "all").get("all", {}).get(mode, (None,) * 3)
        cycles = batch_cycles(parts)[0] if first.batching.enabled else 0
        return Quote(sum(sum(p.calls.values()) for p in parts), expected, high, cycles)


def open_files_for(chains: int, concurrency: int) -> str:
    """Each (model, run) keeps up to --concurrency connections to each of its three endpoints, and its record and
    journal files, open: the soft limit on open files is raised toward the hard one when the grid may need more
    (the common default of 1,024 is short of a 10 x 10 grid's). A note when even the hard limit may be short."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to raise
        return ""
    needed = chains * (3 * concurrency + 16) + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return ""
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    except (ValueError, OSError):  # macOS caps a process below an unlimited hard limit (kern.maxfilesperproc)
        raised = soft
    if raised >= needed:
        return ""
    return (
        f"[grid] up to {needed} files and connections may be open at once, over this process's limit of {raised} "
        "(ulimit -n): raise it, or run the grid in parts (--shard K/N)"
    )


def stopped_outside(interrupt: BaseException, grid: GridRun | None) -> str:
    """What a stop that the grid's own handling did not meet says: "before any call" while no chain can have started,
    else what a grid's every stop says (each call is saved or journalled as it is answered)."""
    said = stop_of(interrupt).said
    if grid is None or grid.grid is None:
        return f"{said} before any call"
    return f"{said}: every answered call is saved or journalled"


def start_grid(
    stages: list[Stage],
    models: list[str] | None,
    run_ids: list[str],
    options: list[str],
    grid_path: str | None,
    limit_entries: list[str],
    env=os.environ,
    err=None,
    shard: str | None = None,
    limits_url: str | None = None,
    workers: str | None = None,
    chains: int | None = None,
) -> GridRun:
    """The grid run_grid.py runs (or its shard K/N, or one worker of a fleet), checked before any call."""
    if "--batch-status" in options:
        raise HarnessError(
            "--batch-status: a grid's batches are each run's; ask a run with its stage script "
            "(python eval_LJP_gold.py --run-id RUN --model MODEL --batch-status), or rerun the grid to collect them"
        )
    refuse_fleet_mixes(workers, shard, chains, options)
    grid = plan_grid(stages, models, run_ids, options, grid_path, limit_entries, env, err)
    grid.shard, grid.limits_url = (parse_shard(shard) if shard else None), limits_url or workers
    grid.workers_url, grid.chains_cap = workers, chains or 0
    if grid.shard and grid.shard[1] > 1 and not limits_url and "--max-cost" in options:
        raise HarnessError(
            "--max-cost with --shard: the shards would each spend the whole cap; give every shard the same "
            "--limits redis://HOST:PORT/DB and they share one budget (docs/grid.md), or run the grid unsharded"
        )
    if workers:
        workers_url(workers)
    if limits_url:
        from lexpilot.models.shared_limits import limits_url as checked_url

        checked_url(limits_url)  # a dry run is told too
    return grid


def refuse_fleet_mixes(
    workers: str | None, shard: str | None, chains: int | None, options: list[str]
) -> None:
    """--workers deals the chains itself: with --shard or --batch (whose batches pool a fixed set of chains in
    lockstep) it is refused in one line, as --chains without it."""
    if workers and shard:
        raise HarnessError(
            "--shard with --workers: the workers deal the grid's chains among themselves; give every process the "
            "same --workers URL and no --shard (--shard K/N is for processes without Redis)"
        )
    if workers and "--batch" in options:
        raise HarnessError(
            "--batch with --workers: a grid's batches pool a fixed set of chains in lockstep; run the batch grid in "
            "one process, or split it with --shard K/N --limits redis://…"
        )
    if chains and not workers:
        raise HarnessError("--chains: a worker's cap, with --workers redis://HOST:PORT/DB only")


def plan_grid(
    stages: list[Stage],
    models: list[str] | None,
    run_ids: list[str],
    options: list[str],
    grid_path: str | None,
    limit_entries: list[str],
    env=os.environ,
    err=None,
) -> GridRun:
    """The grid from the command line (quote_grid.py's too): each cell's settings with the grid file's endpoints,
    and the limits by model id, every model id one a role of the grid uses."""
    grid_file = read_grid_file(Path(grid_path), env) if grid_path else GridFile()
    models = models or list(grid_file.endpoints)
    if not models:
        raise HarnessError('no evaluated model: pass --models, or give [models."ID"] tables in --grid')
    limits = grid_file.limits | command_limits(limit_entries)
    base = stage_settings(stages, options, models)

    def settings_of(stage: Stage, model: str, run_id: str) -> Settings:
        settings = with_endpoint(base(stage, model, run_id), grid_file.endpoints.get(model), env)
        return with_off_peak(with_tiers(settings, grid_file.tiers), grid_file.off_peak)

    grid = GridRun(stages, models, run_ids, settings_of, limits, err, servers=grid_file.servers)
    roles = [r for model in models for r in settings_of(stages[0], model, run_ids[0]).roles.values()]
    used = {r.model for r in roles}
    unknown = sorted((set(limits) | set(grid_file.tiers) | set(grid_file.off_peak)) - used)
    if unknown:
        named = set(grid_file.limits) | set(grid_file.tiers) | set(grid_file.off_peak)
        where = f"--grid {grid_path}: " if grid_path and unknown[0] in named else ""
        raise HarnessError(
            f"{where}limits or a service tier for {', '.join(unknown)}: no role of this grid uses that model id (the grid's: "
            f"{', '.join(sorted(used))})"
        )
    served = {server_of(r.base_url) for r in roles}
    idle = sorted(url for url in grid_file.servers if server_of(url) not in served)
    if idle:
        raise HarnessError(
            f'--grid {grid_path}: [servers."{idle[0]}"]: no role of this grid is served there (its base URLs: '
            f"{', '.join(sorted(served))})"
        )
    return grid
