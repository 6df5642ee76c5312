"""Cells claimed on demand (`run_grid.py --workers redis://HOST:PORT/DB`): any number of processes on any machines
take the grid's next (model, run) chain from Redis as they free up. A claim is a lease, renewed while the chain runs;
a chain whose worker died is taken by another once its lease has expired; a finished chain is marked done and never
claimed again. Each cell's run lock still guards its files, so two workers never run one cell, whatever Redis says.

Keys, named by the grid (`shared_spending.grid_key`: its dataset, models, runs and stages), under
`lexpilot:workers:<grid>:`: `leases` (a sorted set: chain -> until when its claim holds), `holders` (a hash: chain ->
the worker that claimed it, host:pid), `taken` (a hash: chain -> when it was claimed), `done` (a set of chains),
`failed` (a hash: chain -> "when worker reason") and `workers` (a sorted set: worker -> until when it counts as
alive). Each expires a week after its last use. Times are the Redis server's (machines whose clocks differ agree).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from lexpilot.errors import HarnessError
from lexpilot.models.shared_limits import RedisStore, limits_url
from lexpilot.models.shared_spending import KEEP_SECONDS
from lexpilot.running.batch.chain import DONE, FAILED, NOT_RUN
from lexpilot.running.grid.cells import Cell, Grid, start_chain

CLAIM_SPACING = (
    0.5  # between two claims of one worker: workers started together see each other before dealing
)
PARTS = ("leases", "holders", "taken", "done", "failed", "workers")

# KEYS: PARTS; ARGV: owner, lease ms, keep s, this worker's start (ms), chains it runs now, its cap (0: none), the
# grid's chains, then the chains it may claim (not its own) in the order they are dealt. Returns {chain, its previous holder} ({'', ''}: nothing to claim now).
CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local leases, holders, taken, done, failed, workers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
redis.call('ZADD', workers, now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', workers, '-inf', now)
for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ARGV[3]) end
-- an equal share of the grid's chains among the workers alive, or the worker's own cap
local chains = tonumber(ARGV[7])
local share = math.ceil(chains / math.max(1, redis.call('ZCARD', workers)))
if tonumber(ARGV[6]) > 0 then share = math.min(share, tonumber(ARGV[6])) end
if tonumber(ARGV[5]) >= share then return {'', ''} end
for i = 8, #ARGV do
  local chain = ARGV[i]
  local failure = redis.call('HGET', failed, chain)
  -- a chain that failed is tried again by a worker started after the failure (a rerun), not by those running
  local retried = not failure or tonumber(string.match(failure, '^(%d+)')) < tonumber(ARGV[4])
  if retried and redis.call('SISMEMBER', done, chain) == 0
      and tonumber(redis.call('ZSCORE', leases, chain) or 0) <= now then
    local before = redis.call('HGET', holders, chain) or ''
    redis.call('ZADD', leases, now + tonumber(ARGV[2]), chain)
    redis.call('HSET', holders, chain, ARGV[1])
    redis.call('HSET', taken, chain, now)
    redis.call('HDEL', failed, chain)
    return {chain, before}
  end
end
return {'', ''}
"""

# KEYS: PARTS; ARGV: owner, lease ms, then the chains it holds. Returns the chains another worker holds now.
RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[6], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local lost = {}
for i = 3, #ARGV do
  local holder = redis.call('HGET', KEYS[2], ARGV[i])
  if holder == ARGV[1] or not holder then
    -- no holder: the keys were lost (FLUSHALL, a restart without persistence), so the claim is made again
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[1])
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[i])
  else
    table.insert(lost, ARGV[i])
  end
end
return lost
"""

# KEYS: PARTS; ARGV: owner, chain, outcome (done, failed or released), reason, keep s
FINISH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1]
if ARGV[3] == 'done' then
  redis.call('SADD', KEYS[4], ARGV[2])
  redis.call('HDEL', KEYS[5], ARGV[2])
elseif ARGV[3] == 'failed' and mine then
  redis.call('HSET', KEYS[5], ARGV[2], now .. ' ' .. ARGV[1] .. ' ' .. ARGV[4])
end
if mine then
  redis.call('HDEL', KEYS[2], ARGV[2])
  redis.call('HDEL', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[1], ARGV[2])
end
for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ARGV[5]) end
return 1
"""


def workers_url(url: str) -> tuple[str, float]:
    """(host:port, lease seconds) of a --workers URL: the form --limits takes, checked before any call."""
    try:
        return limits_url(url)
    except HarnessError as e:  # the same rules, said of the option the user gave
        raise HarnessError(str(e).replace("--limits", "--workers", 1)) from None


