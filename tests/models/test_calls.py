"""Model calls: roles and endpoints, request parameters, retries, rejections, judge-output validation."""

import argparse
import json
import threading
import time

import pytest

from lexpilot.benchmark.dataset import case_from_raw
from lexpilot.benchmark.prompts import load_prompts
from lexpilot.errors import Aborted, CaseFailed, FatalError, HarnessError
from lexpilot.models.calls import ModelCaller
from lexpilot.models.retries import backoff_seconds, retry_after_seconds
from lexpilot.models.usage import Usage
from lexpilot.protocols.judging import (
    clean_judge_output,
    parse_dcg_label,
    parse_lca_label,
    verdict_parser,
)
from lexpilot.protocols.steps import CaseCalls
from lexpilot.scripted.provider import ScriptedProvider
from lexpilot.settings import DEFAULT_BASE_URL, resolve_roles
from tests.helpers.calls import make_caller, role_args, script_of
from tests.helpers.datasets import sample_cases
from tests.helpers.paths import DATA


def test_roles_fall_back_to_openai_variables_and_defaults():
    env = {
        "LEXPILOT_MODEL": "m",
        "OPENAI_BASE_URL": "http://shared:9/v1",
        "OPENAI_API_KEY": "k0",
        "LEXPILOT_JUDGE_BASE_URL": "http://judge.example:8443/v1",
        "LEXPILOT_JUDGE_API_KEY": "kj",
        "LEXPILOT_USER_MODEL": "u-env",
    }
    roles = resolve_roles(role_args(), env)
    assert (roles["eval"].model, roles["user"].model, roles["judge"].model) == ("m", "u-env", "DeepSeek-R1")
    assert roles["eval"].base_url == roles["user"].base_url == "http://shared:9/v1"
    assert (roles["judge"].base_url, roles["judge"].api_key, roles["eval"].api_key) == (
        "http://judge.example:8443/v1",
        "kj",
        "k0",
    )
    assert roles["judge"].host == "judge.example:8443"
    assert (roles["eval"].temperature, roles["user"].temperature, roles["judge"].temperature) == (
        0.7,
        0.7,
        0.1,
    )


def test_flags_win_and_defaults_apply():
    roles = resolve_roles(role_args(model="flag", judge_model="j"), {"LEXPILOT_MODEL": "env"})
    assert roles["eval"].model == "flag" and roles["judge"].model == "j"
    assert roles["user"].model == "DeepSeek-V4.1-Flash"
    assert roles["eval"].base_url == DEFAULT_BASE_URL


def test_no_evaluated_model_is_chosen_automatically():
    with pytest.raises(HarnessError, match="--model"):
        resolve_roles(role_args(), {})


def test_key_never_in_role_repr():
    roles = resolve_roles(role_args(model="m"), {"OPENAI_API_KEY": "sk-secret-xyz"})
    assert "sk-secret-xyz" not in repr(roles) and "sk-secret-xyz" not in roles["eval"].describe()


def test_request_carries_exactly_the_specified_parameters():
    with ScriptedProvider() as p:
        make_caller(p).chat("judge", "填好的提示", Usage())
        body = p.requests[0]
    assert body == {
        "model": "DeepSeek-R1",
        "messages": [{"role": "user", "content": "填好的提示"}],
        "temperature": 0.1,
        "max_tokens": 8192,
        "n": 1,
    }


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 500, 503, 408])
def test_transient_status_is_retried(status):
    with ScriptedProvider(script_of({"status": status, "headers": {"Retry-After": "0"}})) as p:
        usage = Usage()
        assert make_caller(p).chat("eval", "x", usage).text == "?"
        assert p.statuses[status] == 1 and p.statuses[200] == 1
    assert usage.by_role["eval"]["calls"] == 1


def test_retry_after_is_honoured():
    with ScriptedProvider(script_of({"status": 429, "headers": {"Retry-After": "0.4"}})) as p:
        caller = make_caller(p)
        start = time.monotonic()
        caller.chat("eval", "x", Usage())
        assert time.monotonic() - start >= 0.4
        assert caller.progress.retries == 1 and "HTTP 429" in caller.progress.last_error


