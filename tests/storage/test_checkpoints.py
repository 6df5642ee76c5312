"""Checkpoints, manifests, locks and resuming: paid work is never lost or silently redone."""

import errno
import gc
import hashlib
import json
import os
import subprocess
import sys

import pytest

import show_results
from lexpilot.benchmark.records import (
    A1,
    DIRECT_PREDICTION,
    INTERACTION,
    LJP_GOLD,
    content_digest,
    read_records,
)
from lexpilot.benchmark.records import model_folder as model_dirname
from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.scripted.provider import ScriptedProvider
from lexpilot.storage import checkpoints
from lexpilot.storage.checkpoints import manifest_path
from lexpilot.storage.compared import settings_digest
from lexpilot.storage.lock import RunLock
from tests.helpers.datasets import sample_cases
from tests.helpers.messages import one_line
from tests.helpers.paths import ROOT, SAMPLE
from tests.helpers.runs import break_record, run_folder
from tests.helpers.stages import SECRET, STAGES, Harness

THIRD_CASE = sample_cases()[2]["underspecified_consultation"][0]["content"]


def fail_case(text, status=500):
    """Every call whose prompt holds `text` fails with `status`."""
    return lambda kind, prompt, body: {"status": status} if text in prompt else None


def test_model_folder_is_safe_and_unique():
    assert model_dirname("org/Model:7B") != model_dirname("org_Model_7B")
    assert "/" not in model_dirname("org/Model:7B") and model_dirname("org/Model:7B").startswith(
        "org_Model_7B-"
    )


def test_failure_stops_the_stage_and_rerun_resumes_without_regenerating(harness, provider, capsys):
    h = harness
    provider.script = fail_case(THIRD_CASE)
    assert h.run("direct", "--concurrency", "1", "--retries", "0") == 1
    err = capsys.readouterr().err
    assert "（2099）示例民初3号" in err and "Rerun the same command" in err
    saved = {r["case_number"] for r in h.records("Force_judge_gen", "a1_direct.jsonl")}
    assert saved == {"（2099）示例民初1号", "（2099）示例民初2号"}  # no new case started after the failure
    provider.script, provider.requests = None, []
    assert h.run("direct") == 0
    regenerated = [p for p in provider.prompts("force_judge") if "我爸去年病走了" in p or "2090年结的婚" in p]
    assert regenerated == [] and len(provider.prompts("force_judge")) == 10
    assert len(h.records("eval_results", "LJP_direct.jsonl")) == 12


def test_keep_going_finishes_the_others_and_reports_every_failure(tmp_path, monkeypatch, capsys):
    fourth = sample_cases()[3]["underspecified_consultation"][0]["content"]
    script = lambda kind, prompt, body: {"status": 503} if THIRD_CASE in prompt or fourth in prompt else None
    with ScriptedProvider(script) as p:
        h = Harness(tmp_path, p, monkeypatch)
        assert h.run("direct", "--keep-going", "--retries", "1") == 1
    err = capsys.readouterr().err
    assert "（2099）示例民初3号" in err and "（2099）示例民初4号" in err
    assert len(h.records("eval_results", "LJP_direct.jsonl")) == 10


def test_a_case_too_long_for_the_context_window_fails_alone(harness, provider, capsys):
    error = {
        "status": 400,
        "code": "context_length_exceeded",
        "error": "This model's maximum context length is "
        "2048 tokens. However, you requested 4546 tokens (4530 in the messages, 16 in the completion).",
    }
    provider.script = lambda kind, prompt, body: error if THIRD_CASE in prompt else None
    assert harness.run("direct", "--keep-going") == 1
    err = capsys.readouterr().err
    assert (
        "case （2099）示例民初3号 failed" in err and "context window" in err and "Lower --max-tokens" in err
    )
    assert len(harness.records("eval_results", "LJP_direct.jsonl")) == 11
    assert sum(THIRD_CASE in p for p in provider.prompts()) == 1  # never retried


