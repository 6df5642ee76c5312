"""Saved runs for reporting: reading each run's manifest and records (through the one record reader), the
per-run metrics overall and per class, interaction behaviour and token usage; grouping runs with equal
settings; and the bootstrap over whole cases with paired differences.
"""
from __future__ import annotations

import gc
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from operator import add
from pathlib import Path

import numpy as np

from categories import FOCAL_TYPES, cause_class
from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.records import (
    AUDIT,
    BEHAVIOUR_DIALOGUE,
    DCG,
    FOCAL_TYPE_RECORDS,
    INTERACTION,
    LCA,
    LJP_BEHAVIOUR,
    LJP_DIRECT,
    LJP_SETUPS,
    PLAIN_TYPES,
    RECORD_KINDS,
    REJUDGE_REUSED,
    RecordKind,
    collector_paused,
    model_folder,
    read_records,
)
from lexpilot.benchmark.vocabulary import ASKS, BEHAVIOURS, HISTORY_TYPES
from lexpilot.errors import HarnessError, first_of
from lexpilot.reporting.metrics import (
    PLAIN_TYPE_ORDER,
    audit_counts,
    audit_from_counts,
    confusion,
    dcg_from_counts,
    lca_counts,
    lca_from_counts,
    ljp_from_counts,
    plain,
    plain_counts,
    plain_from_counts,
    ratio,
)
from lexpilot.storage.checkpoints import read_unanswered
from lexpilot.storage.manifest import (
    COMPARED_MANIFEST_FIELDS,
    compared_setting,
    read_manifest,
    settings_hash,
)

OVERALL = "Overall"
USAGE_FIELDS = ("calls", "prompt_tokens", "completion_tokens", "unreported_calls", "reasoning_tokens", "batched_calls",
                "cached_prompt_tokens")

# ----------------------------------------------------------------------------- loading and scoring

@dataclass
class TaskData:
    """Per-case counts of one task of one run, in the run's selected-case order."""
    cases: list[str]
    classes: list[str]
    counts: np.ndarray  # cases × counts


@dataclass
class Run:
    run_id: str
    model: str
    manifest: dict
    folder: str
    metrics: dict = field(default_factory=dict)  # (task, metric, class) -> value or None
    tasks: dict = field(default_factory=dict)  # task -> TaskData
    usage: dict = field(default_factory=dict)  # checkpoint file -> role -> usage sums
    problems: list[str] = field(default_factory=list)
    input_hashes: dict = field(default_factory=dict)  # selected case -> input hash (None: not checked)
    notes: list[str] = field(default_factory=list)  # torn last lines left out, for stderr
    unanswered: dict = field(default_factory=dict)  # role -> calls paid but never answered (process killed)
    saved: dict | None = None  # kind name -> case_number -> record, kept for the viewer (keep_records)
    rejections: dict = field(default_factory=dict)  # Table 4: condition -> Counter of rejection reasons
    focal_types: dict = field(default_factory=dict)  # Figure 4: case -> (class, the type of each focal point)

    @property
    def selected(self) -> list[str]:
        return self.manifest["selected_cases"]

    @property
    def condition(self) -> str:
        return self.manifest.get("user_condition", "standard")


def read_saved(run: Run, root: Path, kind: RecordKind) -> tuple[dict, str | None]:
    """The records of one kind saved so far, complete or not (case_number -> record), or the problem:
    a missing file, a malformed line, another schema version, a case the manifest did not select, a record
    made from other inputs than the dataset shown with."""
    path = kind.path(root, run.run_id, run.folder)
    if not path.exists():
        return {}, f"{path}: not found"
    try:
        loaded = read_records(path, kind, run.input_hashes, "the run's files do not match its manifest",
                              notes=run.notes)
    except HarnessError as e:
        return {}, str(e)
    expected = accepted_settings(run, root, kind)
    other = [(line, n) for n, (line, r) in loaded.items() if r.get("settings_hash") not in (None, *expected)]
    if other:  # the manifest says other settings than these records were made with (it was edited, or swapped)
        return {}, (f"{path}:{other[0][0]}: case {other[0][1]} (and {len(other) - 1} more) was made with other "
                    "settings than the run's manifest says; restore the manifest")
    return {n: r for n, (_, r) in loaded.items()}, None


