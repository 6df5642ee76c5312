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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from categories import CLASS_LABELS, cause_class
from common import COMPARED_MANIFEST_FIELDS, HERE, LCA_RESULTS, DCG_RESULTS, LJP_DIRECT, LJP_GOLD, \
    LJP_INTERACTION, VERDICTS

OVERALL = "Overall"
LJP_SETUPS = (("direct", LJP_DIRECT, "Direct"), ("interaction", LJP_INTERACTION, "Interaction-Based"),
              ("gold", LJP_GOLD, "Gold-Standard"))
USER_CONDITION_NAMES = (("standard", "Standard"), ("delayed", "Delayed Disclosure"), ("self-correction", "Self-Correction"))


# ----------------------------------------------------------------------------- metrics

def lca_metrics(labels: list[tuple[str, str]]) -> dict:
    """labels: (true type, predicted type) per history; underspecified is the positive class."""
    tp = sum(t == "underspecified" and p == "underspecified" for t, p in labels)
    fp = sum(t == "complete" and p == "underspecified" for t, p in labels)
    fn = sum(t == "underspecified" and p == "complete" for t, p in labels)
    tn = sum(t == "complete" and p == "complete" for t, p in labels)
    f1_u = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0
    f1_c = 2 * tn / (2 * tn + fp + fn) if 2 * tn + fp + fn else 0.0
    return {"macro_f1": (f1_u + f1_c) / 2, "f1_u": f1_u, "f1_c": f1_c,
            "acc_c": tn / (tn + fp) if tn + fp else None, "acc_u": tp / (tp + fn) if tp + fn else None}


def quadratic_weighted_kappa(gold: list[str], predicted: list[str]) -> float | None:
    """QWK on the fixed ordinal labels 支持=0, 部分支持=1, 驳回=2; None when expected disagreement is zero."""
    index = {label: i for i, label in enumerate(VERDICTS)}
    k = len(VERDICTS)
    observed = np.zeros((k, k))
    for g, p in zip(gold, predicted):
        observed[index[g], index[p]] += 1
    n = observed.sum()
    if n == 0:
        return None
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / n
    weights = np.subtract.outer(np.arange(k), np.arange(k)) ** 2 / (k - 1) ** 2
    expected_disagreement = (weights * expected).sum()
    if expected_disagreement == 0:
        return None
    return float(1 - (weights * observed).sum() / expected_disagreement)


def ljp_metrics(pairs: list[tuple[str, str]]) -> dict:
    gold = [g for g, _ in pairs]
    predicted = [p for _, p in pairs]
    return {"qwk": quadratic_weighted_kappa(gold, predicted),
            "accuracy": sum(g == p for g, p in pairs) / len(pairs) if pairs else None}


# ----------------------------------------------------------------------------- loading

@dataclass
class Run:
    run_id: str
    model: str
    manifest: dict
    folder: str
    metrics: dict = field(default_factory=dict)  # (task, metric, class) -> value or None
    problems: list[str] = field(default_factory=list)


def read_task(path: Path, selected: list[str]) -> tuple[dict | None, str | None]:
    """case_number -> record, or a problem: missing file, malformed line, unknown/duplicate/missing cases."""
    if not path.exists():
        return None, f"{path}: not found"
    records = {}
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                record = json.loads(line)
                number = record["case_number"]
            except (json.JSONDecodeError, KeyError, TypeError):
                return None, f"{path}:{lineno}: malformed record"
            if number in records:
                return None, f"{path}:{lineno}: second record for case {number}"
            records[number] = record
    extra = sorted(set(records) - set(selected))
    if extra:
        return None, f"{path}: cases not selected by the run's manifest: {', '.join(extra[:5])}"
    missing = [n for n in selected if n not in records]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return None, f"{path}: incomplete, {len(missing)} of {len(selected)} cases missing: {shown}"
    return records, None


def by_class(records: dict, value_of) -> dict[str, list]:
    """Values per cause class label and overall, in case order."""
    groups: dict[str, list] = {OVERALL: []}
    for record in records.values():
        values = value_of(record)
        groups[OVERALL] += values
        groups.setdefault(cause_class(record["cause_of_action"]), []).extend(values)
    return groups


