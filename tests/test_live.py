"""Live smoke test against a real OpenAI-compatible server (README: "Serving models"); skipped in CI.

LEXPILOT_LIVE_BASE_URL (e.g. http://127.0.0.1:8765/v1) serves the evaluated model and the User Model;
the judge stays on the tests' own scripted server, since a small real model cannot judge.
Optional: LEXPILOT_LIVE_MODEL (model id, default "local"), LEXPILOT_LIVE_API_KEY, LEXPILOT_LIVE_MAX_TOKENS
(default 256), LEXPILOT_LIVE_TIMEOUT (seconds, default 300). Run with -s to see each stage's output.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lexpilot.benchmark.records import RECORD_KINDS
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.paths import ROOT, SAMPLE
from tests.helpers.stages import STAGES as CATALOGUED

# read at import: the tests' clean_env fixture drops LEXPILOT_*
LIVE = os.environ.get("LEXPILOT_LIVE_BASE_URL")
MODEL = os.environ.get("LEXPILOT_LIVE_MODEL", "local")
API_KEY = os.environ.get("LEXPILOT_LIVE_API_KEY", "EMPTY")
MAX_TOKENS = os.environ.get("LEXPILOT_LIVE_MAX_TOKENS", "256")
TIMEOUT = os.environ.get("LEXPILOT_LIVE_TIMEOUT", "300")
CONTEXT_CHARS = int(os.environ.get("LEXPILOT_LIVE_CONTEXT_CHARS", "60000"))  # more than the served context

# Run them in one process, in turn (-n0, docs/serving.md): a server with one slot answers one request at a time,
# and the tests must not make load for each other; the harness's own concurrency still meets it.
pytestmark = [
    pytest.mark.skipif(not LIVE, reason="set LEXPILOT_LIVE_BASE_URL to run against a real server"),
    pytest.mark.xdist_group("live"),
]

# Every stage script but eval_LCA.py (LexAwN_gen.py runs its step), in the order of a run.
STAGES = [CATALOGUED[name].script for name in ("LexAwN", "DCG", "direct", "gold", "interaction")]
USAGE = re.compile(
    r"\b(eval|user|judge) (\d+) calls/(\d+)\+(\d+) tokens( \((\d+) calls without token counts\))?"
)
CLEAR_STOP = re.compile(r"^\[[^\]]+\] (case .+ failed: .+|stopped: .+|error: .+)$", re.M)


@pytest.fixture(scope="module")
def judge():
    with ScriptedProvider() as provider:
        yield provider


def run(
    script: str, root: Path, judge: ScriptedProvider, run_id: str, *extra: str
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "LEXPILOT_EVAL_BASE_URL": LIVE,
        "LEXPILOT_USER_BASE_URL": LIVE,
        "LEXPILOT_EVAL_API_KEY": API_KEY,
        "LEXPILOT_USER_API_KEY": API_KEY,
        "LEXPILOT_JUDGE_BASE_URL": judge.base_url,
        "LEXPILOT_JUDGE_API_KEY": "scripted",
    }
    command = [
        sys.executable,
        script,
        "--run-id",
        run_id,
        "--model",
        MODEL,
        "--user-model",
        MODEL,
        "--judge-model",
        "scripted-judge",
        "--dataset",
        str(SAMPLE),
        "--output-root",
        str(root),
        "--limit",
        "1",
        "--retries",
        "1",
        "--timeout",
        TIMEOUT,
        "--max-tokens",
        MAX_TOKENS,
        *extra,
    ]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    print(
        f"\n$ {' '.join(command[1:])}\nexit {result.returncode}\n{result.stdout}{result.stderr}", flush=True
    )
    assert "Traceback" not in result.stderr, "a stage must stop with a message, not a traceback"
    return result


def usage_of(result) -> dict:
    return {
        m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(6) or 0))
        for m in USAGE.finditer(result.stdout)
    }


def test_every_stage_completes_or_stops_with_a_clear_message(tmp_path, judge):
    for script in STAGES:
        result = run(script, tmp_path, judge, "live")
        assert result.returncode in (0, 1, 2), script
        if result.returncode:
            assert CLEAR_STOP.search(result.stderr), f"{script}: no clear message on stderr"
        if result.returncode != 2:  # the stage ran: the real server's usage was recorded
            calls, prompt_tokens, _, unreported = usage_of(result)["eval"]
            assert calls > 0 and (prompt_tokens > 0 or unreported == calls)
    for (
        kind
    ) in RECORD_KINDS:  # every saved record carries usage per role (the call journal is not a record file)
        for path in tmp_path.glob(f"{kind.top}/live/*/{kind.file}"):
            for line in path.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                assert record["usage"] and all(u["calls"] > 0 for u in record["usage"].values())


def test_a_stage_streams_against_the_server(tmp_path, judge):
    result = run("eval_LJP_gold.py", tmp_path, judge, "stream", "--stream")
    assert result.returncode in (0, 1)
    calls, prompt_tokens, _, unreported = usage_of(result)["eval"]
    assert calls > 0 and (prompt_tokens > 0 or unreported == calls)
    if result.returncode == 0:
        (record,) = [
            json.loads(line)
            for line in next(tmp_path.glob("Force_judge_gen/stream/*/a1_force_judge.jsonl"))
            .read_text()
            .splitlines()
        ]
        assert record["response"].strip() and record["usage"]["eval"]["calls"] >= 1
    else:
        assert CLEAR_STOP.search(result.stderr)


@pytest.mark.parametrize("stream", [False, True])
def test_a_truncated_reply_is_rejected_and_retried(tmp_path, judge, stream):
    result = run(
        "eval_LJP_direct.py",
        tmp_path,
        judge,
        f"trunc-{stream}",
        "--max-tokens",
        "16",
        *(["--stream"] if stream else []),
    )
    if result.returncode == 0:  # the model stopped by itself within 16 tokens: nothing to check
        pytest.skip("the served model answered within 16 tokens")
    # What the harness guarantees, whatever the model says: a failed case is a clear one-line message, and a
    # reply cut at the limit is never saved: it is asked again (--retries 1), and when both attempts were cut,
    # the message says so and both are billed (llama.cpp reports 17 completion tokens for max_tokens 16)
    assert result.returncode == 1 and CLEAR_STOP.search(result.stderr)
    assert not list(tmp_path.glob(f"Force_judge_gen/trunc-{stream}/*/a1_direct.jsonl"))
    if "reply truncated at --max-tokens 16 (after 2 attempts)" in result.stderr:
        calls, _, completion_tokens, unreported = usage_of(result)["eval"]
        assert calls == 2 and (completion_tokens >= 32 or unreported == 2)


def test_a_prompt_beyond_the_context_window_fails_its_case_with_a_hint(tmp_path, judge):
    # A consultation far longer than any context: the server refuses it before generating anything.
    # (A huge --max-tokens is no test: llama.cpp clamps it to the context and generates until full.)
    case = json.loads(SAMPLE.read_text(encoding="utf-8"))[0]
    padding = "我再补充一下当时的经过。" * (CONTEXT_CHARS // 12)
    for history in ("complete_consultation", "underspecified_consultation"):
        case[history][0]["content"] += padding
    dataset = tmp_path / "long.json"
    dataset.write_text(json.dumps([case], ensure_ascii=False), encoding="utf-8")
    result = run("eval_LJP_direct.py", tmp_path, judge, "context", "--dataset", str(dataset))
    assert (
        result.returncode == 1 and "context window" in result.stderr and "Lower --max-tokens" in result.stderr
    )
    assert "case （2099）示例民初1号 failed" in result.stderr