def saved_records(run: Run, root: Path, kind: RecordKind) -> dict:
    """The records of one kind a run saved (case_number -> record): those scoring kept, else read again."""
    return run.saved[kind.name] if run.saved is not None else read_saved(run, root, kind)[0]


def accepted_settings(run: Run, root: Path, kind: RecordKind) -> set[str]:
    """The settings hashes a run's records of `kind` may carry: its manifest's, and for the generations a re-judged
    run copied from its source, the source run's (made with another judge, the one setting that may differ)."""
    hashes = {settings_hash(run.manifest)}
    source = run.manifest.get("rejudged_from")
    if isinstance(source, str) and kind in REJUDGE_REUSED:
        try:
            hashes.add(settings_hash(read_manifest(root / "runs" / source / run.folder / "manifest.json")))
        except HarnessError:
            pass  # the source's manifest is gone: the copies are then refused as made with other settings
    return hashes


def complete_task(path: Path, selected: list[str], records: dict, problem: str | None) -> tuple[dict | None, str | None]:
    """The records in selected-case order, or a problem: the task is incomplete."""
    if problem:
        return None, problem
    missing = [n for n in selected if n not in records]
    if missing:
        shown = ", ".join(first_of(missing))
        return None, f"{path}: incomplete, {len(missing)} of {len(selected)} cases missing: {shown}"
    return {n: records[n] for n in selected}, None


def read_task(run: Run, root: Path, kind: RecordKind) -> tuple[dict | None, str | None]:
    """Every selected case's record of one kind, or why the task cannot be scored."""
    return complete_task(kind.path(root, run.run_id, run.folder), run.selected, *read_saved(run, root, kind))


def ljp_case_counts(record: dict) -> np.ndarray:
    if not len(record["claims"]) == len(record["gold"]) == len(record["predicted"]) > 0:
        raise ValueError
    return confusion(zip(record["gold"], record["predicted"]))


# task -> (verdict or label records, per-case counts of a record, metrics from summed counts)
TASKS = {
    "LCA": (LCA, lambda r: lca_counts([(j["true_type"], j["predicted_type"]) for j in r["judgments"].values()]),
            lca_from_counts),
    "DCG": (DCG, lambda r: np.array([float(bool(r["success"])), 1.0]), dcg_from_counts),
    **{f"LJP_{setup}": (kind, ljp_case_counts, ljp_from_counts) for setup, kind, _, _ in LJP_SETUPS},
    **{f"plain_{t}": (PLAIN_TYPES[t], lambda r: plain_counts(r["type"]), plain_from_counts) for t in HISTORY_TYPES},
}
TASKS |= {f"audit_{source}": (AUDIT[source], audit_counts, audit_from_counts) for source in AUDIT}
# Table 4: Direct, Targeted and Off-target on the cases resolved in both conditions (filled in score_behaviour_
# dialogues, not read from one file)
# Table 4 over every case and claim ("QWK over all 657 equally weighted claims per run"; "Direct results are
# reused from Table 3"), and, as a sensitivity view, over the cases resolved in both conditions
TABLE_4 = {"T4_direct": LJP_DIRECT, **{f"T4_{b}": LJP_BEHAVIOUR[b] for b in BEHAVIOURS}}
TABLE_4_RESOLVED = {f"T4r_{name[3:]}": kind for name, kind in TABLE_4.items()}
TASKS |= {task: (kind, ljp_case_counts, ljp_from_counts) for task, kind in {**TABLE_4, **TABLE_4_RESOLVED}.items()}
# run only when wanted: the plain consultation, the simulator audit
OPTIONAL_TASKS = {f"plain_{t}" for t in HISTORY_TYPES} | {f"audit_{source}" for source in AUDIT}
# task using User Model replies -> (its audit, the metric shown on the cases whose replies were all clean)
AUDITED = {"DCG": ("audit_dcg", "accuracy"), "LJP_interaction": ("audit_interaction", "qwk")}
METRIC_NAMES = {"macro_f1": "Macro-F1", "accuracy": "accuracy", "qwk": "QWK", "acc_c": "Acc_C", "acc_u": "Acc_U"}
BY_CAUSE = {"LCA": "macro_f1", "DCG": "accuracy"}  # Figure 3's metrics, per cause of action
TASK_NAMES = {"LCA": "LCA", "DCG": "DCG", **{f"LJP_{s}": f"LJP {s}" for s, _, _, _ in LJP_SETUPS},
              **{f"plain_{t}": f"plain consultation ({t})" for t in HISTORY_TYPES},
              **{f"audit_{s}": f"simulator audit ({s})" for s in AUDIT}}