def test_paid_generation_is_kept_when_only_its_judging_fails(harness, provider):
    h, p = harness, provider
    p.script = lambda kind, prompt, body: "无效输出" if kind == "dcg_judge" else None
    assert h.run("DCG", "--keep-going", "--limit", "2") == 1
    assert len(p.prompts("dcg_judge")) == 2 * 3  # three attempts for the first question of each case
    assert len(h.records("Force_ask_gen", "force_ask.jsonl")) == 2
    p.script, p.requests = None, []
    assert h.run("DCG", "--limit", "2") == 0
    assert p.kinds() == {"dcg_judge": 4}


def test_permanent_failure_stops_at_once(tmp_path, monkeypatch, capsys):
    with ScriptedProvider(lambda kind, prompt, body: {"status": 401, "error": "invalid key"}) as p:
        h = Harness(tmp_path, p, monkeypatch)
        assert h.run("direct", "--keep-going", "--concurrency", "2") == 2
        assert len(p.requests) <= 2
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "eval-model" in err and SECRET not in err


def test_malformed_checkpoint_line_is_an_explicit_error(tmp_path, monkeypatch, capsys, provider):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("LexAwN", "--limit", "3") == 0
    path = h.file(A1)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text(lines[0] + lines[1][:40] + "\n" + lines[2], encoding="utf-8")
    before = len(provider.requests)
    assert h.run("LexAwN", "--limit", "3") == 2
    assert len(provider.requests) == before
    err = capsys.readouterr().err
    assert f"{path}:2: malformed or truncated record" in err and "delete it" in err


def test_record_from_other_inputs_is_detected(tmp_path, monkeypatch, capsys, provider):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("direct", "--limit", "2") == 0
    path = h.file("Force_judge_gen", "a1_direct.jsonl")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    records[1]["input_hash"] = "0" * 16
    records[1]["digest"] = content_digest(records[1])  # as if made so, not edited afterwards
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert h.run("direct", "--limit", "2") == 2
    number = records[1]["case_number"]
    assert f"{path}:2: case {number} was generated from different inputs" in capsys.readouterr().err


def test_changed_upstream_record_is_detected(tmp_path, monkeypatch, capsys, provider):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("direct", "--limit", "1") == 0
    path = h.file("Force_judge_gen", "a1_direct.jsonl")
    record = json.loads(path.read_text(encoding="utf-8"))
    record["response"] = "被改过的回复"
    record["digest"] = content_digest(record)  # regenerated by another run, not edited by hand
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    assert h.run("direct", "--limit", "1") == 2
    assert "built from a direct_prediction record that has changed" in capsys.readouterr().err


