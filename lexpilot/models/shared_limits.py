"""An endpoint's limiter shared by every process and machine that uses it, through Redis (`run_grid.py --limits
redis://HOST:PORT/DB`): requests in flight as leases that expire (a killed process's slots come back within the
lease time), the rpm and tpm pacing, the AIMD ceiling and a 429's pause, each update one Lua script (atomic, on the
Redis server's clock, so machines whose clocks differ agree). Each process still takes its own cells' turns in
rotation (limits.Limiter); only the decision "may a call go now" is shared.

Keys are `lexpilot:limits:<endpoint hash>:slots` (a sorted set: lease id -> expiry) and `...:state` (a hash: the
ceiling, the pacing's next moments, the pause, counters), the hash taken over the base URL, model id and the key's
hash, never the key; both expire a day after their last use. A Redis that cannot be reached pauses the calls that
wait (one line when it goes, one when it is back); the calls in flight go on, and their leases expire by themselves.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import socket
import threading
import time
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from lexpilot.errors import HarnessError
from lexpilot.models.limits import PACING_MARGIN, Limiter, Limits

KEEP_SECONDS = 24 * 3600  # how long an endpoint's keys outlive their last use
DEFAULT_LEASE = 60.0
UNREACHABLE_POLL = 1.0  # how often a waiting call asks again while Redis cannot be reached
BUSY_POLL = 0.05  # how often the next call asks again while other processes hold every slot
# A process waiting for a slot queues in Redis, so a slot given back goes to the process that waited longest,
# not back to the one that gave it (which asks at once, before anyone's next poll). One that stops asking for
# this long (killed) leaves the queue: well above the longest a live waiter goes between asks (a pause's poll).
QUEUE_STALE = 5.0
DEFAULT_AWAY = 300.0  # --redis-wait: how long calls wait for a Redis out of reach before the grid stops

TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local slots, state, queue, seen, declared, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
-- the keys' epoch: a process that knew another (or none now, where it knew one) finds them lost (FLUSHALL, a
-- restart without persistence): every process puts its held leases back (RESTORE) and no new slot is given for half
-- a lease, within which every live process has renewed (each renews a third of a lease apart), so the count of calls
-- in flight is whole again
local epoch = redis.call('HGET', state, 'epoch')
if not epoch then
  epoch = ARGV[13]
  redis.call('HSET', state, 'epoch', epoch)
  if ARGV[12] ~= '' then redis.call('HSET', state, 'rebuilt_until', now + tonumber(ARGV[2]) / 2) end
end
if ARGV[12] ~= '' and ARGV[12] ~= epoch then return {-2, 0, '0', '0', '0', epoch} end
local rebuilt_until = tonumber(redis.call('HGET', state, 'rebuilt_until') or 0)
-- every live process declares its limits (until a lease after its last take or renewal); the strictest holds
redis.call('HSET', declared, ARGV[8], ARGV[3] .. ' ' .. ARGV[5] .. ' ' .. ARGV[10])
redis.call('ZADD', alive, now + tonumber(ARGV[2]), ARGV[8])
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now)) do
  redis.call('HDEL', declared, gone)
  redis.call('ZREM', alive, gone)
end
local cap, interval, tpm = math.huge, 0, math.huge
for _, said in ipairs(redis.call('HVALS', declared)) do
  local c, i, m = string.match(said, '(%S+) (%S+) (%S+)')
  cap, interval = math.min(cap, tonumber(c)), math.max(interval, tonumber(i))
  if tonumber(m) > 0 then tpm = math.min(tpm, tonumber(m)) end
end
redis.call('EXPIRE', declared, ARGV[7])
redis.call('EXPIRE', alive, ARGV[7])
local limit = math.min(tonumber(redis.call('HGET', state, 'limit') or cap), cap)
local in_flight = redis.call('ZCARD', slots)
local strictest = {tostring(cap), tostring(interval), tostring(tpm == math.huge and 0 or tpm), epoch}
redis.call('EXPIRE', state, ARGV[7])
-- the processes waiting for a slot, first come first served: one that stopped asking leaves the queue
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', seen, '-inf', now - tonumber(ARGV[9]))) do
  redis.call('ZREM', queue, gone)
  redis.call('ZREM', seen, gone)
end
local mine = redis.call('ZSCORE', queue, ARGV[8])
local ahead = mine and redis.call('ZCOUNT', queue, '-inf', '(' .. mine) or redis.call('ZCARD', queue)
if mine then redis.call('ZADD', seen, now, ARGV[8]) end
if in_flight + ahead >= math.floor(limit) then
  redis.call('ZADD', queue, 'NX', now, ARGV[8])
  redis.call('ZADD', seen, now, ARGV[8])
  redis.call('EXPIRE', queue, ARGV[7])
  redis.call('EXPIRE', seen, ARGV[7])
  return {-1, in_flight, unpack(strictest)}
end
local token_ms = 0
if tpm < math.huge then token_ms = tonumber(ARGV[6]) * 60000 / (tpm * tonumber(ARGV[11])) end
local wait = math.max(0, tonumber(redis.call('HGET', state, 'resume_at') or 0) - now, rebuilt_until - now)
local next_request = tonumber(redis.call('HGET', state, 'next_request') or 0)
local next_tokens = tonumber(redis.call('HGET', state, 'next_tokens') or 0)
if interval > 0 then wait = math.max(wait, next_request - now) end
if token_ms > 0 then wait = math.max(wait, next_tokens - now) end
if wait > 0 then return {math.ceil(wait), in_flight, unpack(strictest)} end
redis.call('ZADD', slots, now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREM', queue, ARGV[8])
redis.call('ZREM', seen, ARGV[8])
if interval > 0 then redis.call('HSET', state, 'next_request', math.max(next_request, now) + interval) end
if token_ms > 0 then redis.call('HSET', state, 'next_tokens', math.max(next_tokens, now) + token_ms) end
if not redis.call('HGET', state, 'limit') then redis.call('HSET', state, 'limit', cap, 'max', cap) end
redis.call('HSET', state, 'cap', tostring(cap), 'tpm', tostring(tpm == math.huge and 0 or tpm))
redis.call('HINCRBY', state, 'sent', 1)
redis.call('EXPIRE', slots, ARGV[7])
return {0, in_flight + 1, unpack(strictest)}
"""

