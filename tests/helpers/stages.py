"""Stages run in-process against the scripted provider, and the catalog's stages by their short names."""

import json
from pathlib import Path

from lexpilot.protocols.catalog import BY_HAND, ENTRY_POINTS
from lexpilot.running.stage import stage_main
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.paths import SAMPLE

SECRET = "sk-test-DO-NOT-LEAK-0123456789abcdef"  # the API key the tests give: it must never be shown or saved

# Every stage the catalog declares, by its name with "LJP " left out ("LexAwN", "DCG", "gold", "audit", …): the
# catalog is the one list, a stage added there is here too. eval_LJP.py's own copies of the three setups are left
# out: the single-setup scripts' stages carry those names.
STAGES = {
    stage.name.removeprefix("LJP "): stage
    for entry, stages in ENTRY_POINTS.items()
    if entry not in BY_HAND
    for stage in stages
}


def prompts_in(folder: Path, monkeypatch, **added: str) -> Path:
    """The harness's prompts served from `folder`: a copy of prompts/ there, with `added` prompt files (name ->
    text) declared beside them, as a harness that gains a prompt file (a new stage's) declares it."""
    from lexpilot.benchmark import prompts as prompt_module
    from lexpilot.storage import manifest as manifest_module

    folder.mkdir()
    for file in prompt_module.PROMPT_FILES.values():
        (folder / file).write_bytes((prompt_module.PROMPT_DIR / file).read_bytes())
    for name, text in added.items():
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
        monkeypatch.setitem(prompt_module.PROMPT_FILES, name, f"{name}.txt")
    monkeypatch.setattr(prompt_module, "PROMPT_DIR", folder)
    monkeypatch.setattr(manifest_module, "PROMPT_DIR", folder)
    return folder


def judge_kinds() -> tuple[str, ...]:
    """The scripted provider's names of every prompt a catalogued stage sends the judge (whose outputs
    `CaseCalls.validated` parses), read from the catalog: a new judge stage is in every test that asks for them."""
    from lexpilot.scripted.kinds import KIND_OF_PROMPT

    names = {
        name
        for stages in ENTRY_POINTS.values()
        for stage in stages
        for step in stage.steps
        for role, name in step.prompts.items()
        if role == "judge"
    }
    return tuple(sorted(KIND_OF_PROMPT.get(name, name) for name in names))


class Harness:
    """Runs stages in-process against a ScriptedProvider, with outputs under a temporary root: through the
    OpenAI SDK over HTTP to the provider's server when `http`, else in memory (no socket)."""

    def __init__(
        self,
        tmp_path: Path,
        provider: ScriptedProvider,
        monkeypatch,
        dataset: Path = SAMPLE,
        http: bool = False,
    ):
        self.root, self.provider, self.dataset, self.run_id = tmp_path / "out", provider, dataset, "r1"
        self.http = http
        monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    def run(self, stage: str, *extra: str) -> int:
        argv = [
            "--run-id",
            self.run_id,
            "--model",
            "eval-model",
            "--dataset",
            str(self.dataset),
            "--output-root",
            str(self.root),
            *extra,
        ]
        clients = None if self.http else self.provider.in_memory_clients()
        return stage_main(STAGES[stage], "test", argv=argv, clients=clients)

    def run_stage(self, stage, *extra: str) -> int:
        """A stage object (of any entry point), in memory, with this harness's run, model, dataset and root."""
        argv = [
            "--run-id",
            self.run_id,
            "--model",
            "eval-model",
            "--dataset",
            str(self.dataset),
            "--output-root",
            str(self.root),
            *extra,
        ]
        return stage_main(stage, "test", argv=argv, clients=self.provider.in_memory_clients())

    def file(self, top, name: str | None = None) -> Path:
        """The run's file of a record kind, or of a (top folder, file name)."""
        if name is None:
            top, name = top.top, top.file
        matches = list((self.root / top / self.run_id).glob(f"*/{name}"))
        assert len(matches) == 1, f"{top}/{name}: {matches}"
        return matches[0]

    def records(self, top, name: str | None = None) -> list[dict]:
        return [json.loads(line) for line in self.file(top, name).read_text(encoding="utf-8").splitlines()]
