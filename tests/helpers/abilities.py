"""Runs the stage scripts write against the scripted provider playing an abilities file: each run sent to the base
URL that names it (http://…/<run>/v1), as the try-out in docs/statistics.md does, in memory."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.throughput import synthetic_dataset
from lexpilot.benchmark.dataset import Case, load_dataset
from lexpilot.running.stage import stage_main
from lexpilot.scripted.abilities import Abilities, parse_abilities
from lexpilot.scripted.playing import playing
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.runs import case_records
from tests.helpers.stages import SECRET, STAGES

# two models a set margin apart on every task, with run-to-run noise, and a judge whose confusion differs by label
ABILITIES = """
seed = 0
noise = 0.3

[models."m-strong"]
lca_complete = 0.90
lca_underspecified = 0.80
dcg = 0.60
ljp = 0.70

[models."m-weak"]
lca_complete = 0.70
lca_underspecified = 0.40
dcg = 0.30
ljp = 0.40

[judge]
lca_predict = 0.90
lca_ask = 0.80
dcg_yes = 0.85
dcg_no = 0.90
ljp = 0.95
"""


@dataclass
class Simulated:
    """Runs written against set abilities: where they are, the dataset's cases and the abilities."""

    root: Path
    dataset: Path
    cases: list[Case]
    abilities: Abilities


def stage_argv(run: str, model: str, dataset: Path, root: Path, *extra: str) -> list[str]:
    return ["--run-id", run, "--model", model, "--dataset", str(dataset), "--output-root", str(root), *extra]


def simulate(folder: Path, cases: int, runs, stages, text: str = ABILITIES) -> Simulated:
    """Every model of the abilities, every run and stage, on `cases` synthetic cases, under folder/out."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset = folder / "cases.json"
    synthetic_dataset(cases, dataset)
    loaded, _ = load_dataset(dataset)
    abilities = parse_abilities(text, "abilities.toml")
    with pytest.MonkeyPatch.context() as monkeypatch, ScriptedProvider() as provider:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        provider.script = playing(provider, abilities, loaded)
        for model in abilities.models:
            for run in runs:
                for stage in stages:
                    argv = stage_argv(run, model, dataset, folder / "out")
                    assert (
                        stage_main(STAGES[stage], "test", argv=argv, clients=provider.in_memory_clients(run))
                        == 0
                    )
    return Simulated(folder / "out", dataset, loaded, abilities)


def shared_simulation(folder: Path, cases: int, runs, stages) -> Simulated:
    """`simulate`'s grid made once in `folder` for every test worker that asks (the first makes it under a lock, the
    others wait and read it: each worker made its own, ~6 s of CPU each), read, never written, by its tests."""
    import fcntl  # the suite's workers are forked processes on Linux (tests/helpers/warm.py forks too)

    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "made").is_file():
            dataset = folder / "cases.json"
            return Simulated(
                folder / "out",
                dataset,
                load_dataset(dataset)[0],
                parse_abilities(ABILITIES, "abilities.toml"),
            )
        simulated = simulate(folder, cases, runs, stages)
        (folder / "made").touch()
        return simulated


def saved(root: Path, kind, run: str, model: str) -> dict[str, dict]:
    """A run's records of one kind (a RecordKind), by case number."""
    return case_records(root, kind.top, kind.file, model, run)
