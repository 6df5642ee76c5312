"""One budget for the whole grid, across shards and reruns: "--max-cost caps the grid's total across every shard,
every rerun and every stage script run on the same root. A call that would pass the cap is never sent." The total
is the scripted providers' own bill (every reply they sent, priced by hand); the spending the harness kept is checked
against it: what it settled is at most the bill, and with what it counted for killed processes' calls in flight at
least the bill."""

import json
import shutil
import signal
import time

import pytest

import run_grid
from lexpilot.scripted.provider import ScriptedProvider
from lexpilot.spending import SPENDING_FILE
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import grid, grid_argv, grid_environment
from tests.helpers.paths import ROOT
from tests.helpers.redis_server import RedisServer
from tests.helpers.warm import fresh
from tests.helpers.warm import run as warm_run

PER_MILLION = 1000.0  # every model's prompt and completion price: a token costs 0.001


def price_file(tmp_path) -> str:
    path = tmp_path / "prices.json"
    models = ("model-a", "model-b", "model-c", "DeepSeek-V4.1-Flash", "DeepSeek-R1")
    path.write_text(json.dumps({m: {"prompt": PER_MILLION, "completion": PER_MILLION} for m in models}))
    return str(path)


def bill(*providers) -> float:
    """What the providers billed: every reply they sent, its prompt and completion tokens at the price."""
    tokens = sum(
        counts["prompt_tokens"] + counts["completion_tokens"]
        for p in providers
        for counts in p.billed.values()
    )
    return tokens * PER_MILLION / 1e6


def wait_for_calls(provider, n: int) -> None:
    deadline = time.monotonic() + 30
    while sum(provider.processed.values()) < n and time.monotonic() < deadline:
        time.sleep(0.02)


def stopped_by_the_cap(err: str) -> bool:
    return "--max-cost" in err and "rerun with a larger --max-cost" in err


def test_shards_without_a_shared_store_are_refused_max_cost_in_one_line(tmp_path, capsys):
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    argv = grid_argv(
        tmp_path / "out", dataset, "--shard", "1/2", "--prices", price_file(tmp_path), "--max-cost", "5"
    )
    assert run_grid.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--limits redis://" in err and "each spend the whole cap" in err


@pytest.mark.slow
def test_a_kill_and_a_rerun_on_one_root_never_pass_the_cap(tmp_path, warm):
    # a clean grid costs X; capped at 0.6 X, the grid is killed halfway and rerun: the rerun counts what the killed
    # one spent (and its calls in flight at their worst case), so together they bill at most 0.6 X
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    prices = price_file(tmp_path)
    with ScriptedProvider() as evaluated, ScriptedProvider() as judge:
        env = grid_environment(evaluated, judge)
        assert warm_run(warm, grid(tmp_path / "clean", dataset), ROOT, env).returncode == 0
        whole = bill(evaluated, judge)
        for p in (evaluated, judge):
            p.billed.clear()
        cap = round(0.6 * whole, 2)
        evaluated.latency = judge.latency = 0.05
        capped = (*grid(tmp_path / "out", dataset, "--prices", prices, "--max-cost", str(cap)),)
        first = warm.start(list(capped), ROOT, env)
        wait_for_calls(judge, 4)
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL, first.communicate()[
            1
        ]  # killed mid-grid, not ended by the cap
        evaluated.latency = judge.latency = 0.0
        rerun = fresh(list(capped), ROOT, env)
        total = bill(evaluated, judge)
    assert rerun.returncode != 0 and stopped_by_the_cap(rerun.stderr), rerun.stderr
    assert total <= cap + 1e-9, (total, cap)
    kept = json.loads((tmp_path / "out" / SPENDING_FILE).read_text())
    assert kept["reserved"] == {}
    assert kept["spent"] - kept["reclaimed"] - 1e-6 <= total <= kept["spent"] + 1e-6, (kept, total)
    # the rerun's closing line says the root's spending, every process's
    assert f"--max-cost {cap:g}: {kept['spent']:.2f} spent, 0.00 reserved" in rerun.stderr


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("redis-server"), reason="no redis-server (apt-get install redis-server)")
def test_two_shards_and_a_rerun_after_a_kill_share_one_cap_through_redis(tmp_path, warm):
    pytest.importorskip("redis")
    server = RedisServer(tmp_path)
    server.start()
    try:
        total, cap, errs, spending = shards_killed_and_rerun(tmp_path, warm, server)
    finally:
        server.stop()
    assert total <= cap + 1e-9, (total, cap)
    assert any(stopped_by_the_cap(e) for e in errs), errs
    spent, reclaimed = spending
    assert spent - reclaimed - 1e-6 <= total <= spent + 1e-6, (spent, reclaimed, total)


