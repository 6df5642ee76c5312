"""A grid's spending shared by every shard on every machine, through the Redis that holds its limits (`run_grid.py
--limits redis://…` with --max-cost): one `spending.Ledger` whose reserve and settle are each one Lua script, so that
one cap holds for the whole fleet.

Keys, named by the grid (`grid_key`: its dataset, models, runs and stages, whatever shard a process runs):
`lexpilot:spending:<grid>:totals` (a hash: spent, reclaimed), `...:reserved` (a hash: process -> its reservations) and
`...:alive` (a sorted set: process -> until when it counts as alive, renewed while it has reservations). A process
whose time runs out (killed, its machine gone) has its reservations counted as spent: it may have been billed for
its calls in flight (spending.py). Kept a week after their last use: a rerun days later still counts them.
"""

from __future__ import annotations

import hashlib
import threading
import time

from lexpilot.errors import Aborted, FatalError
from lexpilot.models.shared_limits import RedisStore
from lexpilot.spending import Totals

KEEP_SECONDS = 7 * 24 * 3600

# KEYS: totals, reserved, alive; ARGV: owner, worst, amount, alive ms, keep s, the process's own (1: it has seen the
# totals before). Returns {ok, spent, reserved, reclaimed}; ok -1: the totals were lost (FLUSHALL, a restart without
# persistence) since this process saw them
RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local totals, reserved, alive = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HEXISTS', totals, 'kept') == 0 then
  if ARGV[6] == '1' then return {-1, '0', '0', '0'} end
  redis.call('HSET', totals, 'kept', '1')
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now)) do
  local held = tonumber(redis.call('HGET', reserved, gone) or 0)
  redis.call('HINCRBYFLOAT', totals, 'spent', held)
  redis.call('HINCRBYFLOAT', totals, 'reclaimed', held)
  redis.call('HDEL', reserved, gone)
  redis.call('ZREM', alive, gone)
end
local spent = tonumber(redis.call('HGET', totals, 'spent') or 0)
local held = 0
for _, amount in ipairs(redis.call('HVALS', reserved)) do held = held + tonumber(amount) end
local worst = tonumber(ARGV[2])
local ok = 0
if worst > 0 and spent + held + worst <= tonumber(ARGV[3]) + 1e-8 then
  redis.call('HINCRBYFLOAT', reserved, ARGV[1], worst)
  redis.call('ZADD', alive, now + tonumber(ARGV[4]), ARGV[1])
  held, ok = held + worst, 1
end
for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ARGV[5]) end
local reclaimed = redis.call('HGET', totals, 'reclaimed') or '0'
return {ok, tostring(spent), tostring(held), reclaimed}
"""

# KEYS: totals, reserved, alive; ARGV: owner, reserved, cost, alive ms, keep s
SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local totals, reserved, alive = KEYS[1], KEYS[2], KEYS[3]
local left = tonumber(redis.call('HGET', reserved, ARGV[1]) or 0) - tonumber(ARGV[2])
if left > 1e-12 then
  redis.call('HSET', reserved, ARGV[1], tostring(left))
  redis.call('ZADD', alive, now + tonumber(ARGV[4]), ARGV[1])
else
  redis.call('HDEL', reserved, ARGV[1])
  redis.call('ZREM', alive, ARGV[1])
end
redis.call('HINCRBYFLOAT', totals, 'spent', ARGV[3])
for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ARGV[5]) end
return 1
"""