def test_retry_after_parsing_and_capped_backoff():
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({}) is None
    assert backoff_seconds(1, 2.5, base=1.0) == 2.5
    delays = [backoff_seconds(a, None, base=1.0) for a in range(12)]
    assert all(d <= 60 for d in delays) and delays[0] <= 1.0 and max(delays) > 16


def test_timeout_is_retried_and_bounded():
    with ScriptedProvider(script_of({"sleep": 1.5})) as p:
        caller = make_caller(p, timeout=0.3)
        start = time.monotonic()
        assert caller.chat("eval", "x", Usage()).text == "?"
        assert time.monotonic() - start < 1.4
        assert "timeout" in caller.progress.last_error


def test_permanent_failure_stops_at_once_naming_role_model_host_not_key():
    with ScriptedProvider(script_of({"status": 401, "error": "bad key"})) as p:
        with pytest.raises(FatalError) as e:
            make_caller(p).chat("user", "x", Usage())
        assert len(p.requests) == 1
    message = str(e.value)
    assert "User Model" in message and "DeepSeek-V4.1-Flash" in message and "127.0.0.1" in message
    assert "401" in message and "k" not in message.split("(")[-1].replace("check", "").replace("key", "")


@pytest.mark.parametrize("bad", [{"content": "   "}, {"content": "半句话", "finish_reason": "length"}])
def test_empty_and_truncated_replies_are_rejected_and_retried(bad):
    with ScriptedProvider(script_of(bad, bad)) as p:
        usage = Usage()
        assert make_caller(p).chat("eval", "x", usage).text == "?"
        assert len(p.requests) == 3
    assert usage.by_role["eval"]["calls"] == 3  # the rejected attempts were billed too


def test_rejections_count_within_retries_then_the_case_fails():
    bad = {"content": "截断", "finish_reason": "length"}
    with ScriptedProvider(script_of(*[bad] * 10)) as p:
        with pytest.raises(CaseFailed, match="truncated at --max-tokens 100"):
            make_caller(p, retries=2, max_tokens=100).chat("eval", "x", Usage())
        assert len(p.requests) == 3


def test_streaming_collects_text_and_usage():
    with ScriptedProvider(script_of("流式的完整回答")) as p:
        usage = Usage()
        assert make_caller(p, stream=True).chat("eval", "x", usage).text == "流式的完整回答"
        assert p.requests[0]["stream"] is True
    assert usage.by_role["eval"]["completion_tokens"] == len("流式的完整回答")


def test_a_reply_without_token_counts_is_counted_as_unreported():
    # llama.cpp's server ignores stream_options.include_usage: streamed replies carry no usage at all
    with ScriptedProvider(script_of("流式回答"), usage=False) as p:
        usage = Usage()
        assert make_caller(p, stream=True).chat("eval", "x", usage).text == "流式回答"
        assert make_caller(p, stream=False).chat("eval", "x", usage).text == "?"
    assert usage.by_role["eval"] == {
        "calls": 2,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "unreported_calls": 2,
        "served:eval-m": 2,  # the model the replies say served them is counted all the same
    }


# The shapes real servers use when the prompt plus max_tokens exceed the context window.
OPENAI_CONTEXT = {
    "status": 400,
    "code": "context_length_exceeded",
    "type": "invalid_request_error",
    "error": "This model's maximum context length is 2048 tokens. However, you requested 4546 "
    "tokens (4530 in the messages, 16 in the completion). Please reduce the length of "
    "the messages or completion.",
}
VLLM_CONTEXT = {
    "status": 400,
    "type": "BadRequestError",
    "error": "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
    "(809 in the messages, 8191 in the completion).",
}


@pytest.mark.parametrize("error", [OPENAI_CONTEXT, VLLM_CONTEXT])
def test_context_window_error_fails_the_case_without_retry_and_says_what_to_do(error):
    with ScriptedProvider(script_of(error)) as p:
        with pytest.raises(CaseFailed) as failure:
            make_caller(p, max_tokens=16).chat("eval", "x", Usage())
        assert len(p.requests) == 1  # no retry can help
    message = str(failure.value)
    assert "context window" in message and "maximum context length" in message
    assert "Lower --max-tokens" in message and "--max-tokens 16" in message