def metrics_of(task: str, data: TaskData, mask=None) -> dict:
    counts = data.counts if mask is None else data.counts[mask]
    return plain(TASKS[task][2](counts.sum(axis=0)))


def score_run(run: Run, root: Path, keep_records: bool = False) -> None:
    """Every task's metrics overall and per class, the later sections' analyses, the interaction behaviour and
    the token usage of one run."""
    saved = {kind.name: read_saved(run, root, kind) for kind in RECORD_KINDS}  # each file read once
    if keep_records:
        run.saved = {name: records for name, (records, _) in saved.items()}

    def whole(kind: RecordKind):
        return complete_task(kind.path(root, run.run_id, run.folder), run.selected, *saved[kind.name])

    # A non-ideal-user run is only an Interaction-Based LJP result (Table 15).
    tasks = ["LJP_interaction", "audit_interaction"] if run.condition != "standard" else \
        [t for t in TASKS if t not in TABLE_4 and t not in TABLE_4_RESOLVED]
    for task in tasks:
        kind = TASKS[task][0]
        if task in OPTIONAL_TASKS and not kind.path(root, run.run_id, run.folder).exists():
            continue
        score_task(run, task, kind.path(root, run.run_id, run.folder), *whole(kind))
    types, _ = whole(FOCAL_TYPE_RECORDS)
    if types:
        score_focal_types(run, types)
    score_clean_cases(run)
    if all(LJP_BEHAVIOUR[b].path(root, run.run_id, run.folder).exists() for b in BEHAVIOURS):
        score_table_4(run, root, {name: whole(kind) for name, kind in TABLE_4.items()},
                      {b: whole(BEHAVIOUR_DIALOGUE[b])[0] for b in BEHAVIOURS})
    score_plain_against_lexawn(run, whole(PLAIN_TYPES["underspecified"])[0], whole(LCA)[0])
    interactions, _ = whole(INTERACTION)  # a missing file only leaves out the behaviour tables
    if interactions:
        try:
            score_behaviour(run, interactions)
        except (KeyError, TypeError) as e:
            run.problems.append(f"behaviour: {INTERACTION.path(root, run.run_id, run.folder)}: unreadable "
                                f"interaction record ({e})")
    score_usage(run, root, {name: records for name, (records, _) in saved.items()})


