"""Scoring one run: every task's metrics overall and per class (from per-case counts, so that the bootstrap can
resample cases), the later sections' analyses (Table 4, focal types, the plain consultation, clean cases),
interaction behaviour and token usage.
"""

from __future__ import annotations

from collections import Counter
from operator import add
from pathlib import Path

import numpy as np

from lexpilot.benchmark.categories import FOCAL_TYPES, cause_class
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
)
from lexpilot.benchmark.vocabulary import ASKS, BEHAVIOURS, HISTORY_TYPES
from lexpilot.pricing import counts_of
from lexpilot.reporting.scoring.metrics import (
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
)
from lexpilot.reporting.scoring.runs import (
    OVERALL,
    USAGE_FIELDS,
    MetricKey,
    Run,
    TaskData,
    complete_task,
    read_saved,
)
from lexpilot.storage.checkpoints import NOT_USED, paid_not_used, read_unanswered, steps_paid_for
from lexpilot.text import counted


def ljp_case_counts(record: dict) -> np.ndarray:
    if not len(record["claims"]) == len(record["gold"]) == len(record["predicted"]) > 0:
        raise ValueError
    return confusion(zip(record["gold"], record["predicted"]))


# task -> (verdict or label records, per-case counts of a record, metrics from summed counts)
TASKS = {
    "LCA": (
        LCA,
        lambda r: lca_counts([(j["true_type"], j["predicted_type"]) for j in r["judgments"].values()]),
        lca_from_counts,
    ),
    "DCG": (DCG, lambda r: np.array([float(bool(r["success"])), 1.0]), dcg_from_counts),
    **{s.task: (s.verdicts, ljp_case_counts, ljp_from_counts) for s in LJP_SETUPS},
    **{
        f"plain_{t}": (PLAIN_TYPES[t], lambda r: plain_counts(r["type"]), plain_from_counts)
        for t in HISTORY_TYPES
    },
}
TASKS |= {f"audit_{source}": (AUDIT[source], audit_counts, audit_from_counts) for source in AUDIT}
# Table 4: Direct, Targeted and Off-target on the cases resolved in both conditions (filled in score_behaviour_
# dialogues, not read from one file)
# Table 4 over every case and claim ("QWK over all 657 equally weighted claims per run"; "Direct results are
# reused from Table 3"), and, as a sensitivity view, over the cases resolved in both conditions
TABLE_4_SETUPS = {"direct": LJP_DIRECT, **{b: LJP_BEHAVIOUR[b] for b in BEHAVIOURS}}  # its setups' records
TABLE_4 = {f"T4_{setup}": kind for setup, kind in TABLE_4_SETUPS.items()}  # task -> its records, every case
TABLE_4_RESOLVED = {f"T4r_{setup}": kind for setup, kind in TABLE_4_SETUPS.items()}  # the resolved cases'
# either task's records are read once, under the every-case task's name
TABLE_4_RECORDS = {**{t: t for t in TABLE_4}, **{r: t for r, t in zip(TABLE_4_RESOLVED, TABLE_4)}}
TASKS |= {
    task: (kind, ljp_case_counts, ljp_from_counts) for task, kind in {**TABLE_4, **TABLE_4_RESOLVED}.items()
}
# run only when wanted: the plain consultation, the simulator audit
OPTIONAL_TASKS = {f"plain_{t}" for t in HISTORY_TYPES} | {f"audit_{source}" for source in AUDIT}
# task using User Model replies -> (its audit, the metric shown on the cases whose replies were all clean)
AUDITED = {"DCG": ("audit_dcg", "accuracy"), "LJP_interaction": ("audit_interaction", "qwk")}
METRIC_NAMES = {
    "macro_f1": "Macro-F1",
    "accuracy": "accuracy",
    "qwk": "QWK",
    "acc_c": "Acc_C",
    "acc_u": "Acc_U",
}
BY_CAUSE = {"LCA": "macro_f1", "DCG": "accuracy"}  # Figure 3's metrics, per cause of action
TASK_NAMES = {
    "LCA": "LCA",
    "DCG": "DCG",
    **{s.task: f"LJP {s.name}" for s in LJP_SETUPS},
    **{f"plain_{t}": f"plain consultation ({t})" for t in HISTORY_TYPES},
    **{f"audit_{s}": f"simulator audit ({s})" for s in AUDIT},
}


def metrics_of(task: str, data: TaskData, mask=None) -> dict:
    counts = data.counts if mask is None else data.counts[mask]
    return plain(TASKS[task][2](counts.sum(axis=0)))