def test_other_bad_requests_still_stop_the_stage():
    with ScriptedProvider(script_of({"status": 400, "error": "unknown parameter n"})) as p:
        with pytest.raises(FatalError, match="HTTP 400"):
            make_caller(p).chat("eval", "x", Usage())


@pytest.mark.slow
def test_a_stalled_stream_is_closed_after_the_timeout_and_retried():
    # llama.cpp stops generating when the client closes a stream; a non-streamed request it finishes anyway.
    with ScriptedProvider(script_of({"content": "永远等不到的后半句", "stall": 1.0})) as p:
        caller = make_caller(p, stream=True, timeout=0.3)
        started = time.monotonic()
        assert caller.chat("eval", "x", Usage()).text == "?"
        assert time.monotonic() - started < 0.9  # given up after --timeout, not after the stall
        assert len(p.requests) == 2 and "no response within --timeout" in caller.progress.last_error
        deadline = time.monotonic() + 3
        while p.abandoned == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.abandoned == 1  # the connection was closed, so a real server can stop generating


def test_streaming_rejects_truncation():
    with ScriptedProvider(script_of({"content": "半句", "finish_reason": "length"})) as p:
        assert make_caller(p, stream=True).chat("eval", "x", Usage()).text == "?"


def test_abort_stops_between_attempts():
    with ScriptedProvider(script_of({"status": 500})) as p:
        caller = make_caller(p)
        caller.abort.set()
        with pytest.raises(Aborted):
            caller.chat("eval", "x", Usage())


@pytest.mark.parametrize(
    "raw,clean",
    [
        ("  策略二\n", "策略二"),
        ("<think>先分析一下……策略一？</think>\n策略二", "策略二"),
        ("推理过程</think>策略一", "策略一"),
        ('```json\n{"results": ["支持"]}\n```', '{"results": ["支持"]}'),
    ],
)
def test_judge_output_tolerance(raw, clean):
    assert clean_judge_output(raw) == clean


@pytest.mark.parametrize("raw", ["策略二。", "我认为是策略二", "策略", "Strategy 2"])
def test_lca_label_must_be_exact(raw):
    with pytest.raises(ValueError):
        parse_lca_label(raw)


def test_dcg_label():
    assert parse_dcg_label("<think>…</think>是") == "是"
    with pytest.raises(ValueError):
        parse_dcg_label("是的")


def test_verdicts_validated_and_normalised():
    parse = verdict_parser(3)
    assert parse('{"results": ["被驳回", "支持", "部分支持"]}') == ["驳回", "支持", "部分支持"]
    for bad in ['{"results": ["支持", "支持"]}', '{"results": ["支持", "胜诉", "驳回"]}', '["支持"]', "支持"]:
        with pytest.raises(ValueError):
            parse(bad)


def test_invalid_judge_output_is_asked_again_up_to_three_times():
    case = case_from_raw(sample_cases()[0])
    with ScriptedProvider(script_of("策略三", "大概是策略二")) as p:
        calls = CaseCalls(make_caller(p), load_prompts(), case)
        label, raws = calls.judge("judge_lca", parse_lca_label, history="【追问】请问……")
        assert label == "策略二" and raws == ["策略三", "大概是策略二", "策略二"]
    with ScriptedProvider(lambda kind, prompt, body: "不知道") as p:
        calls = CaseCalls(make_caller(p), load_prompts(), case)
        with pytest.raises(CaseFailed, match="after 3 attempts.*last raw output: '不知道'"):
            calls.judge("judge_lca", parse_lca_label, history="x")
        assert len(p.requests) == 3


def test_rate_limit_push_back_is_waited_out_beyond_the_retry_budget():
    rate_limited = {"status": 429, "headers": {"Retry-After": "0.01"}}
    with ScriptedProvider(script_of(*[rate_limited] * 6)) as p:
        caller = make_caller(p, retries=1)
        assert caller.chat("eval", "x", Usage()).text == "?"
        assert p.statuses[429] == 6 and caller.progress.retries == 6
        assert caller.endpoints.limiters[(p.base_url,)].last_cut > 0  # the shared limit was cut


