"""A 3 × 2 grid the stage scripts wrote against the scripted provider (three models, two runs each, every main stage
on three sample cases), and a run of every stage (the later ones, the diagnostics and the probes too) with a
re-judged copy, each made once per test worker; the export tests read copies of them."""

import json
import shutil

import pytest

import rejudge
import user_probes
from lexpilot.benchmark.records import content_digest, record_line
from lexpilot.protocols.catalog import GRID_STAGES, STAGE_SETS
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.paths import ROOT
from tests.helpers.stages import Harness

MODELS = ("model-a", "model-b", "model-c")
RUNS = ("r1", "r2")
MAIN_STAGES = ("LexAwN", "DCG", "direct", "gold", "interaction")
CASES = 3


@pytest.fixture(scope="session")
def written_grid(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("grid")
    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp_path, provider, monkeypatch)
        for model in MODELS:
            for run in RUNS:
                h.run_id = run
                for stage in MAIN_STAGES:
                    assert h.run(stage, "--limit", str(CASES), "--model", model) == 0
    return h.root


@pytest.fixture(scope="session")
def written_stages(tmp_path_factory):
    """model-a's run r1 through every stage script of the catalog (STAGE_SETS["all"]) and the User Model probes on
    three cases, and r1-again, r1 re-judged by rejudge.py."""
    tmp_path = tmp_path_factory.mktemp("stages")
    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp_path, provider, monkeypatch)
        limit = ("--model", "model-a", "--limit", str(CASES))
        for name in STAGE_SETS["all"]:
            for stage in GRID_STAGES[name]:
                assert h.run_stage(stage, *limit) == 0
        probes = ROOT / "data" / "LexPilot_sample_probes.csv"
        assert h.run_stage(user_probes.STAGE, *limit, "--probes", str(probes)) == 0
        assert h.run_stage(rejudge.STAGE, *limit, "--from-run", "r1", "--run-id", "r1-again") == 0
    return h.root


@pytest.fixture
def stages_root(written_stages, tmp_path):
    """A copy of the every-stage runs' output root, the test's own."""
    root = tmp_path / "out"
    shutil.copytree(written_stages, root)
    return root


@pytest.fixture
def grid(written_grid, tmp_path):
    """A copy of the grid's output root, the test's own."""
    root = tmp_path / "out"
    shutil.copytree(written_grid, root)
    return root


@pytest.fixture
def unreported_grid(grid):
    """The grid with one call of model-a's run r1 whose tokens its provider never reported: the first case's LCA
    reply record counts it in its usage (`unreported_calls`), as a reply without usage is counted. Returns the root
    and that case."""
    (path,) = (grid / "AwN_gen" / "r1").glob("model-a-*/a1.jsonl")
    saved = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    saved[0]["usage"]["eval"] |= {"calls": saved[0]["usage"]["eval"]["calls"] + 1, "unreported_calls": 1}
    saved[0]["digest"] = content_digest(saved[0])
    path.write_bytes(b"".join(record_line(r) for r in saved))
    return grid, saved[0]["case_number"]