# KEYS: alive; ARGV: owner, alive ms
RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
return 1
"""


def grid_key(dataset_sha: str, models: list[str], run_ids: list[str], stages: list[str]) -> str:
    """The grid a spending belongs to, the same for every shard and rerun of one grid command."""
    text = "\0".join([dataset_sha, *sorted(models), "", *sorted(run_ids), "", *sorted(stages)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class RedisLedger:
    """The grid's spending in Redis: every process's reservations apart, each kept alive a lease at a time while
    the process runs (renewed a few times per lease), counted as spent once its time runs out."""

    def __init__(self, store: RedisStore, grid: str):
        self.store, self.owner = store, store.owner
        self.keys = [f"lexpilot:spending:{grid}:{part}" for part in ("totals", "reserved", "alive")]
        self.alive_ms = int(store.lease * 1000)
        client = store.client
        self.reserve_script, self.settle_script, self.renew_script = (
            client.register_script(s) for s in (RESERVE, SETTLE, RENEW)
        )
        self.heartbeat: threading.Thread | None = None
        self.closed = threading.Event()
        # whether this process has seen the totals, and as last seen
        self.seen, self.last = False, Totals(0.0, 0.0)
        self.owed: list[tuple[float, float]] = []  # settlements Redis could not take yet
        self.lock = threading.Lock()

    def reserve(self, worst: float, amount: float) -> tuple[bool, Totals]:
        ok = self._reserve(worst, amount)
        if ok == -1:
            raise FatalError(
                f"--max-cost: Redis at {self.store.where} lost the grid's spending (FLUSHALL, or a restart without "
                f"persistence; {self.last.spent:.4f} spent when this process last saw it): no call is sent without "
                "it. Rerun with --max-cost lowered by what was spent (show_results.py --usage --prices counts it)"
            )
        if ok:
            self._keep_alive()
        return bool(ok), self.last

    def _reserve(self, worst: float, amount: float, wait: bool = True) -> int:
        """The reserve script's answer (1 reserved, 0 refused, -1 the totals lost), the totals kept as `last`;
        `wait`: while Redis is out of reach (else its error is raised)."""
        args: list[str | float | int] = [
            self.owner,
            worst,
            amount,
            self.alive_ms,
            KEEP_SECONDS,
            int(self.seen),
        ]
        if wait:
            ok, spent, reserved, reclaimed = self._call(self.reserve_script, args)
        else:
            ok, spent, reserved, reclaimed = self.reserve_script(keys=self.keys, args=args)
        if ok != -1:
            self.seen, self.last = True, Totals(float(spent), float(reserved), float(reclaimed))
        return ok

    def settle(self, reserved: float, cost: float) -> None:
        """Never waits nor fails: a call that ended is saved or journalled whatever Redis does. Out of reach, the
        settlement is kept here and sent with the next one that goes through (a process that ends first leaves its
        reservation to be counted as spent when its time runs out: never less than it cost)."""
        with self.lock:
            owed, self.owed = self.owed + [(reserved, cost)], []
        for n, (held, spent) in enumerate(owed):
            try:
                self.settle_script(
                    keys=self.keys, args=[self.owner, held, spent, self.alive_ms, KEEP_SECONDS]
                )
            except self.store.errors:
                self.store.trouble(True)
                with self.lock:
                    self.owed = owed[n:] + self.owed
                return
        self.store.trouble(False)

    def totals(self) -> Totals:
        """Every process's spending, as last seen where Redis cannot say now (the display never waits for it)."""
        try:
            self._reserve(0.0, 0.0, wait=False)
        except self.store.errors:
            pass
        return self.last

    def close(self) -> None:
        self.closed.set()
        try:
            held = float(self.store.client.hget(self.keys[1], self.owner) or 0)
        except self.store.errors:
            return  # its time runs out: counted as spent, never lost
        if held:
            self.settle(held, 0.0)

    def _call(self, script, args: list):
        """A script run, waiting while Redis cannot be reached (the cap is never decided without it), until the
        store gives up on it (--redis-wait): then the call is stopped, as a Ctrl-C stops it."""
        while True:
            try:
                result = script(keys=self.keys, args=args)
                self.store.trouble(False)
                return result
            except self.store.errors:
                self.store.trouble(True)
                if self.store.gave_up:
                    raise Aborted() from None
                time.sleep(1.0)

    def _keep_alive(self) -> None:
        if self.heartbeat is None:
            self.heartbeat = threading.Thread(target=self._renew, name="spending", daemon=True)
            self.heartbeat.start()

    def _renew(self) -> None:
        while not self.closed.wait(self.store.lease / 3):
            try:
                self.renew_script(keys=self.keys[2:], args=[self.owner, self.alive_ms])
            except self.store.errors:
                self.store.trouble(True)
