"""A batch belongs to its own run: "Give each run an incarnation id, random and made when its
manifest is first written. Put it in the batch metadata and in every custom id. Attach only batches whose custom
ids carry this run's id; a foreign batch is named in one line and left alone." And after a lost ledger, at a
provider that drops `metadata` from `batches.list`: "Say so before resubmitting ... Resubmit only with an
explicit option"."""

import json
import shutil
from collections import Counter

import pytest

from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import SECRET, STAGES, Harness

CASES = sample_cases()[:8]


@pytest.fixture
def dataset(tmp_path):
    return write_dataset(tmp_path / "eight.json", CASES)


def clean_run(tmp_path, provider, monkeypatch, dataset) -> Counter:
    """What the provider processes for a clean synchronous run of the gold stage (8 cases)."""
    sync = Harness(tmp_path / "sync", provider, monkeypatch, dataset)
    assert sync.run("gold") == 0
    processed = Counter(provider.processed)
    provider.processed.clear()
    return processed


def manifest(h) -> dict:
    return json.loads(next((h.root / "runs").glob("*/*/manifest.json")).read_text(encoding="utf-8"))


def ledger(h) -> dict:
    return json.loads(next((h.root / "runs").glob("*/*/batches.json")).read_text(encoding="utf-8"))


def test_every_custom_id_and_the_metadata_carry_the_runs_incarnation(
    tmp_path, provider, monkeypatch, dataset
):
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    incarnation = manifest(h)["incarnation"]
    assert len(incarnation) == 12
    batch = provider.batches["batch-1"]
    assert batch["metadata"]["lexpilot_incarnation"] == incarnation
    assert (
        all(line["custom_id"].startswith(f"{incarnation}-") for line in batch["_lines"]) and batch["_lines"]
    )
    assert h.run("gold", "--batch-detach") == 0
    assert manifest(h)["incarnation"] == incarnation  # made once, when the manifest is first written


