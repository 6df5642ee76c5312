"""Spending true after an interruption: "Every paid attempt, accepted or rejected, keeps its usage
through the journal, the replay and the record." Every stage is stopped right after a judge output it rejects (a
401 on the next request), then rerun: the records' usage per role equals a clean run's, and the provider processed
exactly what the clean run processed. A judge that keeps answering wrongly fails its case; the next run asks anew.
And real processes killed at random moments: the records' usage equals a clean run's."""

import json
import os
import random
import signal
import sys
import time
from collections import Counter

import pytest

import rejudge
from lexpilot.benchmark.records import LCA
from lexpilot.protocols.catalog import GRID_STAGES, STAGE_SETS
from lexpilot.protocols.consultation import LCA_STAGE
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT
from tests.helpers.stages import Harness, judge_kinds
from tests.helpers.warm import fresh
from tests.helpers.warm import run as warm_run

# kills, Ctrl-C, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow

PROSE = "我认为这个问题很难说。"
JUDGES = judge_kinds()  # every judge prompt of the catalog: their outputs are parsed by `CaseCalls.validated`
USAGE = ("calls", "prompt_tokens", "completion_tokens", "unreported_calls")


class ProseThenStop:
    """The first answer to every judge prompt is prose; with `stop`, the request after the first prose is refused
    once with a 401 (the stage stops at once, as a killed process would, with the prose kept in the journal)."""

    def __init__(self, stop: bool):
        self.seen, self.stop, self.stopped = set(), stop, False
        self.prose = 0

    def __call__(self, kind, prompt, body):
        if self.stop and self.prose and not self.stopped:
            self.stopped = True
            return {"status": 401, "error": "key revoked for a moment"}
        if kind in JUDGES and prompt not in self.seen:
            self.seen.add(prompt)
            self.prose += 1
            return PROSE
        return None


def cases() -> list[dict]:
    return [{k: v for k, v in case.items() if k != "focal_point_types"} for case in sample_cases()[:2]]


def stages() -> list[tuple]:
    found = [(stage, ()) for name in STAGE_SETS["all"] for stage in GRID_STAGES[name]]
    return found + [(LCA_STAGE, ()), (rejudge.STAGE, ("--from-run", "r1", "--run-id", "r1-rj"))]


def spent(root) -> dict:
    """Usage per role summed over every record under the root."""
    total: dict = {}
    for path in root.rglob("*.jsonl"):
        if path.name == "calls_journal.jsonl":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            for role, used in json.loads(line).get("usage", {}).items():
                for field in USAGE:
                    total[(role, field)] = total.get((role, field), 0) + used.get(field, 0)
    return total


def every_stage(h: Harness, scripts, stop: bool, capsys) -> list[tuple]:
    """Every stage, each with its own script; with `stop`, stopped once and rerun. (usage, processed) after each."""
    seen = []
    for stage, own in stages():
        if stage is LCA_STAGE:
            h.file(LCA).unlink()  # eval_LCA.py judges the a1 responses that have no label
        scripts.script = ProseThenStop(stop)
        if stop:
            assert h.run_stage(stage, *own, "--concurrency", "1") == 2, stage.name
            assert scripts.script.stopped and "HTTP 401" in capsys.readouterr().err
        assert h.run_stage(stage, *own, "--concurrency", "1") == 0, stage.name
        seen.append((stage.name, spent(h.root), Counter(scripts.processed)))
    return seen


def test_a_stage_stopped_after_a_rejected_output_keeps_every_attempts_usage(tmp_path, monkeypatch, capsys):
    with ScriptedProvider() as clean_provider:
        clean = Harness(
            tmp_path / "clean", clean_provider, monkeypatch, write_dataset(tmp_path / "two.json", cases())
        )
        expected = every_stage(clean, clean_provider, False, capsys)
    with ScriptedProvider() as provider:
        stopped = Harness(
            tmp_path / "stopped", provider, monkeypatch, write_dataset(tmp_path / "two.json", cases())
        )
        found = every_stage(stopped, provider, True, capsys)
    for (name, usage, processed), (_, clean_usage, clean_processed) in zip(found, expected):
        assert processed == clean_processed, name  # the prose was replayed, never bought again
        assert usage == clean_usage, name  # and its cost is in the record, as the accepted output's is
        assert usage[("judge", "calls")] > 0


def test_a_case_failed_on_three_rejected_outputs_is_asked_anew_by_the_next_run(harness, provider, capsys):
    """The rejected attempts are kept (and replayed after a kill); once they fail the case they are retired, so the
    rerun does not fail on them again without a call."""
    provider.script = lambda kind, prompt, body: PROSE if kind == "ljp_judge" else None
    assert harness.run("gold", "--limit", "1") == 1
    assert "judge_ljp output invalid after 3 attempts" in capsys.readouterr().err
    assert provider.kinds()["ljp_judge"] == 3
    provider.script, provider.requests = None, []
    assert harness.run("gold", "--limit", "1") == 0
    # a1 kept, judge asked
    assert provider.kinds()["ljp_judge"] == 1 and provider.kinds().get("force_judge", 0) == 0
    record = harness.records("eval_results", "LJP_gold.jsonl")[0]
    assert record["usage"]["judge"]["calls"] == 1


