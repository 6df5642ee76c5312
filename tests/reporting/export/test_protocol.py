"""A run's departures from the paper's protocol, as the export states them: an output limit not the paper's 8192, a
prompt file not the one this checkout ships, a dataset not the release; each in the aggregate's protocol line, and
the run then no standard run. Runs written by the stage scripts against the scripted provider."""

import hashlib
import json
from pathlib import Path

import pytest

import export_results
from lexpilot.benchmark.prompts import PROMPT_DIR
from lexpilot.reporting.export import provenance
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.paths import SAMPLE
from tests.helpers.stages import Harness, prompts_in

pytestmark = pytest.mark.slow
pytest.importorskip(
    "every_eval_ever", reason="every-eval-ever is not installed (it needs Python 3.12 or later)"
)

CASES = 3
CHANGED_PROMPT = "judge_lca.txt"  # a prompt LCA sends: the run below is made with it edited


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """model-a's LCA on three cases, three times: `paper` with the harness's defaults, `limits` with the judge's
    output limit 4096, `prompts` with one prompt file edited while it ran (then the shipped one back)."""
    tmp_path = tmp_path_factory.mktemp("protocol")
    limit = ("--model", "model-a", "--limit", str(CASES))
    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp_path, provider, monkeypatch)
        for run, extra in (("paper", ()), ("limits", ("--judge-max-tokens", "4096"))):
            h.run_id = run
            assert h.run("LexAwN", *limit, *extra) == 0
        with pytest.MonkeyPatch.context() as edited:
            folder = prompts_in(tmp_path / "prompts", edited)
            with (folder / CHANGED_PROMPT).open("a", encoding="utf-8") as f:
                f.write("\n请简短回答。\n")
            h.run_id = "prompts"
            assert h.run("LexAwN", *limit) == 0
    return h.root


def protocol(root: Path, out: Path, run: str) -> dict:
    argv = ["--output-root", str(root), "--format", "eee", "--output", str(out), "--run-id", run]
    assert export_results.main(argv) == 0
    (found,) = [
        d
        for p in out.glob("data/lexpilot/*/*/*.json")
        if (d := json.loads(p.read_text(encoding="utf-8"))["source_metadata"]["additional_details"])[
            "lexpilot_run"
        ]
        == run
    ]
    return found


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_output_limit_and_a_changed_prompt_are_departures(runs, tmp_path, monkeypatch):
    """With the sample as the release, the run made with the defaults departs by its case count alone; the run whose
    judge wrote at most 4096 tokens says so against the paper's 8192; the run made with an edited prompt names the
    file, the digest it ran with and the shipped one's."""
    monkeypatch.setattr(provenance, "DEFAULT_DATASET", SAMPLE)
    paper = protocol(runs, tmp_path / "paper", "paper")
    assert paper["protocol"] == f"differs: {CASES} cases (the paper's: 432; a --limit run or another dataset)"
    limits = protocol(runs, tmp_path / "limits", "limits")
    assert limits["standard_run"] == "no"
    assert "judge max_tokens 4096 (the paper's: 8192)" in limits["protocol"]
    assert "evaluated model max_tokens" not in limits["protocol"]
    prompts = protocol(runs, tmp_path / "prompts", "prompts")
    shipped = (PROMPT_DIR / CHANGED_PROMPT).read_bytes()
    edited = shipped + "\n请简短回答。\n".encode()
    assert prompts["standard_run"] == "no"
    assert (
        f"prompt {CHANGED_PROMPT} sha256 {digest(edited)[:16]} (the shipped: {digest(shipped)[:16]})"
        in prompts["protocol"]
    )
    assert prompts["protocol"].count("prompt ") == 1


def test_a_dataset_other_than_the_release_is_a_departure(runs, tmp_path, monkeypatch):
    """A run made on a file other than the release (here the release is the sample with one case's text changed)
    states its dataset's digest against the release's; with no release in the checkout, it says it was not compared."""
    release = tmp_path / "release.json"
    release.write_bytes(SAMPLE.read_bytes().replace("原告".encode(), "原告人".encode(), 1))
    assert release.read_bytes() != SAMPLE.read_bytes()
    monkeypatch.setattr(provenance, "DEFAULT_DATASET", release)
    said = protocol(runs, tmp_path / "other", "paper")["protocol"]
    want = f"dataset sha256 {digest(SAMPLE.read_bytes())} (the release's: {digest(release.read_bytes())})"
    assert want in said
    monkeypatch.setattr(provenance, "DEFAULT_DATASET", tmp_path / "absent.json")
    said = protocol(runs, tmp_path / "absent", "paper")["protocol"]
    assert "dataset not compared with the release (absent.json is not in this checkout's " in said
    assert ": put the release there to compare)" in said