@pytest.mark.slow
def test_429_without_retry_after_uses_the_retry_budget():
    with ScriptedProvider(script_of(*[{"status": 429}] * 5)) as p:
        with pytest.raises(CaseFailed, match="HTTP 429 .after 2 attempts"):
            make_caller(p, retries=1).chat("eval", "x", Usage())


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_beyond_the_cap_is_the_usual_backoff_on_a_5xx_as_on_a_429(status, monkeypatch):
    """ "A Retry-After carried by a server error (5xx) is capped
    as a 429's is, so no single backoff waits past the cap". A day asked for is not waited (not even the cap's 300
    s): the call is retried with the usual backoff."""
    from lexpilot.models import retries

    with ScriptedProvider(script_of({"status": status, "headers": {"Retry-After": "86400"}})) as p:
        caller = make_caller(p)
        waits = []
        monkeypatch.setattr(caller.abort, "wait", lambda seconds=None: waits.append(seconds) or False)
        assert caller.chat("eval", "x", Usage()).text == "?"
    # the usual backoff (base 0.001)
    assert waits and max(waits) <= retries.MAX_BACKOFF and max(waits) < 1
    assert "more than the 300 s the harness waits" in caller.progress.last_error


def test_a_call_is_marked_in_flight_when_it_is_sent_not_while_it_waits_for_a_slot(tmp_path):
    """A process killed while its calls wait for the endpoint's slots paid for none of them: only a call whose
    request went out is counted "paid, never answered" by the next run (the journal's start mark)."""
    from lexpilot.storage.checkpoints import CallJournal, CheckpointWriter

    case = case_from_raw(sample_cases()[0])
    with ScriptedProvider() as p:
        caller = make_caller(p)
        journal = CallJournal(tmp_path / "calls_journal.jsonl", CheckpointWriter(), set())
        calls = CaseCalls(caller, load_prompts(), case, journal=journal, step="s")
        limiter = caller.limiters["eval"]
        held = [limiter.acquire(lambda: False) for _ in range(int(limiter.limit))]  # every slot taken
        waiting = threading.Thread(target=calls._chat, args=("eval", "prompt"))
        waiting.start()
        time.sleep(0.3)
        marks = lambda: (
            [json.loads(line).get("t") for line in journal.path.read_text().splitlines()]
            if journal.path.exists()
            else []
        )  # noqa: E731
        assert waiting.is_alive() and "start" not in marks() and not p.requests  # waiting: nothing paid
        for lease in held:
            limiter.release(lease=lease)
        waiting.join(10)
        assert marks().count("start") == marks().count("end") == 1 and len(p.requests) == 1


def test_the_raw_response_header_is_the_sdks_own():
    """Calls go through the SDK's `post` with its raw-response header set to "stream" (models/calls.py), so that
    the body is read by the harness within the call's deadline; a new SDK that renamed the header would read every
    body itself, and the deadline tests in test_provider_faults.py would hang on a trickling reply."""
    import openai._constants

    from lexpilot.models.calls import RAW_RESPONSE_HEADER

    assert RAW_RESPONSE_HEADER == openai._constants.RAW_RESPONSE_HEADER


def test_the_grid_gives_each_model_and_run_its_own_connections_and_every_client_one_tls_context(monkeypatch):
    """The grid's cells share each endpoint's limiter ("One limiter per endpoint"), not its connection
    pool: the SDK's pool is locked and scanned on every request, so one (model, run)'s cells share their clients,
    two (model, run)s never do; and every client shares one TLS context (each would parse the CA bundle again)."""
    from lexpilot.models.calls import tls_context
    from lexpilot.models.limits import Endpoints
    from lexpilot.models.sharing import Sharing
    from lexpilot.options import add_common_args, settings_from_args

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    parser = argparse.ArgumentParser()
    add_common_args(parser)
    sharing = Sharing(Endpoints(lambda role: 4))

    def callers(model, run_id):
        settings = settings_from_args(parser.parse_args(["--run-id", run_id, "--model", model]))
        return ModelCaller(settings, None, threading.Event(), sharing=sharing)

    first, first_again, other_run = callers("m", "run1"), callers("m", "run1"), callers("m", "run2")
    assert first.clients["judge"] is first_again.clients["judge"]  # two cells (stages) of one chain
    assert first.clients["judge"] is not other_run.clients["judge"]
    assert first.clients["judge"].base_url == other_run.clients["judge"].base_url  # one endpoint, one limiter
    assert first.limiters["judge"] is other_run.limiters["judge"]
    contexts = {
        id(c._client._transport._pool._ssl_context)
        for caller in (first, other_run)
        for c in caller.clients.values()
    }
    assert contexts == {id(tls_context())}  # one TLS context for every client (the CA bundle parsed once)
    # a chain that ends closes its connections, and only its own
    sharing.close_chain(("m", "run1"))
    assert first.clients["judge"].is_closed() and not other_run.clients["judge"].is_closed()
    assert {key[3] for key in sharing.clients} == {("m", "run2")}


