"""Redis faults never overrun a limit, never hang (docs/grid.md): a Redis that could drop the limiter's keys, or
cannot run its scripts or take its writes, is refused at the start in one line; keys lost mid-grid (FLUSHALL, a
restart without persistence) are noticed and the limiter rebuilds without ever going above the limit; leases of calls
that ended while Redis was away are given back when it returns; a Redis away too long stops the grid as a Ctrl-C
does. Real redis-servers on free loopback ports."""

import json
import shutil
import threading
import time
from collections import Counter

import pytest

from lexpilot.models.limits import Limits
from lexpilot.models.shared_limits import RedisStore, SharedLimiter
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import grid, grid_environment
from tests.helpers.paths import ROOT
from tests.helpers.processes import wait_until
from tests.helpers.redis_server import RedisServer, clean_run, limits_error, unanswered, waits
from tests.helpers.warm import fresh

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not shutil.which("redis-server"), reason="no redis-server (apt-get install redis-server)"
    ),
]

ENDPOINT = ("http://127.0.0.1:1/v1", "judge-m", "key-hash")


@pytest.fixture
def servers(tmp_path):
    pytest.importorskip("redis")
    started = []

    def start(*options: str, folder=None) -> RedisServer:
        server = RedisServer(folder or tmp_path / f"redis-{len(started)}", *options)
        server.folder.mkdir(exist_ok=True)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_a_redis_that_may_evict_the_limiters_keys_is_refused_naming_maxmemory_policy(
    servers, tmp_path, capsys, policy
):
    server = servers()
    server.client().config_set("maxmemory-policy", policy)
    code, err = limits_error(tmp_path / "out", capsys, server.url)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"maxmemory-policy {policy}" in err and "noeviction" in err


