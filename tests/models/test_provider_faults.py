"""The model calls against a broken or hostile provider, and the parameter quirks of today's providers, against the
scripted server."""

import json
import subprocess
import sys
import time
from collections import Counter

import pytest

from lexpilot.errors import CaseFailed
from lexpilot.models import retries
from lexpilot.models.usage import Usage
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.calls import make_caller, script_of
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT
from tests.helpers.replies import MAX_TOKENS_REFUSED, TEMPERATURE_REFUSED
from tests.helpers.stages import SECRET, Harness

# ----------------------------------------------------------------------------- hangs


@pytest.mark.parametrize("retry_after", ["100000", "inf", "nan", "Fri, 31 Dec 2099 23:59:59 GMT"])
def test_a_huge_retry_after_is_capped_said_and_fails_the_attempt(monkeypatch, retry_after):
    monkeypatch.setattr(retries, "MAX_RETRY_AFTER", 0.2)
    with ScriptedProvider(script_of(*[{"status": 429, "headers": {"Retry-After": retry_after}}] * 10)) as p:
        caller = make_caller(p, retries=1)
        started = time.monotonic()
        with pytest.raises(
            CaseFailed,
            match=r"HTTP 429 \(provider asks to wait .*, more than the 0 s the harness "
            r"waits\) \(after 2 attempts\); rerun the same command",
        ):
            caller.chat("eval", "x", Usage())
        assert time.monotonic() - started < 3 and len(p.requests) == 2
        assert "provider asks to wait" in caller.progress.last_error
        assert (
            caller.endpoints.limiters[(p.base_url,)].resume_at <= time.monotonic()  # no worker paused for it
        )


@pytest.mark.slow
@pytest.mark.parametrize("stream,outcome", [(False, {"trickle": 0.05}), (True, {"endless": True})])
def test_a_call_is_abandoned_at_its_deadline_however_its_bytes_keep_coming(stream, outcome):
    with ScriptedProvider(script_of(outcome)) as p:
        caller = make_caller(p, stream=stream, timeout=2, deadline=0.5)
        started = time.monotonic()
        assert caller.chat("eval", "x", Usage()).text == "?"  # retried, then the default reply
        assert time.monotonic() - started < 2.5
        assert "no complete reply within the call deadline of 0.5s" in caller.progress.last_error
        wait = time.monotonic() + 5
        while p.abandoned == 0 and time.monotonic() < wait:
            time.sleep(0.05)
        assert p.abandoned == 1  # its connection was closed


def test_the_deadline_defaults_to_ten_timeouts_and_can_be_set(tmp_path, provider, monkeypatch):
    import argparse

    from lexpilot.options import add_common_args, settings_from_args

    parser = argparse.ArgumentParser()
    add_common_args(parser)

    def deadlines(*options: str) -> dict[str, float]:
        settings = settings_from_args(parser.parse_args(["--run-id", "r", "--model", "m", *options]))
        return {name: settings.transport.deadline_of(role) for name, role in settings.roles.items()}

    assert deadlines("--timeout", "7") == {"eval": 70, "user": 70, "judge": 70}
    assert deadlines("--call-deadline", "9") == {"eval": 9, "user": 9, "judge": 9}
    # a flex call's silence timeout is 900 s unless --flex-timeout says otherwise (OpenAI's advice for flex)
    assert deadlines("--timeout", "7", "--judge-service-tier", "flex") == {
        "eval": 70,
        "user": 70,
        "judge": 9000,
    }
    flex = deadlines("--judge-service-tier", "flex", "--flex-timeout", "30")
    assert flex["judge"] == 300 and flex["eval"] == 1200


# ----------------------------------------------------------------------------- malformed replies

