"""A 3 × 2 grid the stage scripts wrote against the scripted provider (three models, two runs each, every main stage
on three sample cases), made once per test worker; the export tests read copies of it."""

import shutil

import pytest

from lexpilot.scripted.provider import ScriptedProvider
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


@pytest.fixture
def grid(written_grid, tmp_path):
    """A copy of the grid's output root, the test's own."""
    root = tmp_path / "out"
    shutil.copytree(written_grid, root)
    return root