def item_outcomes(saved: dict) -> dict[str, dict]:
    """Per task: item -> (outcome, right), what consistency over runs compares: an LCA label per (case, history),
    a DCG success per case, a verdict per (case, claim) of each LJP setup (`saved`: kind name -> case -> record).
    Kept with every run, so that --consistency needs none of the records themselves."""
    items: dict[str, dict] = {"LCA": {}, "DCG": {}}
    for number, record in saved.get(LCA.name, {}).items():
        for history, j in record["judgments"].items():
            items["LCA"][(number, history)] = (j["predicted_type"], j["predicted_type"] == j["true_type"])
    for number, record in saved.get(DCG.name, {}).items():
        items["DCG"][number] = (bool(record["success"]), bool(record["success"]))
    for setup in LJP_SETUPS:
        items[f"LJP {setup.title}"] = {
            (number, i): (p, p == g)
            for number, record in saved.get(setup.task, {}).items()
            for i, (p, g) in enumerate(zip(record["predicted"], record["gold"]))
        }
    return items


def score_run(run: Run, root: Path, keep_records: bool = False, keep_outcomes: bool = False) -> None:
    """Every task's metrics overall and per class, the later sections' analyses, the interaction behaviour and
    the token usage of one run."""
    saved = {kind.name: read_saved(run, root, kind) for kind in RECORD_KINDS}  # each file read once
    if keep_records:
        run.saved = {name: records for name, (records, _) in saved.items()}
        run.ran = stages_ran(run, root)
    if keep_outcomes:
        run.outcomes = item_outcomes({name: records for name, (records, _) in saved.items()})

    def whole(kind: RecordKind):
        return complete_task(kind.path(root, run.run_id, run.folder), run.selected, *saved[kind.name])

    # A non-ideal-user run is only an Interaction-Based LJP result (Table 15).
    tasks = (
        ["LJP_interaction", "audit_interaction"]
        if run.condition != "standard"
        else [t for t in TASKS if t not in TABLE_4 and t not in TABLE_4_RESOLVED]
    )
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
        score_table_4(
            run,
            root,
            {name: whole(kind) for name, kind in TABLE_4.items()},
            {b: whole(BEHAVIOUR_DIALOGUE[b])[0] for b in BEHAVIOURS},
        )
    score_plain_against_lexawn(run, whole(PLAIN_TYPES["underspecified"])[0], whole(LCA)[0])
    interactions, _ = whole(INTERACTION)  # a missing file only leaves out the behaviour tables
    if interactions:
        try:
            score_behaviour(run, interactions)
        except (KeyError, TypeError) as e:
            run.problems.append(
                f"behaviour: {INTERACTION.path(root, run.run_id, run.folder)}: unreadable "
                f"interaction record ({e})"
            )
    score_usage(run, root, {name: records for name, (records, _) in saved.items()})


def stages_ran(run: Run, root: Path) -> set[str]:
    """The record kinds a run's stages were run for: their file is there, or the run paid for replies of them that no
    record holds (a stage whose every case failed writes no file)."""
    there = {kind.name for kind in RECORD_KINDS if kind.path(root, run.run_id, run.folder).exists()}
    return there | steps_paid_for(root / "runs" / run.run_id / run.folder)


def score_task(run: Run, task: str, path: Path, records: dict | None, problem: str | None) -> None:
    """One task's per-case counts, and its metrics overall, per class and (Figure 3) per cause of action."""
    case_counts = TASKS[task][1]
    records = records if records is not None else {}  # None only with a problem (complete_task)
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
        run.metrics[MetricKey(task, metric)] = value
    for cls in sorted(set(classes)):
        for metric, value in metrics_of(task, data, np.array(classes) == cls).items():
            run.metrics[MetricKey(task, metric, cls)] = value
    if task in BY_CAUSE:  # Figure 3: the metric within each cause of action
        causes = np.array([r["cause_of_action"] for r in records.values()])
        for cause in sorted(set(causes)):
            run.metrics[MetricKey("by cause", task, cause)] = metrics_of(task, data, causes == cause)[
                BY_CAUSE[task]
            ]
            run.metrics[MetricKey("cases by cause", task, cause)] = float((causes == cause).sum())