def test_a_new_run_under_a_moved_roots_path_leaves_the_old_runs_batch_alone(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """Detach a run, move its root away, start a new run with the same root path, run id, model and stage: the
    old batch is named in one line and left alone; the new run submits and collects its own."""
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    shutil.move(h.root, tmp_path / "moved")
    old = set(provider.batches)
    provider.batch_delay = 0
    for b in provider.batches.values():
        b["_ready"] = 0  # the old batch is finished and its replies are waiting: still not the new run's
    provider.processed.clear()
    capsys.readouterr()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    err = capsys.readouterr().err
    assert (
        err.count(
            "batch batch-1: tagged with this run id, model and stage by another run (another "
            "incarnation); left alone (not this run's)"
        )
        == 1
    )
    assert "re-attached" not in err
    ids = {b.get("batch_id") for b in ledger(h)["batches"]}
    assert not ids & old
    # the new run's own requests, each processed once (the old batch was never collected: the provider answers it
    # only when it is retrieved, which nobody does)
    assert provider.processed == expected
    assert all(n == 1 for n in provider.submitted.values())


def test_a_listing_that_claims_another_runs_batch_for_this_run_is_not_believed(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """The provider lists run A's batch with run B's metadata: B reads its custom ids, which carry A's
    incarnation, and leaves it alone."""
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    a = Harness(tmp_path / "a", provider, monkeypatch, dataset)
    b = Harness(tmp_path / "b", provider, monkeypatch, dataset)
    provider.batch_delay = 60
    assert a.run("gold", "--batch-detach") == 0  # batch-1, A's
    assert b.run("gold", "--batch-detach") == 0  # batch-2, B's
    b_metadata = provider.batches["batch-2"]["metadata"]
    provider.batch_listed = lambda batch: b_metadata  # every batch listed as B's
    provider.batch_delay = 0
    for batch in provider.batches.values():
        batch["_ready"] = 0
    provider.processed.clear()
    ledger_file = next((b.root / "runs").glob("*/*/batches.json"))
    ledger_file.unlink()  # B must look at the provider's list to find its batch again
    capsys.readouterr()
    assert b.run("gold", "--batch", "--batch-poll", "1") == 0
    err = capsys.readouterr().err
    assert (
        "batch batch-1: its metadata names this run, but its requests carry another run's ids; left alone "
        "(not this run's)"
    ) in err
    assert "re-attached batch batch-2 from the provider's list (8 requests of this run)" in err
    assert "batch-1" not in {x.get("batch_id") for x in ledger(b)["batches"]}
    assert provider.processed == expected  # B's own 8 + 8 requests, once each; A's batch never taken
    assert all(n == 1 for n in provider.submitted.values())


def test_a_lost_ledger_at_a_provider_without_metadata_is_said_and_resubmitted_only_when_asked(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_listed = lambda batch: None  # the provider drops metadata from its list
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    next((h.root / "runs").glob("*/*/batches.json")).unlink()
    submitted = Counter(provider.submitted)
    provider.processed.clear()
    capsys.readouterr()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "batches.json: the ledger is gone and the provider does not return batch metadata; 8 "
        "requests may already be paid. Restore the ledger, or rerun with --batch-resubmit to "
        "submit them again"
    )
    # nothing asked again without the option
    assert provider.submitted == submitted and not provider.processed
    provider.batch_delay = 0
    assert h.run("gold", "--batch", "--batch-resubmit", "--batch-poll", "1") == 0
    # the 8 again, then the second step
    assert sum(provider.submitted.values()) == sum(submitted.values()) + 8 + 8
    # every request of the stage processed once more: the lost batch's 8 are paid twice, as the option says
    assert provider.processed == expected


def test_a_first_batch_run_at_a_provider_without_metadata_is_not_stopped(
    tmp_path, provider, monkeypatch, dataset
):
    """No ledger was ever written (no batch submitted yet): nothing can be lost, so nothing is said."""
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    other = Harness(tmp_path / "other", provider, monkeypatch, dataset)
    provider.batch_listed = lambda batch: None
    assert other.run("gold", "--batch", "--batch-poll", "1") == 0  # the provider now lists batches
    provider.processed.clear()
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    assert provider.processed == expected


# ----------------------------------------------------------------------------- keys


def echo_in_reply(provider):
    provider.script = lambda kind, prompt, body: (
        {"content": f"已收到。{SECRET}"} if kind == "force_judge" else None
    )


def echo_in_a_400_line(provider):
    provider.script = lambda kind, prompt, body: (
        {"status": 400, "error": f"invalid key {SECRET} for this model"} if kind == "force_judge" else None
    )


def echo_in_the_error_file(provider):
    provider.batch_fail = lambda custom_id: f"auth failed for {SECRET}"


def echo_in_the_batch_errors(provider):
    provider.batch_final, provider.batch_final_message = (
        "failed",
        f"key {SECRET} is not allowed to use batches",
    )


@pytest.mark.parametrize(
    "echo", [echo_in_reply, echo_in_a_400_line, echo_in_the_error_file, echo_in_the_batch_errors]
)
def test_a_key_echoed_in_a_batch_never_reaches_a_file_or_a_message(
    tmp_path, provider, monkeypatch, dataset, capsys, echo
):
    """ "Synchronous replies are redacted; batch lines must be too, in every file and message": an error-file line,
    a batch's errors.data[].message, a 400 line and a reply text that hold the key."""
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    echo(provider)
    h.run("gold", "--batch", "--batch-poll", "1", "--retries", "0", "--keep-going")
    said = capsys.readouterr()
    assert SECRET not in said.out + said.err
    assert "[redacted key]" in said.out + said.err or echo is echo_in_reply
    leaked = [p for p in h.root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaked
    if echo is echo_in_reply:  # the reply is kept, redacted, as a synchronous reply is
        assert all(
            "[redacted key]" in r["response"] for r in h.records("Force_judge_gen", "a1_force_judge.jsonl")
        )


# ----------------------------------------------------------------------------- --batch-status


def test_batch_status_reads_while_another_process_writes_the_run(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """ "--batch-status only reads, but the lock refuses it while another process holds the run"."""
    from lexpilot.storage.lock import RunLock

    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    lock = next((h.root / "runs").glob("*/*/manifest.json")).with_name(".lock")
    with RunLock(lock):  # another writer holds the run
        capsys.readouterr()
        assert h.run("gold", "--batch-status") == 0
        assert "batch-1, 8 requests, phase created, status in_progress" in capsys.readouterr().out
        assert h.run("gold", "--batch", "--batch-poll", "1") == 2  # a writer is still refused
        assert "being written by" in capsys.readouterr().err


def test_batch_status_after_a_lost_ledger_shows_a_completed_batch_not_collected(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    next((h.root / "runs").glob("*/*/batches.json")).unlink()
    provider.batches["batch-1"]["_ready"] = 0
    # the provider finishes the batch (it is retrieved once by someone else, as a dashboard would)
    provider.batch_api("GET", "/v1/batches/batch-1", {}, b"")
    assert provider.batches["batch-1"]["status"] == "completed"
    assert h.run("gold", "--batch-status") == 0
    out = capsys.readouterr().out
    assert "no batch in flight" not in out
    provider.batch_delay = 0
    assert (
        "batch-1, status completed: listed by the provider for this run, not in the ledger (the next run "
        "re-attaches to it and collects what the run's records do not hold yet)"
    ) in out
    provider.processed.clear()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    assert (
        "re-attached batch batch-1 from the provider's list (8 requests of this run)"
        in capsys.readouterr().err
    )
    assert max(provider.submitted.values()) == 1  # batch 1 collected, never asked again


# 168 characters: longer than any cut of a message
LONG_KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 5


@pytest.mark.parametrize("where", ["error file", "400 line", "batch errors", "usage"])
def test_a_long_key_is_redacted_before_a_message_is_cut(
    tmp_path, provider, monkeypatch, dataset, capsys, where
):
    """A message cut to its length before redaction kept part of a long key: redacted first, then cut."""
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    monkeypatch.setenv("OPENAI_API_KEY", LONG_KEY)
    echo = f"the provider says: {'x' * 200} {LONG_KEY} is refused"
    if where == "error file":
        provider.batch_fail = lambda custom_id: echo
    elif where == "400 line":
        provider.script = lambda kind, prompt, body: (
            {"status": 400, "error": echo} if kind == "force_judge" else None
        )
    elif where == "batch errors":
        provider.batch_final, provider.batch_final_message = "failed", echo
    else:
        provider.usage_as = {"prompt_tokens": echo, "completion_tokens": 1}
    h.run("gold", "--batch", "--batch-poll", "1", "--retries", "0", "--keep-going")
    said = capsys.readouterr()
    windows = {LONG_KEY[i : i + 16] for i in range(len(LONG_KEY) - 15)}
    texts = [said.out + said.err] + [
        p.read_bytes().decode("utf-8", "replace") for p in h.root.rglob("*") if p.is_file()
    ]
    assert not [w for w in windows for t in texts if w in t]


# ----------------------------------------------------------------------------- runs made before incarnations


def as_before_incarnations(h, provider) -> None:
    """Make the detached run one from before incarnations: its manifest without one, its batch's metadata without
    one, and its custom ids the 32 digits they were then."""
    path = next((h.root / "runs").glob("*/*/manifest.json"))
    saved = json.loads(path.read_text(encoding="utf-8"))
    incarnation = saved.pop("incarnation")
    path.write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
    for batch in provider.batches.values():
        del batch["metadata"]["lexpilot_incarnation"]
        text = provider.files[batch["input_file_id"]].decode("utf-8").replace(f'"{incarnation}-', '"')
        provider.files[batch["input_file_id"]] = text.encode("utf-8")
        batch["_lines"] = [json.loads(x) for x in text.splitlines() if x.strip()]
        assert all(len(x["custom_id"]) == 32 for x in batch["_lines"])


def old_run_then(h, provider, capsys, damage) -> str:
    """A run from before incarnations detached with a batch in flight, `damage` done, the batch finished, then the
    stage run again: what it said."""
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    as_before_incarnations(h, provider)
    damage()
    provider.batch_delay = 0
    provider.batches["batch-1"]["_ready"] = 0
    provider.processed.clear()
    capsys.readouterr()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    return capsys.readouterr().err


def test_a_run_from_before_incarnations_re_attaches_its_own_batch_after_a_lost_ledger(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """Its batch carries no incarnation and its custom ids are the old ones: still its own, never bought again."""
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    err = old_run_then(h, provider, capsys, lambda: next((h.root / "runs").glob("*/*/batches.json")).unlink())
    assert "re-attached batch batch-1 from the provider's list (8 requests of this run)" in err
    assert "left alone" not in err
    assert manifest(h)["incarnation_late"] is True
    assert provider.processed == expected  # batch 1's 8 collected, never asked again
    assert max(provider.submitted.values()) == 1


def test_a_new_run_leaves_a_moved_runs_batch_from_before_incarnations_alone(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """Only a run that began before incarnations owns batches without one: a run made since does not."""
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    err = old_run_then(h, provider, capsys, lambda: shutil.move(h.root, tmp_path / "moved"))
    assert "batch batch-1: tagged with this run id, model and stage by another run" in err
    assert "re-attached" not in err
    assert provider.processed == expected


def test_a_lost_ledger_is_not_said_for_a_stage_that_never_submitted(tmp_path, provider, monkeypatch, dataset):
    """The run submitted batches in the gold stage; the direct stage never did: its first batch run at a
    provider without metadata has nothing to lose."""
    sync = Harness(tmp_path / "sync", provider, monkeypatch, dataset)
    assert sync.run("direct") == 0
    expected_direct, provider.processed = Counter(provider.processed), Counter()
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_listed = lambda batch: None
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    assert manifest(h)["batches_submitted"] == {STAGES["gold"].name: 2}  # its last cycle that submitted
    next((h.root / "runs").glob("*/*/batches.json")).unlink()
    provider.processed.clear()
    assert h.run("direct", "--batch", "--batch-poll", "1") == 0
    assert provider.processed == expected_direct


def test_a_lost_ledger_with_nothing_pending_is_not_said(tmp_path, provider, monkeypatch, dataset, capsys):
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_listed = lambda batch: None
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0  # every case saved
    next((h.root / "runs").glob("*/*/batches.json")).unlink()
    provider.processed.clear()
    capsys.readouterr()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    assert "the ledger is gone" not in capsys.readouterr().err
    assert not provider.processed


def test_batch_status_says_it_cannot_tell_after_a_lost_ledger_without_metadata(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_listed = lambda batch: None
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    next((h.root / "runs").glob("*/*/batches.json")).unlink()
    capsys.readouterr()
    assert h.run("gold", "--batch-status") == 0
    out = capsys.readouterr().out
    assert "no batch in flight" not in out
    assert (
        "cannot tell what is in flight: the ledger is gone and the provider lists 1 batch without metadata"
    ) in out


def test_a_batch_the_ledger_knows_is_not_called_foreign(tmp_path, provider, monkeypatch, dataset, capsys):
    """A listing that tags the run's own batch with another incarnation: the ledger knows it, so nothing is said
    and it is collected as the run's."""
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_delay = 60
    assert h.run("gold", "--batch-detach") == 0
    provider.batch_listed = lambda batch: {**batch["metadata"], "lexpilot_incarnation": "another"}
    provider.batch_delay = 0
    provider.batches["batch-1"]["_ready"] = 0
    provider.processed.clear()
    capsys.readouterr()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    assert "left alone" not in capsys.readouterr().err
    assert provider.processed == expected


# ----------------------------------------------------------------------------- lost ledgers and manifests


def finish(provider) -> None:
    for batch in provider.batches.values():
        batch["_ready"] = 0


def ledger_file(h):
    return next((h.root / "runs").glob("*/*/batches.json"))


def test_a_lost_ledger_after_a_re_ask_adopts_the_re_ask_not_the_answered_batch(tmp_path, monkeypatch, capsys):
    """An invalid judge output asked again: the re-ask asks what the first ask asked. After a lost ledger, the
    batch of the first ask (collected already: its replies are in the journal) must not take the re-ask's place."""
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.replies import FirstAnswerInvalid

    four = write_dataset(tmp_path / "four.json", CASES[:4])
    with ScriptedProvider(FirstAnswerInvalid()) as sync:
        assert Harness(tmp_path / "sync", sync, monkeypatch, four).run("gold") == 0
        expected = Counter(sync.processed)
    with ScriptedProvider(FirstAnswerInvalid()) as provider:
        h = Harness(tmp_path / "batch", provider, monkeypatch, four)
        provider.batch_delay = 3600
        # the predictions; their extractions (prose); the extractions asked again, in flight
        for _ in range(3):
            assert h.run("gold", "--batch-detach") == 0
            finish(provider)
        ledger_file(h).unlink()
        provider.batch_delay = 0
        capsys.readouterr()
        assert h.run("gold", "--batch", "--batch-poll", "1") == 0
        err = capsys.readouterr().err
        assert "re-attached batch batch-3 from the provider's list (4 requests of this run)" in err
        assert "batch batch-3 (judge): completed" in err  # named by the role its requests ask
        assert "re-attached batch batch-2" not in err
        assert provider.processed == expected  # request by request: nothing bought twice


def test_a_ledger_another_stage_wrote_after_the_loss_is_still_a_lost_ledger(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """Every stage of a run shares batches.json: the gold stage's ledger lost, the direct stage writes a new one;
    gold's batches are still not in it."""
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_listed = lambda batch: None
    provider.batch_delay = 3600
    assert h.run("gold", "--batch-detach") == 0
    ledger_file(h).unlink()
    provider.batch_delay = 0
    assert h.run("direct", "--batch", "--batch-poll", "1") == 0  # a new batches.json
    submitted = Counter(provider.submitted)
    capsys.readouterr()
    assert h.run("gold", "--batch-status") == 0
    assert (
        "cannot tell what is in flight: the ledger is gone and the provider lists" in capsys.readouterr().out
    )
    assert h.run("gold", "--batch", "--batch-poll", "1") == 2
    assert (
        "the ledger is gone and the provider does not return batch metadata; 8 requests may already be paid"
        in capsys.readouterr().err
    )
    assert provider.submitted == submitted


def test_a_stale_copy_of_the_ledger_put_back_is_said_before_any_submission(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_listed = lambda batch: None
    provider.batch_delay = 3600
    assert h.run("gold", "--batch-detach") == 0  # the predictions
    backup = ledger_file(h).read_bytes()
    finish(provider)
    assert h.run("gold", "--batch-detach") == 0  # collected; the extractions submitted
    ledger_file(h).write_bytes(backup)  # an old copy put back
    finish(provider)
    submitted = Counter(provider.submitted)
    capsys.readouterr()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 2
    assert (
        "the ledger is older than the stage's last batches and the provider does not return batch metadata; 8 "
        "requests may already be paid"
    ) in capsys.readouterr().err
    assert provider.submitted == submitted


def test_a_lost_ledger_at_a_provider_that_lists_none_of_the_runs_batches_is_said(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """Another API key or project lists none of the run's batches: what was submitted cannot be seen."""
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_delay = 3600
    assert h.run("gold", "--batch-detach") == 0
    ledger_file(h).unlink()
    provider.batch_listed = lambda batch: {"lexpilot_run": "someone else's"}  # none of this run's
    provider.batch_delay = 0
    submitted = Counter(provider.submitted)
    capsys.readouterr()
    assert h.run("gold", "--batch-status") == 0
    assert (
        "cannot tell what is in flight: the ledger is gone and the provider lists no batch of this run"
        in capsys.readouterr().out
    )
    assert h.run("gold", "--batch", "--batch-poll", "1") == 2
    assert (
        "the ledger is gone and the provider lists no batch of this run, model and stage (another API key or "
        "project?); 8 requests may already be paid"
    ) in capsys.readouterr().err
    assert provider.submitted == submitted


@pytest.mark.parametrize("reply", ["not JSON", "HTML", "a stream's error event", "a stream event not JSON"])
def test_a_long_key_quoted_from_a_malformed_reply_is_redacted_before_it_is_cut(
    tmp_path, provider, monkeypatch, dataset, capsys, reply
):
    """A malformed reply's start was cut (to 40 or 120 characters) before redaction, so a
    key it held reached the message in part."""
    h = Harness(tmp_path / "run", provider, monkeypatch, dataset)
    monkeypatch.setenv("OPENAI_API_KEY", LONG_KEY)
    stream = reply.startswith("a stream")
    body = {
        "not JSON": f"Unauthorized {LONG_KEY}",
        "HTML": f"<html>key {LONG_KEY}</html>",
        "a stream's error event": "data: "
        + json.dumps({"error": {"message": "x" * 100 + " " + LONG_KEY}})
        + "\n\n",
        "a stream event not JSON": f"data: key {LONG_KEY} bad\n\n",
    }[reply]
    kind = "text/event-stream" if stream else "text/html" if reply == "HTML" else "application/json"
    provider.script = lambda k, p, b: (
        {"raw": body.encode(), "content_type": kind} if k == "force_judge" else None
    )
    h.run("gold", "--retries", "0", "--keep-going", *(["--stream"] if stream else []))
    said = capsys.readouterr()
    assert "malformed reply" in said.err and "[redacted key]" in said.err
    windows = {LONG_KEY[i : i + 12] for i in range(len(LONG_KEY) - 11)}
    texts = [said.out + said.err] + [
        p.read_bytes().decode("utf-8", "replace") for p in h.root.rglob("*") if p.is_file()
    ]
    assert not [w for w in windows for t in texts if w in t]


def test_a_run_whose_manifest_and_ledger_are_lost_re_attaches_its_batch(
    tmp_path, provider, monkeypatch, dataset, capsys
):
    """Manifest.json and batches.json deleted, the records there. The manifest is rebuilt from the
    records with a new incarnation; the run's batch, which carries the lost one, is still the run's own."""
    expected = clean_run(tmp_path, provider, monkeypatch, dataset)
    h = Harness(tmp_path / "batch", provider, monkeypatch, dataset)
    provider.batch_delay = 3600
    assert h.run("gold", "--batch-detach") == 0
    finish(provider)
    assert h.run("gold", "--batch-detach") == 0  # the predictions saved; the extractions in flight
    ledger_file(h).unlink()
    next((h.root / "runs").glob("*/*/manifest.json")).unlink()
    finish(provider)
    provider.batch_delay = 0
    provider.processed.clear()
    capsys.readouterr()
    assert h.run("gold", "--batch", "--batch-poll", "1") == 0
    err = capsys.readouterr().err
    assert "re-attached batch batch-2 from the provider's list (8 requests of this run)" in err
    assert "left alone" not in err
    assert max(provider.submitted.values()) == 1  # nothing submitted twice
    # what this run made the provider process: the extractions in flight, once each, and nothing else
    assert provider.processed == Counter({k: n for k, n in expected.items() if k[0] == "ljp_judge"})


def test_identical_requests_of_different_cases_are_each_credited_after_a_lost_ledger(
    tmp_path, provider, monkeypatch, capsys
):
    """ "After a lost ledger, identical requests of different cases
    (the same prompt bytes) are each credited to their own case, and none is paid twice". The LCA judge sees only a
    response, and the scripted model's responses repeat across cases: the judge batch holds identical requests."""
    four = write_dataset(tmp_path / "four.json", CASES[:4])
    clean = Harness(tmp_path / "sync", provider, monkeypatch, four)
    assert clean.run("LexAwN") == 0
    expected, provider.processed = Counter(provider.processed), Counter()
    h = Harness(tmp_path / "batch", provider, monkeypatch, four)
    provider.batch_delay = 3600
    judged = []
    while len(judged) == len(set(judged)):  # cycle by cycle, until a batch in flight holds identical requests
        assert h.run("LexAwN", "--batch-detach") == 0 and len(provider.batches) < 12
        last = list(provider.batches.values())[-1]
        judged = [line["body"]["messages"][0]["content"] for line in last["_lines"]]
        judged = judged if "你是一个严谨的文本分类器" in judged[0] else []
        if len(judged) == len(set(judged)):
            finish(provider)
    in_flight = last["id"]
    ledger_file(h).unlink()
    finish(provider)
    provider.batch_delay = 0
    capsys.readouterr()
    assert h.run("LexAwN", "--batch", "--batch-poll", "1") == 0
    assert (
        f"re-attached batch {in_flight} from the provider's list ({len(judged)} requests of this run)"
        in capsys.readouterr().err
    )
    assert provider.processed == expected  # request by request, identical ones included
    assert max(provider.submitted.values()) == 1
    labels = lambda run: sorted(
        (r["case_number"], json.dumps(r["judgments"], ensure_ascii=False))  # noqa: E731
        for r in run.records("eval_results", "LCA_results.jsonl")
    )
    assert labels(h) == labels(clean)  # each case its own label


def test_an_older_manifests_every_stage_submitted_survives_one_stage_noting_its_cycle(tmp_path):
    """`batches_submitted: true` (written before stages were named) stands for every stage; one stage noting its
    cycle must not drop the others' lost-ledger check."""
    from lexpilot.storage.manifest import read_manifest
    from lexpilot.storage.manifest_notes import note_batches_submitted, submitted_batches

    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"batches_submitted": True}), encoding="utf-8")
    note_batches_submitted(read_manifest(path), "LJP gold", 3)
    saved = read_manifest(path)
    assert submitted_batches(saved, "LJP gold") == 3 and submitted_batches(saved, "DCG") == 1
