"""A stage is compared on the prompt files it sends (as on the code it runs): each stage declares them, the
declaration covers every prompt the stage actually fills, and a prompt only another stage sends never blocks it."""
from types import SimpleNamespace

import pytest

import audit_simulator
import eval_focal_types
import eval_LJP_behaviour
import eval_LJP_order
import eval_plain
from lexpilot.benchmark import prompts as prompt_module
from lexpilot.benchmark.prompts import PROMPT_FILES
from lexpilot.running import stage as stage_module
from tests.conftest import STAGES, Harness, sample_cases, write_dataset


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


RUNS = [("LexAwN", "standard"), ("LexAwN", "delayed"), ("LexAwN", "self-correction"), ("LCA", "standard"),
        ("DCG", "standard"), ("direct", "standard"), ("gold", "standard"), ("interaction", "standard")]


@pytest.mark.parametrize("name, condition", RUNS + [("plain", "standard"), ("focal", "standard"),
                                                    ("behaviour", "standard"), ("audit", "standard"),
                                                    ("order", "standard")])
def test_every_prompt_a_stage_fills_is_one_it_declares(tmp_path, provider, monkeypatch, recorded, name, condition):
    cases = [{k: v for k, v in c.items() if k != "focal_point_types"} for c in sample_cases()[:2]]  # typed by the judge
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", cases))
    extra = ("--user-condition", condition) if condition != "standard" else ()
    others = {"plain": eval_plain.STAGE, "focal": eval_focal_types.STAGE, "behaviour": eval_LJP_behaviour.STAGE,
              "audit": audit_simulator.STAGE, "order": eval_LJP_order.STAGE}
    if name in ("LCA", "interaction", "audit", "order"):
        assert h.run("LexAwN", *extra) == 0
    for upstream in ("direct", "gold", "interaction") if name == "order" else ():
        assert h.run(upstream) == 0
    if name == "audit":
        assert h.run("DCG") == 0
    if name == "LCA":
        h.file("eval_results", "LCA_results.jsonl").unlink()  # judged again by eval_LCA.py
    recorded.used.clear()
    stage = others.get(name) or STAGES[name]
    extra += ("--histories", "underspecified,complete") if name == "plain" else ()
    assert h.run_stage(stage, *extra) == 0
    settings = SimpleNamespace(user_condition=condition, histories=("underspecified", "complete"))
    assert recorded.used and {PROMPT_FILES[n] for n in recorded.used} <= stage.prompt_files(settings)


def test_a_prompt_only_another_stage_sends_never_blocks_a_stage(tmp_path, provider, monkeypatch, capsys):
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    assert h.run("gold", "--limit", "1") == 0
    folder = tmp_path / "prompts"
    folder.mkdir()
    for name in PROMPT_FILES.values():
        (folder / name).write_bytes((prompt_module.PROMPT_DIR / name).read_bytes())
    (folder / "behaviour_targeted.txt").write_text("改过的提示 {history} {key_facts}", encoding="utf-8")
    monkeypatch.setattr(prompt_module, "PROMPT_DIR", folder)
    from lexpilot.storage import manifest
    monkeypatch.setattr(manifest, "PROMPT_DIR", folder)
    assert h.run("gold", "--limit", "2") == 2  # the selection grew: refused for that, not for the prompt
    err = capsys.readouterr().err
    assert "selected_cases" in err and "behaviour_targeted" not in err
    assert h.run("gold", "--limit", "1") == 0  # the gold stage never sends that prompt: it goes on
    (folder / "force_judge.txt").write_text("改过的预测提示 {history}", encoding="utf-8")
    capsys.readouterr()
    assert h.run("gold", "--limit", "1") == 2
    assert "prompt_hash.force_judge.txt: run" in capsys.readouterr().err