def score_clean_cases(run: Run) -> None:
    """DCG and Interaction-Based LJP on the cases whose simulator replies the audit found all clean."""
    for task, (audit, metric) in AUDITED.items():
        if task in run.tasks and audit in run.tasks:
            clean = dict(zip(run.tasks[audit].cases, (run.tasks[audit].counts[:, 1:3].sum(axis=1) == 0)))
            mask = np.array([clean.get(n, False) for n in run.tasks[task].cases])
            run.metrics[MetricKey("clean", task)] = (
                metrics_of(task, run.tasks[task], mask)[metric] if mask.any() else None
            )
            run.metrics[MetricKey("clean cases", task)] = float(mask.sum())


def score_plain_against_lexawn(run: Run, plain: dict | None, lca: dict | None) -> None:
    """Does the LexAwN prompt turn each plain response type into a question (on the same history)?"""
    if not (plain and lca):
        return
    for kind in PLAIN_TYPE_ORDER:
        asked = [
            lca[n]["judgments"]["underspecified"]["label"] == ASKS
            for n, r in plain.items()
            if r["type"] == kind
        ]
        run.metrics[MetricKey("plain_then_asked", kind)] = float(np.mean(asked)) if asked else None


BASE_FIELDS = ("calls", "prompt_tokens", "completion_tokens")


def score_usage(run: Run, root: Path, saved: dict[str, dict]) -> None:
    """Tokens per stage file and role (spending counts even in an unfinished file), and calls paid but never
    answered."""
    # a re-judged run's copied generations were paid for by its source run: counting them again overstates spending
    copied = REJUDGE_REUSED if run.manifest.rejudged else ()
    for kind in (k for k in RECORD_KINDS if k not in copied):
        totals: dict[str, list[int]] = {}  # role -> a sum per field: plain lists, 583,000 records at 10 × 5
        extras: dict[
            str, Counter
        ] = {}  # role -> the counts of price classes and served models ("flex:calls")
        for record in saved[kind.name].values():
            usage = record.get("usage")
            for role, used in usage.items() if isinstance(usage, dict) else ():
                counts = [used.get(k, 0) for k in USAGE_FIELDS] if isinstance(used, dict) else None
                if counts is None or not all(isinstance(c, int) for c in counts):
                    run.problems.append(
                        f"usage: {kind.path(root, run.run_id, run.folder)}: malformed usage for "
                        f"case {record['case_number']}; left out of the token counts"
                    )
                    continue
                total = totals.get(role) or totals.setdefault(role, [0] * len(USAGE_FIELDS))
                total[:] = map(add, total, counts)
                if len(used) > len(BASE_FIELDS):  # beside the three every entry has: any count kept by name
                    extras.setdefault(role, Counter()).update(
                        {
                            k: v
                            for k, v in used.items()
                            if ":" in k and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                        }
                    )
                    served = counts_of(used, "served")
                    if served:
                        run.served.setdefault(role, Counter()).update(served)
        for role, total in totals.items():
            summed = run.usage.setdefault(kind.file, {})[role] = Counter(dict(zip(USAGE_FIELDS, total)))
            summed.update(extras.get(role, Counter()))
    folder = root / "runs" / run.run_id / run.folder
    run.unanswered = read_unanswered(folder / "unanswered_calls.json")
    not_used, unreadable = paid_not_used(folder, {name: set(records) for name, records in saved.items()})
    if not_used:
        run.usage[NOT_USED] = not_used
    if unreadable:
        run.problems.append(
            f"usage: {folder}: {counted(unreadable, 'line')} of replies paid for but not used are unreadable; "
            "left out of the token counts"
        )


def score_focal_types(run: Run, types: dict) -> None:
    """Figure 4: DCG accuracy per focal-point type (a case counts once in each type among its focal points),
    and the number of focal points per type and class."""
    for number, record in types.items():
        cls = cause_class(record["cause_of_action"])
        run.focal_types[number] = (cls, [FOCAL_TYPES.get(e["type"], e["type"]) for e in record["types"]])
        for entry in record["types"]:
            key = MetricKey("focal points", FOCAL_TYPES.get(entry["type"], entry["type"]), cls)
            run.metrics[key] = (run.metrics.get(key) or 0.0) + 1  # a count, never None
    data = run.tasks.get("DCG")
    if data is None:
        return
    # Figure 4 (b) over the same runs as (a): the runs with focal-point types
    for key in [k for k in run.metrics if (k.family, k.name) == ("DCG", "accuracy")]:
        run.metrics[MetricKey("DCG typed", "accuracy", key.part)] = run.metrics[key]
    of_case = {n: {FOCAL_TYPES.get(e["type"], e["type"]) for e in r["types"]} for n, r in types.items()}
    for label in FOCAL_TYPES.values():
        mask = np.array([label in of_case.get(n, ()) for n in data.cases])
        run.metrics[MetricKey("DCG by focal type", label)] = (
            metrics_of("DCG", data, mask)["accuracy"] if mask.any() else None
        )