GIVE_BACK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local slots, state = KEYS[1], KEYS[2]
local in_flight = redis.call('ZCARD', slots)
redis.call('ZREM', slots, ARGV[1])
local cap = tonumber(redis.call('HGET', state, 'cap') or ARGV[6])
local limit = math.min(tonumber(redis.call('HGET', state, 'limit') or ARGV[5]), cap)
local max = math.min(tonumber(redis.call('HGET', state, 'max') or ARGV[6]), cap)
local pause = tonumber(ARGV[3])
if ARGV[2] == 'slots' then
  limit = math.max(1, math.min(limit, in_flight - 1))
  max = limit
elseif ARGV[2] == 'rate' then
  redis.call('HSET', state, 'resume_at', math.max(tonumber(redis.call('HGET', state, 'resume_at') or 0), now + pause))
  redis.call('HINCRBY', state, 'rate_limited', 1)
  if now - tonumber(redis.call('HGET', state, 'last_cut') or 0) > pause then
    limit = math.max(1, limit / 2)
    redis.call('HSET', state, 'last_cut', now)
  end
else
  limit = math.min(max, limit + 1 / limit)
end
redis.call('HSET', state, 'limit', tostring(limit), 'max', tostring(max))
local tpm = tonumber(redis.call('HGET', state, 'tpm') or 0)
if tonumber(ARGV[4]) > 0 and tpm > 0 then
  local token_ms = tonumber(ARGV[4]) * 60000 / (tpm * tonumber(ARGV[7]))
  redis.call('HSET', state, 'next_tokens', math.max(tonumber(redis.call('HGET', state, 'next_tokens') or 0), now) + token_ms)
