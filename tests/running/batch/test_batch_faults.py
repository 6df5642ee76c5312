"""Batch mode under faults: paid work is counted per request — what the provider processed, by
kind and by what the request asks — and must equal what a clean synchronous run processes."""

import json
from collections import Counter

import pytest

from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

CASES = sample_cases()[:8]


@pytest.fixture
def pair(tmp_path, provider, monkeypatch):
    dataset = write_dataset(tmp_path / "eight.json", CASES)
    return (
        Harness(tmp_path / "sync", provider, monkeypatch, dataset),
        Harness(tmp_path / "batch", provider, monkeypatch, dataset),
    )


def synchronous(provider, h, *stages) -> Counter:
    """What the provider processes for a clean synchronous run of these stages."""
    provider.processed.clear()
    for stage in stages:
        assert h.run(stage) == 0
    processed = Counter(provider.processed)
    provider.processed.clear()
    return processed


@pytest.mark.parametrize("stage", ["LexAwN", "DCG"])
def test_a_role_left_synchronous_is_never_paid_twice(pair, provider, stage):
    """With --batch-roles judge, the evaluated model and the User Model are asked directly within the
    cycles; each reply bought so is kept and never asked again (8 cases: 28 eval and 12 user calls for LexAwN)."""
    sync, batch = pair
    expected = synchronous(provider, sync, stage)
    assert batch.run(stage, "--batch-roles", "judge", "--batch-poll", "1") == 0
    assert provider.processed == expected
    kinds = Counter()
    for (kind, _), n in expected.items():
        kinds[kind] += n
    if stage == "LexAwN":  # by hand: 2 a1 per case, then per interaction round one eval and one user call
        assert sum(n for k, n in kinds.items() if k in ("lexawn", "user")) > 16


def ledger_of(h):
    return next((h.root / "runs").glob("*/*/batches.json"))


def test_a_lost_ledger_is_rebuilt_from_the_providers_list_and_nothing_is_submitted_twice(
    pair, provider, capsys
):
    """After --batch-detach the ledger is deleted: --batch-status still shows the batch (the provider
    lists it, tagged with run, model and stage), and the rerun re-attaches to it instead of submitting again."""
    sync, batch = pair
    expected = synchronous(provider, sync, "gold")
    provider.batch_delay = 60
    assert batch.run("gold", "--batch-detach") == 0
    submitted = Counter(provider.submitted)
    ledger_of(batch).unlink()
    capsys.readouterr()
    assert batch.run("gold", "--batch-status") == 0
    out = capsys.readouterr().out
    assert "batch-1, status in_progress: listed by the provider for this run" in out and "no batch" not in out
    assert batch.run("gold", "--batch-detach") == 0
    assert (
        "re-attached batch batch-1 from the provider's list (8 requests of this run)"
        in capsys.readouterr().err
    )
    assert provider.submitted == submitted  # nothing submitted again
    for b in provider.batches.values():
        b["_ready"] = 0
    provider.batch_delay = 0
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    assert provider.processed == expected and max(provider.submitted.values()) == 1


def test_a_stale_ledger_re_attaches_the_batches_it_does_not_know(pair, provider, capsys):
    sync, batch = pair
    expected = synchronous(provider, sync, "gold")
    provider.batch_delay = 60
    assert batch.run("gold", "--batch-detach") == 0
    stale = ledger_of(batch).read_bytes()  # a copy from before the second batch
    provider.batches["batch-1"]["_ready"] = 0
    assert batch.run("gold", "--batch-detach") == 0  # collects batch 1, submits batch 2
    assert "batch-2" in provider.batches
    ledger_of(batch).write_bytes(stale)
    provider.batch_delay = 0
    for b in provider.batches.values():
        b["_ready"] = 0
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    assert "re-attached batch batch-2" in capsys.readouterr().err
    assert provider.processed == expected and max(provider.submitted.values()) == 1


def test_without_the_ledger_and_without_the_providers_list_nothing_is_submitted(pair, provider, capsys):
    _, batch = pair
    provider.batch_errors = [("GET", "batches", 503)] * 20
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 2
    err = capsys.readouterr().err
    assert "listing batches: HTTP 503 after 4 attempts" in err and "Traceback" not in err
    assert not provider.submitted and not provider.processed


def test_a_create_whose_reply_was_lost_is_found_not_repeated(pair, provider):
    """The batch was created but the reply never arrived: the retry finds it by its input file."""
    sync, batch = pair
    expected = synchronous(provider, sync, "gold")
    provider.batch_lost_create = True
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    assert provider.processed == expected and max(provider.submitted.values()) == 1