MALFORMED = {
    "not JSON": (b"this is not json", "not JSON"),
    "HTML": (b"<!DOCTYPE html><html><body>Bad gateway</body></html>", "is HTML"),
    "array": (b"[1, 2, 3]", "JSON list, not an object"),
    "choices string": (b'{"choices": "none"}', "choices is a str"),
    "message null": (b'{"choices": [{"message": null, "finish_reason": "stop"}]}', "message is null"),
    "deep": (
        b'{"choices": [{"message": {"content": ' + b"[" * 100000 + b"]" * 100000 + b"}}]}",
        "nested too deeply",
    ),
    "surrogate": (
        b'{"choices": [{"message": {"content": "\\ud800"}, "finish_reason": "stop"}]}',
        "lone surrogate",
    ),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_200_is_a_transient_failure_with_its_own_message(name):
    body, message = MALFORMED[name]
    with ScriptedProvider(script_of({"raw": body})) as p:
        caller = make_caller(p, retries=1)
        assert caller.chat("eval", "x", Usage()).text == "?"  # the retry got a good reply
        assert caller.progress.retries == 1 and "malformed reply: " in caller.progress.last_error
        assert message in caller.progress.last_error
    with ScriptedProvider(script_of(*[{"raw": body}] * 3)) as p:
        with pytest.raises(CaseFailed, match=f"malformed reply: .*{message}.*after 2 attempts"):
            make_caller(p, retries=1).chat("eval", "x", Usage())


def test_a_malformed_judge_reply_fails_only_its_case(tmp_path, provider, monkeypatch, capsys):
    first = sample_cases()[0]["complete_consultation"][0]["content"]
    provider.script = lambda kind, prompt, body: {"raw": b"<html>oops</html>"} if first in prompt else None
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("gold", "--keep-going", "--retries", "1") == 1
    err = capsys.readouterr().err
    assert "malformed reply: the reply is HTML" in err and "internal error" not in err
    assert len(h.records("eval_results", "LJP_gold.jsonl")) == 11


# ----------------------------------------------------------------------------- a one-slot server


@pytest.mark.slow
def test_a_stream_cut_short_by_a_one_slot_server_is_push_back_and_the_stage_completes(
    tmp_path, monkeypatch, capsys
):
    with ScriptedProvider(latency=0.05, one_slot=True) as p:
        h = Harness(
            tmp_path, p, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]), http=True
        )
        assert h.run("LexAwN", "--stream", "--concurrency", "2") == 0
        assert p.statuses["cut"] > 0  # the server did cut concurrent streams
        err = capsys.readouterr().err
        assert "stream ended before the reply finished" in err and "empty reply" not in err


def test_a_stream_without_finish_reason_says_what_to_do():
    cut = {"raw": b"data: [DONE]\n\n", "content_type": "text/event-stream"}
    with ScriptedProvider(script_of(*[cut] * 3)) as p:
        with pytest.raises(
            CaseFailed,
            match="stream ended before the reply finished .after 2 attempts.; "
            "the server may serve one request at a time: --concurrency 1",
        ):
            make_caller(p, retries=1, stream=True).chat("eval", "x", Usage())