def score_task(run: Run, task: str, path: Path, records: dict | None, problem: str | None) -> None:
    """One task's per-case counts, and its metrics overall, per class and (Figure 3) per cause of action."""
    case_counts = TASKS[task][1]
    if not problem:
        counts = []
        for number, record in records.items():
            try:
                counts.append(case_counts(record))
            except (ValueError, KeyError, TypeError, AttributeError):
                problem = f"{path}: claims and verdicts misaligned for case {number}"
                break
    if not problem:
        try:
            classes = [cause_class(r["cause_of_action"]) for r in records.values()]
        except KeyError as e:
            problem = f"{path}: {e.args[0]}"
    if problem:
        run.problems.append(f"{TASK_NAMES[task]}: {problem}")
        return
    data = run.tasks[task] = TaskData(list(records), classes, np.array(counts))
    for metric, value in metrics_of(task, data).items():
        run.metrics[(task, metric, OVERALL)] = value
    for cls in sorted(set(classes)):
        for metric, value in metrics_of(task, data, np.array(classes) == cls).items():
            run.metrics[(task, metric, cls)] = value
    if task in BY_CAUSE:  # Figure 3: the metric within each cause of action
        causes = np.array([r["cause_of_action"] for r in records.values()])
        for cause in sorted(set(causes)):
            run.metrics[("by cause", task, cause)] = metrics_of(task, data, causes == cause)[BY_CAUSE[task]]
            run.metrics[("cases by cause", task, cause)] = float((causes == cause).sum())


def score_clean_cases(run: Run) -> None:
    """DCG and Interaction-Based LJP on the cases whose simulator replies the audit found all clean."""
    for task, (audit, metric) in AUDITED.items():
        if task in run.tasks and audit in run.tasks:
            clean = dict(zip(run.tasks[audit].cases, (run.tasks[audit].counts[:, 1:3].sum(axis=1) == 0)))
            mask = np.array([clean.get(n, False) for n in run.tasks[task].cases])
            run.metrics[("clean", task, OVERALL)] = metrics_of(task, run.tasks[task], mask)[metric] if mask.any() \
                else None
            run.metrics[("clean cases", task, OVERALL)] = float(mask.sum())


def score_plain_against_lexawn(run: Run, plain: dict | None, lca: dict | None) -> None:
    """Does the LexAwN prompt turn each plain response type into a question (on the same history)?"""
    if not (plain and lca):
        return
    for kind in PLAIN_TYPE_ORDER:
        asked = [lca[n]["judgments"]["underspecified"]["label"] == ASKS for n, r in plain.items() if r["type"] == kind]
        run.metrics[("plain_then_asked", kind, OVERALL)] = float(np.mean(asked)) if asked else None


def score_usage(run: Run, root: Path, saved: dict[str, dict]) -> None:
    """Tokens per stage file and role (spending counts even in an unfinished file), and calls paid but never
    answered."""
    # a re-judged run's copied generations were paid for by its source run: counting them again overstates spending
    copied = REJUDGE_REUSED if run.manifest.get("rejudged_from") else ()
    for kind in (k for k in RECORD_KINDS if k not in copied):
        totals: dict[str, list[int]] = {}  # role -> a sum per field: plain lists, 583,000 records at 10 × 5
        for record in saved[kind.name].values():
            usage = record.get("usage")
            for role, used in (usage.items() if isinstance(usage, dict) else ()):
                counts = [used.get(k, 0) for k in USAGE_FIELDS] if isinstance(used, dict) else None
                if counts is None or not all(isinstance(c, int) for c in counts):
                    run.problems.append(f"usage: {kind.path(root, run.run_id, run.folder)}: malformed usage for "
                                        f"case {record['case_number']}; left out of the token counts")
                    continue
                total = totals.get(role) or totals.setdefault(role, [0] * len(USAGE_FIELDS))
                total[:] = map(add, total, counts)
        for role, total in totals.items():
            run.usage.setdefault(kind.file, {})[role] = Counter(dict(zip(USAGE_FIELDS, total)))
    run.unanswered = read_unanswered(root / "runs" / run.run_id / run.folder / "unanswered_calls.json")