def score_table_4(run: Run, root: Path, verdicts: dict, dialogues: dict) -> None:
    """Table 4: QWK Direct / Targeted / Off-target over every case and claim (an unresolved case predicted from
    its last attempted dialogue, and counted as unresolved), the same over the cases resolved in both conditions
    (a sensitivity view), and per condition how many cases were accepted at each attempt, and the reasons."""
    problems = [f"{name}: {problem}" for name, (_, problem) in verdicts.items() if problem]
    if problems or any(d is None for d in dialogues.values()):
        hint = (
            " (run eval_LJP_direct.py for this run: Table 4 compares with Direct)"
            if verdicts["T4_direct"][1]
            else ""
        )
        run.problems.append("Table 4: " + "; ".join(problems or ["dialogues incomplete"]) + hint)
        return
    resolved = [
        n for n in run.selected if all(verdicts[f"T4_{b}"][0][n]["status"] == "accepted" for b in BEHAVIOURS)
    ]
    for cases, tasks in ((run.selected, TABLE_4), (resolved, TABLE_4_RESOLVED)):
        for task, kind in tasks.items():
            records = verdicts[TABLE_4_RECORDS[task]][0]
            rows = [records[n] for n in cases]
            try:
                counts = np.array([ljp_case_counts(r) for r in rows]).reshape(len(rows), -1)
            # an unresolved case saved without a prediction (before 25.2)
            except (ValueError, KeyError, TypeError):
                run.problems.append(
                    f"Table 4: {kind.file}: a case without predicted verdicts; rerun "
                    "eval_LJP_behaviour.py on a new run id"
                )
                return
            data = run.tasks[task] = TaskData(
                list(cases), [cause_class(r["cause_of_action"]) for r in rows], counts
            )
            run.metrics[MetricKey(task, "qwk")] = metrics_of(task, data)["qwk"] if rows else None
    run.metrics[MetricKey("T4 cases", "all")] = float(len(run.selected))
    run.metrics[MetricKey("T4 cases", "resolved")] = float(len(resolved))
    for b, records in dialogues.items():
        attempts = [len(r["attempts"]) if r["status"] == "accepted" else None for r in records.values()]
        for k in range(1, 6):
            run.metrics[MetricKey("T4 attempts", f"{b} {k}")] = float(sum(a == k for a in attempts))
        run.metrics[MetricKey("T4 unresolved", b)] = float(sum(a is None for a in attempts))
        run.rejections[b] = Counter(
            reason for r in records.values() for a in r["attempts"] for reason in a["rejected"]
        )


STOP_CATEGORIES = ("round 1", "round 2", "round 3", "budget")
# the case list's tag of each stop reason: what a cell of the stop reasons opens
STOP_TAGS = {
    "round 1": "premature judgment",
    "round 2": "judged in round 2",
    "round 3": "judged in round 3",
    "budget": "budget reached",
}


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
        run.metrics[MetricKey("behaviour", "questions", cls)] = float(questions[mask].mean())
        for category in STOP_CATEGORIES:
            run.metrics[MetricKey("behaviour", category, cls)] = float((stops[mask] == category).mean())
    disrupted = [r.get("disrupted_round") is not None for r in interactions.values()]
    faults = [r["fault"]["kind"] for r in interactions.values() if isinstance(r.get("fault"), dict)]
    if run.condition != "standard":
        run.metrics[MetricKey("faults", "disrupted")] = float(np.mean(disrupted))
        for kind in ("incomplete", "wrong"):
            run.metrics[MetricKey("faults", kind)] = (
                float(np.mean([f == kind for f in faults])) if faults else None
            )
    data = run.tasks.get("LJP_interaction")
    if data is not None:
        by_case = dict(zip(interactions, stops))
        case_stops = np.array([by_case[n] for n in data.cases])
        for category in STOP_CATEGORIES:
            if (case_stops == category).any():
                run.metrics[MetricKey("LJP_interaction_by_stop", "qwk", category)] = metrics_of(
                    "LJP_interaction", data, case_stops == category
                )["qwk"]
