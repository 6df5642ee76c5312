"""Cells claimed on demand (`run_grid.py --workers redis://…`), on a real redis-server started here on a free port
of 127.0.0.1: three workers, one killed with kill -9 halfway, and the others finish every chain, the dead worker's
after its lease, paying for nothing twice beyond the calls in flight at the kill; a finished chain is never claimed
again; `--status` shows the fleet from outside. (The rules each test pins were each broken by hand once.)"""

import re
import signal
import time
from collections import Counter

import pytest

import run_grid
from lexpilot.running.batch.chain import DONE
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import grid, grid_environment, records
from tests.helpers.paths import ROOT
from tests.helpers.processes import wait_until
from tests.helpers.redis_server import clean_run, unanswered
from tests.helpers.warm import run as warm_run

LEASE = 2  # seconds: a dead worker's chains are taken over soon after


def holders(redis_server) -> dict[str, str]:
    """chain -> the worker holding it, as Redis says."""
    client = redis_server.client()
    return {
        chain.decode(): worker.decode()
        for key in client.keys("lexpilot:workers:*:holders")
        for chain, worker in client.hgetall(key).items()
    }


def done(redis_server) -> set[str]:
    client = redis_server.client()
    return {
        chain.decode() for key in client.keys("lexpilot:workers:*:done") for chain in client.smembers(key)
    }


def status(monkeypatch, capsys, env, root, dataset, url) -> str:
    """run_grid.py --status for the grid, in this process: what it printed."""
    for name, value in env.items():
        if name.startswith(("OPENAI_", "LEXPILOT_")):
            monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert run_grid.main(grid(root, dataset, "--workers", url, "--status")[2:]) == 0
    return capsys.readouterr().out


@pytest.mark.slow
def test_three_workers_one_killed_finish_every_chain_and_pay_nothing_twice(
    tmp_path, redis_server, warm, monkeypatch, capsys
):
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    url = f"{redis_server.url}?lease={LEASE}"
    with ScriptedProvider() as evaluated, ScriptedProvider() as judge:
        env = grid_environment(evaluated, judge)
        clean_processed = clean_run(warm, tmp_path / "clean", dataset, env, evaluated, judge)
        evaluated.latency = judge.latency = 0.05  # calls in flight a while, once the clean grid is done
        command = grid(tmp_path / "out", dataset, "--workers", url)
        workers = [warm.start(command, ROOT, env) for _ in range(3)]
        # six chains, three workers: an equal share of two each, all claimed before the kill
        wait_until(lambda: len(set(holders(redis_server).values())) == 3 and len(holders(redis_server)) == 6)
        wait_until(lambda: sum(judge.processed.values()) >= 10)
        dead = f":{workers[0].pid}"
        held_by_dead = {c for c, w in holders(redis_server).items() if w.endswith(dead)}
        workers[0].send_signal(signal.SIGKILL)
        assert workers[0].wait(10) == -signal.SIGKILL
        # the survivors' chains go on at this latency past a lease: a claim held only until its lease would be taken
        errs = [w.communicate(timeout=60)[1] for w in workers[1:]]
        assert [w.returncode for w in workers[1:]] == [0, 0], errs
        processed = Counter(evaluated.processed) + Counter(judge.processed)
        evaluated.processed.clear(), judge.processed.clear()
        # a fourth worker after the grid is done: nothing claimed, nothing sent, one line
        fourth = warm_run(warm, command, ROOT, env)
        fleet = status(monkeypatch, capsys, env, tmp_path / "out", dataset, url)
        assert not evaluated.processed and not judge.processed
    assert len(held_by_dead) == 2 and done(redis_server) == {
        f"{m} run{r}" for m in ("model-a", "model-b", "model-c") for r in (1, 2)
    }
    taken_over = [
        found
        for err in errs
        for found in re.findall(r"\[grid\] (\S+ \S+): taken over from worker (\S+),", err)
    ]
    # the dead worker's two chains, each once, and no live worker's (whose claims its heartbeat renews)
    assert sorted(c for c, _ in taken_over) == sorted(held_by_dead), errs
    assert all(worker.endswith(dead) for _, worker in taken_over), errs
    assert all("Traceback" not in e for e in errs)
    assert records(tmp_path / "out") == records(tmp_path / "clean")
    assert set(processed) == set(clean_processed)
    assert sum((processed - clean_processed).values()) <= unanswered(tmp_path / "out")
    assert fourth.returncode == 0 and len(fourth.stderr.strip().splitlines()) == 1, fourth.stderr
    assert "every chain of this grid is done or failed (6 done, 0 failed" in fourth.stderr
    assert "6 chains: 6 done, 0 held, 0 waiting, 0 failed" in fleet, fleet


