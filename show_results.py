"""Print the paper's tables from saved runs; never calls an API.

Reads runs/<run>/<model>/manifest.json and eval_results/<run>/<model>/*.jsonl under --output-root.
Metrics are computed within each run (overall and per cause-of-action class), then runs with identical
settings are grouped and reported as mean and sample SD (ddof=1). Writes only to stdout
(problems with the saved files go to stderr).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from categories import CLASS_LABELS, cause_class
from common import (A1, COMPARED_MANIFEST_FIELDS, DCG_RESULTS, DIRECT_GEN, FORCE_ASK, GOLD_GEN, HERE, INTERACTION,
                    LCA_RESULTS, LJP_DIRECT, LJP_GOLD, LJP_INTERACTION, ROLES, VERDICTS)

OVERALL = "Overall"
LJP_SETUPS = (("direct", LJP_DIRECT, "Direct"), ("interaction", LJP_INTERACTION, "Interaction-Based"),
              ("gold", LJP_GOLD, "Gold-Standard"))
USER_CONDITION_NAMES = (("standard", "Standard"), ("delayed", "Delayed Disclosure"), ("self-correction", "Self-Correction"))


# ----------------------------------------------------------------------------- metrics
# Each task reduces a case to a small vector of counts; a metric is a function of the summed counts.
# The same functions give the point estimate (counts summed over the cases) and, vectorised over the
# first axis, every bootstrap resample (counts weighted by how often each case was drawn).

K = len(VERDICTS)
VERDICT_INDEX = {label: i for i, label in enumerate(VERDICTS)}
QWK_WEIGHTS = np.subtract.outer(np.arange(K), np.arange(K)) ** 2 / (K - 1) ** 2


def _ratio(num, den):
    """num/den, NaN where den is 0 (the metric is undefined there)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=den != 0)


def lca_counts(labels) -> np.ndarray:
    """(TP, FP, FN, TN) with underspecified as the positive class, from (true, predicted) types."""
    cells = {("underspecified", "underspecified"): 0, ("complete", "underspecified"): 1,
             ("underspecified", "complete"): 2, ("complete", "complete"): 3}
    c = np.zeros(4)
    for pair in labels:
        c[cells[pair]] += 1
    return c


def lca_from_counts(c: np.ndarray) -> dict:
    tp, fp, fn, tn = np.moveaxis(np.asarray(c, float), -1, 0)
    # an F1 with no positive anywhere is 0, as in the paper's always-ask / always-answer 1/3
    f1_u = np.nan_to_num(_ratio(2 * tp, 2 * tp + fp + fn))
    f1_c = np.nan_to_num(_ratio(2 * tn, 2 * tn + fp + fn))
    return {"macro_f1": (f1_u + f1_c) / 2, "f1_u": f1_u, "f1_c": f1_c,
            "acc_c": _ratio(tn, tn + fp), "acc_u": _ratio(tp, tp + fn)}


def dcg_from_counts(c: np.ndarray) -> dict:
    successes, cases = np.moveaxis(np.asarray(c, float), -1, 0)
    return {"accuracy": _ratio(successes, cases)}


def confusion(pairs) -> np.ndarray:
    """Gold × predicted counts on the fixed ordinal scale, flattened."""
    c = np.zeros((K, K))
    for g, p in pairs:
        c[VERDICT_INDEX[g], VERDICT_INDEX[p]] += 1
    return c.ravel()


def ljp_from_counts(c: np.ndarray) -> dict:
    observed = np.asarray(c, float).reshape(*np.shape(c)[:-1], K, K)
    n = observed.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = observed.sum(-1)[..., :, None] * observed.sum(-2)[..., None, :] / n[..., None, None]
    expected_disagreement = np.nan_to_num((QWK_WEIGHTS * expected).sum(axis=(-2, -1)))
    observed_disagreement = (QWK_WEIGHTS * observed).sum(axis=(-2, -1))
    # QWK undefined when the expected disagreement is zero (one label on either side, or no claim)
    qwk = 1 - _ratio(observed_disagreement, expected_disagreement)
    return {"qwk": qwk, "accuracy": _ratio(np.trace(observed, axis1=-2, axis2=-1), n)}


def _plain(metrics: dict) -> dict:
    return {k: None if np.isnan(v) else float(v) for k, v in metrics.items()}


def lca_metrics(labels: list[tuple[str, str]]) -> dict:
    """labels: (true type, predicted type) per history; underspecified is the positive class."""
    return _plain(lca_from_counts(lca_counts(labels)))


def quadratic_weighted_kappa(gold: list[str], predicted: list[str]) -> float | None:
    """QWK on the fixed ordinal labels 支持=0, 部分支持=1, 驳回=2; None when expected disagreement is zero."""
    return _plain(ljp_from_counts(confusion(zip(gold, predicted))))["qwk"]