@pytest.mark.parametrize("lost", ["batch", "output file"])
def test_a_batch_the_provider_lost_goes_back_to_pending(pair, provider, capsys, lost):
    """A 404 for the batch or its output file: one line, and its requests go into a new batch."""
    sync, batch = pair
    expected = synchronous(provider, sync, "gold")
    provider.batch_delay = 60
    assert batch.run("gold", "--batch-detach") == 0
    if lost == "batch":
        provider.batch_forget = {"batch-1"}
        provider.processed.clear()  # the lost batch was never answered
    else:
        provider.batch_delay = 0
        provider.batches["batch-1"]["_ready"] = 0
        provider.batch_output = lambda lines: lines
        real = provider.batch_api

        def without_output(method, path, headers, raw):
            status, h, payload = real(method, path, headers, raw)
            if path.endswith("/batches/batch-1") and "output_file_id" in provider.batches["batch-1"]:
                provider.files.pop(provider.batches["batch-1"]["output_file_id"], None)
            return status, h, payload

        provider.batch_api = without_output
    provider.batch_delay = 0
    capsys.readouterr()
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    err = capsys.readouterr().err
    assert (
        "its 8 requests are asked again in the next cycle"
        if lost == "batch"
        else "cannot be downloaded (HTTP 404): the requests it answered are asked again"
    ) in err
    assert "Traceback" not in err
    assert len(batch.records("eval_results", "LJP_gold.jsonl")) == 8
    if lost == "batch":
        assert provider.processed == expected


def mangled(lines: list[str]) -> list[str]:
    """A custom id that is a list, an object, null; a bare string; a response that is a string, a body
    that is a string; a custom id answered twice with different replies."""
    first, second, third, fourth = (json.loads(x) for x in lines[:4])
    bad = [
        json.dumps({**first, "custom_id": ["x"]}),
        json.dumps({**first, "custom_id": {"a": 1}}),
        json.dumps({**first, "custom_id": None}),
        json.dumps("oops"),
        json.dumps({**second, "response": "oops"}),
        json.dumps({**third, "response": {**third["response"], "body": "oops"}}),
    ]
    twice = json.dumps(
        {**fourth, "response": {**fourth["response"], "body": {**fourth["response"]["body"], "id": "other"}}}
    )
    return bad + [lines[3], twice] + lines[4:]


def test_malformed_output_lines_are_counted_reported_and_asked_again(pair, provider, capsys):
    sync, batch = pair
    assert sync.run("gold") == 0
    state = {"first": True}

    def once(lines):
        if state["first"]:
            state["first"] = False
            return mangled(lines)
        return lines

    provider.batch_output = once
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    err = capsys.readouterr().err
    assert "4 output line(s) are not batch replies" in err and err.count("are not batch replies") == 1
    assert "1 custom id(s) answered twice with different replies" in err
    assert "malformed reply" in err and "Traceback" not in err
    from tests.helpers.batches import contents

    assert contents(batch, "eval_results", "LJP_gold.jsonl") == contents(
        sync, "eval_results", "LJP_gold.jsonl"
    )


def test_malformed_lines_in_a_vllm_output_file_are_no_traceback(pair, provider, tmp_path, capsys):
    _, batch = pair
    folder = tmp_path / "vllm"
    assert batch.run("gold", "--batch-files", str(folder)) == 0
    path = next(folder.glob("*.jsonl"))
    lines = []
    for x in path.read_text(encoding="utf-8").splitlines():
        x = json.loads(x)
        status, _, payload = provider._answer(x["body"])
        lines.append(
            json.dumps(
                {
                    "custom_id": x["custom_id"],
                    "response": {"status_code": status, "body": json.loads(payload)},
                }
            )
        )
    path.with_name(path.stem + ".out.jsonl").write_text("\n".join(mangled(lines)) + "\n", encoding="utf-8")
    assert batch.run("gold", "--batch-files", str(folder)) == 0
    err = capsys.readouterr().err
    assert "not batch replies" in err and "Traceback" not in err


def test_transient_failures_of_the_batch_endpoints_are_retried(pair, provider, capsys):
    """One HTTP 500, 429 or connection reset on /files or /batches is retried, not a traceback."""
    sync, batch = pair
    expected = synchronous(provider, sync, "gold")
    provider.batch_errors = [
        ("POST", "files", 500),
        ("POST", "batches", 429),
        ("GET", "batches", 0),
        ("GET", "files", 502),
        ("GET", "batches", 500),
    ]
    assert batch.run("gold", "--batch", "--batch-poll", "1") == 0
    err = capsys.readouterr().err
    assert "uploading a batch file: HTTP 500; asked again" in err and "Traceback" not in err
    assert (
        provider.processed == expected and max(provider.submitted.values()) == 1 and not provider.batch_errors
    )