def score_focal_types(run: Run, types: dict) -> None:
    """Figure 4: DCG accuracy per focal-point type (a case counts once in each type among its focal points),
    and the number of focal points per type and class."""
    for number, record in types.items():
        cls = cause_class(record["cause_of_action"])
        run.focal_types[number] = (cls, [FOCAL_TYPES.get(e["type"], e["type"]) for e in record["types"]])
        for entry in record["types"]:
            key = ("focal points", FOCAL_TYPES.get(entry["type"], entry["type"]), cls)
            run.metrics[key] = run.metrics.get(key, 0.0) + 1
    data = run.tasks.get("DCG")
    if data is None:
        return
    of_case = {n: {FOCAL_TYPES.get(e["type"], e["type"]) for e in r["types"]} for n, r in types.items()}
    for label in FOCAL_TYPES.values():
        mask = np.array([label in of_case.get(n, ()) for n in data.cases])
        run.metrics[("DCG by focal type", label, OVERALL)] = metrics_of("DCG", data, mask)["accuracy"] \
            if mask.any() else None


def score_table_4(run: Run, root: Path, verdicts: dict, dialogues: dict) -> None:
    """Table 4: QWK Direct / Targeted / Off-target over every case and claim (an unresolved case predicted from
    its last attempted dialogue, and counted as unresolved), the same over the cases resolved in both conditions
    (a sensitivity view), and per condition how many cases were accepted at each attempt, and the reasons."""
    problems = [f"{name}: {problem}" for name, (_, problem) in verdicts.items() if problem]
    if problems or any(d is None for d in dialogues.values()):
        hint = " (run eval_LJP_direct.py for this run: Table 4 compares with Direct)" \
            if verdicts["T4_direct"][1] else ""
        run.problems.append("Table 4: " + "; ".join(problems or ["dialogues incomplete"]) + hint)
        return
    resolved = [n for n in run.selected if all(verdicts[f"T4_{b}"][0][n]["status"] == "accepted" for b in BEHAVIOURS)]
    for cases, tasks in ((run.selected, TABLE_4), (resolved, TABLE_4_RESOLVED)):
        for task, kind in tasks.items():
            records = verdicts[f"T4_{task.split('_', 1)[1]}"][0]
            rows = [records[n] for n in cases]
            try:
                counts = np.array([ljp_case_counts(r) for r in rows]).reshape(len(rows), -1)
            except (ValueError, KeyError, TypeError):  # an unresolved case saved without a prediction (before 25.2)
                run.problems.append(f"Table 4: {kind.file}: a case without predicted verdicts; rerun "
                                    "eval_LJP_behaviour.py on a new run id")
                return
            data = run.tasks[task] = TaskData(list(cases), [cause_class(r["cause_of_action"]) for r in rows], counts)
            run.metrics[(task, "qwk", OVERALL)] = metrics_of(task, data)["qwk"] if rows else None
    run.metrics[("T4 cases", "all", OVERALL)] = float(len(run.selected))
    run.metrics[("T4 cases", "resolved", OVERALL)] = float(len(resolved))
    for b, records in dialogues.items():
        attempts = [len(r["attempts"]) if r["status"] == "accepted" else None for r in records.values()]
        for k in range(1, 6):
            run.metrics[("T4 attempts", f"{b} {k}", OVERALL)] = float(sum(a == k for a in attempts))
        run.metrics[("T4 unresolved", b, OVERALL)] = float(sum(a is None for a in attempts))
        run.rejections[b] = Counter(reason for r in records.values() for a in r["attempts"]
                                    for reason in a["rejected"])


STOP_CATEGORIES = ("round 1", "round 2", "round 3", "budget")


def stop_category(interaction: dict) -> str:
    """Judged in round 1, 2 or 3, or the forced prediction after the budget."""
    return f"round {len(interaction['rounds'])}" if interaction["stop_reason"] == "judged" else "budget"


