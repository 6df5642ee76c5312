"""Batch mode (--batch): cycles through the scripted batch API give the records of a synchronous run; a batch
survives its process; rejected replies go into the next cycle; refusing endpoints stop before submitting."""

import ast
import json

import pytest

import show_results
from lexpilot.benchmark.vocabulary import ROLE
from tests.helpers.batches import contents, run_batch_files
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.source import keys_read
from tests.helpers.stages import Harness

CASES = sample_cases()[:4]


@pytest.fixture
def pair(tmp_path, provider, monkeypatch):
    dataset = write_dataset(tmp_path / "four.json", CASES)
    sync = Harness(tmp_path / "sync", provider, monkeypatch, dataset)
    batch = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    return sync, batch


FILES = {
    "gold": [("Force_judge_gen", "a1_force_judge.jsonl"), ("eval_results", "LJP_gold.jsonl")],
    "direct": [("Force_judge_gen", "a1_direct.jsonl"), ("eval_results", "LJP_direct.jsonl")],
    "DCG": [("Force_ask_gen", "force_ask.jsonl"), ("eval_results", "DCG_results.jsonl")],
    "LexAwN": [
        ("AwN_gen", "a1.jsonl"),
        ("eval_results", "LCA_results.jsonl"),
        ("AwN_gen", "interaction.jsonl"),
    ],
}


@pytest.mark.parametrize("stage", ["gold", "direct", "DCG", "LexAwN"])
def test_batch_records_equal_a_synchronous_runs(pair, provider, capsys, stage):
    sync, batch = pair
    assert sync.run(stage) == 0
    provider.requests = []
    assert batch.run(stage, "--batch", "--batch-poll", "1") == 0
    out = capsys.readouterr().out
    for top, name in FILES[stage]:
        assert contents(batch, top, name) == contents(sync, top, name), name
    for top, name in FILES[stage]:
        for record in batch.records(top, name):
            assert all(u.get("batched_calls") == u["calls"] for u in record["usage"].values())
    assert all(n == 1 for n in provider.submitted.values())  # every request submitted once
    assert "batch mode: 4 of 4 cases saved, 0 failed" in out


def test_a_batch_survives_its_process_and_is_never_submitted_twice(pair, provider, capsys):
    _, batch = pair
    provider.batch_delay = 60  # the provider takes its time
    assert batch.run("gold", "--batch-detach") == 0
    assert "rerun the same command to collect them" in capsys.readouterr().err
    first = dict(provider.submitted)
    assert batch.run("gold", "--batch-status") == 0
    assert "in_progress" in capsys.readouterr().out
    assert batch.run("gold", "--batch-detach") == 0  # still in flight: re-attached, nothing new submitted
    assert provider.submitted == first
    provider.batch_delay = 0
    for b in provider.batches.values():
        b["_ready"] = 0
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    assert (
        all(n == 1 for n in provider.submitted.values())
        and len(batch.records("eval_results", "LJP_gold.jsonl")) == 4
    )


@pytest.mark.parametrize("phase", ["before upload", "after upload", "after create"])
def test_a_kill_at_each_phase_re_attaches_without_a_duplicate(pair, provider, monkeypatch, phase):
    from lexpilot.running.batch import cycles as batching
    from lexpilot.running.batch.ledger import LedgerBatch

    _, batch = pair
    real_submit = batching.submit

    def killed(run, client, role, requests, max_tokens):
        ledger = run.ledger
        if phase == "before upload":
            ledger.add(LedgerBatch(role, "prepared", {cid: meta for cid, meta, _ in requests}, max_tokens))
            ledger.save()
        else:
            real_submit(run, client, role, requests, max_tokens)
            if phase == "after upload":  # the batch was created, but the ledger never learnt its id
                b = ledger.batches[-1]
                b.phase, b.batch_id = "uploaded", None
                ledger.save()
        raise KeyboardInterrupt

    monkeypatch.setattr(batching, "submit", killed)
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 130  # interrupted at that phase
    monkeypatch.setattr(batching, "submit", real_submit)
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    assert all(n == 1 for n in provider.submitted.values())
    assert len(batch.records("eval_results", "LJP_gold.jsonl")) == 4