def score_run(run: Run, root: Path) -> None:
    selected = run.manifest["selected_cases"]
    folder = lambda where: root / where[0] / run.run_id / run.folder / where[1]  # noqa: E731

    # A non-ideal-user run is only an Interaction-Based LJP result (Table 15).
    non_ideal = run.manifest.get("user_condition", "standard") != "standard"
    records, problem = (None, None) if non_ideal else read_task(folder(LCA_RESULTS), selected)
    if problem:
        run.problems.append(f"LCA: {problem}")
    elif records:
        labels = by_class(records, lambda r: [(j["true_type"], j["predicted_type"]) for j in r["judgments"].values()])
        for cls, pairs in labels.items():
            for metric, value in lca_metrics(pairs).items():
                run.metrics[("LCA", metric, cls)] = value

    records, problem = (None, None) if non_ideal else read_task(folder(DCG_RESULTS), selected)
    if problem:
        run.problems.append(f"DCG: {problem}")
    elif records:
        for cls, successes in by_class(records, lambda r: [bool(r["success"])]).items():
            run.metrics[("DCG", "accuracy", cls)] = sum(successes) / len(successes)

    for setup, where, _ in LJP_SETUPS:
        if non_ideal and setup != "interaction":
            continue
        records, problem = read_task(folder(where), selected)
        if not problem:
            bad = [n for n, r in records.items()
                   if not len(r["claims"]) == len(r["gold"]) == len(r["predicted"]) > 0]
            problem = f"{folder(where)}: claims and verdicts misaligned for cases {', '.join(bad[:5])}" if bad else None
        if problem:
            run.problems.append(f"LJP {setup}: {problem}")
            continue
        pairs = by_class(records, lambda r: list(zip(r["gold"], r["predicted"])))
        for cls, values in pairs.items():
            for metric, value in ljp_metrics(values).items():
                run.metrics[(f"LJP_{setup}", metric, cls)] = value


def load_runs(root: Path, models: list[str] | None, run_ids: list[str] | None) -> list[Run]:
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
        return self.runs[0].manifest.get("user_condition", "standard")

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


# ----------------------------------------------------------------------------- tables

@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]


def cell(stat: dict | None, digits: int) -> str:
    if stat is None:
        return "n/a"
    if stat["mean"] is None:
        return "undefined"
    text = f"{stat['mean']:.{digits}f}"
    if len(stat["runs"]) > 1:
        text += f" ± {stat['sd']:.{digits}f}" if stat["sd"] is not None else " ± n/a"
    if stat["undefined"]:
        text += f" ({stat['undefined']} undefined)"
    return text


def classes_present(groups: list[Group]) -> list[str]:
    present = {k[2] for g in groups for r in g.runs for k in r.metrics}
    return [c for c in CLASS_LABELS if c in present]