def score_behaviour(run: Run, interactions: dict) -> None:
    """Questions before a prediction and stop reasons (premature = judged in round 1), overall and per class;
    Interaction-Based QWK per stop reason."""
    stops = np.array([stop_category(r) for r in interactions.values()])
    questions = np.array([sum(r_["label"] == ASKS for r_ in r["rounds"]) for r in interactions.values()])
    classes = np.array([cause_class(r["cause_of_action"]) for r in interactions.values()])
    for cls in [OVERALL] + sorted(set(classes)):
        mask = np.ones(len(classes), bool) if cls == OVERALL else classes == cls
        run.metrics[("behaviour", "questions", cls)] = float(questions[mask].mean())
        for category in STOP_CATEGORIES:
            run.metrics[("behaviour", category, cls)] = float((stops[mask] == category).mean())
    disrupted = [r.get("disrupted_round") is not None for r in interactions.values()]
    faults = [r["fault"]["kind"] for r in interactions.values() if isinstance(r.get("fault"), dict)]
    if run.condition != "standard":
        run.metrics[("faults", "disrupted", OVERALL)] = float(np.mean(disrupted))
        for kind in ("incomplete", "wrong"):
            run.metrics[("faults", kind, OVERALL)] = float(np.mean([f == kind for f in faults])) if faults else None
    data = run.tasks.get("LJP_interaction")
    if data is not None:
        by_case = dict(zip(interactions, stops))
        case_stops = np.array([by_case[n] for n in data.cases])
        for category in STOP_CATEGORIES:
            if (case_stops == category).any():
                run.metrics[("LJP_interaction_by_stop", "qwk", category)] = \
                    metrics_of("LJP_interaction", data, case_stops == category)["qwk"]


def load_runs(root: Path, models: list[str] | None, run_ids: list[str] | None, score: bool = True,
              dataset: Path | None = None, err=None, keep_records: bool = False) -> list[Run]:
    """The runs under `root` (manifest by manifest), scored unless `score` is false.

    Records are checked against the cases of `dataset` (else the dataset the manifest names, when it is
    still there and unchanged): a record made from other inputs leaves its task out.
    """
    err = err or sys.stderr
    runs = []
    datasets: dict[Path, tuple[dict, str] | str] = {}
    for path in sorted(root.glob("runs/*/*/manifest.json")):
        manifest, problem = run_manifest(path, root)
        if problem:
            print(f"{problem}; run skipped", file=err)
            continue
        model = manifest["models"]["eval"]["model"]
        if (models and model not in models) or (run_ids and manifest["run_id"] not in run_ids):
            continue
        run = Run(manifest["run_id"], model, manifest, path.parent.name)
        run.input_hashes = input_hashes(run, dataset, datasets, err)
        if score:  # judge_agreement only needs the manifests
            with collector_paused():  # records and scores hold no cycles, and are kept to the report's end:
                score_run(run, root, keep_records)
            gc.freeze()  # the cycle collector need not walk them again
        runs.append(run)
    return runs


def run_manifest(path: Path, root: Path) -> tuple[dict | None, str | None]:
    """A manifest with the fields the reports need, or what is wrong with it."""
    try:
        manifest = read_manifest(path)
    except HarnessError as e:
        return None, str(e)
    try:
        model = manifest["models"]["eval"]["model"]
        selected = manifest["selected_cases"]
        run_id = manifest["run_id"]
        if not isinstance(model, str) or not isinstance(run_id, str) or not isinstance(selected, list) \
                or not all(isinstance(n, str) for n in selected):
            raise TypeError
    except (KeyError, TypeError):
        return None, f"{path}: the manifest lacks models.eval.model, run_id or selected_cases (or they are malformed)"
    if path.parent != root / "runs" / run_id / model_folder(model):
        return None, f"{path}: the manifest's run_id {run_id[:80]!r} and model do not match its folder"
    return manifest, None


