"""A stage is compared on the prompt files it sends (as on the code it runs): each stage declares them, the
declaration covers every prompt the stage actually fills, and a prompt only another stage sends never blocks it."""

from types import SimpleNamespace

import pytest

from lexpilot.benchmark import prompts as prompt_module
from lexpilot.benchmark.prompts import PROMPT_FILES
from lexpilot.protocols.catalog import ENTRY_POINTS, GRID_STAGES, OTHER_STAGES
from lexpilot.running import stage as stage_module
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness, prompts_in


class Recording(dict):
    """The prompts, noting every one a stage fills."""

    used: set

    def __getitem__(self, name):
        self.used.add(name)
        return super().__getitem__(name)


@pytest.fixture
def recorded(monkeypatch):
    prompts = Recording(prompt_module.load_prompts())
    prompts.used = set()
    monkeypatch.setattr(stage_module, "load_prompts", lambda: prompts)
    return prompts


# Every stage the catalog declares (a new stage is covered without touching this test), under each
# user condition it takes; re-judging needs a finished run and the probe study an expert file (their own tests).
CATALOGUED = list(
    {
        stage.name: stage
        for stages in ENTRY_POINTS.values()
        for stage in stages
        if stage not in (*OTHER_STAGES["rejudge"], *OTHER_STAGES["user_probes"])
    }.values()
)


def conditions(stage) -> tuple[str, ...]:
    """The user conditions a stage can be run under here: each, where it and every stage it reads take one."""
    every = stage.user_condition and all(s.user_condition for s in upstream_stages(stage))
    return ("standard", "delayed", "self-correction") if every else ("standard",)


def upstream_stages(stage) -> list:
    """The stages that write what `stage` reads, each before what reads it (found in the catalog by record kind)."""
    chosen = []
    for kind in stage.upstream:
        maker = next(
            s for stages in GRID_STAGES.values() for s in stages if kind in [step.kind for step in s.steps]
        )
        chosen += [s for s in (*upstream_stages(maker), maker) if s not in chosen]
    return chosen


RUNS = [(stage, condition) for stage in CATALOGUED for condition in conditions(stage)]


@pytest.mark.parametrize("stage, condition", RUNS, ids=[f"{s.name}-{c}" for s, c in RUNS])
def test_every_prompt_a_stage_fills_is_one_it_declares(
    tmp_path, provider, monkeypatch, recorded, stage, condition
):
    # typed by the judge
    cases = [{k: v for k, v in c.items() if k != "focal_point_types"} for c in sample_cases()[:2]]
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", cases))
    extra = ("--user-condition", condition) if condition != "standard" else ()
    for upstream in upstream_stages(stage):
        assert h.run_stage(upstream, *(extra if upstream.user_condition else ())) == 0
    for (
        step
    ) in stage.steps:  # what an upstream stage wrote too (LexAwN judges LCA) is done again by this stage
        path = next((h.root / step.kind.top / h.run_id).glob(f"*/{step.kind.file}"), None)
        if path is not None:
            path.unlink()
    recorded.used.clear()
    extra += ("--histories", "underspecified,complete") if stage.name == "plain" else ()
    assert h.run_stage(stage, *(extra if stage.user_condition or stage.name == "plain" else ())) == 0
    settings = SimpleNamespace(user_condition=condition, histories=("underspecified", "complete"))
    assert recorded.used and {PROMPT_FILES[n] for n in recorded.used} <= stage.prompt_files(settings)


def test_a_prompt_only_another_stage_sends_never_blocks_a_stage(tmp_path, provider, monkeypatch, capsys):
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    assert h.run("gold", "--limit", "1") == 0
    folder = prompts_in(tmp_path / "prompts", monkeypatch)
    (folder / "behaviour_targeted.txt").write_text("改过的提示 {history} {key_facts}", encoding="utf-8")
    assert h.run("gold", "--limit", "2") == 2  # the selection grew: refused for that, not for the prompt
    err = capsys.readouterr().err
    assert "selected_cases" in err and "behaviour_targeted" not in err
    assert h.run("gold", "--limit", "1") == 0  # the gold stage never sends that prompt: it goes on
    (folder / "force_judge.txt").write_text("改过的预测提示 {history}", encoding="utf-8")
    capsys.readouterr()
    assert h.run("gold", "--limit", "1") == 2
    assert "prompt_hash.force_judge.txt: run" in capsys.readouterr().err
