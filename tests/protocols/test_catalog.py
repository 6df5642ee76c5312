"""The stage catalog and the prompt declarations are the only lists: a stage or a prompt declared
there is under the tests' guards and told apart by the scripted provider without touching either."""

import subprocess
import sys

import pytest

from lexpilot.benchmark import prompts as prompt_module
from lexpilot.scripted import kinds
from tests.helpers.paths import ROOT
from tests.helpers.stages import STAGES

GUARDS = ["tests/storage/test_code_hash.py", "tests/protocols/test_stage_prompts.py"]
QUIET = ["-p", "no:hypothesispytest", "-p", "no:cacheprovider"]


def collected(*plugin: str) -> str:
    return subprocess.run(
        # no workers to start, no plugin the collection does not need (hypothesis' takes a second to import)
        [sys.executable, "-m", "pytest", "-n0", *QUIET, "--collect-only", "-q", *plugin, *GUARDS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.slow
def test_a_stage_declared_only_in_the_catalog_is_under_the_code_hash_and_prompt_guards():
    """ "Test this: a new stage declared only in the catalog (a test fixture) is covered by the code-hash and prompt
    tests without touching them." The fixture stage is declared by tests/helpers/fixture_stage_plugin.py alone."""
    hashed = "test_code_hash.py::test_a_stage_s_code_is_its_script_its_protocols_and_the_runner_and_never_reporting"
    prompted = "test_stage_prompts.py::test_every_prompt_a_stage_fills_is_one_it_declares"
    assert f"{hashed}[eval_fixture.py]" not in collected() and "fixture stage" not in collected()
    with_fixture = collected("-p", "tests.helpers.fixture_stage_plugin")
    assert (
        f"{hashed}[eval_fixture.py]" in with_fixture and f"{prompted}[fixture stage-standard]" in with_fixture
    )


def test_the_tests_know_every_catalogued_stage_by_a_short_name():
    from lexpilot.protocols.catalog import ENTRY_POINTS

    every = {stage.name for stages in ENTRY_POINTS.values() for stage in stages}
    assert {stage.name for stage in STAGES.values()} == every and STAGES["gold"].name == "LJP gold"


def test_a_prompt_declared_only_in_the_prompt_files_is_told_apart_by_the_scripted_provider(
    tmp_path, monkeypatch
):
    """The scripted provider's markers come from the prompt files: each declared prompt is known by its kind, and
    one declared only in PROMPT_FILES by its own name, never as "unknown"."""
    for kind, marker in kinds.prompt_markers():
        assert kinds.kind_of(f"……{marker}……") == kind
    new = tmp_path / "judge_new.txt"
    new.write_text("你是一个新的评审员，只评一件事。\n<对话历史>\n{history}\n</对话历史>\n", encoding="utf-8")
    monkeypatch.setitem(prompt_module.PROMPT_FILES, "judge_new", str(new))
    monkeypatch.setattr(kinds, "KIND_MARKERS", kinds.prompt_markers())
    filled = prompt_module.fill(new.read_text(encoding="utf-8"), history="User: 我借了钱。")
    assert kinds.kind_of(filled) == "judge_new"
    assert {kind for kind, _ in kinds.KIND_MARKERS} >= {"lexawn", "user", "ljp_judge", "judge_new"}