def input_hashes(run: Run, dataset: Path | None, cache: dict, err) -> dict[str, str | None]:
    """Selected case -> its input hash in the dataset shown with (None where it cannot be checked)."""
    named = run.manifest.get("dataset_path")
    path = dataset or Path(str(named))
    unchecked = {n: None for n in run.selected}
    if dataset is None and (not isinstance(named, str) or not path.is_file()):
        print(f"run {run.run_id}, model {run.model}: the run's dataset {named!r} is not there; records not "
              "checked against it (pass --dataset)", file=err)
        return unchecked
    if path not in cache:
        try:
            cases, sha = load_dataset(path)
            cache[path] = ({c.number: c.input_hash for c in cases}, sha)
        except HarnessError as e:
            cache[path] = str(e).splitlines()[0]
    if isinstance(cache[path], str):
        print(f"run {run.run_id}, model {run.model}: records not checked against the dataset: {cache[path]}",
              file=err)
        return unchecked
    hashes, sha = cache[path]
    if dataset is None and sha != run.manifest.get("dataset_sha256"):
        print(f"run {run.run_id}, model {run.model}: {path} has changed since the run; records not checked "
              "against it (pass the run's --dataset)", file=err)
        return unchecked
    # a case the dataset does not hold gets a hash no record has, so its records are reported
    return {n: hashes.get(n, "not in the dataset") for n in run.selected}


# ----------------------------------------------------------------------------- grouping and statistics

@dataclass
class Group:
    model: str
    settings: tuple
    runs: list[Run]
    differs: list[str] = field(default_factory=list)

    @property
    def condition(self) -> str:
        return self.runs[0].condition

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    def values(self, key) -> list:
        return [r.metrics[key] for r in self.runs if key in r.metrics]

    def stat(self, key) -> dict | None:
        """Mean and sample SD over the runs where the metric is defined; counts the others."""
        values = self.values(key)
        if not values:
            return None
        defined = [v for v in values if v is not None]
        return {"runs": values, "mean": float(np.mean(defined)) if defined else None,
                "sd": float(np.std(defined, ddof=1)) if len(defined) > 1 else None,
                "n": len(defined), "undefined": len(values) - len(defined)}


def settings_key(manifest: dict) -> tuple:
    return tuple(json.dumps(compared_setting(manifest, name), sort_keys=True) for name in COMPARED_MANIFEST_FIELDS)


def group_runs(runs: list[Run]) -> list[Group]:
    groups: dict[tuple, Group] = {}
    for run in sorted(runs, key=lambda r: (r.model, r.run_id)):
        key = (run.model, settings_key(run.manifest))
        groups.setdefault(key, Group(run.model, key[1], [])).runs.append(run)
    ordered = list(groups.values())
    for group in ordered:
        first = next(g for g in ordered if g.model == group.model)
        group.differs = [name for name, a, b in zip(COMPARED_MANIFEST_FIELDS, group.settings, first.settings) if a != b]
    return ordered


def differing_settings(a: dict, b: dict, prefix: str = "") -> list[str]:
    """The settings two groups differ in, down to the sub-setting (models.judge, generation.judge_temperature)."""
    differing = []
    for name in dict.fromkeys([*a, *b]):
        x, y = a.get(name), b.get(name)
        if isinstance(x, dict) and isinstance(y, dict) and not prefix:
            differing += differing_settings(x, y, f"{name}.")
        elif json.dumps(x, sort_keys=True) != json.dumps(y, sort_keys=True):
            differing.append(prefix + name)
    return differing


WORDS_FOR = {"selected_cases": "other cases", "dataset_sha256": "another dataset", "code_hash": "other code",
             "prompt_hash": "other prompts", "user_condition": "another user condition"}


def what_differs(settings: dict, name: str) -> str:
    """A differing setting in a few words: its value where it is short (a temperature, a judge's model)."""
    top, _, sub = name.partition(".")
    if top in WORDS_FOR:
        return WORDS_FOR[top]
    value = settings.get(top, {}).get(sub) if sub else settings.get(top)
    value = value.get("model", value) if isinstance(value, dict) else value
    return f"{sub or top} {str(value)[:24]}"


