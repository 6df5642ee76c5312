"""Hardening, round three (issue 28, items 10-21): the paper's reasoning model under concurrency, a Retry-After
beyond the cap, API keys, special files, bounds, digests, duplicated keys, missing runs and reports' output."""
import time
from collections import Counter

import pytest

from lexpilot.models.calls import Usage
from tests.conftest import SECRET, Harness, sample_cases, write_dataset
from tests.fake_provider import FakeProvider
from tests.test_calls import _caller, _script
from tests.test_provider_faults import MAX_TOKENS_REFUSED


def test_a_reasoning_model_at_the_default_concurrency_switches_every_refused_request(tmp_path, monkeypatch):
    """Item 10: eight requests go out at once with max_tokens; every refusal of the field the request carried is
    repeated with max_completion_tokens, whichever worker switched the role first."""
    dataset = write_dataset(tmp_path / "eight.json", sample_cases()[:8])
    def slow_refusal(kind, prompt, body):
        if "max_tokens" in body:
            time.sleep(0.2)  # every worker's first request is out before the first refusal comes back
            return MAX_TOKENS_REFUSED
        return None
    with FakeProvider() as provider:
        provider.script = slow_refusal
        h = Harness(tmp_path, provider, monkeypatch, dataset)
        assert h.run("gold") == 0  # the default --concurrency 8
        refused = [r for r in provider.requests if "max_tokens" in r]
        assert len(refused) > 2  # several were in flight when the first refusal arrived
        answered = Counter(r["messages"][0]["content"] for r in provider.requests if "max_tokens" not in r)
        assert len(answered) == 16 and set(answered.values()) == {1}  # each request answered once
        assert len(h.records("eval_results", "LJP_gold.jsonl")) == 8


@pytest.mark.parametrize("retry_after, shown", [("100000", "27.8 h"), ("Fri, 31 Dec 2099 23:59:59 GMT", "h")])
def test_a_retry_after_beyond_the_cap_is_a_transient_failure_without_a_stage_pause(retry_after, shown):
    """Item 11: normal backoff for that call, no stage-wide pause; the case fails saying how long the provider
    asks to wait, so that the user can rerun later."""
    with FakeProvider(_script(*[{"status": 429, "headers": {"Retry-After": retry_after}}] * 10)) as p:
        caller = _caller(p, retries=2)
        started = time.monotonic()
        with pytest.raises(Exception, match=rf"provider asks to wait [\d.]+ {shown.split()[-1]}"):
            caller.chat("eval", "x", Usage())
        assert time.monotonic() - started < 3 and len(p.requests) == 3  # retries 2: three attempts, no more
        assert caller.throttles[p.base_url].resume_at <= time.monotonic()  # no worker was paused


@pytest.mark.parametrize("key, problem", [(SECRET + "\n", "ends with a line break"),
                                          (SECRET + "\r\n", "ends with a line break"),
                                          ("sk-ключ-0123456789", "non-ASCII"), (" " + SECRET, "spaces")])
def test_a_malformed_api_key_is_named_before_any_call_and_never_printed(harness, provider, monkeypatch, capsys,
                                                                        key, problem):
    """Item 12."""
    monkeypatch.setenv("OPENAI_API_KEY", key)
    assert harness.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and problem in err and key.strip() not in err and err.count("\n") == 1
    assert not provider.requests


def test_no_api_key_at_all_is_said_with_the_variables_read(harness, provider, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY")
    provider.script = lambda kind, prompt, body: {"status": 401, "error": "Incorrect API key provided"}
    assert harness.run("gold", "--limit", "1") == 1
    err = capsys.readouterr().err
    assert "no API key is set" in err and "LEXPILOT_EVAL_API_KEY" in err and "OPENAI_API_KEY" in err