def ljp_metrics(pairs: list[tuple[str, str]]) -> dict:
    return _plain(ljp_from_counts(confusion(pairs)))


# ----------------------------------------------------------------------------- loading

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

    @property
    def condition(self) -> str:
        return self.manifest.get("user_condition", "standard")


def read_task(path: Path, selected: list[str]) -> tuple[dict | None, str | None]:
    """case_number -> record, or a problem: missing file, malformed line, unknown/duplicate/missing cases."""
    return complete_task(path, selected, *read_records(path, selected))


def complete_task(path: Path, selected: list[str], records: dict, problem: str | None) -> tuple[dict | None, str | None]:
    if problem:
        return None, problem
    missing = [n for n in selected if n not in records]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return None, f"{path}: incomplete, {len(missing)} of {len(selected)} cases missing: {shown}"
    return {n: records[n] for n in selected}, None


def read_records(path: Path, selected: list[str]) -> tuple[dict, str | None]:
    """The records saved so far, complete or not."""
    if not path.exists():
        return {}, f"{path}: not found"
    records = {}
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                record = json.loads(line)
                number = record["case_number"]
            except (json.JSONDecodeError, KeyError, TypeError):
                return {}, f"{path}:{lineno}: malformed record"
            if number in records:
                return {}, f"{path}:{lineno}: second record for case {number}"
            records[number] = record
    extra = sorted(set(records) - set(selected))
    if extra:
        return {}, f"{path}: cases not selected by the run's manifest: {', '.join(extra[:5])}"
    return records, None


def ljp_case_counts(record: dict) -> np.ndarray:
    if not len(record["claims"]) == len(record["gold"]) == len(record["predicted"]) > 0:
        raise ValueError
    return confusion(zip(record["gold"], record["predicted"]))


# task -> (results file, per-case counts of a record, metrics from summed counts)
TASKS = {
    "LCA": (LCA_RESULTS, lambda r: lca_counts([(j["true_type"], j["predicted_type"]) for j in r["judgments"].values()]),
            lca_from_counts),
    "DCG": (DCG_RESULTS, lambda r: np.array([float(bool(r["success"])), 1.0]), dcg_from_counts),
    **{f"LJP_{setup}": (where, ljp_case_counts, ljp_from_counts) for setup, where, _ in LJP_SETUPS},
}
METRIC_NAMES = {"macro_f1": "Macro-F1", "accuracy": "accuracy", "qwk": "QWK", "acc_c": "Acc_C", "acc_u": "Acc_U"}
TASK_NAMES = {"LCA": "LCA", "DCG": "DCG", **{f"LJP_{s}": f"LJP {s}" for s, _, _ in LJP_SETUPS}}
USAGE_FILES = (A1, LCA_RESULTS, INTERACTION, FORCE_ASK, DCG_RESULTS, DIRECT_GEN, LJP_DIRECT, GOLD_GEN, LJP_GOLD,
               LJP_INTERACTION)


def metrics_of(task: str, data: TaskData, mask=None) -> dict:
    counts = data.counts if mask is None else data.counts[mask]
    return _plain(TASKS[task][2](counts.sum(axis=0)))


def score_run(run: Run, root: Path) -> None:
    selected = run.manifest["selected_cases"]
    folder = lambda where: root / where[0] / run.run_id / run.folder / where[1]  # noqa: E731
    files: dict = {}

    def read(where, whole: bool = True):  # each file is read once, for its metrics and for its usage
        if where not in files:
            files[where] = read_records(folder(where), selected)
        return complete_task(folder(where), selected, *files[where]) if whole else files[where]

    # A non-ideal-user run is only an Interaction-Based LJP result (Table 15).
    tasks = ["LJP_interaction"] if run.condition != "standard" else list(TASKS)
    for task in tasks:
        where, case_counts, _ = TASKS[task]
        records, problem = read(where)
        if not problem:
            counts = []
            for number, record in records.items():
                try:
                    counts.append(case_counts(record))
                except (ValueError, KeyError, TypeError):
                    problem = f"{folder(where)}: claims and verdicts misaligned for case {number}"
                    break
        if problem:
            run.problems.append(f"{TASK_NAMES[task]}: {problem}")
            continue
        classes = [cause_class(r["cause_of_action"]) for r in records.values()]
        data = run.tasks[task] = TaskData(list(records), classes, np.array(counts))
        for metric, value in metrics_of(task, data).items():
            run.metrics[(task, metric, OVERALL)] = value
        for cls in sorted(set(classes)):
            for metric, value in metrics_of(task, data, np.array(classes) == cls).items():
                run.metrics[(task, metric, cls)] = value
    interactions, _ = read(INTERACTION)  # a missing file only leaves out the behaviour tables
    if interactions:
        score_behaviour(run, interactions)
    for where in USAGE_FILES:  # spending counts even in an unfinished file
        records, _ = read(where, whole=False)
        for record in records.values():
            for role, used in (record.get("usage") or {}).items():
                total = run.usage.setdefault(where[1], {}).setdefault(role, Counter())
                total.update({k: used.get(k, 0) for k in ("calls", "prompt_tokens", "completion_tokens",
                                                           "unreported_calls")})