def group_label(group: Group, groups: list[Group]) -> str:
    """The model (and a non-ideal user); a further group of the same model is labelled by what differs from its
    first group (re-judged by a judge, another temperature, other code), not by a number."""
    siblings = [g for g in groups if g.model == group.model and g.condition == group.condition]
    label = group.model if group.condition == "standard" else f"{group.model} ({group.condition} user)"
    if len(siblings) == 1 or siblings[0] is group:
        return label
    text = difference_text(group, siblings[0])
    clash = any(difference_text(g, siblings[0]) == text for g in siblings[1:] if g is not group)
    return f"{label} · {text}" + (f" #{siblings.index(group) + 1}" if clash else "")


def difference_text(group: Group, first: Group) -> str:
    theirs, mine = ({n: json.loads(v) for n, v in zip(COMPARED_MANIFEST_FIELDS, g.settings)} for g in (first, group))
    if mine.get("rejudged_from"):
        return f"{mine['rejudged_from']} re-judged by {((mine.get('models') or {}).get('judge') or {}).get('model', '?')}"
    return ", ".join(dict.fromkeys(what_differs(mine, n) for n in differing_settings(theirs, mine))) or "other runs"


# ----------------------------------------------------------------------------- bootstrap over cases

MAX_RESAMPLES = 100_000  # --resamples: more adds nothing a paper reports, and costs minutes of CPU per table


@dataclass
class Bootstrap:
    """Resampling of whole cases (a case's claims and both its histories stay together).

    One draw of cases per resample, shared by every run, task, setup and model on the same selected cases,
    so differences between setups or models are paired. A group's value in a resample is the mean over its
    runs of the metric on that resample.
    """
    resamples: int = 1000
    seed: int = 0
    _weights: dict = field(default_factory=dict)
    _metrics: dict = field(default_factory=dict)

    def weights(self, cases: tuple) -> np.ndarray:
        """Resamples × cases: how often each case was drawn."""
        if cases not in self._weights:
            rng = np.random.default_rng(self.seed)
            draws = rng.integers(0, len(cases), size=(self.resamples, len(cases)))
            self._weights[cases] = np.stack([np.bincount(d, minlength=len(cases)) for d in draws]).astype(float)
        return self._weights[cases]

    def distribution(self, group: Group, key: tuple) -> np.ndarray | None:
        task, metric, cls = key
        if (id(group), task, cls) not in self._metrics:
            per_run = []
            for run in group.runs:
                data = run.tasks.get(task)
                if data is not None:
                    counts = data.counts if cls == OVERALL else data.counts * (np.array(data.classes) == cls)[:, None]
                    per_run.append(TASKS[task][2](self.weights(tuple(data.cases)) @ counts))
            self._metrics[(id(group), task, cls)] = per_run
        per_run = self._metrics[(id(group), task, cls)]
        if not per_run:
            return None
        values = np.array([m[metric] for m in per_run])
        defined = ~np.isnan(values)
        return ratio(np.where(defined, values, 0).sum(axis=0), defined.sum(axis=0))

    def interval(self, group: Group, key: tuple) -> tuple[float, float] | None:
        return percentile_interval(self.distribution(group, key))


def percentile_interval(values: np.ndarray | None) -> tuple[float, float] | None:
    """The 95% percentile interval over the resamples where the value is defined."""
    if values is None or np.isnan(values).all():
        return None
    lo, hi = np.percentile(values[~np.isnan(values)], [2.5, 97.5])
    return float(lo), float(hi)


def paired_difference(boot: Bootstrap, a: tuple[Group, tuple], b: tuple[Group, tuple]) -> dict | None:
    """a − b on the same resampled cases: point difference of the group means, interval, share below zero."""
    (ga, ka), (gb, kb) = a, b
    mean_a, mean_b = (ga.stat(ka) or {}).get("mean"), (gb.stat(kb) or {}).get("mean")
    da, db = boot.distribution(ga, ka), boot.distribution(gb, kb)
    if None in (mean_a, mean_b) or da is None or db is None:
        return None
    diff = da - db
    defined = diff[~np.isnan(diff)]
    return {"difference": mean_a - mean_b, "ci": percentile_interval(diff),
            "below_zero": float((defined < 0).mean()) if defined.size else None}