@pytest.mark.parametrize("final", ["failed", "cancelled", "expired"])
def test_batches_that_always_fail_end_the_cases_with_the_providers_reason(pair, provider, capsys, final):
    """Bounded: a request without a reply in --retries + 1 batches fails its case."""
    _, batch = pair
    provider.batch_final = final
    assert batch.run("gold", "--batch", "--batch-poll", "1", "--retries", "2") == 1
    err = capsys.readouterr().err
    assert len(provider.batches) == 3  # every request in 3 batches, then its case fails
    assert err.count("failed: eval: no reply in batch " + final) == 8 and f"(batch {final})" in err
    assert "no accepted reply in 3 batches" in err


@pytest.mark.parametrize(
    "content", ["{}", "[]", '{"batches": [1]}', '{"batches": [], "failures": []}', "nonsense"]
)
def test_a_malformed_ledger_is_one_line(pair, provider, capsys, content):
    """A ledger (batches.json) that is not one is one line naming it, for --batch-status and --batch alike, and no
    batch is submitted."""
    from lexpilot.storage.checkpoints import run_folder

    _, batch = pair
    assert batch.run("gold", "--batch-status") == 0
    assert not batch.root.exists()  # --batch-status only reads
    ledger = run_folder(batch.root, "r1", "eval-model") / "batches.json"
    ledger.parent.mkdir(parents=True)
    ledger.write_text(content, encoding="utf-8")
    for extra in (("--batch-status",), ("--batch", "--batch-poll", "1")):
        capsys.readouterr()
        assert batch.run("gold", *extra) == 2
        err = capsys.readouterr().err
        assert str(ledger) in err and "re-attaches" in err and err.count("\n") == 1
    assert not provider.submitted


def test_batch_poll_has_a_floor(pair, capsys):
    _, batch = pair
    with pytest.raises(SystemExit):
        batch.run("gold", "--batch", "--batch-poll", "0")
    assert "--batch-poll" in capsys.readouterr().err


def test_cycle_lines_count_over_the_run_and_the_depth_goes_down(pair, provider, capsys):
    """Cycle numbers go on over reruns; the remaining depth never stays put; the budget says spent,
    reserved and left."""
    _, batch = pair
    provider.batch_delay = 60
    assert batch.run("LexAwN", "--batch-detach") == 0
    provider.batch_delay = 0
    for b in provider.batches.values():
        b["_ready"] = 0
    capsys.readouterr()
    assert batch.run("LexAwN", "--batch", "--batch-poll", "1") == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if "] cycle " in x]
    assert lines[0].split("] cycle ")[1].startswith("2:")  # the first invocation made cycle 1
    depths = [int(x.split("at most ")[1].split()[0]) for x in lines]
    assert depths == sorted(depths, reverse=True) and depths[-1] < depths[0]


def test_the_budget_line_in_batch_mode_says_spent_reserved_and_left(pair, provider, tmp_path, capsys):
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
        batch.run("gold", "--batch", "--batch-poll", "1", "--prices", str(prices), "--max-cost", "100") == 0
    )
    line = next(x for x in capsys.readouterr().err.splitlines() if "] cycle 1:" in x)
    spent, reserved, left = (
        float(line.split(word)[0].split()[-1].rstrip(",")) for word in (" spent", " reserved", " left")
    )
    assert spent == 0 and reserved > 0 and left == pytest.approx(100 - reserved, abs=1e-4)


STORM_STAGES = ["LexAwN", "DCG", "direct", "gold", "interaction"]


def analysis_stages():
    import audit_simulator
    import eval_LJP_behaviour
    import eval_plain

    return [eval_plain.STAGE, eval_LJP_behaviour.STAGE, audit_simulator.STAGE]


def run_all(h, *extra) -> tuple[list[int], int]:
    """Every stage of a run, each rerun after a kill (exit 130) until it ends: the exit codes, and the kills."""
    codes, kills = [], 0
    for stage in STORM_STAGES + analysis_stages():
        for _ in range(60):
            code = h.run(stage, *extra) if isinstance(stage, str) else h.run_stage(stage, *extra)
            if code != 130:
                break
            kills += 1
        codes.append(code)
    return codes, kills