def chain_id(chain: list[Cell]) -> str:
    """A chain's name in Redis and in messages: 'model run'."""
    return f"{chain[0].model} {chain[0].run_id}"


def dealt(chains: list[list[Cell]]) -> list[list[Cell]]:
    """The chains in the order workers take them: every model's first run, then every model's second, ... (a grid
    stopped part-way has comparable runs of every model), models by id, so every machine deals alike."""
    return sorted(chains, key=lambda chain: (chain[0].run_id, chain[0].model))


def failure(text: str) -> tuple[float, str, str]:
    """A failed chain's entry, 'when(ms) worker reason': (when in seconds, worker, reason)."""
    when, worker, reason = (text.split(" ", 2) + ["", ""])[:3]
    return int(when) / 1000, worker, reason


@dataclass
class Survey:
    """The fleet as Redis holds it at one moment: each chain done, failed, held (by whom, since when, lease left) or
    waiting; the workers alive."""

    now: float  # seconds, Redis's clock
    done: set[str]
    failed: dict[str, tuple[float, str, str]]  # chain -> (when, worker, reason)
    held: dict[
        str, tuple[str, float, float]
    ]  # chain -> (worker, seconds since claimed, lease left: < 0 expired)
    workers: int


class Fleet:
    """This worker's side of the fleet: its claims, their heartbeat, and what it marks done, failed or released."""

    def __init__(self, store: RedisStore, grid: str, chains: list[list[Cell]], cap: int = 0):
        self.store, self.cap, self.owner = store, cap, store.owner
        self.keys = [f"lexpilot:workers:{grid}:{part}" for part in PARTS]
        self.chains = {chain_id(c): c for c in dealt(chains)}
        client = store.client
        self.claim_script, self.renew_script, self.finish_script = (
            client.register_script(s) for s in (CLAIM, RENEW, FINISH)
        )
        self.held: set[str] = set()
        self.lost: set[str] = set()  # said once each: a claim that lapsed while its chain ran here
        self.lock, self.closed = threading.Lock(), threading.Event()
        self.started_ms = 0

    def reach(self) -> Survey:
        """Redis answers (or one line says why not): the fleet now, and when this worker began."""
        try:
            survey = self.survey()
        except self.store.errors as e:
            raise HarnessError(self.store.refused(e).replace("--limits", "--workers", 1)) from None
        self.started_ms = int(survey.now * 1000)
        return survey

    def start(self) -> None:
        """Before the first claim: the heartbeat that keeps this worker's claims."""
        threading.Thread(target=self._renew, name="fleet", daemon=True).start()

    def claim(self, running: int) -> tuple[list[Cell], str] | None:
        """The next chain this worker may take (and its previous holder, whose lease expired), or None."""
        args: list[str | int] = [self.owner, int(self.store.lease * 1000), KEEP_SECONDS, self.started_ms]
        args += [running, self.cap, len(self.chains)]
        try:
            with self.lock:  # never its own running chain again, whatever Redis lost meanwhile
                free = [c for c in self.chains if c not in self.held]
            chain, before = self.claim_script(keys=self.keys, args=[*args, *free])
        except self.store.errors:
            self.store.trouble(True)
            return None
        self.store.trouble(False)
        if not chain:
            return None
        with self.lock:
            self.held.add(chain.decode())
        return self.chains[chain.decode()], before.decode()

    def finish(self, chain: list[Cell]) -> None:
        """Its chain ended: done (every cell), failed (a cell failed or was held back: said with the first reason),
        or released for another worker (stopped by Ctrl-C or SIGTERM, or left with batches in flight)."""
        name = chain_id(chain)
        failed = [c for c in chain if c.status in (FAILED, NOT_RUN)]
        outcome = "done" if all(c.status == DONE for c in chain) else "failed" if failed else "released"
        reason = f"{failed[0].stage.name}: {failed[0].reason}"[:300] if failed else ""
        with self.lock:
            self.held.discard(name)
        try:
            self.finish_script(keys=self.keys, args=[self.owner, name, outcome, reason, KEEP_SECONDS])
        except self.store.errors:  # its lease expires; a worker that takes it finds its records saved
            self.store.trouble(True)

    def leave(self) -> None:
        """This worker counts no longer among the workers alive (its share goes to the others at once)."""
        self.closed.set()
        try:
            self.store.client.zrem(self.keys[5], self.owner)
        except self.store.errors:
            pass  # its registration expires a lease later

    def _renew(self) -> None:
        """Renew this worker's claims a few times per lease: only a worker that stopped loses its chains."""
        while not self.closed.wait(self.store.lease / 3):
            with self.lock:
                held = sorted(self.held)
            try:
                lost = self.renew_script(
                    keys=self.keys, args=[self.owner, int(self.store.lease * 1000), *held]
                )
            except self.store.errors:
                self.store.trouble(True)
                continue
            for chain in {c.decode() for c in lost} - self.lost:
                self.lost.add(chain)
                self.store.say(
                    f"[grid] {chain}: this worker's claim lapsed (Redis was out of reach past the lease) and "
                    "another worker claimed it; each cell's run lock keeps the two apart"
                )

    def survey(self) -> Survey:
        """The fleet now, read in one round trip."""
        pipe = self.store.client.pipeline(transaction=True)
        pipe.time()
        pipe.smembers(self.keys[3])
        pipe.hgetall(self.keys[4])
        pipe.hgetall(self.keys[1])
        pipe.zrange(self.keys[0], 0, -1, withscores=True)
        pipe.hgetall(self.keys[2])
        (seconds, micros), done, failed, holders, leases, taken = pipe.execute()
        now = seconds + micros / 1e6
        expiry = {chain.decode(): score / 1000 for chain, score in leases}
        alive = self.store.client.zcount(self.keys[5], int(now * 1000), "+inf")
        return Survey(
            now,
            {c.decode() for c in done},
            {c.decode(): failure(v.decode()) for c, v in failed.items()},
            {
                c.decode(): (w.decode(), now - int(taken.get(c, 0)) / 1000, expiry.get(c.decode(), 0) - now)
                for c, w in holders.items()
            },
            alive,
        )

    def left_for_me(self, survey: Survey) -> list[str]:
        """The chains this worker may still run or take over: neither done nor failed since it started."""
        began = self.started_ms / 1000
        return [
            c
            for c in self.chains
            if c not in survey.done and not (c in survey.failed and survey.failed[c][0] >= began)
        ]


