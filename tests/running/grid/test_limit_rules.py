"""The limiter's and the shards' rules, each with numbers computed by hand, each pinned so that changing the rule
fails its test (a mutation audit changed one rule at a time in the limiter, the shards and the grid's set-up). The
rules shared through Redis are in tests/models/test_redis_limits.py."""

import itertools
import time
from types import SimpleNamespace

import pytest

from lexpilot.errors import Aborted
from lexpilot.models.limits import Endpoint, Endpoints, Limiter, Limits
from lexpilot.models.replies import Reply
from lexpilot.models.retries import Attempt
from lexpilot.protocols.catalog import stages_named
from lexpilot.running.grid.cells import shard_of
from lexpilot.running.grid.run import start_grid
from lexpilot.settings import Role
from tests.helpers.calls import make_caller
from tests.helpers.datasets import sample_cases, write_dataset

NEVER = lambda: False  # noqa: E731  (a call that is never stopped)


def chain(model: str, run_id: str) -> list:
    return [SimpleNamespace(model=model, run_id=run_id)]


def test_a_shard_is_dealt_the_same_chains_whatever_order_the_models_and_runs_are_named_in():
    # "dealt in turn in the order of (model id, run id)": a1 a2 b1 b2 c1 c2, so shard 1/2 holds a1 b1 c1 and shard
    # 2/2 a2 b2 c2, named in any order (dealt in the order given, [b, c, a] × [2, 1] would give shard 1 b2 c2 a2)
    expected = {1: {("a", "1"), ("b", "1"), ("c", "1")}, 2: {("a", "2"), ("b", "2"), ("c", "2")}}
    for models in itertools.permutations("abc"):
        for runs in (("1", "2"), ("2", "1")):
            chains = [chain(m, r) for m in models for r in runs]
            for k in (1, 2):
                dealt = {(c[0].model, c[0].run_id) for c in shard_of(chains, (k, 2))}
                assert dealt == expected[k], (models, runs, k)


def grid_endpoints(tmp_path, monkeypatch, *extra: str, shard: str | None = None, models=("m1", "m2", "m3")):
    """The endpoints a grid's process holds (run_grid.py's set-up, no call made): three models, two runs."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    tmp_path.mkdir(exist_ok=True)
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    options = ["--dataset", str(dataset), "--output-root", str(tmp_path / "out"), "--concurrency", "8"]
    grid = start_grid(
        stages_named(["eval_DCG"]), list(models), ["1", "2"], options, None, list(extra), shard=shard
    )
    chains = grid.chains()
    return grid.endpoints(chains, lambda line: None), chains[0][0].settings.roles


def test_a_shard_without_a_shared_store_holds_1_in_n_of_every_limit(tmp_path, monkeypatch):
    # the judge's 5 in flight, 60 rpm and 1,000 tpm: shard 1/2 holds 2 (5 // 2), 30 rpm and 500 tpm
    limit = "DeepSeek-R1=concurrency:5,rpm:60,tpm:1000"
    endpoints, roles = grid_endpoints(tmp_path, monkeypatch, limit, shard="1/2")
    judge = endpoints.of(roles["judge"])
    assert isinstance(judge, Limiter)
    assert judge.limits == Limits(2, 30.0, 500.0) and judge.max_limit == 2
    whole, roles = grid_endpoints(tmp_path / "whole", monkeypatch, limit)
    assert whole.of(roles["judge"]).limits == Limits(5, 60.0, 1000.0)


def test_an_endpoint_without_a_concurrency_limit_starts_at_twice_the_concurrency_per_chain_using_it(
    tmp_path, monkeypatch
):
    # --concurrency 8: the judge, shared by 3 models × 2 runs = 6 chains, starts at 2 × 8 × 6 = 96 in flight; an
    # evaluated model, used by its own 2 runs' chains, at 2 × 8 × 2 = 32
    endpoints, roles = grid_endpoints(tmp_path, monkeypatch)
    assert endpoints.of(roles["judge"]).max_limit == 96
    assert endpoints.of(roles["eval"]).max_limit == 32


def test_a_429_halves_the_window():
    # multiplicative decrease: a window of 64 goes to 32 (not 63), then 16 after the pause
    limiter = Limiter(64)
    limiter.acquire(NEVER)
    limiter.release("rate", pause=0.0)
    assert limiter.limit == 32
    limiter.acquire(NEVER)
    limiter.release("rate", pause=0.0)  # a later push-back, past the first's pause (of none)
    assert limiter.limit == 16


def test_the_window_never_grows_past_the_configured_concurrency():
    # additive increase stops at the endpoint's concurrency: a hundred replies at a window of 2 leave it at 2
    limiter = Limiter(64, Limits(concurrency=2))
    for _ in range(100):
        limiter.release(lease=limiter.acquire(NEVER))
    assert limiter.limit == 2


def test_a_reply_over_its_counted_tokens_is_charged_the_difference_prompt_tokens_included():
    # at 60,000 tpm paced at 97 %, a token is 1 / 970 s; a request counted at 200 tokens whose reply used 300 prompt
    # and 400 completion tokens is charged 500 more: the next request waits (200 + 500) / 970 s after the first
    limiter = Limiter(10, Limits(tpm=60_000))
    limiter.acquire(NEVER, None, 200)
    start = limiter.next_tokens - 200 / 970
    limiter.release(tokens_over=300 + 400 - 200)
    assert limiter.next_tokens - start == pytest.approx(700 / 970)


def test_an_endpoint_spelled_two_ways_is_one_endpoint():
    # a trailing slash, an upper-case scheme or host, a doubled slash and a default port name one endpoint: one
    # limiter, so a concurrency of 1 holds across them
    spellings = (
        "http://api.example.org/v1",
        "http://api.example.org/v1/",
        "HTTP://API.Example.org/v1",
        "http://api.example.org//v1",
        "http://api.example.org:80/v1",
    )
    roles = [Role("judge", "m", url, "sk-test-0123456789", 0.0) for url in spellings]
    assert len({Endpoint.of(role) for role in roles}) == 1
    endpoints = Endpoints(lambda role: 4, {"m": Limits(concurrency=1)}, per_model=True)
    limiters = {id(endpoints.of(role)) for role in roles}
    assert len(limiters) == 1
    endpoints.of(roles[0]).acquire(NEVER)
    deadline = time.monotonic() + 0.3
    with pytest.raises(Aborted):  # the second spelling waits for the one slot until it is stopped
        endpoints.of(roles[1]).acquire(lambda: time.monotonic() > deadline)
    # a different path, port or scheme is another endpoint
    others = ("http://api.example.org/v2", "http://api.example.org:8080/v1", "https://api.example.org/v1")
    assert len({Endpoint.of(Role("judge", "m", url, "sk-test-0123456789", 0.0)) for url in others}) == 3


def test_a_call_whose_reply_used_more_than_was_counted_charges_the_difference_to_the_pacing(provider):
    # the same rule where the caller settles a call: counted at 200 tokens when sent, the reply's 300 prompt and 400
    # completion tokens charge 500 more to the tpm pacing (at 60,000 tpm paced at 97 %: 500 / 970 s)
    caller = make_caller(provider)
    limiter = Limiter(10, Limits(tpm=60_000))
    limiter.acquire(NEVER, None, 200)
    before = limiter.next_tokens
    reply = Reply("答", "stop", prompt_tokens=300, completion_tokens=400)
    caller._settle(
        caller.settings.roles["judge"], Attempt(reply=reply, answered=reply), limiter, None, 200, 0.0
    )
    assert limiter.next_tokens - before == pytest.approx(500 / 970)
