"""The runs under an output root, read and scored: each manifest checked, each run's records checked against
the dataset it names (or the one given), every run scored once; and the options that choose them, declared once for
every report script.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.records import (
    collector_paused,
    model_folder,
)
from lexpilot.benchmark.vocabulary import ROLE
from lexpilot.errors import HarnessError
from lexpilot.paths import DEFAULT_OUTPUT_ROOT
from lexpilot.reporting.scoring.parallel import fork_map, workers
from lexpilot.reporting.scoring.runs import Run
from lexpilot.reporting.scoring.score_cache import cached_score, run_key, store_score
from lexpilot.reporting.scoring.scoring import score_run
from lexpilot.storage.manifest import Manifest, read_manifest


def add_run_options(parser, one_run: bool = False) -> None:
    """--output-root and --dataset, and the runs to read: any number of models and run ids (show_results.py,
    judge_agreement.py export), or with `one_run` the one run of one model a kit evaluates (user_probes.py
    evaluate: --run-id required, --model defaulting to LEXPILOT_MODEL, as a stage takes them)."""
    parser.add_argument(
        "--output-root",
        type=Path,
        default=DEFAULT_OUTPUT_ROOT,
        help="where the runs are (default: next to the scripts)",
    )
    parser.add_argument(
        "--dataset",
        type=Path,
        help="check every record against this dataset (default: the "
        "dataset each run's manifest names, when it is still there and unchanged)",
    )
    if one_run:
        parser.add_argument("--run-id", required=True)
        evaluated = ROLE["eval"]
        parser.add_argument(
            evaluated.flag("model"),
            default=os.environ.get(evaluated.model_variable),
            required=evaluated.model_variable not in os.environ,
            help=f"the run's {evaluated.display} id (it names the run's folder; else ${evaluated.model_variable})",
        )
        return
    parser.add_argument(
        "--model",
        action="extend",
        nargs="+",
        help="only these evaluated model ids (--model A B, or repeated)",
    )
    parser.add_argument(
        "--run-id", action="extend", nargs="+", help="only these run ids (--run-id run1 run2, or repeated)"
    )


def load_runs(
    root: Path,
    models: list[str] | None,
    run_ids: list[str] | None,
    score: bool = True,
    dataset: Path | None = None,
    err=None,
    keep_outcomes: bool = False,
) -> list[Run]:
    """The runs under `root` (manifest by manifest), scored unless `score` is false (then `score_runs` scores them).

    Records are checked against the cases of `dataset` (else the dataset the manifest names, when it is
    still there and unchanged): a record made from other inputs leaves its task out.
    """
    err = err or sys.stderr
    runs = []
    datasets: dict[Path, tuple[dict, str] | str] = {}
    for path in sorted(root.glob("runs/*/*/manifest.json")):
        manifest = run_manifest(path, root)
        if isinstance(manifest, str):
            print(f"{manifest.rstrip('.')}; run skipped", file=err)
            continue
        model, run_id = manifest.model("eval"), manifest.run_id
        assert model is not None and run_id is not None, "run_manifest checked both"
        if (models and model not in models) or (run_ids and run_id not in run_ids):
            continue
        run = Run(run_id, model, manifest, path.parent.name)
        run.input_hashes = input_hashes(run, dataset, datasets, err)
        runs.append(run)
    # judge_agreement only needs the manifests
    return score_runs(runs, root, keep_outcomes) if score else runs


# (run, its place, its records, its source's) -> pages
Render = Callable[[Run, int, dict, "dict | None"], object]


def score_runs(
    runs: list[Run],
    root: Path,
    keep_outcomes: bool = False,
    render: Render | None = None,
    processes: int | None = None,
) -> list[Run]:
    """The runs scored, on every core (`processes`: default one per core), in their order. With `render`, each run's
    `pages` are what render makes of its records while they are read (the viewer's case fragments), and no record
    is kept: the site's build never holds fifty runs' records at once, and reads each file once."""
    chains = rejudge_chains(runs)
    work = partial(score_chain, root=root, keep_outcomes=keep_outcomes, render=render)
    scored_runs: dict[int, Run] = {}  # place -> the run scored: the chains hold every place once
    with collector_paused():  # what comes back holds no cycles, and is kept to the report's end
        for chain in fork_map(work, chains, processes or workers(len(chains), cases_in(runs))):
            for place, run in chain:
                scored_runs[place] = run
    gc.freeze()  # the cycle collector need not walk them again
    return [scored_runs[place] for place in range(len(runs))]


def cases_in(runs: list[Run]) -> int | None:
    """The cases the runs hold in all, as their manifests select them (None: a manifest does not say)."""
    counts = [len(r.manifest.selected_cases) if r.manifest.selected_cases is not None else None for r in runs]
    return None if None in counts else sum(c for c in counts if c is not None)


def rejudge_chains(runs: list[Run]) -> list[list[tuple[int, Run]]]:
    """The runs as (place, run) chains: each run shown that re-judged no run shown, then the re-judged copies of it
    (its model's, copy after source), so that a copy is scored beside the records it re-judged."""
    # looked up by a run's source too (None: it re-judged no run)
    place: dict[tuple[str, str | None], int] = {(r.folder, r.run_id): i for i, r in enumerate(runs)}

    def lineage(i: int) -> list[int]:  # from the run up to the first source not shown (a loop ends it too)
        line = [i]
        while (
            source := place.get((runs[line[-1]].folder, runs[line[-1]].manifest.rejudged_from))
        ) is not None and source not in line:
            line.append(source)
        return line

    chains: dict[int, list[list[int]]] = {}
    for i in range(len(runs)):
        line = lineage(i)
        chains.setdefault(line[-1], []).append(line)
    return [
        [(line[0], runs[line[0]]) for line in sorted(lines, key=lambda line: (len(line), line[0]))]
        for lines in chains.values()
    ]


def score_chain(
    chain: list[tuple[int, Run]], root: Path, keep_outcomes: bool, render: Render | None
) -> list[tuple[int, Run]]:
    """One chain's runs scored (in a worker process), each with its pages when `render` is given."""
    records: dict[str, dict] = {}
    done = []
    for place, run in chain:
        if render is None:
            done.append((place, scored(run, root, keep_outcomes)))
            continue
        with collector_paused():
            score_run(run, root, keep_records=True, keep_outcomes=keep_outcomes)
        assert run.saved is not None, "score_run keeps the records it is asked to keep"
        records[run.run_id] = run.saved
        source = run.manifest.rejudged_from
        run.pages = render(run, place, run.saved, records.get(source) if source else None)
        done.append((place, run))
    for _, run in done:
        run.saved = None  # sent back without its records: its pages hold what the site shows of them
    return done


def scored(run: Run, root: Path, keep_outcomes: bool) -> Run:
    """The run scored: from the cache when nothing it depends on changed, else from its records, the cache then
    updated."""
    key = run_key(run, root) + ("+outcomes" if keep_outcomes else "")
    cached = cached_score(run, root, key)
    if cached is not None:
        return cached
    with collector_paused():  # records and scores hold no cycles, and are kept to the report's end
        score_run(run, root, keep_outcomes=keep_outcomes)
    store_score(run, root, key)
    return run


def run_manifest(path: Path, root: Path) -> Manifest | str:
    """A manifest with the fields the reports need, or what is wrong with it."""
    try:
        manifest = read_manifest(path)
    except HarnessError as e:
        return str(e)
    model, selected, run_id = manifest.model("eval"), manifest.selected_cases, manifest.run_id
    if model is None or run_id is None or selected is None or not all(isinstance(n, str) for n in selected):
        return (
            f"{path}: the manifest lacks models.eval.model, run_id or selected_cases (or they are malformed)"
        )
    if path.parent != root / "runs" / run_id / model_folder(model):
        return f"{path}: the manifest's run_id {run_id[:80]!r} and model do not match its folder"
    return manifest


def input_hashes(run: Run, dataset: Path | None, cache: dict, err) -> dict[str, str | None]:
    """Selected case -> its input hash in the dataset shown with (None where it cannot be checked)."""
    named = run.manifest.dataset_path
    path = dataset or Path(str(named))
    unchecked: dict[str, str | None] = {n: None for n in run.selected}
    if dataset is None and (not named or not path.is_file()):
        print(
            f"run {run.run_id}, model {run.model}: the run's dataset {named!r} is not there; records not "
            "checked against it (pass --dataset)",
            file=err,
        )
        return unchecked
    if path not in cache:
        try:
            cases, sha = load_dataset(path)
            cache[path] = ({c.number: c.input_hash for c in cases}, sha)
        except HarnessError as e:
            cache[path] = str(e).splitlines()[0]
    if isinstance(cache[path], str):
        print(
            f"run {run.run_id}, model {run.model}: records not checked against the dataset: {cache[path]}",
            file=err,
        )
        return unchecked
    hashes, sha = cache[path]
    if dataset is None and sha != run.manifest.dataset_sha256:
        print(
            f"run {run.run_id}, model {run.model}: {path} has changed since the run; records not checked "
            "against it (pass the run's --dataset)",
            file=err,
        )
        return unchecked
    # a case the dataset does not hold gets a hash no record has, so its records are reported
    return {n: hashes.get(n, "not in the dataset") for n in run.selected}