@pytest.mark.slow
def test_many_first_calls_at_once_in_a_fresh_process(tmp_path):
    """Regression: lazily built SDK response models once raced across threads on the first calls."""
    cases = [dict(c, case_number=f"（2099）并发民初{i}号") for i, c in enumerate(sample_cases() * 2)]
    dataset = write_dataset(tmp_path / "many.json", cases)
    with ScriptedProvider() as p:
        env = {
            "PATH": "/usr/bin:/bin",
            "OPENAI_BASE_URL": p.base_url,
            "OPENAI_API_KEY": "k",
            "LEXPILOT_MODEL": "m",
        }
        result = subprocess.run(
            [
                sys.executable,
                "eval_LJP_gold.py",
                "--run-id",
                "r",
                "--dataset",
                str(dataset),
                "--output-root",
                str(tmp_path),
                "--concurrency",
                "24",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert "24 done" in result.stdout


# ----------------------------------------------------------------------------- secrets and redirects


def test_a_key_echoed_by_the_server_never_reaches_a_message_or_a_file(
    tmp_path, provider, monkeypatch, capsys
):
    provider.script = lambda kind, prompt, body: {"status": 401, "error": f"Invalid API key: {SECRET}"}
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "Invalid API key: [redacted key]" in err and SECRET not in err
    provider.script = lambda kind, prompt, body: f"回复里有密钥 {SECRET}" if kind == "force_judge" else None
    h.run_id = "echo"
    assert h.run("gold", "--limit", "1") == 0
    for path in h.root.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


@pytest.mark.parametrize(
    "url",
    [
        "sk-test-DO-NOT-LEAK-0123456789abcdef",
        "http://[::1",
        "http://127.0.0.1:99999/v1",
        "ftp://host/v1",
        "http:///v1",
    ],
)
def test_a_base_url_that_is_not_an_http_url_stops_before_any_call(
    tmp_path, provider, monkeypatch, capsys, url
):
    h = Harness(tmp_path, provider, monkeypatch)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert h.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "OPENAI_BASE_URL" in err and "is not an http(s)://host[:port]/" in err and SECRET[8:] not in err
    assert len(err.strip().splitlines()) == 1 and not provider.requests and not h.root.exists()


def test_a_redirect_to_another_origin_is_not_followed(tmp_path, provider, monkeypatch, capsys):
    with ScriptedProvider() as elsewhere:
        provider.script = lambda kind, prompt, body: {
            "status": 307,
            "headers": {"Location": elsewhere.base_url + "/chat/completions"},
        }
        h = Harness(tmp_path, provider, monkeypatch, http=True)
        assert h.run("gold", "--limit", "1") == 2
        assert not elsewhere.requests  # the prompt never went there
    err = capsys.readouterr().err
    assert f"redirects to {elsewhere.base_url}/chat/completions" in err and "not followed" in err


# ----------------------------------------------------------------------------- numbers and messages


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--temperature", "nan"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--timeout", "1e300"),
        ("--temperature", "-1"),
        ("--max-tokens", "0"),
        ("--concurrency", "1.5"),
        ("--retries", "-1"),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_refused_at_parse_time(harness, capsys, flag, value):
    with pytest.raises(SystemExit) as exit_:
        harness.run("gold", flag, value)
    assert (
        exit_.value.code == 2 and f"argument {flag}" in capsys.readouterr().err and not harness.root.exists()
    )


def test_the_timeout_hint_fits_the_streaming_setting():
    with ScriptedProvider(script_of(*[{"content": "x", "stall": 1.0}] * 3)) as p:
        with pytest.raises(CaseFailed) as failure:
            make_caller(p, stream=True, timeout=0.2, retries=0).chat("eval", "x", Usage())
    assert "use --stream" not in str(failure.value) and "raise --timeout" in str(failure.value)


def test_a_rerun_with_nothing_to_do_removes_a_stale_journal(harness):
    assert harness.run("gold", "--limit", "1") == 0
    journal = next((harness.root / "runs").glob("*/*/")) / "calls_journal.jsonl"
    journal.write_text(
        json.dumps(
            {
                "case_number": "（2099）示例民初1号",
                "step": "gold_prediction",
                "key": "k",
                "reply": "r",
                "usage": {},
            }
        )
        + "\n",
        encoding="utf-8",
    )
    assert harness.run("gold", "--limit", "1") == 0 and not journal.exists()


# ----------------------------------------------------------------------------- today's providers


def reasoning_model(kind, prompt, body):
    """An OpenAI reasoning model: refuses max_tokens and any temperature but the default."""
    if "max_tokens" in body:
        return MAX_TOKENS_REFUSED
    if "temperature" in body and body["temperature"] != 1:
        return TEMPERATURE_REFUSED
    return None


def test_max_tokens_refused_switches_each_role_to_max_completion_tokens(harness, provider):
    provider.script = lambda kind, prompt, body: MAX_TOKENS_REFUSED if "max_tokens" in body else None
    # one case at a time, so that exactly the first request of each role meets the refusal (with several in
    # flight, each of them is refused once and repeated)
    assert harness.run("gold", "--limit", "3", "--concurrency", "1") == 0
    refused = [r for r in provider.requests if "max_tokens" in r]
    assert len(refused) == 2  # the first request of each role (eval, judge), and no retry counted
    later = [r for r in provider.requests if "max_tokens" not in r]
    assert all(r["max_completion_tokens"] == 8192 for r in later) and len(later) == 6
    manifest = json.loads(next((harness.root / "runs").glob("*/*/manifest.json")).read_text(encoding="utf-8"))
    assert manifest["token_fields"]["eval"] == manifest["token_fields"]["judge"] == "max_completion_tokens"
    results = harness.file("eval_results", "LJP_gold.jsonl")
    results.write_text(
        "".join(results.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8"
    )
    provider.requests = []
    assert harness.run("gold", "--limit", "3") == 0  # the resumed run starts with the field it learnt
    assert len(provider.requests) == 1 and "max_tokens" not in provider.requests[0]


def test_a_refused_temperature_stops_with_the_flag_to_use_and_default_sends_none(harness, provider, capsys):
    provider.script = reasoning_model
    assert harness.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "evaluated model 'eval-model'" in err and "does not accept temperature 0.7" in err
    assert "Pass --temperature default" in err and len(provider.requests) == 2  # the switch, then the refusal
    harness.run_id = "default-temperature"
    assert (
        harness.run("gold", "--limit", "1", "--temperature", "default", "--judge-temperature", "default") == 0
    )
    sent = [r for r in provider.requests[2:]]
    assert sent and all("temperature" not in r for r in sent)
    manifest = json.loads(
        (harness.root / "runs" / "default-temperature")
        .glob("*/manifest.json")
        .__next__()
        .read_text(encoding="utf-8")
    )
    assert manifest["generation"]["temperature"] == manifest["generation"]["judge_temperature"] == "default"


def test_a_user_or_judge_temperature_refusal_names_its_own_flag(harness, provider, capsys):
    provider.script = lambda kind, prompt, body: TEMPERATURE_REFUSED if kind == "ljp_judge" else None
    assert harness.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err  # an assert whose second half is a bare string is always true
    assert "judge 'DeepSeek-R1'" in err and "Pass --judge-temperature default" in err


def test_per_role_output_limits_and_a_refused_limit_quotes_the_model(harness, provider, capsys):
    assert harness.run("DCG", "--limit", "1", "--user-max-tokens", "1000", "--judge-max-tokens", "500") == 0
    by_kind = {}
    from lexpilot.scripted.kinds import kind_of

    for r in provider.requests:
        by_kind[kind_of(r["messages"][0]["content"])] = r["max_tokens"]
    assert by_kind == {"force_ask": 8192, "user": 1000, "dcg_judge": 500}
    manifest = json.loads(next((harness.root / "runs").glob("*/*/manifest.json")).read_text(encoding="utf-8"))
    assert (
        manifest["generation"]["user_max_tokens"] == 1000
        and manifest["generation"]["judge_max_tokens"] == 500
    )
    provider.script = lambda kind, prompt, body: (
        {
            "status": 400,
            "error": "max_tokens is too large: 8192. This model supports at most 4096 completion tokens",
        }
        if kind == "force_ask"
        else None
    )
    harness.run_id = "capped"
    assert harness.run("DCG", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert (
        "supports at most 4096 completion tokens" in err and "Pass --max-tokens with the model's limit" in err
    )


def test_reasoning_is_kept_for_the_judge_and_counted(harness, provider, capsys):
    def script(kind, prompt, body):
        if kind == "ljp_judge":
            claims = prompt[prompt.rfind("<正式诉请>") + 6 : prompt.rfind("</正式诉请>")].strip().split("\n")
            return {
                "content": json.dumps({"results": ["支持"] * len(claims)}),
                "reasoning_content": "先看诉请……",
                "reasoning_tokens": 40,
            }
        if kind == "force_judge":
            return {"content": "【预测】支持。", "reasoning_content": "模型的思考", "reasoning_tokens": 7}
        return None

    provider.script = script
    assert harness.run("gold", "--limit", "1") == 0
    (prediction,) = harness.records("Force_judge_gen", "a1_force_judge.jsonl")
    (verdicts,) = harness.records("eval_results", "LJP_gold.jsonl")
    assert "reasoning" not in prediction and prediction["response"] == "【预测】支持。"
    assert verdicts["reasoning"] == {"judge": ["先看诉请……"]}
    assert (
        verdicts["usage"]["judge"]["reasoning_tokens"] == 40
        and prediction["usage"]["eval"]["reasoning_tokens"] == 7
    )
    harness.run_id = "kept"
    assert harness.run("gold", "--limit", "1", "--keep-reasoning") == 0
    (prediction,) = harness.records("Force_judge_gen", "a1_force_judge.jsonl")
    assert prediction["reasoning"] == {"eval": ["模型的思考"]}


def test_a_default_temperature_run_is_shown_with_its_setting_and_never_grouped_with_0_7(harness, capsys):
    import show_results

    assert harness.run("gold", "--limit", "1") == 0
    harness.run_id = "r-default"
    assert harness.run("gold", "--limit", "1", "--temperature", "default") == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert sorted((g["run_ids"][0], g["settings"]["generation"]["temperature"]) for g in groups) == [
        ("r-default", "default"),
        ("r1", 0.7),
    ]
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    runs = capsys.readouterr().out.split("Main results")[0]
    assert "generation" in runs  # the Runs table says what differs


def test_a_reasoning_model_at_the_default_concurrency_switches_every_refused_request(tmp_path, monkeypatch):
    """A reasoning model at the default concurrency: eight requests go out at once with max_tokens; every refusal of
    the field the request carried is repeated with max_completion_tokens, whichever worker switched the role first."""
    dataset = write_dataset(tmp_path / "eight.json", sample_cases()[:8])

    def slow_refusal(kind, prompt, body):
        if "max_tokens" in body:
            time.sleep(0.2)  # every worker's first request is out before the first refusal comes back
            return MAX_TOKENS_REFUSED
        return None

    with ScriptedProvider() as provider:
        provider.script = slow_refusal
        h = Harness(tmp_path, provider, monkeypatch, dataset)
        assert h.run("gold") == 0  # the default --concurrency 8
        refused = [r for r in provider.requests if "max_tokens" in r]
        assert len(refused) > 2  # several were in flight when the first refusal arrived
        answered = Counter(r["messages"][0]["content"] for r in provider.requests if "max_tokens" not in r)
        assert len(answered) == 16 and set(answered.values()) == {1}  # each request answered once
        assert len(h.records("eval_results", "LJP_gold.jsonl")) == 8