end
return 1
"""

# KEYS: slots, alive, state; ARGV: lease ms, owner, the epoch known, a fresh epoch, lease ids. Returns the epoch and
# whether the keys were found lost (then the leases are put back, as RESTORE puts them, and new slots wait a lease)
RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('HGET', KEYS[3], 'epoch')
if not epoch and ARGV[3] ~= '' then
  epoch = ARGV[4]
  redis.call('HSET', KEYS[3], 'epoch', epoch, 'rebuilt_until', now + tonumber(ARGV[1]) / 2)
end
local lost = ARGV[3] ~= '' and epoch ~= ARGV[3]
redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[1]), ARGV[2])
for i = 5, #ARGV do redis.call('ZADD', KEYS[1], lost and 'NX' or 'XX', now + tonumber(ARGV[1]), ARGV[i]) end
return {epoch or ARGV[3], lost and 1 or 0}
"""

# KEYS: slots, state; ARGV: lease ms, the epoch found, lease ids. A process's held leases put back after its keys were
# lost, and the epoch it now knows
RESTORE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[1]), ARGV[i]) end
return redis.call('HGET', KEYS[2], 'epoch') or ARGV[2]
"""


class RedisStore:
    """One connection to the Redis that holds every shared limiter, with its scripts; `say` reports (once per
    change) that it cannot be reached, or is back."""

    def __init__(self, url: str, say=print, flag: str = "--limits"):
        self.flag = flag  # the option that named this Redis, for its messages
        try:
            import redis
        except ImportError:
            raise HarnessError(
                f"{flag} redis://…: the redis package is not installed; pip install -r "
                "requirements-optional.txt"
            ) from None
        self.where, self.lease = limits_url(url)
        # any answer that is not the script's (connection lost, a timeout, a server that refuses): the calls wait
        self.errors = (redis.exceptions.RedisError,)
        self.redis = redis
        self.client = redis.Redis.from_url(url.split("?")[0], socket_timeout=2, socket_connect_timeout=2)
        self.take, self.give_back, self.renew, self.restore = (
            self.client.register_script(s) for s in (TAKE, GIVE_BACK, RENEW, RESTORE)
        )
        self.say, self.unreachable, self.lock = say, False, threading.Lock()
        # how long calls wait for a Redis out of reach (--redis-wait) before `on_away` stops the grid, as a Ctrl-C does
        self.away_limit, self.gave_up = DEFAULT_AWAY, False
        self.down_since: float | None = None  # when it went out of reach
        self.on_away: Callable[[], None] = lambda: None
        self.ids = itertools.count(1)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"

    def reachable(self) -> None:
        """Before any call: Redis answers, runs scripts, takes writes and keeps what it is given, or one line says
        what it does not."""
        probe = f"lexpilot:probe:{self.owner}"
        try:
            self.client.ping()
            # a database number the server lacks fails here
            self.client.exists(f"lexpilot:limits:{self.owner}")
        except self.errors as e:
            raise HarnessError(self.refused(e)) from None
        try:  # scripting (refused: a renamed or disabled EVAL) and writes (refused: a read-only replica)
            self.client.eval("return redis.call('SET', KEYS[1], '1', 'EX', 10)", 1, probe)
            self.client.delete(probe)
        except self.redis.exceptions.ReadOnlyError:
            raise HarnessError(
                f"{self.flag}: Redis at {self.where} is a read-only replica; give the primary's URL"
            ) from None
        except self.errors as e:
            raise HarnessError(
                f"{self.flag}: Redis at {self.where} does not run the limiter's scripts ({self.said(e)}); enable "
                "scripting (EVAL) there, or use another Redis"
            ) from None
        self.keeps_keys()

    def keeps_keys(self) -> None:
        """Refused: a Redis that may evict keys to make room (its maxmemory-policy other than noeviction), which can
        drop a limiter's leases mid-grid and let calls past the limit."""
        try:
            policy = str(self.client.info("memory").get("maxmemory_policy", "noeviction"))
        except self.errors:
            return  # a managed Redis that hides INFO: nothing to tell
        if policy != "noeviction":
            raise HarnessError(
                f"{self.flag}: Redis at {self.where} has maxmemory-policy {policy}, which can evict the limiter's "
                "keys and let calls past the limits; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy "
                "noeviction, or in redis.conf), or use another Redis"
            )

    def said(self, e) -> str:
        """What Redis said, on one line, its password never shown."""
        password = parts_password(self.client)
        return " ".join((str(e).replace(password, "[redacted]") if password else str(e)).split())[:160]

    def refused(self, e) -> str:
        """Why Redis cannot be used, in one line, its password never shown, and what to do."""
        reason = self.said(e)
        exceptions = self.redis.exceptions
        if (
            isinstance(e, exceptions.AuthenticationError)
            or "authenticat" in reason.lower()
            or "NOAUTH" in reason
        ):
            return (
                f"{self.flag}: Redis at {self.where} needs a password ({reason}): give it in the URL, "
                "redis://:PASSWORD@HOST:PORT/DB"
            )
        if isinstance(e, exceptions.ResponseError):
            return (
                f"{self.flag}: Redis at {self.where} refuses ({reason}); check the URL's database number (0 to 15 "
                "on a default server)"
            )
        # (InvalidResponse is neither; a server that is not Redis, an HTTP one say, often just closes the line)
        if (
            isinstance(e, (exceptions.ConnectionError, exceptions.TimeoutError))
            and "closed by server" not in reason
        ):
            return (
                f"{self.flag}: cannot reach Redis at {self.where} ({reason}); start it (docs/grid.md) or run "
                f"without {self.flag}"
            )
        return (
            f"{self.flag}: the server at {self.where} does not answer as Redis does ({reason}); check the host "
            "and port"
        )

    def trouble(self, failed: bool) -> None:
        """Redis out of reach (said once, and timed from then: past `away_limit` seconds, `on_away` once), or reached
        again (said once)."""
        with self.lock:
            changed, self.unreachable = failed != self.unreachable, failed
            if changed:
                self.down_since = time.monotonic() if failed else None
            give_up = failed and not self.gave_up and self.away() > self.away_limit
            self.gave_up = self.gave_up or give_up
        if changed:
            self.say(
                f"[grid] cannot reach Redis at {self.where}: calls wait until it is back (nothing is lost)"
                if failed
                else f"[grid] Redis at {self.where} reached again: calls go on"
            )
        if give_up:
            self.on_away()

    def away(self) -> float:
        """For how long Redis has been out of reach (0: it answers)."""
        since = self.down_since
        return 0.0 if since is None else time.monotonic() - since

    def lease_id(self) -> str:
        return f"{self.owner}:{next(self.ids)}"