STOP_CATEGORIES = ("round 1", "round 2", "round 3", "budget")


def stop_category(interaction: dict) -> str:
    """Judged in round 1, 2 or 3, or the forced prediction after the budget."""
    return f"round {len(interaction['rounds'])}" if interaction["stop_reason"] == "judged" else "budget"


def score_behaviour(run: Run, interactions: dict) -> None:
    """Questions before a prediction and stop reasons (premature = judged in round 1), overall and per class;
    Interaction-Based QWK per stop reason."""
    stops = np.array([stop_category(r) for r in interactions.values()])
    questions = np.array([sum(r_["label"] == "策略二" for r_ in r["rounds"]) for r in interactions.values()])
    classes = np.array([cause_class(r["cause_of_action"]) for r in interactions.values()])
    for cls in [OVERALL] + sorted(set(classes)):
        mask = np.ones(len(classes), bool) if cls == OVERALL else classes == cls
        run.metrics[("behaviour", "questions", cls)] = float(questions[mask].mean())
        for category in STOP_CATEGORIES:
            run.metrics[("behaviour", category, cls)] = float((stops[mask] == category).mean())
    data = run.tasks.get("LJP_interaction")
    if data is not None:
        by_case = dict(zip(interactions, stops))
        case_stops = np.array([by_case[n] for n in data.cases])
        for category in STOP_CATEGORIES:
            if (case_stops == category).any():
                run.metrics[("LJP_interaction_by_stop", "qwk", category)] = \
                    metrics_of("LJP_interaction", data, case_stops == category)["qwk"]


def load_runs(root: Path, models: list[str] | None, run_ids: list[str] | None, score: bool = True) -> list[Run]:
    runs = []
    for path in sorted(root.glob("runs/*/*/manifest.json")):
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            print(f"{path}: unreadable manifest ({e.msg}); run skipped", file=sys.stderr)
            continue
        model = manifest["models"]["eval"]["model"]
        if (models and model not in models) or (run_ids and manifest["run_id"] not in run_ids):
            continue
        run = Run(manifest["run_id"], model, manifest, path.parent.name)
        if score:  # judge_agreement only needs the manifests
            score_run(run, root)
        runs.append(run)
    return runs


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
    return tuple(json.dumps(manifest.get(name), sort_keys=True) for name in COMPARED_MANIFEST_FIELDS)


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


def group_label(group: Group, groups: list[Group]) -> str:
    siblings = [g for g in groups if g.model == group.model and g.condition == group.condition]
    label = group.model if group.condition == "standard" else f"{group.model} ({group.condition} user)"
    return label if len(siblings) == 1 else f"{label} #{siblings.index(group) + 1}"


# ----------------------------------------------------------------------------- bootstrap over cases

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
        return _ratio(np.where(defined, values, 0).sum(axis=0), defined.sum(axis=0))

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


# ----------------------------------------------------------------------------- tables

@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]


def cell(stat: dict | None, digits: int, ci: tuple[float, float] | None = None) -> str:
    if stat is None:
        return "n/a"
    if stat["mean"] is None:
        return "undefined"
    text = f"{stat['mean']:.{digits}f}"
    if len(stat["runs"]) > 1:
        text += f" ± {stat['sd']:.{digits}f}" if stat["sd"] is not None else " ± n/a"
    if ci is not None:
        text += f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    if stat["undefined"]:
        text += f" ({stat['undefined']} undefined)"
    return text


def difference_cell(d: dict | None, digits: int = 3) -> str:
    if d is None:
        return "n/a"
    text = f"{d['difference']:+.{digits}f}"
    if d["ci"] is not None:
        text += f" [{d['ci'][0]:+.{digits}f}, {d['ci'][1]:+.{digits}f}]"
    return text + (f", {100 * d['below_zero']:.1f}% < 0" if d["below_zero"] is not None else "")


def classes_present(groups: list[Group]) -> list[str]:
    present = {k[2] for g in groups for r in g.runs for k in r.metrics}
    return [c for c in CLASS_LABELS if c in present]