@pytest.mark.slow
def test_status_shows_the_holders_their_leases_and_what_waits(
    tmp_path, redis_server, warm, monkeypatch, capsys
):
    # one worker capped at two chains of six: two held (by it, lease renewed), four waiting; killed, its leases age
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    url = f"{redis_server.url}?lease={LEASE}"
    with ScriptedProvider(latency=0.5) as evaluated, ScriptedProvider(latency=0.5) as judge:
        env = grid_environment(evaluated, judge)
        worker = warm.start(grid(tmp_path / "out", dataset, "--workers", url, "--chains", "2"), ROOT, env)
        wait_until(lambda: len(holders(redis_server)) == 2)
        time.sleep(LEASE)  # renewed past its first lease: still held
        fleet = status(monkeypatch, capsys, env, tmp_path / "out", dataset, url)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        time.sleep(LEASE + 0.5)
        after = status(monkeypatch, capsys, env, tmp_path / "out", dataset, url)
    assert "6 chains: 0 done, 2 held, 4 waiting, 0 failed; 1 worker alive" in fleet, fleet
    held = re.findall(rf"  held: (\S+ run\d) by \S+:{worker.pid} for (\d+)s, lease (\d+)s left", fleet)
    assert [c for c, _, _ in held] == ["model-a run1", "model-b run1"] and all(
        int(a) >= LEASE for _, a, _ in held
    ), fleet
    assert "  waiting: model-c run1, model-a run2, model-b run2, model-c run2" in fleet, fleet
    assert re.search(r"DeepSeek-R1 at 127\.0\.0\.1:\d+: \d+ in flight", fleet), fleet
    assert "0 workers alive" in after and after.count("lease expired") == 2, after


@pytest.mark.parametrize(
    "extra, said",
    [
        (("--shard", "1/2"), "--shard with --workers: the workers deal the grid's chains among themselves"),
        (("--batch",), "--batch with --workers: a grid's batches pool a fixed set of chains"),
        (
            ("--workers", "redis://127.0.0.1:1/0?lease=0"),
            "--workers (Redis at 127.0.0.1:1): lease is one number",
        ),
        ((), "--workers: cannot reach Redis at 127.0.0.1:1"),  # nothing listens on port 1
    ],
)
def test_what_workers_cannot_be_given_is_refused_in_one_line(tmp_path, capsys, extra, said):
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    argv = grid(tmp_path / "out", dataset, "--workers", "redis://127.0.0.1:1/0", *extra)[2:]
    assert run_grid.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and said in err, err


def test_status_and_chains_without_workers_are_refused_in_one_line(tmp_path, capsys):
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    for extra, said in (
        (("--status",), "--status: give the fleet's --workers"),
        (("--chains", "2"), "--chains:"),
    ):
        assert run_grid.main(grid(tmp_path / "out", dataset, *extra)[2:]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and said in err, err


@pytest.mark.slow
def test_a_done_chain_is_never_claimed_and_a_claim_whose_keys_were_lost_is_made_again(redis_server):
    # two chains, two workers: one each (an equal share); the first marked done is claimed by no one, however free;
    # after FLUSHALL (a restart without persistence) the running chain's heartbeat claims it again for its worker
    from types import SimpleNamespace

    from lexpilot.models.shared_limits import RedisStore
    from lexpilot.running.grid.workers import Fleet

    chains = [[SimpleNamespace(model="m", run_id=r, status=DONE)] for r in ("run1", "run2")]
    fleets = []
    for owner in ("machine-1:100", "machine-2:200"):
        store = RedisStore(f"{redis_server.url}?lease=60", say=lambda line: None)
        store.owner = owner
        fleets.append(Fleet(store, "grid", chains))
        fleets[-1].reach()
    first, second = fleets
    assert first.claim(0)[0] is chains[0] and second.claim(0)[0] is chains[1]
    first.finish(chains[0])
    assert first.claim(0) is None and second.claim(0) is None  # done; and the other's own, still held
    redis_server.client().flushall()
    # the done mark is lost with the rest (a rerun of that chain sends nothing: its records are saved); the chain
    # the second worker runs is not its to claim again, though nothing in Redis holds it now
    assert second.claim(0)[0] is chains[0] and second.claim(0) is None
    assert second.renew_script(keys=second.keys, args=[second.owner, 60_000, "m run1", "m run2"]) == []
    assert (
        redis_server.client().hget(second.keys[1], "m run2") == b"machine-2:200"
    )  # its heartbeat claimed it again
    assert first.claim(0) is None