def build_tables(groups: list[Group]) -> list[Table]:
    tables = [Table("Runs", ["Model", "Runs", "Run ids", "Differs from #1 in"],
                    [[group_label(g, groups), str(len(g.runs)), ", ".join(g.run_ids), ", ".join(g.differs) or "-"]
                     for g in groups])]
    non_ideal = non_ideal_table(groups)
    groups = [g for g in groups if g.condition == "standard"]
    labels = [group_label(g, groups) for g in groups]
    classes = classes_present(groups) + [OVERALL]
    tables.append(Table("Main results (Table 11): mean ± SD over runs",
                        ["Model", "LCA Macro-F1", "DCG Acc.", "LJP Direct QWK", "LJP Interaction QWK", "LJP Gold QWK"],
                        [[label, cell(g.stat(("LCA", "macro_f1", OVERALL)), 3),
                          cell(g.stat(("DCG", "accuracy", OVERALL)), 3)]
                         + [cell(g.stat((f"LJP_{s}", "qwk", OVERALL)), 3) for s, _, _ in LJP_SETUPS]
                         for label, g in zip(labels, groups)]))
    tables.append(Table("LCA detail (Table 14)", ["Model", "Macro-F1", "Acc_C", "Acc_U"],
                        [[label] + [cell(g.stat(("LCA", m, OVERALL)), 4) for m in ("macro_f1", "acc_c", "acc_u")]
                         for label, g in zip(labels, groups)]))
    for title, key, digits in (("LCA Macro-F1 by class (Table 2, top)", ("LCA", "macro_f1"), 4),
                               ("DCG accuracy by class (Table 2, bottom)", ("DCG", "accuracy"), 4),
                               ("LJP Direct QWK by class", ("LJP_direct", "qwk"), 4),
                               ("LJP Interaction-Based QWK by class (Table 17)", ("LJP_interaction", "qwk"), 4),
                               ("LJP Gold-Standard QWK by class (Table 16)", ("LJP_gold", "qwk"), 4)):
        tables.append(Table(title, ["Model"] + classes,
                            [[label] + [cell(g.stat((*key, c)), digits) for c in classes]
                             for label, g in zip(labels, groups)]))
    tables.append(Table("LJP accuracy", ["Model", "Direct", "Interaction-Based", "Gold-Standard"],
                        [[label] + [cell(g.stat((f"LJP_{s}", "accuracy", OVERALL)), 4) for s, _, _ in LJP_SETUPS]
                         for label, g in zip(labels, groups)]))
    tables.append(interaction_gain_table(groups, labels))
    return tables + ([non_ideal] if non_ideal else [])


def non_ideal_table(groups: list[Group]) -> Table | None:
    """Table 15: Interaction-Based QWK per user condition, for groups equal in every other setting."""
    rows: dict[tuple, dict[str, Group]] = {}
    for g in groups:
        others = tuple(s for name, s in zip(COMPARED_MANIFEST_FIELDS, g.settings) if name != "user_condition")
        rows.setdefault((g.model, others), {})[g.condition] = g
    rows = {key: by_condition for key, by_condition in rows.items() if set(by_condition) - {"standard"}}
    if not rows:
        return None
    table = Table("Non-ideal users (Table 15): Interaction-Based LJP QWK, mean ± SD over runs",
                  ["Model"] + [name for _, name in USER_CONDITION_NAMES], [])
    for (model, _), by_condition in rows.items():
        same_model = [key for key in rows if key[0] == model]
        label = model if len(same_model) == 1 else f"{model} #{same_model.index((model, _)) + 1}"
        table.rows.append([label] + [cell(by_condition[c].stat(("LJP_interaction", "qwk", OVERALL)), 4)
                                     if c in by_condition else "n/a" for c, _ in USER_CONDITION_NAMES])
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


def render_json(groups: list[Group]) -> str:
    data = []
    for g in groups:
        metrics: dict = {}
        keys = sorted({k for r in g.runs for k in r.metrics}, key=str)
        for task, metric, cls in keys:
            stat = g.stat((task, metric, cls))
            metrics.setdefault(task, {}).setdefault(metric, {})[cls] = {
                "per_run": dict(zip([r.run_id for r in g.runs if (task, metric, cls) in r.metrics], stat["runs"])),
                "mean": stat["mean"], "sd": stat["sd"], "undefined_runs": stat["undefined"]}
        data.append({"model": g.model, "run_ids": g.run_ids, "differs_from_first_group": g.differs,
                     "settings": dict(zip(COMPARED_MANIFEST_FIELDS, map(json.loads, g.settings))),
                     "problems": {r.run_id: r.problems for r in g.runs if r.problems}, "metrics": metrics})
    return json.dumps({"groups": data}, ensure_ascii=False, indent=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-root", type=Path, default=HERE, help="where the runs are (default: next to the scripts)")
    parser.add_argument("--model", action="append", help="show only this evaluated model id (repeatable)")
    parser.add_argument("--run-id", action="append", help="show only this run id (repeatable)")
    parser.add_argument("--format", choices=("text", "markdown", "csv", "json", "latex"), default="text")
    args = parser.parse_args(argv)
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
    if args.format == "json":
        print(render_json(groups))
        return 0
    render = {"text": render_text, "markdown": render_markdown, "csv": render_csv, "latex": render_latex}
    print(render[args.format](build_tables(groups)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