CLASS_TABLES = (("LCA Macro-F1 by class (Table 2, top)", ("LCA", "macro_f1"), 4),
                ("DCG accuracy by class (Table 2, bottom)", ("DCG", "accuracy"), 4),
                ("LJP Direct QWK by class", ("LJP_direct", "qwk"), 4),
                ("LJP Interaction-Based QWK by class (Table 17)", ("LJP_interaction", "qwk"), 4),
                ("LJP Gold-Standard QWK by class (Table 16)", ("LJP_gold", "qwk"), 4))


def build_tables(groups: list[Group], boot: Bootstrap | None = None) -> list[Table]:
    """The paper's tables over the standard-user groups; with `boot`, a 95% interval in every metric cell."""
    tables = [Table("Runs", ["Model", "Runs", "Run ids", "Differs from #1 in"],
                    [[group_label(g, groups), str(len(g.runs)), ", ".join(g.run_ids), ", ".join(g.differs) or "-"]
                     for g in groups])]
    non_ideal = non_ideal_table(groups, boot)
    behaviour = behaviour_tables(groups)
    groups = [g for g in groups if g.condition == "standard"]
    labels = [group_label(g, groups) for g in groups]
    classes = classes_present(groups) + [OVERALL]
    suffix = ", [95% bootstrap interval over cases]" if boot else ""

    def value(g: Group, key: tuple, digits: int) -> str:
        return cell(g.stat(key), digits, boot.interval(g, key) if boot and key[0] in TASKS else None)

    tables.append(Table(f"Main results (Table 11): mean ± SD over runs{suffix}",
                        ["Model", "LCA Macro-F1", "DCG Acc.", "LJP Direct QWK", "LJP Interaction QWK", "LJP Gold QWK"],
                        [[label, value(g, ("LCA", "macro_f1", OVERALL), 3), value(g, ("DCG", "accuracy", OVERALL), 3)]
                         + [value(g, (f"LJP_{s}", "qwk", OVERALL), 3) for s, _, _ in LJP_SETUPS]
                         for label, g in zip(labels, groups)]))
    tables.append(Table(f"LCA detail (Table 14){suffix}", ["Model", "Macro-F1", "Acc_C", "Acc_U"],
                        [[label] + [value(g, ("LCA", m, OVERALL), 4) for m in ("macro_f1", "acc_c", "acc_u")]
                         for label, g in zip(labels, groups)]))
    for title, key, digits in CLASS_TABLES:
        tables.append(Table(title + suffix, ["Model"] + classes,
                            [[label] + [value(g, (*key, c), digits) for c in classes]
                             for label, g in zip(labels, groups)]))
    tables.append(Table(f"LJP accuracy{suffix}", ["Model", "Direct", "Interaction-Based", "Gold-Standard"],
                        [[label] + [value(g, (f"LJP_{s}", "accuracy", OVERALL), 4) for s, _, _ in LJP_SETUPS]
                         for label, g in zip(labels, groups)]))
    tables.append(interaction_gain_table(groups, labels))
    if boot:
        tables.append(paired_setups_table(groups, labels, boot))
    return tables + behaviour + ([non_ideal] if non_ideal else [])


def paired_setups_table(groups: list[Group], labels: list[str], boot: Bootstrap) -> Table:
    qwk = lambda g, setup: (g, (f"LJP_{setup}", "qwk", OVERALL))  # noqa: E731
    return Table("Paired QWK differences on the same cases: difference of means [95% bootstrap interval], "
                 "share of resamples below zero", ["Model", "Interaction − Direct", "Gold − Interaction"],
                 [[label, difference_cell(paired_difference(boot, qwk(g, "interaction"), qwk(g, "direct"))),
                   difference_cell(paired_difference(boot, qwk(g, "gold"), qwk(g, "interaction")))]
                  for label, g in zip(labels, groups)])


COMPARED_METRICS = (("LCA Macro-F1", ("LCA", "macro_f1")), ("LCA Acc_C", ("LCA", "acc_c")),
                    ("LCA Acc_U", ("LCA", "acc_u")), ("DCG Acc.", ("DCG", "accuracy")),
                    *((f"LJP {name} QWK", (f"LJP_{s}", "qwk")) for s, _, name in LJP_SETUPS))


def comparison_table(a: Group, b: Group, boot: Bootstrap) -> Table:
    """Model A − model B on every metric, paired on the same resampled cases."""
    rows = []
    for name, (task, metric) in COMPARED_METRICS:
        key = (task, metric, OVERALL)
        rows.append([name, cell(a.stat(key), 4), cell(b.stat(key), 4),
                     difference_cell(paired_difference(boot, (a, key), (b, key)), 4)])
    return Table(f"{a.model} − {b.model}: difference of means [95% bootstrap interval over cases], "
                 "share of resamples below zero", ["Metric", a.model, b.model, "Difference"], rows)