def limits_url(url: str) -> tuple[str, float]:
    """(host:port, lease seconds) of a --limits URL, or a one-line error; checked before any call (a dry run too)."""
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
        query = parse_qs(parts.query, keep_blank_values=True)
    except ValueError:
        parts, port, query = urlsplit(""), 0, {}
    # the URL may hold a password: messages name the host and port only
    if parts.scheme not in ("redis", "rediss") or not parts.hostname or not port:
        raise HarnessError("--limits: not a redis://[:PASSWORD@]HOST:PORT/DB URL (optionally ?lease=SECONDS)")
    where = f"{parts.hostname}:{port}"
    if parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise HarnessError(
            f"--limits (Redis at {where}): the database is a number after the port, redis://HOST:PORT/0"
        )
    unknown = sorted(set(query) - {"lease"})
    if unknown:
        raise HarnessError(
            f"--limits (Redis at {where}): {unknown[0][:40]!r} is not a setting; the URL takes only "
            "?lease=SECONDS"
        )
    try:
        lease = float(query.get("lease", [DEFAULT_LEASE])[-1])
        if not 1 <= lease <= 3600 or len(query.get("lease", [])) > 1:
            raise ValueError
    except ValueError:
        raise HarnessError(
            f"--limits (Redis at {where}): lease is one number of seconds from 1 to 3600"
        ) from None
    return where, lease


