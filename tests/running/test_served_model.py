"""The model that answered (models/served.py, docs/results.md): a role's first served id is accepted, an alias or a
dated snapshot included; a later reply served by another id stops that role's calls with one line naming the role,
the requested id, the ids served with their calls and --allow-served-model-change; the records and the manifest keep
both ids with their calls; the option completes the run, recorded in the manifest; a run resumed after its provider
changed what answers is stopped the same way. Sync, --stream and --batch alike, on the sample through the scripted
provider."""

import json

import pytest

import show_results
from lexpilot.benchmark.records import DCG, GOLD_PREDICTION, LJP_GOLD
from lexpilot.errors import STOPPED
from lexpilot.scripted.served import ServedAs, switching
from lexpilot.storage.checkpoints import NOT_USED_FILE
from tests.helpers.runs import run_folder

JUDGE = "DeepSeek-R1"  # the judge's default model id (benchmark/vocabulary.py ROLE_TABLE)
NEXT = "deepseek-r2-0901"  # what the provider answers the judge's id as, once it switched


def judge_switched_after(provider, requests: int) -> None:
    """The provider answers the judge's id as NEXT from its request after `requests` on."""
    provider.script = switching(provider, [ServedAs(JUDGE, NEXT, requests)])


def served(records: list[dict], role: str) -> dict[str, int]:
    """The served ids the records count for a role, summed over the records."""
    total: dict[str, int] = {}
    for record in records:
        for key, n in record["usage"].get(role, {}).items():
            if key.startswith("served:"):
                total[key.removeprefix("served:")] = total.get(key.removeprefix("served:"), 0) + n
    return total


def processed(provider, kind: str) -> int:
    """The requests of a kind the provider answered, synchronously or in a batch."""
    return sum(n for (k, _), n in provider.processed.items() if k == kind)


def manifest(harness) -> dict:
    return json.loads((run_folder(harness) / "manifest.json").read_text(encoding="utf-8"))


def stop_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "the served model changed" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.slow
def test_a_judge_switched_halfway_stops_the_stage_in_one_line_until_the_change_is_accepted(harness, capsys):
    # one case at a time: each LJP gold case asks the evaluated model, then the judge once. The judge's first two
    # requests are served as asked, the third as NEXT: case 3's record keeps that reply, and case 4's judge call is
    # never sent (its evaluated model's reply, paid, waits in the journal)
    judge_switched_after(harness.provider, 2)
    assert harness.run("gold", "--limit", "6", "--concurrency", "1") == STOPPED
    line = stop_line(capsys.readouterr().err)
    assert f"judge '{JUDGE}'" in line and f"requested {JUDGE}" in line
    assert f"served {JUDGE} (2 calls), {NEXT} (1 call)" in line
    assert "--allow-served-model-change" in line
    assert served(harness.records(LJP_GOLD), "judge") == {JUDGE: 2, NEXT: 1}
    assert manifest(harness)["served_models"]["judge"] == {"calls": {JUDGE: 2, NEXT: 1}, "accepted": [JUDGE]}
    assert manifest(harness)["served_models"]["eval"]["calls"] == {"eval-model": 4}
    judged = harness.provider.kinds()["ljp_judge"]

    # rerun as it is: refused the same way, with no judge call
    assert harness.run("gold", "--limit", "6", "--concurrency", "1") == STOPPED
    assert f"served {JUDGE} (2 calls), {NEXT} (1 call)" in stop_line(capsys.readouterr().err)
    assert harness.provider.kinds()["ljp_judge"] == judged == 3

    # accepted: the three cases left are judged by NEXT, and the manifest says it was accepted
    assert harness.run("gold", "--limit", "6", "--concurrency", "1", "--allow-served-model-change") == 0
    assert served(harness.records(LJP_GOLD), "judge") == {JUDGE: 2, NEXT: 4}
    saved = manifest(harness)
    assert saved["served_models"]["judge"] == {"calls": {JUDGE: 2, NEXT: 4}, "accepted": [JUDGE, NEXT]}
    assert saved["served_model_changes_allowed"] == [{"role": "judge", "served": NEXT}]
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    assert f"eval-model · judge {JUDGE} (served: {JUDGE}, {NEXT})" in capsys.readouterr().out