def behaviour_tables(groups: list[Group]) -> list[Table]:
    """Over-asking against premature judgment (Section 6.2, Appendix E.4), from interaction.jsonl."""
    groups = [g for g in groups if g.stat(("behaviour", "questions", OVERALL))]
    if not groups:
        return []
    labels = [group_label(g, groups) for g in groups]
    classes = classes_present(groups) + [OVERALL]
    tables = [Table("Interaction behaviour: mean questions before a prediction and share of stop reasons, "
                    "mean ± SD over runs",
                    ["Model", "Questions", "Judged in round 1 (premature)", "Round 2", "Round 3", "Budget (forced)"],
                    [[label, cell(g.stat(("behaviour", "questions", OVERALL)), 2)]
                     + [cell(g.stat(("behaviour", c, OVERALL)), 3) for c in STOP_CATEGORIES]
                     for label, g in zip(labels, groups)]),
              Table("Interaction-Based QWK by stop reason, mean ± SD over runs",
                    ["Model", "Judged in round 1", "Round 2", "Round 3", "Budget (forced)"],
                    [[label] + [cell(g.stat(("LJP_interaction_by_stop", "qwk", c)), 4) for c in STOP_CATEGORIES]
                     for label, g in zip(labels, groups)])]
    for title, metric, digits in (("Questions before a prediction by class", "questions", 2),
                                  ("Premature predictions (judged in round 1) by class", "round 1", 3)):
        tables.append(Table(title, ["Model"] + classes,
                            [[label] + [cell(g.stat(("behaviour", metric, c)), digits) for c in classes]
                             for label, g in zip(labels, groups)]))

    def shares(g: Group, cls: str) -> str:
        means = [(g.stat(("behaviour", category, cls)) or {}).get("mean") for category in STOP_CATEGORIES]
        return "n/a" if None in means else " / ".join(f"{m:.2f}" for m in means)
    tables.append(Table("Stop reasons by class: judged in round 1 / 2 / 3 / budget, share (mean over runs)",
                        ["Model"] + classes, [[label] + [shares(g, c) for c in classes]
                                              for label, g in zip(labels, groups)]))
    return tables


def non_ideal_table(groups: list[Group], boot: Bootstrap | None = None) -> Table | None:
    """Table 15: Interaction-Based QWK per user condition, for groups equal in every other setting."""
    rows: dict[tuple, dict[str, Group]] = {}
    for g in groups:
        others = tuple(s for name, s in zip(COMPARED_MANIFEST_FIELDS, g.settings) if name != "user_condition")
        rows.setdefault((g.model, others), {})[g.condition] = g
    rows = {key: by_condition for key, by_condition in rows.items() if set(by_condition) - {"standard"}}
    if not rows:
        return None
    key = ("LJP_interaction", "qwk", OVERALL)
    table = Table("Non-ideal users (Table 15): Interaction-Based LJP QWK, mean ± SD over runs"
                  + (", [95% bootstrap interval over cases]" if boot else ""),
                  ["Model"] + [name for _, name in USER_CONDITION_NAMES], [])
    for (model, others), by_condition in rows.items():
        same_model = [k for k in rows if k[0] == model]
        label = model if len(same_model) == 1 else f"{model} #{same_model.index((model, others)) + 1}"
        table.rows.append([label] + [cell(by_condition[c].stat(key), 4, boot.interval(by_condition[c], key)
                                          if boot else None) if c in by_condition else "n/a"
                                     for c, _ in USER_CONDITION_NAMES])
    return table


def interaction_gain_table(groups: list[Group], labels: list[str]) -> Table:
    """Interaction − Direct and (Interaction − Gold) / Gold on the group means (Section 6.4)."""
    rows, gains, changes = [], [], []
    for label, g in zip(labels, groups):
        means = {s: (g.stat((f"LJP_{s}", "qwk", OVERALL)) or {}).get("mean") for s, _, _ in LJP_SETUPS}
        gain = means["interaction"] - means["direct"] if None not in (means["interaction"], means["direct"]) else None
        change = (means["interaction"] - means["gold"]) / means["gold"] \
            if None not in (means["interaction"], means["gold"]) and means["gold"] != 0 else None
        gains += [gain] if gain is not None else []
        changes += [change] if change is not None else []
        rows.append([label, "n/a" if gain is None else f"{gain:+.3f}",
                     "n/a" if change is None else f"{100 * change:+.2f}%"])
    rows.append([f"Average over {len(gains)} / {len(changes)} models",
                 f"{np.mean(gains):+.3f}" if gains else "n/a", f"{100 * np.mean(changes):+.2f}%" if changes else "n/a"])
    return Table("Interaction-Based against Direct and Gold-Standard (QWK)",
                 ["Model", "Interaction − Direct", "Interaction vs Gold (relative)"], rows)


