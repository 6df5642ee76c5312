"""--verify DIR: the paper's main tables recomputed from an export alone, no LexPilot record read. Each run's
Every Eval Ever instance records of the main stages give its per-case counts (LCA: each history's reference and the
judge's label; DCG: the case's success; LJP: each claim's court verdict and the extracted one), the harness's metric functions turn
them into Table 2 (LCA Macro-F1 and DCG accuracy by class) and Table 3 (the main table's LJP setups, beside LCA and
DCG), printed as show_results.py prints them; the values the export's aggregate records state are drawn into the
same tables, per group and per run, and any cell that differs at the printed digits is one line naming the table,
the model, the run and both values. The export's own JSON is read as JSON, so that the check needs neither the
harness's records nor the every-eval-ever package."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lexpilot.benchmark.categories import cause_class
from lexpilot.errors import UsageError
from lexpilot.reporting.export.stages import MAIN_TASKS
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.metrics import confusion, lca_counts
from lexpilot.reporting.scoring.runs import MetricKey, Run, TaskData
from lexpilot.reporting.scoring.scoring import metrics_of
from lexpilot.reporting.tables.paper import results_tables
from lexpilot.reporting.tables.renderings import TEXT_WIDTH, render_text
from lexpilot.storage.manifest import Manifest
from lexpilot.text import counted

COLLECTION = "lexpilot"  # eee.py's
VERIFIED_TABLES = (
    "main",
    "lca_by_class",
    "dcg_by_class",
)  # Table 11 (Tables 2-3 overall) and Table 2, in report order
PAPER_NAME = {"main": "Table 3 (main)", "lca_by_class": "Table 2 (LCA)", "dcg_by_class": "Table 2 (DCG)"}


@dataclass
class ExportedResult:
    """One model and run of an export: what its aggregate states, what its instances give, and any problem."""

    model: str
    run_id: str
    group: str
    settings: str  # the digest of what makes its group (provenance.settings_digest)
    stated: dict[MetricKey, float]
    recomputed: Run
    problems: list[str]
    samples: Path  # its instance records' file


def aggregates(folder: Path) -> list[tuple[Path, dict]]:
    """The export's LexPilot aggregate records, or one line saying the folder holds none."""
    if not folder.is_dir():
        raise UsageError(
            f"--verify {folder} is not a folder: name the folder export_results.py --output wrote"
        )
    found = []
    for path in sorted(folder.glob(f"data/{COLLECTION}/*/*/*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            raise UsageError(f"{path}: not JSON; it is no aggregate record of an export") from None
        if isinstance(record, dict) and str(record.get("evaluation_id", "")).startswith(f"{COLLECTION}/"):
            found.append((path, record))
    if not found and not any(folder.glob(f"data/{COLLECTION}/*/*/*_samples.jsonl")):
        raise UsageError(
            f"--verify {folder}: no LexPilot export there (data/{COLLECTION}/<developer>/<model>/<uuid>.json); "
            "name the folder an export_results.py --format eee --output DIR wrote (DIR a folder of its own, "
            "not the runs' --output-root)"
        )
    return found


def stated_metrics(record: dict, where: Path) -> dict[MetricKey, float]:
    stated = {}
    try:
        for result in record["evaluation_results"]:
            task, metric, part = result["evaluation_result_id"].split(".", 2)
            stated[MetricKey(task, metric, part)] = float(result["score_details"]["score"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UsageError(
            f"{where}: an evaluation result without its id or score; not an export's record"
        ) from None
    return stated


def instance_counts(row: dict) -> tuple[str, np.ndarray]:
    """A case's task and its counts, from the fields any EEE reader has: the references and the extracted labels."""
    task = row["evaluation_name"].split(".", 1)[1]
    references = row["input"]["reference"]
    labels = [a["extracted_value"] for a in row["answer_attribution"]]
    if task == "LCA":
        return task, lca_counts(zip(references, labels))
    if task == "DCG":
        return task, np.array([float(row["evaluation"]["score"]), 1.0])
    return task, confusion(zip(references, labels))


def recomputed_run(model: str, run_id: str, samples: Path) -> Run:
    """The run's metrics from its instance records alone, overall and per class, as scoring.py makes them."""
    per_task: dict[str, tuple[list, list, list]] = {}
    for n, line in enumerate(samples.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            if row["evaluation_name"].split(".", 1)[1] not in MAIN_TASKS:
                continue  # a later stage or a diagnostic: no part of Tables 2 and 3
            task, counts = instance_counts(row)
            cls = cause_class(row["metadata"]["cause_of_action"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise UsageError(f"{samples}:{n}: not an export's instance record ({e})") from None
        cases, classes, rows = per_task.setdefault(task, ([], [], []))
        cases.append(row["sample_id"])
        classes.append(cls)
        rows.append(counts)
    run = Run(run_id, model, Manifest.of({}), "")
    for task, (cases, classes, rows) in per_task.items():
        data = run.tasks[task] = TaskData(cases, classes, np.array(rows))
        for metric, value in metrics_of(task, data).items():
            run.metrics[MetricKey(task, metric)] = value
        for cls in sorted(set(classes)):
            for metric, value in metrics_of(task, data, np.array(classes) == cls).items():
                run.metrics[MetricKey(task, metric, cls)] = value
    return run


def read_result(path: Path, record: dict, folder: Path) -> ExportedResult:
    """One aggregate and its companion, read."""
    try:
        details = record["source_metadata"]["additional_details"]
        model, run_id, group = record["model_info"]["id"], details["lexpilot_run"], details["group"]
        settings = str(details["group_digest"])
        companion = record["detailed_evaluation_results"]
        samples = folder / companion["file_path"]
    except (KeyError, TypeError):
        raise UsageError(
            f"{path}: not an aggregate record of export_results.py (no run id, group, settings digest or samples)"
        ) from None
    if not samples.is_file():
        raise UsageError(f"{path}: its instance records {samples} are missing; export the run again")
    problems = []
    if companion.get("checksum") != hashlib.sha256(samples.read_bytes()).hexdigest():
        problems.append(
            f"model {model}, run {run_id}: {samples.name} does not match the checksum its aggregate states"
        )
    return ExportedResult(
        model,
        run_id,
        group,
        settings,
        stated_metrics(record, path),
        recomputed_run(model, run_id, samples),
        problems,
        samples.resolve(),
    )


def groups_of(results: list[ExportedResult], stated: bool, per_run: bool = False) -> list[Group]:
    """The runs grouped as show_results.py groups them, by their model and settings digest (not by the label, which
    names differences from the paper's settings alone), in order of model and run id, each group named by its label (and its
    digest where two groups of one export share a label). With `stated`, each run carries the values its aggregate
    states; with `per_run`, every run is a group."""
    ordered = sorted(results, key=lambda r: (r.model, r.run_id))
    labels = group_labels(ordered)
    groups: dict[str, Group] = {}
    for result in ordered:
        run = result.recomputed
        if stated:
            metrics = {key: result.stated.get(key) for key in run.metrics} | result.stated
            run = Run(result.run_id, result.model, run.manifest, "", metrics=dict(metrics))
        label = labels[(result.model, result.settings)]
        label = f"{label}, run {result.run_id}" if per_run else label
        groups.setdefault(label, Group(result.model, (), [], label=label)).runs.append(run)
    return list(groups.values())


def group_labels(results: list[ExportedResult]) -> dict[tuple[str, str], str]:
    """(model, settings digest) -> the label its first run states; where runs of other settings state the same
    label (the label leaves out the cases and the code; an export made before labels were made from the run alone
    labelled each against other runs), each named with its digest too."""
    labels: dict[tuple[str, str], str] = {}
    for result in results:
        labels.setdefault((result.model, result.settings), result.group)
    shared = [label for label in labels.values() if list(labels.values()).count(label) > 1]
    return {
        key: f"{label} (settings {key[1][:8]})" if label in shared else label for key, label in labels.items()
    }


def verified_tables(groups: list[Group]) -> list:
    tables = {t.id: t for t in results_tables(groups, None)}
    return [tables[i].at(None) for i in VERIFIED_TABLES]


def differences(results: list[ExportedResult]) -> list[str]:
    """Every cell that differs at the printed digits, per group and per run."""
    found = []
    for per_run in (False, True):
        shown = verified_tables(groups_of(results, stated=True, per_run=per_run))
        recomputed = verified_tables(groups_of(results, stated=False, per_run=per_run))
        for said, made in zip(shown, recomputed):
            for said_row, made_row in zip(said.rows, made.rows):
                for header, a, b in zip(said.headers[1:], said_row[1:], made_row[1:]):
                    if str(a) != str(b):
                        found.append(
                            f"{PAPER_NAME[said.id]}, model {said_row[0]}, {header}: the export states {a}, "
                            f"its instance records give {b}"
                        )
    return list(dict.fromkeys(found))


def orphans(folder: Path, results: list[ExportedResult]) -> list[str]:
    """A line per instance-record file no aggregate names (its aggregate deleted): EEE's validator refuses such a file,
    and no table states what it holds."""
    named = {r.samples for r in results}
    return [
        f"{path.relative_to(folder)}: instance records without the aggregate record that names them; "
        "export the run again, or remove the file"
        for path in sorted(folder.glob(f"data/{COLLECTION}/*/*/*_samples.jsonl"))
        if path.resolve() not in named
    ]


def verify_export(folder: Path) -> int:
    """Print the tables recomputed from the export; 1 when any value differs from what it states, else 0."""
    folder = folder.resolve()
    results = [read_result(path, record, folder) for path, record in aggregates(folder)]
    if results:
        print(render_text(verified_tables(groups_of(results, stated=False)), TEXT_WIDTH))
    problems = orphans(folder, results) + [p for r in results for p in r.problems]
    problems += differences(results) if results else []
    for problem in problems:
        print(f"export_results --verify: {problem}", file=sys.stderr)
    if problems:
        print(
            f"export_results --verify: {counted(len(problems), 'difference')}; the export does not hold",
            file=sys.stderr,
        )
        return 1
    print(
        f"export_results --verify: {counted(len(results), 'run')} recomputed from {folder}; every printed value holds"
    )
    return 0