def test_rejected_and_failed_requests_go_into_the_next_cycle(pair, provider, capsys):
    _, batch = pair
    failures = {"n": 0}

    def fail_twice(custom_id):
        failures["n"] += 1
        return failures["n"] <= 2

    provider.batch_fail = fail_twice
    provider.script = lambda kind, prompt, body: (
        {"content": "半句", "finish_reason": "length"}
        if kind == "force_judge" and not provider.batches.get("batch-3")
        else None
    )
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    err = capsys.readouterr().err
    assert (
        "failed in the batch" in err and "asked again in the next cycle" in err and "reply truncated" in err
    )
    assert len(provider.batches) >= 4  # the rejected requests took further cycles
    assert len(batch.records("eval_results", "LJP_gold.jsonl")) == 4


def test_an_endpoint_refusing_the_batch_api_stops_before_submitting(pair, provider, capsys):
    _, batch = pair
    provider.batch_refuse = True
    assert batch.run("gold", "--batch") == 2
    err = capsys.readouterr().err
    assert "refuses the batch API (HTTP 404)" in err and "run without --batch" in err
    assert not provider.submitted and not provider.requests


def test_a_role_left_synchronous_works_within_the_same_cycles(pair, provider):
    sync, batch = pair
    assert sync.run("DCG") == 0
    provider.requests = []
    assert batch.run("DCG", "--batch-roles", "eval,judge", "--batch-poll", "1") == 0
    assert provider.kinds() == {"user": 4}  # the User Model was called directly, the others in batches
    assert contents(batch, "Force_ask_gen", "force_ask.jsonl") == contents(
        sync, "Force_ask_gen", "force_ask.jsonl"
    )
    record = batch.records("Force_ask_gen", "force_ask.jsonl")[0]
    assert "batched_calls" not in record["usage"]["user"] and record["usage"]["eval"]["batched_calls"] == 2


def test_vllm_batch_files_round_trip(pair, provider, tmp_path, capsys):
    sync, batch = pair
    folder = tmp_path / "vllm"
    assert sync.run("gold") == 0
    rounds = 0
    while True:
        assert batch.run("gold", "--batch-files", str(folder)) == 0
        err = capsys.readouterr().err
        if not run_batch_files(provider, folder):
            break
        assert "vllm run-batch -i" in err
        rounds += 1
    assert rounds == 2 and contents(batch, "eval_results", "LJP_gold.jsonl") == contents(
        sync, "eval_results", "LJP_gold.jsonl"
    )


def test_an_expired_batch_asks_its_unanswered_requests_again(pair, provider):
    _, batch = pair
    provider.batch_expire = True  # each batch ends expired with only half of its requests answered
    # an unanswered request counts as a failed attempt: the last one here waits through four expired batches
    assert batch.run("gold", "--batch", "--batch-poll", "1", "--retries", "5") == 0
    assert len(batch.records("eval_results", "LJP_gold.jsonl")) == 4 and len(provider.batches) > 2


def test_input_files_are_split_at_the_providers_limit(pair, provider, monkeypatch):
    from lexpilot.running.batch import api as batch_api

    _, batch = pair
    monkeypatch.setattr(batch_api, "MAX_REQUESTS", 3)
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    sizes = sorted(len(b["_lines"]) for b in provider.batches.values())
    assert sizes == [1, 1, 3, 3]  # four requests per cycle, two cycles


def test_the_budget_stops_before_a_batch_that_could_cross_it(pair, provider, tmp_path, capsys):
    _, batch = pair
    prices = tmp_path / "p.json"
    prices.write_text(
        json.dumps(
            {
                m: {"prompt": 1, "completion": 4, "batch_discount": 0.5}
                for m in ("eval-model", "DeepSeek-V4.1-Flash", "DeepSeek-R1")
            }
        )
    )
    assert (
        batch.run(
            "gold",
            "--batch",
            "--batch-poll",
            "1",
            "--prices",
            str(prices),
            "--max-cost",
            "0.0005",
            "--max-tokens",
            "50",
        )
        == 2
    )
    assert "--max-cost 0.0005" in capsys.readouterr().err and not provider.submitted