# ----------------------------------------------------------------------------- token usage and cost

class UsageError(Exception):
    """A problem with the price file: said in one line, nothing else is printed."""


def read_prices(path: Path) -> dict[str, tuple[float, float]]:
    """{"model id": {"prompt": USD per 1M prompt tokens, "completion": USD per 1M completion tokens}, ...}"""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--prices {path}: not found") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"--prices {path}: not JSON ({e.msg} at line {e.lineno})") from None
    prices = {}
    for model, entry in (data.items() if isinstance(data, dict) else [(None, None)]):
        try:
            prices[model] = (float(entry["prompt"]), float(entry["completion"]))
        except (TypeError, KeyError, ValueError):
            raise UsageError(f"--prices {path}: entry {model!r} must be {{\"prompt\": number, \"completion\": "
                             "number}} (price per million tokens)") from None
    return prices


def role_cost(run: Run, role: str, used: dict, prices: dict | None) -> float | None:
    price = (prices or {}).get(run.manifest["models"].get(role, {}).get("model"))
    if price is None:
        return None
    return (used["prompt_tokens"] * price[0] + used["completion_tokens"] * price[1]) / 1e6


def usage_tables(groups: list[Group], prices: dict | None) -> list[Table]:
    """Tokens per run and role, and per stage file and role over each group's runs; cost when priced."""
    money = lambda v: "n/a" if v is None else f"{v:,.2f}" if v >= 1 else f"{v:.4f}"  # noqa: E731
    per_run, per_stage = [], []
    for g in groups:
        label = group_label(g, groups)
        stage_totals: dict[tuple, Counter] = {}
        stage_costs: dict[tuple, list] = {}
        for run in g.runs:
            by_role: dict[str, Counter] = {role: Counter() for role in ROLES}
            costs = []
            for stage, roles in run.usage.items():
                for role, used in roles.items():
                    by_role.setdefault(role, Counter()).update(used)
                    stage_totals.setdefault((stage, role), Counter()).update(used)
                    cost = role_cost(run, role, used, prices)
                    costs.append(cost)
                    stage_costs.setdefault((stage, role), []).append(cost)
            total = None if not costs or None in costs else sum(costs)
            per_run.append([label, run.run_id] + [f"{by_role[r]['calls']} / {by_role[r]['prompt_tokens']} / "
                                                  f"{by_role[r]['completion_tokens']}"
                                                  + (f" ({by_role[r]['unreported_calls']} uncounted)"
                                                     if by_role[r]["unreported_calls"] else "") for r in ROLES]
                           + [money(total)])
        for (stage, role), used in sorted(stage_totals.items(), key=lambda x: (x[0][0], ROLES.index(x[0][1]))):
            costs = stage_costs[(stage, role)]
            per_stage.append([label, stage, role, str(used["calls"]), str(used["prompt_tokens"]),
                              str(used["completion_tokens"]), money(None if None in costs else sum(costs))])
    return [Table("Token usage per run (calls / prompt tokens / completion tokens; saved records only; "
                  "'uncounted': calls whose reply carried no token counts)",
                  ["Model", "Run", "Evaluated model", "User Model", "Judge", "Cost"], per_run),
            Table("Token usage per stage file, all runs of the group",
                  ["Model", "Stage file", "Role", "Calls", "Prompt tokens", "Completion tokens", "Cost"], per_stage)]


# ----------------------------------------------------------------------------- figures