# ----------------------------------------------------------------------------- real kills

PAPER = ("LexAwN_gen.py", "eval_DCG.py", "eval_LJP.py")


def run_scripts(
    warm, provider, root, env, kills: int, seed: int, asks: dict | None = None
) -> tuple[int, dict]:
    """The README's loop for one run, each script killed `kills` times at random moments, then run to the end in a
    fresh interpreter; (kills that landed, each script's requests). A moment is a random number of the requests
    the script makes in a clean run (`asks`), or none: killed 0-0.15 s after it starts (reading its dataset,
    manifest and journal)."""
    rng, killed, counts = random.Random(seed), 0, {}
    for script in PAPER:
        command = [sys.executable, script, "--run-id", "k", "--dataset", str(env["DATASET"])]
        command += ["--output-root", str(root), "--concurrency", "2"]
        for _ in range(kills):
            before, moment = sum(provider.processed.values()), rng.randint(0, asks[script] - 1)
            process, end = warm.start(command, ROOT, env), time.monotonic() + 30
            time.sleep(0 if moment else rng.uniform(0, 0.15))
            while (
                process.poll() is None
                and sum(provider.processed.values()) - before < moment
                and time.monotonic() < end
            ):
                time.sleep(0.002)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                killed += 1
            process.wait(timeout=30)
        before = sum(provider.processed.values())
        done = fresh(command, ROOT, env) if kills else warm_run(warm, command, ROOT, env)
        assert done.returncode == 0, done.stderr
        counts[script] = sum(provider.processed.values()) - before
    return killed, counts


def unanswered(root) -> int:
    return sum(sum(json.loads(p.read_text()).values()) for p in root.glob("runs/*/*/unanswered_calls.json"))


def test_kills_at_random_moments_keep_the_usage_of_a_clean_run(tmp_path, warm):
    """After kills at random moments through the paper's stages, the records' usage per role equals a clean run's,
    and what the provider processed beyond it is at most the calls in flight at the kills (paid, never answered)."""
    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])
    with ScriptedProvider() as provider:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LEXPILOT_"))}
        env |= {
            "OPENAI_BASE_URL": provider.base_url,
            "OPENAI_API_KEY": "k",
            "LEXPILOT_MODEL": "m",
            "DATASET": str(dataset),
        }
        _, asks = run_scripts(warm, provider, tmp_path / "clean", env, 0, 0)
        clean, clean_processed = spent(tmp_path / "clean"), sum(provider.processed.values())
        provider.processed.clear()
        provider.latency = 0.02  # each call in flight a while, so that kills land with calls in flight
        killed, _ = run_scripts(warm, provider, tmp_path / "killed", env, 3, 7, asks)
        extra = sum(provider.processed.values()) - clean_processed
    assert killed >= 6
    assert spent(tmp_path / "killed") == clean
    assert 0 <= extra <= unanswered(tmp_path / "killed")


class ReasonedProseThenStop(ProseThenStop):
    """As ProseThenStop, the judge giving its reasoning apart (reasoning_content) with every answer: the prose's
    reasoning, then the accepted answer's."""

    def __call__(self, kind, prompt, body):
        answer = super().__call__(kind, prompt, body)
        if kind != "ljp_judge" or isinstance(answer, dict):
            return answer
        return (
            {"content": answer, "reasoning_content": "这段输出不合格式。"}
            if answer
            else {"reasoning_content": "先分析每项诉请，再对照判决。"}
        )


def reasoning_of(h) -> dict:
    return {r["case_number"]: r.get("reasoning") for r in h.records("eval_results", "LJP_gold.jsonl")}


def test_the_judges_reasoning_reaches_the_record_in_batch_mode_and_after_a_replay(tmp_path, monkeypatch):
    """Records kept the judge's reasoning synchronously and dropped it in batch mode (the
    journal did not hold it), and so did a reply replayed from the journal after an interruption. Each attempt's
    reasoning is kept, the rejected prose's too, in order."""
    dataset = write_dataset(tmp_path / "two.json", cases())
    with ScriptedProvider(ReasonedProseThenStop(stop=False)) as provider:
        sync = Harness(tmp_path / "sync", provider, monkeypatch, dataset)
        assert sync.run("gold") == 0
    expected = reasoning_of(sync)
    assert all(
        r == {"judge": ["这段输出不合格式。", "先分析每项诉请，再对照判决。"]} for r in expected.values()
    )
    with ScriptedProvider(ReasonedProseThenStop(stop=False)) as provider:
        batch = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
        assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    assert reasoning_of(batch) == expected
    with ScriptedProvider(
        ReasonedProseThenStop(stop=True)
    ) as provider:  # stopped after the first prose, rerun
        replayed = Harness(tmp_path / "replayed", provider, monkeypatch, dataset)
        assert replayed.run("gold", "--concurrency", "1") == 2
        assert replayed.run("gold", "--concurrency", "1") == 0
    assert reasoning_of(replayed) == expected