def test_an_alias_served_from_the_first_call_is_accepted_and_shown(harness, capsys):
    # the evaluated model's id answered as its dated snapshot, the judge's as another id, from the first call on
    snapshot = "eval-model-2026-07-01"
    harness.provider.served_as.update({"eval-model": snapshot, JUDGE: NEXT})
    assert harness.run("gold", "--limit", "3", "--stream") == 0
    said = capsys.readouterr()
    assert "served model changed" not in said.err
    # said in the stage's closing lines: the evaluated model's 3 predictions, the judge's 3 extractions
    served_line = next(line for line in said.out.splitlines() if line.startswith("[LJP gold] served: "))
    assert (
        "evaluated model 'eval-model' at " in served_line
        and f"answered as {snapshot} (3 calls)" in served_line
    )
    assert f"judge '{JUDGE}' at " in served_line and f"answered as {NEXT} (3 calls)" in served_line
    assert served(harness.records(GOLD_PREDICTION), "eval") == {snapshot: 3}
    assert served(harness.records(LJP_GOLD), "judge") == {NEXT: 3}
    models = manifest(harness)["served_models"]
    assert models["eval"] == {"calls": {snapshot: 3}, "accepted": [snapshot]}
    assert models["judge"] == {"calls": {NEXT: 3}, "accepted": [NEXT]}
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    assert f"eval-model (served: {snapshot}) · judge {JUDGE} (served: {NEXT})" in capsys.readouterr().out


def test_a_run_resumed_after_its_judge_changed_between_invocations_is_refused(harness, capsys):
    # LJP gold judged by the id asked for (3 calls); then the provider re-points it, and DCG, the same run's next
    # stage, meets the new id at its first judge call (one case at a time): the judge's second question of case 1
    # is never sent
    assert harness.run("gold", "--limit", "3") == 0
    harness.provider.served_as[JUDGE] = NEXT
    assert harness.run("DCG", "--limit", "3", "--concurrency", "1") == STOPPED
    line = stop_line(capsys.readouterr().err)
    assert f"served {JUDGE} (3 calls), {NEXT} (1 call)" in line
    assert manifest(harness)["served_models"]["judge"] == {"calls": {JUDGE: 3, NEXT: 1}, "accepted": [JUDGE]}
    assert harness.provider.kinds()["dcg_judge"] == 1
    # accepted: case 1's first judgement replayed from the journal, its second and cases 2 and 3's two asked (5)
    assert harness.run("DCG", "--limit", "3", "--concurrency", "1", "--allow-served-model-change") == 0
    assert harness.provider.kinds()["dcg_judge"] == 1 + 5
    assert served(harness.records(DCG), "judge") == {NEXT: 6}
    assert manifest(harness)["served_models"]["judge"] == {
        "calls": {JUDGE: 3, NEXT: 6},
        "accepted": [JUDGE, NEXT],
    }


def test_a_judge_switched_within_a_batch_stops_after_the_batch_is_collected(harness, capsys):
    # --batch: cycle 1 asks the evaluated model for the 6 cases, cycle 2 the judge in one batch of 6, answered in
    # the order submitted: 2 as asked, then 4 as NEXT. Every reply of the batch is kept in the journal; no record
    # is written before the stop, and the rerun with the option saves them all without asking the judge again
    judge_switched_after(harness.provider, 2)
    assert harness.run("gold", "--limit", "6", "--batch", "--batch-poll", "0.05") == STOPPED
    assert f"served {NEXT} (4 calls), {JUDGE} (2 calls)" in stop_line(capsys.readouterr().err)
    assert manifest(harness)["served_models"]["judge"] == {"calls": {JUDGE: 2, NEXT: 4}, "accepted": [JUDGE]}
    assert harness.run("gold", "--limit", "6", "--batch", "--batch-poll", "0.05") == STOPPED
    assert harness.run("gold", "--limit", "6", "--batch", "--allow-served-model-change") == 0
    assert processed(harness.provider, "ljp_judge") == 6
    assert served(harness.records(LJP_GOLD), "judge") == {JUDGE: 2, NEXT: 4}
    # each record lists its one judge call, replayed from the batch's journal, as it was served
    calls = [call["served"] for record in harness.records(LJP_GOLD) for call in judge_calls(record)]
    assert sorted(calls) == [JUDGE] * 2 + [NEXT] * 4