def shards_killed_and_rerun(tmp_path, warm, server):
    """Shards 1/2 and 2/2 sharing a cap of 0.6 × a clean grid's bill through Redis; shard 1 killed after the judge's
    fourth call and rerun. (The providers' bill, the cap, what the survivors said, the spending kept in Redis.)"""
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    prices = price_file(tmp_path)
    with ScriptedProvider() as evaluated, ScriptedProvider() as judge:
        env = grid_environment(evaluated, judge)
        assert warm_run(warm, grid(tmp_path / "clean", dataset), ROOT, env).returncode == 0
        cap = round(0.6 * bill(evaluated, judge), 2)
        for p in (evaluated, judge):
            p.billed.clear()
        evaluated.latency = judge.latency = 0.05
        shared = ("--prices", prices, "--max-cost", str(cap), "--limits", f"{server.url}?lease=2")
        shards = [
            warm.start(grid(tmp_path / "out", dataset, "--shard", f"{k}/2", *shared), ROOT, env)
            for k in (1, 2)
        ]
        wait_for_calls(judge, 4)
        shards[0].send_signal(signal.SIGKILL)
        assert shards[0].wait(10) == -signal.SIGKILL
        _, survivor = shards[1].communicate(timeout=120)
        time.sleep(2.5)  # the killed shard's time runs out (a lease): its reservations count as spent
        rerun = fresh(grid(tmp_path / "machine-1", dataset, "--shard", "1/2", *shared), ROOT, env)
        total = bill(evaluated, judge)
    client = server.client()
    key = next(iter(client.keys("lexpilot:spending:*:totals")))
    kept = {k.decode(): float(v) for k, v in client.hgetall(key).items()}
    return total, cap, [survivor, rerun.stderr], (kept["spent"], kept.get("reclaimed", 0.0))


@pytest.mark.slow
def test_a_grid_sharing_its_budget_through_redis_keeps_it_in_its_output_root_too(
    tmp_path, warm, redis_server
):
    # "every stage script run on the same root": the grid's spending, kept in Redis for its shards, is kept in its
    # root's spending.json as well, where a stage script on that root reads it; run stage by stage, one budget
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    capped = ("--prices", price_file(tmp_path), "--max-cost", "1000", "--limits", redis_server.url)
    with ScriptedProvider() as evaluated, ScriptedProvider() as judge:
        env = grid_environment(evaluated, judge)
        for stage in ("LexAwN_gen", "eval_DCG"):
            done = warm_run(warm, grid(tmp_path / "out", dataset, "--stages", stage, *capped), ROOT, env)
            assert done.returncode == 0, done.stderr
        total = bill(evaluated, judge)
    kept = json.loads((tmp_path / "out" / SPENDING_FILE).read_text())
    (key,) = redis_server.client().keys("lexpilot:spending:*:totals")
    in_redis = float(redis_server.client().hget(key, "spent"))
    assert kept["spent"] == pytest.approx(total, abs=1e-6) and in_redis == pytest.approx(total, abs=1e-6)
