"""Batch mode with invalid outputs ("Judges write invalid output routinely"). Every stage, in
batch mode and with each --batch-roles split, is given one invalid output for every prompt whose output has a
required form (every judge's); each is asked again as in a synchronous run, the
stage completes, and the provider processes exactly what a clean synchronous run processes, request by request."""

import json
from collections import Counter

import pytest

import rejudge
from lexpilot.benchmark.records import LCA
from lexpilot.protocols.catalog import GRID_STAGES, STAGE_SETS
from lexpilot.protocols.consultation import LCA_STAGE
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.replies import PROSE, VALIDATED, FirstAnswerInvalid
from tests.helpers.stages import Harness


def cases() -> list[dict]:
    """Three sample cases without their focal-point types, so that the judge types them."""
    return [{k: v for k, v in case.items() if k != "focal_point_types"} for case in sample_cases()[:3]]


def every_stage(h: Harness, script: FirstAnswerInvalid, *extra: str) -> None:
    """Every stage run per model and run, the LCA stage on a deleted label file, and a re-judge: 12 stages, each
    given invalid outputs."""
    stages = [(stage, ()) for name in STAGE_SETS["all"] for stage in GRID_STAGES[name]]
    stages += [(LCA_STAGE, ()), (rejudge.STAGE, ("--from-run", "r1", "--run-id", "r1-rj"))]
    for stage, own in stages:
        if stage is LCA_STAGE:
            h.file(LCA).unlink()  # eval_LCA.py judges the a1 responses that have no label
        script.next_stage()
        assert h.run_stage(stage, *own, *extra) == 0, stage.name
        assert script.invalid > 0, stage.name


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """What the provider processes for a synchronous run of every stage, with the same invalid outputs."""
    tmp = tmp_path_factory.mktemp("sync")
    script = FirstAnswerInvalid()
    with ScriptedProvider(script) as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp, provider, monkeypatch, write_dataset(tmp / "three.json", cases()))
        every_stage(h, script)
    assert {kind for kind, _ in provider.processed} >= set(VALIDATED)
    return tmp, Counter(provider.processed)


@pytest.mark.slow
@pytest.mark.parametrize("roles", ["eval,user,judge", "eval", "judge", "eval,user", "user,judge"])
def test_an_invalid_output_in_batch_mode_is_asked_again_and_every_stage_completes(
    clean, tmp_path, monkeypatch, capsys, roles
):
    sync_root, expected = clean
    script = FirstAnswerInvalid()
    with ScriptedProvider(script) as provider:
        h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "three.json", cases()))
        every_stage(h, script, "--batch-roles", roles, "--batch-poll", "1")
        err = capsys.readouterr().err
        assert "Traceback" not in err and "invalid judge_lca output: expected exactly 策略一 or 策略二" in err
        assert err.count(": asked again: invalid ") == script.total  # each said once, not at every cycle
        assert provider.processed == expected
    for path in (sync_root / "out" / "eval_results").rglob("*.jsonl"):  # the same labels and verdicts
        twin = tmp_path / "out" / path.relative_to(sync_root / "out")
        assert verdicts(twin) == verdicts(path), path.name


# what depends on the order in which cases were asked: which of two equal prompts (the LCA judge sees only the
# response, often the same for two cases) got the prose, and the usage, calls and digests that follow from it
ORDERED = ("usage", "served_calls", "digest", "upstream_hash", "judge_raw", "raw")


def verdicts(path) -> list:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ORDERED}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return sorted(
        (strip(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()),
        key=lambda r: r["case_number"],
    )


def detached_until_done(h: Harness, provider, capsys, *extra: str) -> str:
    """The gold stage in batch mode, one --batch-detach invocation per cycle (each batch finished before the next
    invocation); what they said, together."""
    provider.batch_delay, said = 3600, ""
    for _ in range(12):
        for batch in provider.batches.values():
            batch["_ready"] = 0
        h.run("gold", "--batch-detach", *extra)
        out = capsys.readouterr()
        said += out.err
        if "batch mode:" in out.out:
            return said
    raise AssertionError("the stage did not finish in 12 invocations")


def test_an_invalid_output_is_said_once_across_detached_invocations(tmp_path, monkeypatch, capsys):
    """Each --batch-detach invocation replays the journal from the start; an invalid output an
    earlier invocation said is not said again."""
    script = FirstAnswerInvalid()
    with ScriptedProvider(script) as provider:
        h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "three.json", cases()))
        said = detached_until_done(h, provider, capsys)
    assert script.total > 0 and said.count(": asked again: invalid ") == script.total


def test_the_last_of_three_invalid_outputs_is_not_said_to_be_asked_again(tmp_path, monkeypatch, capsys):
    """Three invalid outputs: two are asked again; the third fails the case, which says so (in batch mode as in a
    synchronous run)."""
    always = lambda kind, prompt, body: PROSE if kind == "ljp_judge" else None
    for mode in ((), ("--batch", "--batch-poll", "1")):
        with ScriptedProvider(always) as provider:
            root = tmp_path / ("batch" if mode else "sync")
            h = Harness(
                root, provider, monkeypatch, write_dataset(tmp_path / f"{root.name}.json", cases()[:1])
            )
            assert h.run("gold", "--keep-going", *mode) == 1
            err = capsys.readouterr().err
            if mode:
                assert err.count(": asked again: invalid judge_ljp output") == 2, err
            else:
                assert ", 2 retries," in err and ", 3 retries," not in err, err
            assert "judge_ljp output invalid after 3 attempts" in err