def test_a_refused_reply_that_shows_the_change_is_kept_as_paid_and_not_used(harness, capsys):
    # the judge's third request is answered as NEXT and cut at its output limit: refused, so the call would ask
    # again; the change stops it first, and the refused reply (1 call) is kept as paid for and not used
    def script(kind, prompt, body):
        if kind == "ljp_judge" and harness.provider.served_as.get(JUDGE) == NEXT:
            return {"content": "支持", "finish_reason": "length"}
        return None

    harness.provider.script = switching(harness.provider, [ServedAs(JUDGE, NEXT, 2)], script)
    assert harness.run("gold", "--limit", "3", "--concurrency", "1") == STOPPED
    assert f"served {JUDGE} (2 calls), {NEXT} (1 call)" in stop_line(capsys.readouterr().err)
    assert harness.provider.kinds()["ljp_judge"] == 3
    lines = (run_folder(harness) / NOT_USED_FILE).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["usage"]["judge"][f"served:{NEXT}"] for line in lines] == [1]
    assert served(harness.records(LJP_GOLD), "judge") == {JUDGE: 2}


def judge_calls(record: dict) -> list[dict]:
    return [call for call in record["served_calls"] if call["role"] == "judge"]


def test_a_record_lists_what_served_each_of_its_calls_in_order(harness):
    # "Every call's record ... keeps the reply's model, system_fingerprint (when present) and service_tier" and "the
    # fallback is recorded on the call". One DCG case, its two judgements asked at flex with --flex-fallback 1: the
    # scripted flex tier refuses every second flex request (the first answered, the second refused and sent at the
    # standard tier, "default"), and the judge's id is answered as NEXT from its second request on
    harness.provider.flex_unavailable = 0.5
    judge_switched_after(harness.provider, 1)
    flex = ("--judge-service-tier", "flex", "--flex-fallback", "1", "--allow-served-model-change")
    assert harness.run("DCG", "--limit", "1", "--concurrency", "1", *flex) == 0
    (record,) = harness.records(DCG)
    assert judge_calls(record) == [
        {"role": "judge", "served": JUDGE, "tier": "flex"},
        {"role": "judge", "served": NEXT, "tier": "default", "fallback": True},
    ]
    # the per-record counts say the same, without the order
    judge = record["usage"]["judge"]
    assert (judge[f"served:{JUDGE}"], judge[f"served:{NEXT}"], judge["flex_fallback_calls"]) == (1, 1, 1)


def test_a_run_killed_before_its_manifest_was_told_is_held_to_what_its_records_and_journal_say(
    harness, capsys
):
    # "differs from the run's earlier calls after a resume": an invocation killed in the run's first stage leaves
    # its served ids in its records and journal only (the manifest is told when a stage ends). Played here by a
    # stage whose manifest lost them and whose last two cases are not saved: its 2 saved judge calls were served as
    # asked; re-pointed, the rerun's first new judge reply stops the role, with the earlier calls counted
    assert harness.run("gold", "--limit", "4", "--concurrency", "1") == 0
    path = run_folder(harness) / "manifest.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    del saved["served_models"]
    path.write_text(json.dumps(saved), encoding="utf-8")
    for kind in (GOLD_PREDICTION, LJP_GOLD):  # cases 3 and 4 not yet saved
        records = harness.file(kind)
        records.write_text(
            "".join(records.read_text(encoding="utf-8").splitlines(True)[:2]), encoding="utf-8"
        )
    harness.provider.served_as[JUDGE] = NEXT
    assert harness.run("gold", "--limit", "4", "--concurrency", "1") == STOPPED
    line = stop_line(capsys.readouterr().err)
    assert f"served {JUDGE} (2 calls), {NEXT} (1 call)" in line
    assert manifest(harness)["served_models"]["judge"] == {"calls": {JUDGE: 2, NEXT: 1}, "accepted": [JUDGE]}