def test_every_client_of_a_process_shares_one_tls_context_per_ca_setting(monkeypatch, tmp_path):
    """Each context parses the CA bundle (~30 ms, three roles per stage): one per process, but a change of
    SSL_CERT_FILE or SSL_CERT_DIR (the variables that choose the bundle) gets its own."""
    from lexpilot.models.calls import tls_context

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first = tls_context()
    assert tls_context() is first
    bundle = tmp_path / "ca.pem"  # a public root CA, shipped with the tests (no package needed to find one)
    bundle.write_bytes((DATA / "ca.pem").read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert tls_context() is not first and tls_context() is tls_context()
    monkeypatch.delenv("SSL_CERT_FILE")
    assert tls_context() is first


def test_an_endpoint_is_told_apart_one_way_everywhere():
    """An endpoint's identity is one type (models/limits.py `Endpoint`: base URL, model, key digest): the limiters,
    the pooled and grouped batches and the clients all read it, and nothing else spells it."""
    import ast

    from lexpilot.models.limits import Endpoint
    from lexpilot.settings import Role
    from tests.helpers.paths import ROOT

    role = Role("judge", "m", "http://h:1/v1", "sk-secret-0123456789", 0.1)
    endpoint = Endpoint.of(role)
    assert endpoint == Endpoint.of(Role("user", "m", "http://h:1/v1", "sk-secret-0123456789", 0.7))
    assert endpoint != Endpoint.of(Role("judge", "m", "http://h:1/v1", "sk-other-0123456789", 0.1))
    assert "sk-secret" not in repr(endpoint) and endpoint.account == ("http://h:1/v1", endpoint.key)
    # no other spelling: key_digest of a role's key is called only where the identity is made
    calls = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in (ROOT / "lexpilot").rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) == "key_digest"
    ]
    assert len(calls) == 1 and calls[0].startswith("lexpilot/models/limits.py:"), calls


@pytest.mark.parametrize("retry_after, shown", [("100000", "27.8 h"), ("Fri, 31 Dec 2099 23:59:59 GMT", "h")])
def test_a_retry_after_beyond_the_cap_is_a_transient_failure_without_a_stage_pause(retry_after, shown):
    """A Retry-After beyond the cap: normal backoff for that call, no stage-wide pause; the case fails saying how long
    the provider asks to wait, so that the user can rerun later."""
    with ScriptedProvider(script_of(*[{"status": 429, "headers": {"Retry-After": retry_after}}] * 10)) as p:
        caller = make_caller(p, retries=2)
        started = time.monotonic()
        with pytest.raises(Exception, match=rf"provider asks to wait [\d.]+ {shown.split()[-1]}"):
            caller.chat("eval", "x", Usage())
        assert time.monotonic() - started < 3 and len(p.requests) == 3  # retries 2: three attempts, no more
        assert caller.endpoints.limiters[(p.base_url,)].resume_at <= time.monotonic()  # no worker was paused


def test_no_api_key_at_all_is_said_with_the_variables_read(harness, provider, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY")
    provider.script = lambda kind, prompt, body: {"status": 401, "error": "Incorrect API key provided"}
    assert harness.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "no API key is set" in err and "LEXPILOT_EVAL_API_KEY" in err and "OPENAI_API_KEY" in err


@pytest.mark.slow
def test_a_zero_or_past_retry_after_is_the_usual_backoff_not_a_burst():
    with ScriptedProvider(script_of(*[{"status": 429, "headers": {"Retry-After": "0"}}] * 40)) as p:
        caller = make_caller(p, retries=2)
        with pytest.raises(Exception, match="HTTP 429"):
            caller.chat("eval", "x", Usage())
        assert len(p.requests) == 3  # three attempts, not thirty rate-limited repeats
