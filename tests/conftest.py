import json
import os
import shutil
from pathlib import Path

import pytest

from lexpilot.protocols.catalog import BY_HAND, ENTRY_POINTS
from lexpilot.running.stage import stage_main
from lexpilot.scripted.provider import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = ROOT / "data" / "LexPilot_sample.json"
SECRET = "sk-test-DO-NOT-LEAK-0123456789abcdef"

# Every stage the catalog declares, by its name with "LJP " left out ("LexAwN", "DCG", "gold", "audit", …): the
# catalog is the one list (issue 37 item 3), a stage added there is here too. eval_LJP.py's own copies of the
# three setups are left out: the single-setup scripts' stages carry those names.
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


def as_at_a_terminal() -> None:
    """A child process's Ctrl-C as a user's at a terminal: the shell starts a background job (a suite run with `&`)
    with SIGINT ignored, which its children inherit, and a test of Ctrl-C must not depend on how pytest was started
    (issue 37 item 9). Passed to subprocess as `preexec_fn`."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sample_cases() -> list[dict]:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def write_dataset(path: Path, cases) -> Path:
    path.write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    return path


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


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path_factory):
    for name in list(os.environ):
        if name.startswith(("LEXPILOT_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "0.001")
    # each test its own score cache
    monkeypatch.setenv("LEXPILOT_CACHE", str(tmp_path_factory.mktemp("scores")))


@pytest.fixture
def provider():
    """A scripted provider; its HTTP server starts only when a test asks for its base URL's traffic."""
    with ScriptedProvider() as p:
        yield p


@pytest.fixture
def http(provider, monkeypatch):
    """The scripted provider over HTTP, as every role's endpoint (the environment's base URL and key)."""
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return provider


@pytest.fixture
def harness(tmp_path, provider, monkeypatch):
    return Harness(tmp_path, provider, monkeypatch)


CHROMIUM = os.environ.get("LEXPILOT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("no Chromium: .ci/run installs the distribution's chromium for these tests")
        pytest.skip("no Chromium found (apt-get install chromium, or set LEXPILOT_CHROMIUM)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def warm_interpreter(tmp_path_factory):
    """Scripts started as real processes forked from one warm interpreter per worker (tests/warm.py)."""
    from tests.warm import Warm

    interpreter = Warm(tmp_path_factory.mktemp("warm"))
    yield interpreter
    interpreter.close()


@pytest.fixture
def warm(warm_interpreter):
    """The warm interpreter, for one test: the processes it started and left running are killed as it ends."""
    yield warm_interpreter
    warm_interpreter.reap()


def json_table(capsys, *argv: str) -> list[list]:
    """The rows of the one table `show_results.py ARGV --format json --table ID` prints, each count as its number."""
    import show_results

    capsys.readouterr()
    assert show_results.main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tables"][0]["rows"]
    return [[c["value"] if isinstance(c, dict) and "value" in c else c for c in row] for row in rows]