def test_a_record_edited_by_hand_is_noticed_by_the_stages_and_show_results(
    tmp_path, monkeypatch, capsys, provider
):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("LexAwN", "--limit", "2") == 0
    path = h.file("eval_results", "LCA_results.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[1])
    judged = record["judgments"]["complete"]
    judged["predicted_type"] = {"complete": "underspecified", "underspecified": "complete"}[
        judged["predicted_type"]
    ]
    path.write_text(lines[0] + json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    assert show_results.main(["--output-root", str(h.root), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert (
        f"LCA: {path}:2: the record of case {record['case_number']} was changed after it was saved"
        in captured.err
    )
    assert ("LCA", "macro_f1", "Overall") not in load_runs(h.root, None, None)[0].metrics
    assert h.run("LexAwN", "--limit", "2") == 2
    assert "changed after it was saved" in capsys.readouterr().err


def test_a_line_is_its_canonical_content_then_its_digest_and_an_edit_in_place_is_noticed(
    tmp_path, monkeypatch, capsys, provider
):
    """A record's line is the canonical text its digest hashes, the digest last, so the digest is checked on the
    line's bytes (docs/protocol.md: "`digest` (a hash of its own content)"); an edit of one character in place, a
    digest moved onto other content, a record reformatted and a record saved before lines were canonical are each
    read as they should be."""
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("direct", "--limit", "2") == 0
    path = h.file("Force_judge_gen", "a1_direct.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[0])
    content = {k: v for k, v in record.items() if k != "digest"}
    canonical = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert lines[0] == (canonical[:-1] + f',"digest":"{record["digest"]}"}}\n').encode("utf-8")
    assert record["digest"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def read(first: bytes) -> str:
        path.write_bytes(first + lines[1])
        assert h.run("direct", "--limit", "2") in (0, 2)
        return capsys.readouterr().err

    reply = record["response"]
    edited = lines[0].replace(
        json.dumps(reply, ensure_ascii=False)[1:-1].encode(), ("改" + reply[1:]).encode(), 1
    )
    assert edited != lines[0] and json.loads(edited)["response"] == "改" + reply[1:]
    assert f"{path}:1: the record of case {record['case_number']} was changed after it was saved" in read(
        edited
    )
    second = json.loads(lines[1])  # the first line's content under the second line's digest
    moved = lines[0].replace(record["digest"].encode(), second["digest"].encode())
    assert "changed after it was saved" in read(moved)
    # older writers
    reformatted = (json.dumps(record, ensure_ascii=False, indent=None) + "\n").encode("utf-8")
    assert reformatted != lines[0] and "changed after" not in read(reformatted)
    assert "changed after" not in read(json.dumps(record).encode() + b"\n")  # ASCII escapes: the same content
    assert len(h.records("Force_judge_gen", "a1_direct.jsonl")) == 2


def test_reading_records_leaves_the_cycle_collector_as_it_found_it(tmp_path, monkeypatch, provider):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("direct", "--limit", "1") == 0
    path = h.file("Force_judge_gen", "a1_direct.jsonl")
    selected = {json.loads(path.read_text(encoding="utf-8"))["case_number"]: None}
    try:
        for running in (True, False):
            (gc.enable if running else gc.disable)()
            assert read_records(path, DIRECT_PREDICTION, selected, "x") and gc.isenabled() == running
            path.write_bytes(path.read_bytes() + b"{}\n")  # malformed: read_records raises
            with pytest.raises(HarnessError):
                read_records(path, DIRECT_PREDICTION, selected, "x")
            assert gc.isenabled() == running
            path.write_bytes(path.read_bytes()[:-3])
    finally:
        gc.enable()


def test_manifest_mismatch_stops_before_any_call(tmp_path, monkeypatch, capsys, provider):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("direct", "--limit", "1") == 0
    before = len(provider.requests)
    assert h.run("gold", "--limit", "1", "--temperature", "0.5", "--judge-model", "other-judge") == 2
    assert h.run("gold", "--limit", "2") == 2
    assert len(provider.requests) == before
    err = capsys.readouterr().err
    assert "models.judge.model: run DeepSeek-R1, now other-judge" in err
    assert (
        "generation.temperature: run 0.7, now 0.5" in err
        and "generation.user_temperature: run 0.7, now 0.5" in err
    )
    assert "selected_cases: run 1 cases, now 2" in err and "new --run-id" in err


def test_an_endpoint_on_another_port_resumes_and_a_code_change_needs_consent(
    tmp_path, monkeypatch, capsys, provider
):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("direct", "--limit", "1") == 0
    mpath = next((h.root / "runs").glob("*/*/manifest.json"))
    manifest = json.loads(mpath.read_text(encoding="utf-8"))
    for role in manifest["models"].values():
        role["endpoint_host"] = "127.0.0.1:1"  # the server was on another port when the run started
    # and the harness was upgraded since
    manifest["code_files"]["lexpilot/protocols/ljp.py"] = "0123456789abcdef"
    manifest["settings_digest"] = settings_digest(manifest)  # as the harness wrote it then
    mpath.write_text(json.dumps(manifest), encoding="utf-8")
    assert h.run("direct", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert (
        "code: lexpilot/protocols/ljp.py changed since the run started" in err
        and "--allow-code-change" in err
    )
    assert "models" not in err
    assert h.run("direct", "--limit", "1", "--allow-code-change") == 0
    resumed = json.loads(mpath.read_text(encoding="utf-8"))
    assert resumed["code_files"]["lexpilot/protocols/ljp.py"] == "0123456789abcdef"
    assert len(resumed["code_hashes_resumed_with"]) == 1
    # not for settings
    assert h.run("gold", "--limit", "1", "--allow-code-change", "--temperature", "0.2") == 2


def test_manifest_records_settings_and_never_credentials(tmp_path, monkeypatch, provider):
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("LexAwN", "--limit", "2") == 0
    assert h.run("DCG", "--limit", "2", "--stream") == 0  # transport settings do not split a run
    manifest = json.loads(manifest_path(h.root, "r1", "eval-model").read_text(encoding="utf-8"))
    assert manifest["selected_cases"] == ["（2099）示例民初1号", "（2099）示例民初2号"]
    assert manifest["models"]["judge"] == {
        "model": "DeepSeek-R1",
        "endpoint_host": "127.0.0.1:" + provider.base_url.split(":")[2].split("/")[0],
    }
    assert manifest["generation"] == {
        "temperature": 0.7,
        "user_temperature": 0.7,
        "judge_temperature": 0.1,
        "max_tokens": 8192,
        "n": 1,
    }
    assert {"dataset_sha256", "code_hash", "prompt_hash", "package_versions"} <= set(manifest)
    for path in h.root.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


def test_second_writer_is_refused(tmp_path, monkeypatch, capsys, provider):
    h = Harness(tmp_path, provider, monkeypatch)
    lock = manifest_path(h.root, "r1", "eval-model").with_name(".lock")
    with RunLock(lock):
        assert h.run("direct", "--limit", "1") == 2
    assert "being written by pid" in capsys.readouterr().err and not provider.requests
    assert h.run("direct", "--limit", "1") == 0  # released with its holder


@pytest.mark.slow
def test_results_do_not_depend_on_concurrency(tmp_path, monkeypatch):
    outputs = []
    for concurrency in ("1", "8"):
        with ScriptedProvider() as p:
            h = Harness(tmp_path / concurrency, p, monkeypatch)
            for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
                assert h.run(stage, "--concurrency", concurrency) == 0
            files = sorted(f for f in h.root.rglob("*.jsonl"))
            outputs.append(
                {
                    f.relative_to(h.root).as_posix(): sorted(f.read_text(encoding="utf-8").splitlines())
                    for f in files
                }
            )
    assert len(outputs[0]) == 10 and outputs[0] == outputs[1]


def always_ask(kind, prompt, body):
    return "【追问】还需要核实一点。" if kind == "lexawn" else None


@pytest.mark.parametrize(
    "stage,calls",
    [
        ("LexAwN", {"eval": 12 * 5, "user": 12 * 3, "judge": 12 * 4}),
        ("DCG", {"eval": 24, "user": 12, "judge": 24}),
        ("direct", {"eval": 12, "judge": 12}),
    ],
)
def test_dry_run_counts_match_a_fresh_run(tmp_path, monkeypatch, capsys, stage, calls):
    with ScriptedProvider(always_ask) as p:
        h = Harness(tmp_path, p, monkeypatch)
        assert h.run(stage, "--dry-run") == 0
        out = capsys.readouterr().out
        assert not p.requests and not h.root.exists()
        assert "12 of 12 selected cases to do" in out
        assert (
            "calls at most (not counting retries): "
            + ", ".join(f"{r} {calls.get(r, 0)}" for r in ("eval", "user", "judge"))
            in out
        )
        assert h.run(stage) == 0
        roles = {"lexawn": "eval", "force_ask": "eval", "force_judge": "eval", "user": "user"}
        made = {}
        for kind, n in p.kinds().items():
            role = roles.get(kind, "judge")
            made[role] = made.get(role, 0) + n
        assert made == calls
        assert h.run(stage, "--dry-run") == 0
        assert "0 of 12 selected cases to do" in capsys.readouterr().out


def test_dry_run_estimates_tokens_from_the_prompts_it_would_send(harness, provider, capsys):
    assert harness.run("gold", "--dry-run", "--max-tokens", "1000") == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("tokens, estimated"))
    estimate = {part.split()[0]: part.split() for part in line.split(": ", 1)[1].split("; ")}
    assert harness.run("gold") == 0
    sent = {kind: sum(len(p) for p in provider.prompts(kind)) for kind in ("force_judge", "ljp_judge")}
    # the Gold-Standard prompt is the prompt and the complete history: known exactly beforehand
    assert estimate["eval"][:6] == [
        "eval",
        "prompt",
        f"~{sent['force_judge']:,},",
        "completion",
        "<=",
        "12,000",
    ]
    # the extraction prompt also carries the reply to extract from, which is not known beforehand
    judged = int(estimate["judge"][2].strip("~,").replace(",", ""))
    assert 0 < judged < sent["ljp_judge"] and "user" not in estimate


def test_interrupted_stage_resumes(harness, provider):
    """A run stopped mid-stage: finished cases are on disk, the rest are redone and nothing twice."""
    h, p = harness, provider
    seen = []
    p.script = lambda kind, prompt, body: seen.append(1) or ({"status": 500} if len(seen) > 4 else None)
    assert h.run("gold", "--concurrency", "1", "--retries", "0") == 1
    done = {r["case_number"] for r in h.records("eval_results", "LJP_gold.jsonl")}
    assert len(done) == 2
    p.script, p.requests = None, []
    assert h.run("gold") == 0
    assert len(p.prompts("force_judge")) == 10
    numbers = [r["case_number"] for r in h.records("eval_results", "LJP_gold.jsonl")]
    assert len(numbers) == len(set(numbers)) == 12


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_completed_records(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers.paths import ROOT, SAMPLE
    from tests.helpers.processes import as_at_a_terminal

    with ScriptedProvider(latency=0.1) as p:
        env = {**os.environ, "OPENAI_BASE_URL": p.base_url, "OPENAI_API_KEY": "k", "LEXPILOT_MODEL": "m"}
        cmd = [
            sys.executable,
            str(ROOT / "eval_LJP_gold.py"),
            "--run-id",
            "r",
            "--dataset",
            str(SAMPLE),
            "--output-root",
            str(tmp_path),
            "--concurrency",
            "2",
        ]
        process = subprocess.Popen(
            cmd,
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            preexec_fn=as_at_a_terminal,
        )
        deadline = time.monotonic() + 20
        results = tmp_path / "eval_results" / "r" / model_dirname("m") / "LJP_gold.jsonl"
        while not (results.exists() and results.read_text(encoding="utf-8")) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        err = process.communicate(timeout=20)[1]
        assert process.returncode == 130 and "rerun the same command to resume" in err
        saved = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
        assert 1 <= len(saved) < 12
        rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert rerun.returncode == 0 and f"{len(saved)} skipped" in rerun.stdout


def numbered_replies(fail_when):
    """Each LexAwN reply carries a serial number, so a regenerated reply differs from the first one;
    a call whose prompt makes fail_when(kind, prompt) true gets HTTP 500."""
    serial = {"n": 0}

    def script(kind, prompt, body):
        if fail_when(kind, prompt):
            return {"status": 500}
        if kind == "lexawn":
            serial["n"] += 1
            return f"【追问】第{serial['n']}个回复：请问还有什么证据？"
        return None

    return script


def test_a_reply_paid_before_a_failure_in_the_same_step_is_replayed_not_bought_again(
    harness, provider, capsys
):
    h = harness
    underspecified_tail = sample_cases()[0]["underspecified_consultation"][-1]["content"]
    complete_tail = sample_cases()[0]["complete_consultation"][-1]["content"]
    provider.script = numbered_replies(
        lambda kind, prompt: (
            kind == "lexawn" and underspecified_tail in prompt and complete_tail not in prompt
        )
    )
    # a1: complete answered, underspecified failed
    assert h.run("LexAwN", "--limit", "1", "--retries", "0") == 1
    first = [p for p in provider.prompts("lexawn")]
    assert len(first) == 2 and not (h.root / "AwN_gen").exists()
    journal = next(h.root.glob("runs/r1/*/calls_journal.jsonl"))
    assert len(journal.read_text(encoding="utf-8").splitlines()) == 1
    capsys.readouterr()
    provider.requests = []
    provider.script = numbered_replies(lambda kind, prompt: False)
    assert h.run("LexAwN", "--limit", "1") == 0
    assert "1 replies paid in an earlier run replayed" in capsys.readouterr().out
    resent = [p for p in provider.prompts("lexawn") if complete_tail in p and underspecified_tail not in p]
    assert resent == []  # the complete-history response was not bought twice
    (a1,) = h.records(A1)
    assert a1["responses"]["complete"]["response"] == "【追问】第1个回复：请问还有什么证据？"
    assert a1["usage"]["eval"]["calls"] == 2  # the record's cost includes the replayed reply
    assert not journal.exists()  # nothing left to replay once the steps are saved


def test_an_interaction_failing_in_round_3_replays_rounds_1_and_2(harness, provider):
    h = harness
    # the User Model fails once the dialogue holds three new assistant turns (its third reply)
    third_reply = lambda kind, prompt: kind == "user" and prompt.count("个回复：") >= 3  # noqa: E731
    provider.script = numbered_replies(third_reply)
    assert h.run("LexAwN", "--limit", "1", "--retries", "0") == 1
    paid = provider.kinds()
    provider.requests = []
    provider.script = numbered_replies(lambda kind, prompt: False)
    assert h.run("LexAwN", "--limit", "1") == 0
    # the rerun asks only what failed and what follows: the third user reply and the forced prediction
    assert provider.kinds() == {"user": 1, "force_judge": 1}
    (record,) = h.records(INTERACTION)
    assert [r["round"] for r in record["rounds"]] == [1, 2, 3, 4] and paid["lexawn"] == 4


def test_a_torn_journal_line_is_ignored_with_a_note(harness, provider, capsys):
    h = harness
    journal = h.root / "runs" / "r1" / model_dirname("eval-model") / "calls_journal.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"case_number": "x", "st', encoding="utf-8")  # a crash in mid-line
    assert h.run("direct", "--limit", "2") == 0
    assert "1 unreadable line(s) ignored" in capsys.readouterr().err and not journal.exists()


def test_calls_of_two_processes_in_one_journal_keep_their_own_marks(tmp_path):
    """A call started and never ended is counted as paid and unanswered ("Calls started but never ended are added
    up per role in unanswered_calls.json"): one writer's end mark must never close another writer's call."""
    from lexpilot.storage.checkpoints import CallJournal, CheckpointWriter

    path = tmp_path / "calls_journal.jsonl"
    killed, other = (CallJournal(path, CheckpointWriter(), set()) for _ in range(2))  # two cells of a run
    killed.started("judge")  # its process dies here: never ended
    other.ended(other.started("judge"))
    assert CallJournal(path, CheckpointWriter(), set()).unanswered == {"judge": 1}


def test_a_finished_case_keeps_only_its_records_on_disk_not_in_memory(harness, provider, monkeypatch):
    """Nothing reads a finished case's records again in its stage, so they leave memory as the case finishes (a
    10 x 5 grid held every chain's records of a stage at once); its pending cases keep theirs, upstream included."""
    import dataclasses

    from lexpilot.running import context as context_module
    from lexpilot.running.state import SAVED

    states = []
    loaded = context_module.load_state
    monkeypatch.setattr(
        context_module, "load_state", lambda *a, **k: states.append(loaded(*a, **k)) or states[-1]
    )
    assert harness.run("LexAwN") == 0
    assert harness.run("interaction") == 0
    assert [len(s.records["interaction"]) for s in states] == [len(sample_cases())] * 2
    assert all(r is SAVED for s in states for records in s.records.values() for r in records.values())
    # a resumed stage: the finished cases' records are not kept, the pending case's upstream record is
    path = states[1].paths["LJP_interaction"]
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    pending = json.loads(lines[-1])["case_number"]
    state = loaded(dataclasses.replace(states[1].context, stage=STAGES["interaction"]))
    assert [n for n, r in state.records["interaction"].items() if r is not SAVED] == [pending]


# ----------------------------------------------------------------------------- torn lines


def tear(path, how):
    """Leave the file as a crash would: the last record cut inside a multi-byte character, or the last
    record complete but without its newline."""
    data = path.read_bytes()
    if how == "torn":
        last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        cut = last.index("示".encode()) + 1  # inside the three bytes of a Chinese character
        path.write_bytes(data[: len(data) - len(last) - 1] + last[:cut])
    else:
        path.write_bytes(data.rstrip(b"\n"))


@pytest.mark.parametrize("how", ["torn", "unterminated"])
def test_a_torn_or_unterminated_last_line_is_recovered_and_nothing_complete_is_lost(
    harness, provider, capsys, how
):
    assert harness.run("gold", "--limit", "4") == 0
    results = harness.file(LJP_GOLD)
    before = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    tear(results, how)
    journal = run_folder(harness) / "calls_journal.jsonl"
    journal.write_bytes(b'{"case_number": "\xe7\xa4", "st')  # a torn journal line too
    assert show_results.main(["--output-root", str(harness.root)]) == 0  # reads, reports, changes nothing
    err = capsys.readouterr().err
    if how == "torn":
        assert f"{results}:4: the last line was torn by an interrupted write; left out" in err
        assert "LJP gold" in err and "incomplete, 1 of 4 cases missing" in err
    provider.requests = []
    assert harness.run("gold", "--limit", "4") == 0
    err = capsys.readouterr().err
    after = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    if how == "torn":
        assert "set aside in LJP_gold.jsonl.torn-" in err and len(list(results.parent.glob("*.torn-*"))) == 1
        assert provider.kinds() == {"ljp_judge": 1}  # only the torn case is redone
        assert after[:3] == before[:3] and after[3]["case_number"] == before[3]["case_number"]
    else:
        assert "lost its newline; kept" in err and not provider.requests and after == before
    assert ("1 unreadable line(s) ignored" in err) == (how == "torn") and not journal.exists()
    assert harness.run("gold", "--limit", "4") == 0  # and the next run finds a clean file


def test_a_malformed_line_in_the_middle_still_stops_with_file_and_line(harness, capsys):
    assert harness.run("gold", "--limit", "3") == 0
    results = harness.file(LJP_GOLD)
    lines = results.read_text(encoding="utf-8").splitlines(keepends=True)
    results.write_text(lines[0] + "{broken\n" + lines[1] + lines[2], encoding="utf-8")
    assert harness.run("gold", "--limit", "3") == 2
    assert f"{results}:2: malformed or truncated record" in capsys.readouterr().err


def test_a_record_is_never_glued_onto_a_fragment(harness, provider):
    assert harness.run("LexAwN", "--limit", "2") == 0
    a1 = harness.file(A1)
    interaction = harness.file(INTERACTION)
    lines = interaction.read_text(encoding="utf-8").splitlines(keepends=True)
    interaction.write_text(lines[0] + lines[1][:-40], encoding="utf-8")  # torn: the last step of its case
    a1.write_bytes(a1.read_bytes()[:-1])  # unterminated
    assert harness.run("LexAwN", "--limit", "3") == 2  # another --limit: refused, and nothing written
    assert harness.run("LexAwN", "--limit", "2") == 0
    for path in (a1, interaction):
        for line in path.read_text(encoding="utf-8").splitlines():
            json.loads(line)


@pytest.mark.slow
def test_a_kill_leaves_torn_files_and_the_rerun_recovers_every_complete_record(tmp_path):
    """A real process killed in the middle of a stage, then torn lines added as a full disk leaves them."""
    import signal
    import time

    with ScriptedProvider(latency=0.05) as p:
        env = {**os.environ, "OPENAI_BASE_URL": p.base_url, "OPENAI_API_KEY": "k", "LEXPILOT_MODEL": "m"}
        command = [
            sys.executable,
            "LexAwN_gen.py",
            "--run-id",
            "k",
            "--dataset",
            str(SAMPLE),
            "--output-root",
            str(tmp_path),
            "--concurrency",
            "4",
        ]
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        a1 = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = list(tmp_path.glob("AwN_gen/k/*/a1.jsonl"))
            if found and found[0].read_text(encoding="utf-8").count("\n") >= 3:
                a1 = found[0]
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        assert a1 is not None
        complete = [json.loads(line) for line in a1.read_bytes().split(b"\n")[:-1] if line.strip()]
        with a1.open("ab") as f:
            f.write('{"case_number": "（2099）示例'.encode()[:-1])  # torn inside a character
        journal = a1.parents[3] / "runs" / "k" / a1.parent.name / "calls_journal.jsonl"
        if journal.exists():
            with journal.open("ab") as f:
                f.write('{"reply": "示'.encode()[:-2])
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "set aside" in result.stderr
    final = {
        json.loads(line)["case_number"]: json.loads(line)
        for line in a1.read_text(encoding="utf-8").splitlines()
    }
    assert len(final) == 12 and all(final[r["case_number"]] == r for r in complete)


# ----------------------------------------------------------------------------- a full disk


def test_a_full_disk_stops_the_stage_in_one_line_and_keeps_every_completed_record(
    harness, monkeypatch, capsys
):
    real_fsync, calls = os.fsync, {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(checkpoints.os, "fsync", fsync)
    assert harness.run("gold", "--concurrency", "1") == 2
    err = capsys.readouterr().err
    (line,) = [e for e in err.splitlines() if "stopped" in e]
    assert "no space left on device writing" in line and "every completed record is kept" in line
    assert "Traceback" not in err
    monkeypatch.setattr(checkpoints.os, "fsync", real_fsync)
    assert harness.run("gold", "--concurrency", "1") == 0  # and the rerun completes from what was kept
    assert len(harness.records(LJP_GOLD)) == 12


# ----------------------------------------------------------------------------- a broken run folder


def break_manifest(h):
    (run_folder(h) / "manifest.json").write_text("[]", encoding="utf-8")


def lock_folder(h):
    lock = run_folder(h) / ".lock"
    lock.unlink()
    lock.mkdir()


STAGE_BREAKAGES = {
    "manifest not an object": (break_manifest, "the manifest is not a JSON object"),
    "case_number a list": (break_record("case_number", [1]), "malformed or truncated record"),
    "upstream_hash not an object": (break_record("upstream_hash", "x"), "malformed or truncated record"),
    "lock is a folder": (lock_folder, "the run's lock file is a folder"),
}


@pytest.mark.parametrize("name", STAGE_BREAKAGES)
def test_a_broken_run_folder_is_one_line(harness, capsys, name):
    breakage, message = STAGE_BREAKAGES[name]
    assert harness.run("gold", "--limit", "1") == 0
    breakage(harness)
    capsys.readouterr()
    assert harness.run("gold", "--limit", "1") == 2
    assert message in one_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- the journal


def test_a_journal_reply_edited_by_hand_is_never_replayed(harness, provider, capsys):
    """Journal entries carry a digest like records do: a reply edited by hand in the journal is asked again."""
    provider.script = lambda kind, prompt, body: {"status": 500} if kind == "user" else None
    # the first question is paid, the reply fails
    assert harness.run("DCG", "--limit", "1", "--retries", "0") == 1
    journal = next((harness.root / "runs").glob("*/*/calls_journal.jsonl"))
    entries = [json.loads(x) for x in journal.read_text(encoding="utf-8").splitlines()]
    reply = next(e for e in entries if "reply" in e)
    journal.write_text(
        journal.read_text(encoding="utf-8").replace(
            json.dumps(reply["reply"], ensure_ascii=False)[1:-1], "篡改的回复"
        ),
        encoding="utf-8",
    )
    provider.script, provider.requests = None, []
    capsys.readouterr()
    assert harness.run("DCG", "--limit", "1") == 0
    assert "1 repl(ies) changed after they were saved" in capsys.readouterr().err
    # both questions asked: the edited one is not taken from the line
    assert provider.kinds()["force_ask"] == 2
    assert "篡改的回复" not in harness.file("Force_ask_gen", "force_ask.jsonl").read_text(encoding="utf-8")


@pytest.mark.parametrize("temperature,replayed", [("0.7", True), ("0.2", False)])
def test_a_journal_is_replayed_only_under_the_settings_it_was_made_with(
    harness, provider, capsys, temperature, replayed
):
    """With the manifest deleted, a rerun at another temperature replayed the journal's replies made at 0.7
    into the 0.2 run. Journal entries carry the run's settings hash; the same settings still replay them."""
    provider.script = lambda kind, prompt, body: {"status": 500} if kind == "user" else None
    # the first question is paid, the reply fails
    assert harness.run("DCG", "--limit", "1", "--retries", "0") == 1
    next((harness.root / "runs").glob("*/*/manifest.json")).unlink()
    provider.script, provider.requests = None, []
    capsys.readouterr()
    assert harness.run("DCG", "--limit", "1", "--temperature", temperature) == 0
    err = capsys.readouterr().err
    # by hand: DCG asks two forced questions; the first was paid at 0.7
    assert provider.kinds()["force_ask"] == (1 if replayed else 2)
    assert ("1 repl(ies) were made with other settings than this run's" in err) is not replayed