@pytest.mark.slow
@pytest.mark.parametrize("condition", ["delayed", "self-correction"])
def test_batch_records_equal_a_synchronous_runs_with_a_non_ideal_user(pair, provider, condition):
    sync, batch = pair
    for h, extra in ((sync, ()), (batch, ("--batch", "--batch-poll", "1"))):
        assert h.run("LexAwN", "--user-condition", condition, *extra) == 0
        assert h.run("interaction", "--user-condition", condition, *extra) == 0
    for top, name in FILES["LexAwN"] + [("eval_results", "LJP_interaction.jsonl")]:
        assert contents(batch, top, name) == contents(sync, top, name), name


def test_a_kill_while_importing_imports_each_reply_once(pair, provider, monkeypatch, capsys):
    from lexpilot.storage.checkpoints import CallJournal

    _, batch = pair
    real_keep, kept = CallJournal.keep_key, {"n": 0}

    def killed_after_two(self, *args, **kwargs):
        real_keep(self, *args, **kwargs)
        kept["n"] += 1
        if kept["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(CallJournal, "keep_key", killed_after_two)
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 130
    monkeypatch.setattr(CallJournal, "keep_key", real_keep)
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    assert (
        all(n == 1 for n in provider.submitted.values())
        and len(batch.records("eval_results", "LJP_gold.jsonl")) == 4
    )
    assert "cases pending, at most" in capsys.readouterr().err


def test_a_prompt_beyond_the_context_window_fails_its_case_at_once(pair, provider, capsys):
    _, batch = pair
    first = CASES[0]["complete_consultation"][0]["content"]
    provider.script = lambda kind, prompt, body: (
        {
            "status": 400,
            "code": "context_length_exceeded",
            "error": "This model's maximum context length is 2048 tokens.",
        }
        if first in prompt
        else None
    )
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 1
    err = capsys.readouterr().err
    assert "beyond the context window" in err and CASES[0]["case_number"] in err
    assert sum(1 for cid in provider.submitted) == 4 + 3  # asked once, not retried; the other three went on


def test_batched_calls_are_priced_at_the_batch_price(pair, provider, tmp_path, capsys):
    import show_results

    sync, batch = pair
    prices = tmp_path / "p.json"
    prices.write_text(
        json.dumps(
            {
                m: {"prompt": 1, "completion": 4, "batch_discount": 0.5}
                for m in ("eval-model", "DeepSeek-V4.1-Flash", "DeepSeek-R1")
            }
        )
    )
    assert sync.run("gold") == 0 and batch.run("gold", "--batch", "--batch-poll", "1") == 0
    costs = []
    for h in (sync, batch):
        capsys.readouterr()
        assert show_results.main(["--output-root", str(h.root), "--prices", str(prices)]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("eval-model  r1"))
        costs.append(float(row.split()[-1]))
    assert costs[1] == pytest.approx(costs[0] / 2, rel=0.01)


@pytest.mark.slow
def test_batch_records_equal_a_synchronous_runs_for_the_analysis_stages(pair, provider):
    """The plain consultation, the Targeted / Off-target dialogues and the simulator audit, in batches too."""
    import audit_simulator
    import eval_LJP_behaviour
    import eval_plain

    sync, batch = pair
    files = [
        ("Plain_gen", "plain_underspecified.jsonl"),
        ("eval_results", "plain_types_underspecified.jsonl"),
        ("Behaviour_gen", "dialogues_targeted.jsonl"),
        ("eval_results", "LJP_off_target.jsonl"),
        ("eval_results", "simulator_audit_dcg.jsonl"),
        ("eval_results", "simulator_audit_interaction.jsonl"),
    ]
    for h, extra in ((sync, ()), (batch, ("--batch", "--batch-poll", "1"))):
        assert h.run("LexAwN") == 0 and h.run("DCG") == 0
        for stage in (eval_plain.STAGE, eval_LJP_behaviour.STAGE, audit_simulator.STAGE):
            assert h.run_stage(stage, *extra) == 0
    for top, name in files:
        assert contents(batch, top, name) == contents(sync, top, name), name


def test_batch_after_batch_files_says_the_files_wait_for_vllm_rather_than_waiting_for_ever(
    pair, provider, capsys
):
    """Files written for `vllm run-batch` are answered only by their output files: --batch without --batch-files
    stops at once, naming the file, the missing output and the option, instead of polling for ever."""
    _, batch = pair
    folder = batch.root / "vllm"
    assert batch.run("gold", "--batch-files", str(folder)) == 0
    capsys.readouterr()
    assert batch.run("gold", "--batch", "--batch-poll", "0.01") == 2
    err = capsys.readouterr().err
    assert "written for vllm run-batch, and its output" in err and f"--batch-files {folder}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_roles_on_one_url_with_different_models_get_a_batch_each(pair, provider):
    """OpenAI's batch API takes one model per input file ("each input file can only include requests to a single
    model"; the scripted provider fails a batch that mixes them, as OpenAI's validation does): when a cycle asks
    the evaluated model for some cases and the judge for others at the same base URL, each gets its own batch."""
    _, batch = pair
    provider.batch_expire = (
        True  # half of each batch unanswered: the cases fall out of step, roles mix in cycles
    )
    assert batch.run("gold", "--batch", "--batch-poll", "0.05", "--retries", "5") == 0
    models = [{line["body"]["model"] for line in b["_lines"]} for b in provider.batches.values()]
    assert all(len(m) == 1 for m in models)
    assert {m for ms in models for m in ms} == {"eval-model", ROLE["judge"].default_model}
    assert all(b["status"] == "expired" for b in provider.batches.values())


# the ledger's own fields, by names nothing else in running/ reads by string ("case", "step", "role" and the like
# are a journal's and a batch line's fields too)
LEDGER_KEYS = {
    "phase", "requests", "batch_id", "file_id", "pool", "adopted", "token_field", "batches", "failures", "reasons",
    "cycles",
}  # fmt: skip


def ledger_keys_read(path) -> list[str]:
    """Lines of a module that read or write a ledger field by its name: `x["phase"]`, `x.get("batch_id")`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.name}:{line} {key}" for line, key in keys_read(tree, LEDGER_KEYS)]


def test_the_ledger_is_read_and_written_only_by_its_module(tmp_path):
    """The ledger's entries are dataclasses (running/batch/ledger.py): no other module of running/ reads or writes
    one by string key. Broken once: a module reading a batch's phase by its name."""
    from tests.helpers.paths import ROOT

    modules = [p for p in (ROOT / "lexpilot/running").rglob("*.py") if p.name != "ledger.py"]
    assert [line for p in modules for line in ledger_keys_read(p)] == []
    broken = tmp_path / "collect.py"
    broken.write_text(
        (ROOT / "lexpilot/running/batch/collect.py").read_text(encoding="utf-8")
        + '\n\ndef old(batch):\n    return batch["phase"]\n',
        encoding="utf-8",
    )
    assert [line.split(" ")[1] for line in ledger_keys_read(broken)] == ["phase"]


def test_counts_in_messages_and_titles_agree_with_their_nouns(tmp_path, provider, monkeypatch, capsys):
    """No "1 more calls", "1 cycles" or "(1 runs …)": the counts agree with their nouns on a batch run of one case
    of the gold stage (a prediction, then its extraction: two cycles) and its report."""
    from tests.helpers.stages import Harness

    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "one.json", sample_cases()[:1]))
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    said = capsys.readouterr()
    assert "cycle 1: 1 request in 1 batch; 1 case pending, at most 2 more calls in the longest" in said.err
    assert "cycle 2: 1 request in 1 batch; 1 case pending, at most 1 more call in the longest" in said.err
    assert "2 cycles in this run" in said.out
    assert show_results.main(["--output-root", str(h.root), "--usage"]) == 0
    assert "Spent so far: every run and model shown (1 run, saved records)" in capsys.readouterr().out