def write_plots(groups: list[Group], folder: Path, boot: Bootstrap | None) -> list[Path]:
    """PNG figures of the per-class tables, Acc_C against Acc_U, and QWK across the three LJP setups."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no screen needed
    import matplotlib.pyplot as plt

    groups = [g for g in groups if g.condition == "standard"]
    labels = [group_label(g, groups) for g in groups]
    classes = classes_present(groups) + [OVERALL]
    folder.mkdir(parents=True, exist_ok=True)
    written = []

    def error(g: Group, key: tuple) -> tuple[float, float, float]:
        """(mean, lower, upper error): the bootstrap interval with --ci, else ± SD over runs."""
        stat = g.stat(key)
        if stat is None or stat["mean"] is None:
            return np.nan, 0.0, 0.0
        ci = boot.interval(g, key) if boot else None
        if ci is not None:
            return stat["mean"], stat["mean"] - ci[0], ci[1] - stat["mean"]
        sd = stat["sd"] or 0.0
        return stat["mean"], sd, sd

    bar = "95% bootstrap interval" if boot else "± SD over runs"
    for title, (task, metric), _ in CLASS_TABLES:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(classes) + 1.5), 4.2))
        width = 0.8 / max(len(groups), 1)
        for i, (label, g) in enumerate(zip(labels, groups)):
            values = [error(g, (task, metric, c)) for c in classes]
            x = np.arange(len(classes)) + (i - (len(groups) - 1) / 2) * width
            ax.bar(x, [v[0] for v in values], width, label=label,
                   yerr=np.array([[v[1] for v in values], [v[2] for v in values]]), capsize=3)
        ax.set_xticks(np.arange(len(classes)), classes)
        ax.set_ylabel(f"{TASK_NAMES[task]} {METRIC_NAMES[metric]}")
        ax.set_title(f"{title.split(' (')[0]} (error bars: {bar})", fontsize=10)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(folder / f"by_class_{task}_{metric}.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for label, g in zip(labels, groups):
        (xc, xl, xu), (yu, yl, yh) = error(g, ("LCA", "acc_c", OVERALL)), error(g, ("LCA", "acc_u", OVERALL))
        ax.errorbar([xc], [yu], xerr=[[xl], [xu]], yerr=[[yl], [yh]], fmt="o", capsize=3, label=label)
        if not np.isnan(xc) and not np.isnan(yu):
            ax.annotate(label, (xc, yu), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.plot([0, 1], [1, 0], color="grey", linewidth=0.6, linestyle="--")
    ax.set_xlim(0, 1.02), ax.set_ylim(0, 1.02)
    ax.set_xlabel("Acc_C: complete histories answered (low = over-asking)")
    ax.set_ylabel("Acc_U: underspecified histories asked (low = premature judgment)")
    ax.set_title("LCA: over-asking against premature judgment", fontsize=10)
    fig.tight_layout()
    written.append(folder / "lca_acc_c_vs_acc_u.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4.5))
    setups = [name for _, _, name in LJP_SETUPS]
    for i, (label, g) in enumerate(zip(labels, groups)):
        values = [error(g, (f"LJP_{s}", "qwk", OVERALL)) for s, _, _ in LJP_SETUPS]
        x = np.arange(len(setups)) + 0.04 * (i - (len(groups) - 1) / 2)  # overlapping bars stay apart
        ax.errorbar(x, [v[0] for v in values], yerr=[[v[1] for v in values], [v[2] for v in values]],
                    marker="o", capsize=3, label=label)
    ax.set_xticks(range(len(setups)), setups)
    ax.set_ylabel("QWK")
    ax.set_title(f"LJP: Direct → Interaction-Based → Gold-Standard ({bar})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(folder / "ljp_setups.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def render_text(tables: list[Table]) -> str:
    out = []
    for t in tables:
        widths = [max(len(r[i]) for r in [t.headers] + t.rows) for i in range(len(t.headers))]
        line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        out += [t.title, line(t.headers), "  ".join("-" * w for w in widths)] + [line(r) for r in t.rows] + [""]
    return "\n".join(out)


def render_markdown(tables: list[Table]) -> str:
    out = []
    for t in tables:
        esc = lambda c: c.replace("|", "\\|")  # noqa: E731
        out += [f"### {t.title}", "", "| " + " | ".join(map(esc, t.headers)) + " |",
                "|" + "|".join("---" for _ in t.headers) + "|"]
        out += ["| " + " | ".join(map(esc, r)) + " |" for r in t.rows] + [""]
    return "\n".join(out)


def render_latex(tables: list[Table]) -> str:
    def esc(text: str) -> str:
        for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("#", r"\#"), ("_", r"\_"),
                     ("±", r"$\pm$"), ("−", "--")):
            text = text.replace(a, b)
        return text
    out = []
    for t in tables:
        out += [f"% {esc(t.title)}", r"\begin{tabular}{l" + "c" * (len(t.headers) - 1) + "}", r"\toprule",
                " & ".join(map(esc, t.headers)) + r" \\", r"\midrule"]
        out += [" & ".join(map(esc, r)) + r" \\" for r in t.rows] + [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)


def render_csv(tables: list[Table]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["table", "row"] + [f"col{i}" for i in range(1, max(len(t.headers) for t in tables))])
    for t in tables:
        writer.writerow([t.title, "header"] + t.headers[1:])
        for r in t.rows:
            writer.writerow([t.title, r[0]] + r[1:])
    return buffer.getvalue()


def render_json(groups: list[Group], boot: Bootstrap | None = None, usage: bool = False) -> str:
    data = []
    for g in groups:
        metrics: dict = {}
        keys = sorted({k for r in g.runs for k in r.metrics}, key=str)
        for task, metric, cls in keys:
            stat = g.stat((task, metric, cls))
            entry = metrics.setdefault(task, {}).setdefault(metric, {})[cls] = {
                "per_run": dict(zip([r.run_id for r in g.runs if (task, metric, cls) in r.metrics], stat["runs"])),
                "mean": stat["mean"], "sd": stat["sd"], "undefined_runs": stat["undefined"]}
            if boot and task in TASKS:
                entry["ci95"] = boot.interval(g, (task, metric, cls))
        group = {"model": g.model, "user_condition": g.condition, "run_ids": g.run_ids,
                 "differs_from_first_group": g.differs,
                 "settings": dict(zip(COMPARED_MANIFEST_FIELDS, map(json.loads, g.settings))),
                 "problems": {r.run_id: r.problems for r in g.runs if r.problems}, "metrics": metrics}
        if usage:
            group["usage"] = {r.run_id: {stage: {role: dict(u) for role, u in roles.items()}
                                         for stage, roles in r.usage.items()} for r in g.runs}
        data.append(group)
    return json.dumps({"groups": data}, ensure_ascii=False, indent=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-root", type=Path, default=HERE, help="where the runs are (default: next to the scripts)")
    parser.add_argument("--model", action="append", help="show only this evaluated model id (repeatable)")
    parser.add_argument("--run-id", action="append", help="show only this run id (repeatable)")
    parser.add_argument("--format", choices=("text", "markdown", "csv", "json", "latex"), default="text")
    parser.add_argument("--ci", action="store_true", help="add 95%% bootstrap intervals over cases, and paired "
                        "Interaction − Direct and Gold − Interaction differences")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0: the same numbers every time)")
    parser.add_argument("--compare", nargs=2, metavar=("MODEL_A", "MODEL_B"),
                        help="paired bootstrap difference A − B on every metric (implies --ci)")
    parser.add_argument("--usage", action="store_true", help="add token usage per run, role and stage file")
    parser.add_argument("--prices", type=Path, help='JSON {"model id": {"prompt": P, "completion": C}} in money '
                        "per million tokens: adds cost to the usage tables (implies --usage)")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="also write PNG figures there (needs matplotlib)")
    args = parser.parse_args(argv)
    try:
        return show(args)
    except UsageError as e:
        print(f"show_results: {e}", file=sys.stderr)
        return 2


def show(args) -> int:
    if args.resamples < 1:
        raise UsageError(f"--resamples must be at least 1, got {args.resamples}")
    prices = read_prices(args.prices) if args.prices else None
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install matplotlib") from None
    runs = load_runs(args.output_root.resolve(), args.model, args.run_id)
    if not runs:
        print(f"No results under {args.output_root.resolve()} yet: run LexAwN_gen.py, eval_DCG.py and "
              "eval_LJP.py with --run-id first (see README.md).")
        return 0
    for run in runs:
        for problem in run.problems:
            print(f"run {run.run_id}, model {run.model}: {problem} (metric not reported for this run)",
                  file=sys.stderr)
    groups = group_runs(runs)
    boot = Bootstrap(args.resamples, args.seed) if args.ci or args.compare else None
    compared = compared_groups(groups, args.compare) if args.compare else None
    if prices:
        unpriced = sorted({r.manifest["models"][role]["model"] for r in runs for role in ROLES
                           if r.manifest["models"].get(role, {}).get("model") not in prices})
        if unpriced:
            print(f"no price in {args.prices} for {', '.join(unpriced)}: their cost shows as n/a", file=sys.stderr)
    if args.format == "json":
        print(render_json(groups, boot, args.usage or bool(prices)))
    else:
        tables = build_tables(groups, boot)
        if compared:
            tables.append(comparison_table(*compared, boot))
        if args.usage or prices:
            tables += usage_tables(groups, prices)
        render = {"text": render_text, "markdown": render_markdown, "csv": render_csv, "latex": render_latex}
        print(render[args.format](tables))
    if args.plot:
        for path in write_plots(groups, args.plot, boot):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def compared_groups(groups: list[Group], models: list[str]) -> tuple[Group, Group]:
    """The one standard group of each model, on the same cases (the comparison is paired)."""
    chosen = []
    for model in models:
        found = [g for g in groups if g.model == model and g.condition == "standard"]
        if len(found) != 1:
            raise UsageError(f"--compare {model}: {'no runs' if not found else f'{len(found)} groups of runs with different settings'}"
                             " of this model; select the runs with --run-id")
        chosen.append(found[0])
    cases = [g.runs[0].manifest["selected_cases"] for g in chosen]
    if cases[0] != cases[1]:
        raise UsageError(f"--compare: {models[0]} and {models[1]} were run on different cases; a paired "
                         "comparison needs the same dataset and --limit")
    return chosen[0], chosen[1]


if __name__ == "__main__":
    sys.exit(main())
