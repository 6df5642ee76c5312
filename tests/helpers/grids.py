"""Grids: their command lines, their record files, a clean grid's work to compare a faulty one with."""

import os
import sys
from collections import Counter

import run_grid

MODELS = ("model-a", "model-b", "model-c")
README_LOOP = ("LexAwN_gen", "eval_DCG", "eval_LJP")  # the README's five-run loop, per run
SMALL_GRID_MODELS = ("model-a", "model-b")  # a small grid: two models, one run


def records(root) -> dict:
    """Every record file under the root's output folders: path -> its lines, in case order (cases run in parallel,
    so the order of lines is not compared)."""
    return {
        str(p.relative_to(root)): sorted(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(root.rglob("*.jsonl"))
        if "calls_journal" not in p.name
    }


def grid_argv(root, dataset, *extra, models=MODELS, runs=2) -> list[str]:
    """run_grid.py's arguments for `models` × `runs` on `dataset` under `root`."""
    return [
        "--models",
        *models,
        "--runs",
        str(runs),
        "--dataset",
        str(dataset),
        "--output-root",
        str(root),
        *extra,
    ]


class Terminal:
    """A stream that says it is a terminal, keeping what was written."""

    def __init__(self, tty: bool):
        self.text, self.tty = "", tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return self.tty


def small_grid(root, dataset, *extra) -> list[str]:
    """Two models, one run: ten cells."""
    return grid_argv(root, dataset, *extra, models=SMALL_GRID_MODELS, runs=1)


def clean_grid(http, root, dataset, *extra) -> Counter:
    """What the provider processes for the same grid without the fault (then forgotten)."""
    assert run_grid.main(small_grid(root, dataset, *extra)) == 0
    processed = Counter(http.processed)
    http.processed.clear()
    http.requests.clear()
    return processed


def grid(root, dataset, *extra) -> list[str]:
    """`python run_grid.py` of the three models, two runs each, at concurrency 4."""
    return [
        sys.executable,
        "run_grid.py",
        "--models",
        *MODELS,
        "--runs",
        "2",
        "--dataset",
        str(dataset),
        "--output-root",
        str(root),
        "--concurrency",
        "4",
        *extra,
    ]


def grid_environment(evaluated, judge) -> dict:
    """The environment of a grid whose evaluated models are at `evaluated` and whose judge is at `judge`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LEXPILOT_"))}
    return env | {
        "OPENAI_BASE_URL": evaluated.base_url,
        "LEXPILOT_JUDGE_BASE_URL": judge.base_url,
        "OPENAI_API_KEY": "k",
        "LEXPILOT_BACKOFF_BASE": "0.001",
    }