def test_a_redis_without_scripting_and_a_read_only_replica_are_refused_at_the_start(
    servers, tmp_path, capsys
):
    # before, the first passed the start check, then waited forever saying it "cannot reach" Redis
    no_scripts = servers("--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "")
    code, err = limits_error(tmp_path / "a", capsys, no_scripts.url)
    assert code == 2 and len(err.splitlines()) == 1 and "does not run the limiter's scripts" in err, err
    primary = servers()
    replica = servers("--replicaof", "127.0.0.1", str(primary.port))
    code, err = limits_error(tmp_path / "b", capsys, replica.url)
    assert code == 2 and len(err.splitlines()) == 1 and "read-only replica" in err, err


def limiter(server, limits: Limits, lease: float = 2.0, said=None) -> SharedLimiter:
    store = RedisStore(
        f"{server.url}?lease={lease:g}", say=(said.append if said is not None else lambda line: None)
    )
    return SharedLimiter(store, ENDPOINT, 8, limits, "judge")


def test_keys_lost_to_flushall_are_noticed_and_the_limit_still_holds(servers):
    # concurrency 2, both slots held by a process when every key is lost: the next take notices (the limiter's
    # state is gone though it holds leases), its held leases are put back, and a third call still waits
    server = servers()
    holder = limiter(server, Limits(concurrency=2))
    held = [holder.acquire(lambda: False) for _ in range(2)]
    server.client().flushall()
    other = limiter(server, Limits(concurrency=2))
    other.store.owner = "machine-2:200"
    assert waits(holder) and waits(other)
    for lease in held:
        holder.release(lease=lease)
    assert not waits(other, 3.0)  # within the lease (2 s) the limiter is whole again


def test_after_keys_are_lost_no_slot_is_given_until_every_holder_has_put_its_leases_back(servers):
    # a process that held both slots of a concurrency of 2 and takes nothing (its calls in flight, none waiting)
    # puts its leases back at its next renewal (a third of a lease); another process that knew the keys and asks
    # first gets no slot in between (without the wait it would have found none in flight and gone: 3 of 2), nor
    # after (the 2 are back), until one of them ends
    server = servers()
    holder, asker = (
        limiter(server, Limits(concurrency=2), lease=3),
        limiter(server, Limits(concurrency=2), lease=3),
    )
    asker.store.owner = "machine-2:200"
    asker.release(lease=asker.acquire(lambda: False))  # it knows the keys
    held = [holder.acquire(lambda: False) for _ in range(2)]
    server.client().flushall()
    assert waits(asker, 0.5)
    time.sleep(1.5)  # half a lease: the holder has renewed (every second), its 2 leases back
    assert server.client().zcard(holder.keys[0]) == 2 and waits(asker, 0.5)
    holder.release(lease=held[0])
    assert not waits(asker, 1.0)
    holder.release(lease=held[1])


def test_a_restart_without_persistence_is_noticed_as_flushall_is(servers, tmp_path):
    server = servers()
    holder = limiter(server, Limits(concurrency=1))
    lease = holder.acquire(lambda: False)
    server.stop()
    server.start()
    other = limiter(server, Limits(concurrency=1))
    other.store.owner = "machine-2:200"
    assert waits(holder) and waits(other)  # the holder's lease put back at its first take
    holder.release(lease=lease)
    assert not waits(other, 3.0)


def test_leases_of_calls_that_ended_while_redis_was_away_are_given_back_when_it_returns(servers):
    # restart with persistence: the saved leases come back, though their calls ended while Redis was down. Before,
    # they held their slots until they expired (about 55 s stalled); now the process gives them back when it can
    server = servers()
    holder = limiter(server, Limits(concurrency=2), lease=60)
    held = [holder.acquire(lambda: False) for _ in range(2)]
    server.client().save()
    server.stop()
    for lease in held:
        holder.release(lease=lease)  # Redis away: given back later
    server.start()
    started = time.monotonic()
    other = limiter(server, Limits(concurrency=2), lease=60)
    other.store.owner = "machine-2:200"
    holder.release(
        lease=holder.acquire(lambda: False)
    )  # the holder's next call gives the old leases back first
    other.release(lease=other.acquire(lambda: time.monotonic() > started + 5))
    assert time.monotonic() - started < 5


def test_calls_wait_while_redis_is_down_and_go_on_when_it_returns(servers):
    said: list[str] = []
    server = servers()
    lim = limiter(server, Limits(concurrency=1), said=said)
    lim.release(lease=lim.acquire(lambda: False))
    server.stop()
    got = []
    caller = threading.Thread(target=lambda: got.append(lim.acquire(lambda: False)))
    caller.start()
    time.sleep(1.5)
    assert not got and any("cannot reach Redis" in line for line in said), said
    server.start()
    caller.join(10)
    assert got and any("reached again" in line for line in said), said


def test_a_flushall_mid_grid_never_lets_more_calls_through_than_the_limit(tmp_path, servers, warm):
    # "per fault, the largest in-flight count and the most arrivals in any one-second window never exceed the limit,
    # and the grid completes": the judge limited to 2 at once and 300 a minute, every key lost while the grid runs;
    # the judge's provider counts what it held at once and what arrived in each second
    server = servers()
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    with ScriptedProvider(latency=0.05) as evaluated, ScriptedProvider(latency=0.1) as judge:
        env = grid_environment(evaluated, judge)
        limits = ("--limits", f"{server.url}?lease=2", "--limit", "DeepSeek-R1=concurrency:2,rpm:300")
        running = warm.start(grid(tmp_path / "out", dataset, *limits), ROOT, env)
        wait_until(lambda: sum(judge.processed.values()) >= 6)
        server.client().flushall()
        _, err = running.communicate(timeout=120)
        assert running.returncode == 0, err
        assert judge.most_active <= 2, judge.most_active
        # and the arrivals: paced at 97 % of 5 a second, at most 5 in any second (one late request may meet a
        # window's fifth, as the shared limit's own test allows)
        assert judge.busiest_second() <= 5 + 1, judge.busiest_second()
    assert "Redis lost the limiter's keys" in err and "Traceback" not in err


@pytest.mark.parametrize("capped", [False, True])
def test_a_redis_away_longer_than_redis_wait_stops_the_grid_in_one_line_and_a_rerun_pays_nothing_twice(
    tmp_path, servers, warm, capped
):
    # Redis down for 10 s, --redis-wait 3: the grid waits, counting, then stops as after a Ctrl-C (status 75);
    # rerun once Redis is back, it completes, and the providers processed a clean grid's requests once each (plus at
    # most the calls counted unanswered)
    server = servers()
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    with ScriptedProvider() as evaluated, ScriptedProvider() as judge:
        env = grid_environment(evaluated, judge)
        clean = clean_run(warm, tmp_path / "clean", dataset, env, evaluated, judge)
        evaluated.latency = judge.latency = 0.05
        shared = ("--limits", f"{server.url}?lease=2", "--redis-wait", "3")
        if (
            capped
        ):  # the grid's spending in Redis too: a call that ended while it was away is kept all the same
            shared += ("--prices", price_file(tmp_path), "--max-cost", "1000")
        running = warm.start(grid(tmp_path / "out", dataset, *shared), ROOT, env)
        wait_until(lambda: sum(judge.processed.values()) >= 4)
        began = (
            time.monotonic()
        )  # before the stop: the grid can find Redis gone while stop() waits for its exit
        server.stop()
        _, err = running.communicate(timeout=60)
        stopped_after = time.monotonic() - began
        assert running.returncode == 75, err
        time.sleep(max(0.0, 10 - stopped_after))
        server.start()
        evaluated.latency = judge.latency = 0.0
        rerun = fresh(grid(tmp_path / "out", dataset, *shared), ROOT, env)
        assert rerun.returncode == 0, rerun.stderr
        processed = Counter(evaluated.processed) + Counter(judge.processed)
    said = [line for line in err.splitlines() if "was out of reach for 3 s" in line]
    assert said and all("\n" not in line for line in said) and "Traceback" not in err, err
    assert 3 <= stopped_after < 30, stopped_after
    assert set(processed) == set(clean)
    assert sum((processed - clean).values()) <= unanswered(tmp_path / "out")


def price_file(tmp_path) -> str:
    prices = tmp_path / "prices.json"
    models = ("model-a", "model-b", "model-c", "DeepSeek-V4.1-Flash", "DeepSeek-R1")
    prices.write_text(json.dumps({m: {"prompt": 1.0, "completion": 1.0} for m in models}))
    return str(prices)


def test_spending_lost_to_a_flushall_stops_the_grid_in_one_line(tmp_path, servers, warm):
    server = servers()
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    prices = price_file(tmp_path)
    with ScriptedProvider(latency=0.05) as evaluated, ScriptedProvider(latency=0.05) as judge:
        env = grid_environment(evaluated, judge)
        capped = ("--limits", f"{server.url}?lease=2", "--prices", prices, "--max-cost", "100")
        running = warm.start(grid(tmp_path / "out", dataset, *capped), ROOT, env)
        wait_until(lambda: sum(judge.processed.values()) >= 4)
        server.client().flushall()
        _, err = running.communicate(timeout=60)
    assert running.returncode != 0 and "lost the grid's spending" in err and "Traceback" not in err, err
