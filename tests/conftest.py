import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_DCG  # noqa: E402
import eval_LCA  # noqa: E402
import eval_LJP_direct  # noqa: E402
import eval_LJP_gold  # noqa: E402
import eval_LJP_interaction  # noqa: E402
import LexAwN_gen  # noqa: E402
from common import stage_main  # noqa: E402
from fake_provider import FakeProvider  # noqa: E402

SAMPLE = ROOT / "data" / "LexPilot_sample.json"
SECRET = "sk-test-DO-NOT-LEAK-0123456789abcdef"

STAGES = {
    "LexAwN": ([LexAwN_gen.A1_STEP, eval_LCA.LCA_STEP, LexAwN_gen.INTERACTION_STEP], None),
    "LCA": ([eval_LCA.LCA_STEP], [eval_LCA.A1_FILE]),
    "DCG": (eval_DCG.DCG_STEPS, None),
    "direct": (eval_LJP_direct.DIRECT_STEPS, None),
    "gold": (eval_LJP_gold.GOLD_STEPS, None),
    "interaction": ([eval_LJP_interaction.INTERACTION_LJP_STEP], [eval_LJP_interaction.INTERACTION_FILE]),
}
USER_CONDITION_STAGES = ("LexAwN", "interaction")  # the scripts that take --user-condition


def sample_cases() -> list[dict]:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def write_dataset(path: Path, cases) -> Path:
    path.write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    return path


class Harness:
    """Runs stages in-process against a FakeProvider, with outputs under a temporary root."""

    def __init__(self, tmp_path: Path, provider: FakeProvider, monkeypatch, dataset: Path = SAMPLE):
        self.root, self.provider, self.dataset, self.run_id = tmp_path / "out", provider, dataset, "r1"
        monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    def run(self, stage: str, *extra: str) -> int:
        steps, external = STAGES[stage]
        argv = ["--run-id", self.run_id, "--model", "eval-model", "--dataset", str(self.dataset),
                "--output-root", str(self.root), *extra]
        return stage_main("test", stage, steps, external, user_condition=stage in USER_CONDITION_STAGES, argv=argv)

    def file(self, top: str, name: str) -> Path:
        matches = list((self.root / top / self.run_id).glob(f"*/{name}"))
        assert len(matches) == 1, f"{top}/{name}: {matches}"
        return matches[0]

    def records(self, top: str, name: str) -> list[dict]:
        return [json.loads(line) for line in self.file(top, name).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("LEXPILOT_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "0.001")


@pytest.fixture
def provider():
    with FakeProvider() as p:
        yield p


@pytest.fixture
def harness(tmp_path, provider, monkeypatch):
    return Harness(tmp_path, provider, monkeypatch)