def parts_password(client) -> str:
    """The password the client connects with ("" without one), to keep it out of messages."""
    return client.connection_pool.connection_kwargs.get("password") or ""


class SharedLimiter(Limiter):
    """A Limiter whose slots, pacing, ceiling and pause live in Redis, shared with every process using the
    endpoint; this process's cells still take their turns in rotation."""

    def __init__(self, store: RedisStore, endpoint: tuple, ceiling: int, limits: Limits, name: str = ""):
        super().__init__(ceiling, limits, name)
        digest = hashlib.sha256("\0".join(endpoint).encode()).hexdigest()[:16]
        self.store = store
        parts = ("slots", "state", "queue", "seen", "declared", "alive")
        self.keys = [f"lexpilot:limits:{digest}:{part}" for part in parts]
        self.leases: set[str] = set()
        self.strictest: tuple[float, float, float] | None = None  # said once: another process's, stricter
        self.epoch = ""  # the endpoint keys' epoch this process knows ("": none yet)
        self.owed: set[str] = set()  # leases of calls that ended while Redis could not be reached
        self.heartbeat: threading.Thread | None = None

    def _shared_sent(self) -> int | None:
        try:
            return int(self.store.client.hget(self.keys[1], "sent") or 0)
        except (
            self.store.errors
        ):  # unreachable for now: this backlog is measured by this process's calls alone
            return None

    def _take(self, ticket, now: float) -> float:
        interval = 60_000 / (self.limits.rpm * PACING_MARGIN) if self.limits.rpm else 0
        lease = self.store.lease_id()
        try:
            self._give_back_owed()
            wait, _, *strictest, epoch = self.store.take(
                keys=self.keys,
                args=[
                    lease,
                    int(self.store.lease * 1000),
                    self.max_limit,
                    self.max_limit,
                    interval,
                    ticket.tokens,
                    KEEP_SECONDS,
                    self.store.owner,
                    int(QUEUE_STALE * 1000),
                    self.limits.tpm or 0,
                    PACING_MARGIN,
                    self.epoch,
                    self.store.lease_id(),
                ],
            )
            if wait == -2:  # its keys were lost: this process's leases put back before anything else
                self._restore(epoch.decode() if isinstance(epoch, bytes) else str(epoch))
                return BUSY_POLL
        except self.store.errors:
            self.store.trouble(True)
            return UNREACHABLE_POLL
        self.store.trouble(False)
        self._noticed(epoch.decode() if isinstance(epoch, bytes) else str(epoch))
        self._say_strictest(*(float(x) for x in strictest))
        if wait:
            return BUSY_POLL if wait < 0 else wait / 1000
        self.in_flight += 1
        ticket.lease = lease
        self.leases.add(lease)
        self._keep_leases()
        return 0.0

    def _stopped_waiting(self) -> None:
        try:
            self.store.client.zrem(self.keys[2], self.store.owner)
            self.store.client.zrem(self.keys[3], self.store.owner)
        except self.store.errors:
            pass  # it goes stale in QUEUE_STALE seconds

    def _noticed(self, epoch: str) -> None:
        """The keys' epoch this process now knows; a new one where it knew another was said by `_restore`."""
        self.epoch = epoch

    def _restore(self, epoch: str) -> None:
        """The endpoint's keys were lost (FLUSHALL, a restart without persistence): this process's held leases put
        back, said once per loss; new slots wait a lease while every live process does the same."""
        held = list(self.leases)
        found = self.store.restore(keys=self.keys[:2], args=[int(self.store.lease * 1000), epoch, *held])
        self.epoch = found.decode() if isinstance(found, bytes) else str(found)
        self._say_lost(len(held))

    def _say_lost(self, held: int) -> None:
        self.store.say(
            f"[grid] {self.name}: Redis lost the limiter's keys (FLUSHALL, or a restart without persistence); "
            f"{held} calls in flight here counted again, and new calls wait half a lease ({self.store.lease / 2:g} s) "
            "while every process does the same"
        )

    def _give_back_owed(self) -> None:
        """Slots of calls that ended while Redis could not be reached, given back now (a Redis restarted with
        persistence would otherwise hold them until their leases expired)."""
        if self.owed:
            self.store.client.zrem(self.keys[0], *self.owed)
            self.owed.clear()

    def _say_strictest(self, concurrency: float, interval: float, tpm: float) -> None:
        """Once: another process of the grid declared a stricter limit for this endpoint than this one's, which holds
        for every process while it runs (a lower limit takes effect at once; a higher one once the lower's
        processes are gone, a lease later)."""
        own = (self.max_limit, 60_000 / (self.limits.rpm * PACING_MARGIN) if self.limits.rpm else 0.0)
        stricter = []
        if concurrency < own[0]:
            stricter.append(f"concurrency {concurrency:g} (this process {own[0]:g})")
        if interval > own[1] + 1e-6:
            stricter.append(
                f"rpm {60_000 / (interval * PACING_MARGIN):.4g} (this process {self.limits.rpm or 'none'})"
            )
        if tpm and tpm < (self.limits.tpm or math.inf):
            stricter.append(f"tpm {tpm:g} (this process {self.limits.tpm or 'none'})")
        if stricter and self.strictest is None:
            self.strictest = (concurrency, interval, tpm)
            self.store.say(
                f"[grid] {self.name}: another process sharing this endpoint set {', '.join(stricter)}; "
                "the strictest limit holds for every process"
            )

    def _give_back(self, pushed_back, pause, tokens_over, now: float, lease: str | None = None) -> None:
        self.in_flight -= 1
        self.leases.discard(lease)
        if pushed_back == "rate":
            self.resume_at = max(self.resume_at, now + (pause if pause is not None else 1.0))
        try:
            self.store.give_back(
                keys=self.keys,
                args=[
                    lease or "",
                    pushed_back or "",
                    int(1000 * (pause or 1.0)),
                    max(tokens_over, 0),
                    self.max_limit,
                    self.max_limit,
                    PACING_MARGIN,
                ],
            )
        except self.store.errors:
            self.store.trouble(True)  # given back when Redis is reached again, or it expires by itself
            if lease:
                self.owed.add(lease)

    def _keep_leases(self) -> None:
        """Renew this process's leases a few times per lease: only a process that stopped loses its slots."""
        if self.heartbeat is None:
            self.heartbeat = threading.Thread(target=self._renew, name=f"leases-{self.name}", daemon=True)
            self.heartbeat.start()

    def _renew(self) -> None:
        while True:  # a daemon thread: it ends with the process
            time.sleep(self.store.lease / 3)
            with self.lock:
                held = list(self.leases)
            if held:
                try:
                    epoch, lost = self.store.renew(
                        keys=[self.keys[0], self.keys[5], self.keys[1]],
                        args=[
                            int(self.store.lease * 1000),
                            self.store.owner,
                            self.epoch,
                            self.store.lease_id(),
                            *held,
                        ],
                    )
                except self.store.errors:
                    self.store.trouble(True)
                    continue
                with self.lock:
                    self.epoch = epoch.decode() if isinstance(epoch, bytes) else str(epoch)
                if lost:
                    self._say_lost(len(held))