@pytest.mark.slow
@pytest.mark.parametrize("roles", [(), ("--batch-roles", "judge")])
def test_every_stage_in_batches_under_a_fault_storm_and_kills_pays_what_a_synchronous_run_pays(
    pair, provider, monkeypatch, roles
):
    """The issue's closing test: transient errors on every batch endpoint, a lost create reply, failed chat calls
    for the roles left synchronous, kills after a batch is created and while its replies are imported; the
    provider processes, request by request, exactly what a clean synchronous run of every stage processes."""
    import random

    from lexpilot.running.batch import cycles as batching
    from lexpilot.storage.checkpoints import CallJournal

    sync, batch = pair
    expected = synchronous(provider, sync, *STORM_STAGES)
    for stage in analysis_stages():
        assert sync.run_stage(stage) == 0
    expected += provider.processed
    provider.processed.clear()
    rng = random.Random(7)
    provider.batch_errors = [
        (rng.choice(["GET", "POST"]), rng.choice(["files", "batches"]), rng.choice([0, 429, 500, 503]))
        for _ in range(12)
    ]
    provider.batch_lost_create = True
    chat_calls = Counter()

    def flaky(kind, prompt, body):  # one chat call in five fails once: asked again, never paid twice
        chat_calls[kind] += 1
        return {"status": 502} if chat_calls[kind] % 5 == 0 else None

    provider.script = flaky
    real_submit, real_keep = batching.submit, CallJournal.keep_key

    def submit_then_killed(run, client, role, requests, max_tokens):
        real_submit(run, client, role, requests, max_tokens)
        if rng.random() < 0.3:
            raise KeyboardInterrupt  # killed just after the batch was created

    def keep_then_killed(self, *args, **kwargs):
        real_keep(self, *args, **kwargs)
        if kwargs.get("custom_id") and rng.random() < 0.05:
            raise KeyboardInterrupt  # killed while importing a batch's replies

    monkeypatch.setattr(batching, "submit", submit_then_killed)
    monkeypatch.setattr(CallJournal, "keep_key", keep_then_killed)
    codes, kills = run_all(batch, "--batch", "--batch-poll", "0.1", "--retries", "6", *roles)
    assert codes == [0] * 8 and kills >= 3 and len(provider.batches) > 8 and not provider.batch_errors
    assert provider.processed == expected and max(provider.submitted.values()) == 1  # no batch bought twice


def test_a_reasoning_model_in_batch_mode_switches_its_field_and_pays_each_request_once(pair, provider):
    """In batch mode too, the refusal lines of an OpenAI reasoning model come back in the output
    file; the role switches to max_completion_tokens and asks again, as a synchronous call does."""
    from tests.helpers.replies import MAX_TOKENS_REFUSED

    sync, batch = pair
    expected = synchronous(provider, sync, "gold")
    provider.script = lambda kind, prompt, body: MAX_TOKENS_REFUSED if "max_tokens" in body else None
    assert batch.run("gold", "--batch", "--batch-poll", "1", "--retries", "0") == 0
    assert provider.processed == expected
    manifest = json.loads(next((batch.root / "runs").glob("*/*/manifest.json")).read_text(encoding="utf-8"))
    assert manifest["token_fields"]["eval"] == manifest["token_fields"]["judge"] == "max_completion_tokens"


@pytest.mark.parametrize("content_type", ["application/json", "text/html"])
def test_a_batch_endpoint_answering_a_web_page_stops_in_one_line(pair, provider, capsys, content_type):
    """A base URL pointing at a web page: a 200 whose body is not the batch API's, on /files or /batches."""
    _, batch = pair
    real = provider.batch_api

    def page(method, path, headers, raw):
        if method == "POST":
            return 200, {"Content-Type": content_type}, b"<html>Welcome</html>"
        return real(method, path, headers, raw)

    provider.batch_api = page
    assert batch.run("gold", "--batch", "--batch-poll", "1") in (1, 2)
    err = capsys.readouterr().err
    assert "not the batch API's; check the role's base URL" in err and "Traceback" not in err


def test_a_role_left_synchronous_is_marked_in_flight_while_its_request_is_out(
    tmp_path, provider, monkeypatch
):
    """A call a killed process had sent is counted "paid, never answered" by the next run; in batch mode the roles
    left synchronous are such calls too. Seen from the provider, while each of their requests is being answered."""
    dataset = write_dataset(tmp_path / "one.json", CASES[:1])
    batch = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    open_marks = []

    def look(kind, prompt, body):  # the journal's start marks without an end, at the moment of the request
        if kind == "lexawn":
            journal = next((batch.root / "runs").glob("*/*/calls_journal.jsonl"))
            marks = Counter(
                json.loads(line).get("t") for line in journal.read_text(encoding="utf-8").splitlines()
            )
            open_marks.append(marks["start"] - marks["end"])
        return None

    provider.script = look
    assert batch.run("LexAwN", "--batch-roles", "judge", "--batch-poll", "1") == 0
    assert open_marks and all(n >= 1 for n in open_marks), open_marks