@dataclass
class Dealer:
    """The worker's loop: a chain claimed whenever it has a free place, each run on its own thread as the grid runs
    its chains; it ends once nothing is left for it (every chain done, or failed while it ran) or on a drain."""

    grid: Grid
    fleet: Fleet
    run_one: Callable[[Grid, list[Cell]], None]
    claimed: Callable[[list[Cell]], None]  # the display's quote grows by the chain's
    say: Callable[[str], None]
    ended: threading.Event = field(default_factory=threading.Event)  # set once every chain here has ended
    running: list[threading.Event] = field(default_factory=list)
    changed: threading.Event = field(default_factory=threading.Event)  # a chain here ended

    def start(self) -> threading.Event:
        threading.Thread(target=self._deal, name="dealer", daemon=True).start()
        return self.ended

    def _deal(self) -> None:
        try:
            while not self.grid.sharing.draining.is_set() and self._next():
                pass
            for chain_ended in list(self.running):
                chain_ended.wait()
        finally:
            self.fleet.leave()
            self.ended.set()

    def _next(self) -> bool:
        """Claim one chain if there is a place and a chain; else wait a moment. False: nothing is left to do."""
        running = sum(not e.is_set() for e in self.running)
        taken = self.fleet.claim(running)
        if taken is not None:
            self._run(*taken)
            self.grid.sharing.draining.wait(CLAIM_SPACING)
            return True
        if not running:
            try:
                if not self.fleet.left_for_me(self.fleet.survey()):
                    return False
            except self.fleet.store.errors:
                self.fleet.store.trouble(True)
        self.changed.wait(min(1.0, self.fleet.store.lease / 4))  # a lease expiring elsewhere is seen soon
        self.changed.clear()
        return True

    def _run(self, chain: list[Cell], before: str) -> None:
        if before:
            self.say(f"[grid] {chain_id(chain)}: taken over from worker {before}, whose claim expired")
        self.grid.add(chain)
        self.claimed(chain)

        def run_and_finish(grid: Grid, chain: list[Cell]) -> None:
            try:
                self.run_one(grid, chain)
            finally:
                self.fleet.finish(chain)
                self.changed.set()

        self.running.append(start_chain(self.grid, run_and_finish, chain))


def nothing_left(fleet: Fleet, survey: Survey) -> str:
    """The line a worker says when it finds the grid finished before it took anything ('' when work is left)."""
    if fleet.left_for_me(survey):
        return ""
    failed = sum(c in survey.failed for c in fleet.chains)
    return (
        f"[grid] every chain of this grid is done or failed ({len(fleet.chains) - failed} done, {failed} failed; "
        "run_grid.py --status shows them): nothing to claim"
    )
