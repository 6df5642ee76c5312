"""Judge agreement with people (Appendix E.2, Table 12): the blind items drawn from saved runs, the
guidelines cut from the judge's prompts, the annotation sheet and its key, and the agreement and Cohen's kappa
of each annotator with the judge, with bootstrap intervals over cases.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lexpilot.benchmark.categories import FOCAL_TYPES
from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.prompts import (
    load_prompts,
    render_details_by_focal_point,
    render_focal_points,
    render_history,
    render_key_facts,
)
from lexpilot.benchmark.records import (
    A1,
    DCG,
    FOCAL_TYPE_RECORDS,
    FORCE_ASK,
    LCA,
    LJP_SETUPS,
    PLAIN,
    PLAIN_TYPES,
)
from lexpilot.benchmark.vocabulary import (
    DCG_LABELS,
    HISTORY_TYPES,
    LCA_LABELS,
    RESPONSE_TYPES,
    VERDICTS,
)
from lexpilot.errors import HarnessError, first_of
from lexpilot.files import fits_a_cell, key_file, read_sheet, write_sheet
from lexpilot.reporting.scoring.metrics import kappa_from_confusion, label_agreement
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.reporting.scoring.runs import named_dataset, read_task
from lexpilot.reporting.statistics.bootstrap import percentile_interval
from lexpilot.reporting.tables.formats import interval_cell, kappa_cell, number_cell
from lexpilot.reporting.tables.renderings import render_text
from lexpilot.reporting.tables.table import PERCENT, Kind, Table, declares

# TYPE: the response type of a plain consultation (Table 6); FOCAL: the judge's type of a focal point (Table 18)
ANNOTATED_TASKS = ("LCA", "DCG", "LJP", "TYPE", "FOCAL")
LABELS = {
    "LCA": LCA_LABELS,
    "DCG": DCG_LABELS,
    "LJP": VERDICTS,
    "TYPE": tuple(RESPONSE_TYPES),
    "FOCAL": tuple(FOCAL_TYPES),
}
OPTIONAL = ("TYPE", "FOCAL")  # exported only where the plain consultation or the focal-type stage ran
TYPE_LABEL = {name: label for label, name in RESPONSE_TYPES.items()}
INSTRUCTIONS = {task: f"按标注说明（.guidelines.txt）中 {task} 部分的标准判断" for task in ANNOTATED_TASKS}
ANNOTATION_COLUMNS = [
    "item_id",
    "task",
    "case_number",
    "cause_of_action",
    "instruction",
    "labels",
    "reply",
    "consultation",
    "focal_points",
    "key_details",
    "claim",
    "all_claims",
    "annotator_1",
    "annotator_2",
    "adjudicated",
]
# what `score` needs of a sheet (one exported before it carried the consultation still reads)
SCORED_COLUMNS = [c for c in ANNOTATION_COLUMNS if c != "consultation"]
ANNOTATION_KEY_COLUMNS = ["item_id", "task", "model", "run_id", "case_number", "source", "llm_label", "reply"]


@dataclass
class Item:
    task: str
    model: str
    run_id: str
    case_number: str
    source: str  # file and position of the judge decision
    llm_label: str
    reply: str
    claim: str = ""
    history: str = ""  # the consultation the judge read beside the reply (TYPE: its history type)


# ----------------------------------------------------------------------------- agreement

# ----------------------------------------------------------------------------- export


def _task_records(root: Path, run):
    """Reads one kind of the run's records: (records by case number, their file); notes an unreadable one."""

    def records(kind):
        found, problem = read_task(run, root, kind)
        if problem:
            print(
                f"note: run {run.run_id}, model {run.model}: {problem} (its decisions are not sampled)",
                file=sys.stderr,
            )
        return found or {}, kind.path(root, run.run_id, run.folder)

    return records


def _item_adder(root: Path, run, items: dict[str, list[Item]]):
    """Adds one of the run's judge decisions to its task's items, with the file and place it came from."""

    def item(task, path, number, where, label, reply, claim="", history=""):
        source = f"{path.relative_to(root)} case {number} {where}"
        items[task].append(Item(task, run.model, run.run_id, number, source, label, reply, claim, history))

    return item


def _lca_items(records, item, selected) -> None:
    """LCA: the judge's label of the LexAwN reply after each history."""
    (lca, lca_path), (a1, _) = records(LCA), records(A1)
    for number in selected:
        if number in lca and number in a1:
            for history_type in HISTORY_TYPES:
                item(
                    "LCA",
                    lca_path,
                    number,
                    history_type,
                    lca[number]["judgments"][history_type]["label"],
                    a1[number]["responses"][history_type]["response"],
                    history=history_type,
                )


def _dcg_items(records, item, selected) -> None:
    """DCG: the judge's label of each round's forced question."""
    (dcg, dcg_path), (asked, _) = records(DCG), records(FORCE_ASK)
    for number in selected:
        if number in dcg and number in asked:
            questions = {r["round"]: r["question"] for r in asked[number]["rounds"]}
            for judged in dcg[number]["rounds"]:
                item(
                    "DCG",
                    dcg_path,
                    number,
                    f"round {judged['round']}",
                    judged["label"],
                    questions[judged["round"]],
                )


def _ljp_items(records, item, selected) -> None:
    """LJP: the verdict the judge extracted for each claim, of every setup (Interaction-Based last)."""
    for setup in sorted(LJP_SETUPS, key=lambda s: s.name == "interaction"):
        (ljp, ljp_path), (generated, _) = records(setup.verdicts), records(setup.generation)
        for number in selected:
            if number in ljp and number in generated:
                record = ljp[number]
                for i, (claim, label) in enumerate(zip(record["claims"], record["predicted"]), 1):
                    item(
                        "LJP",
                        ljp_path,
                        number,
                        f"claim {i}",
                        label,
                        generated[number][setup.reply_field],
                        claim,
                    )


def _type_items(records, item, selected, history_type: str) -> None:
    """TYPE: the judge's response type of the plain consultation after one history."""
    (typed, typed_path), (answered, _) = records(PLAIN_TYPES[history_type]), records(PLAIN[history_type])
    for number in selected:
        if number in typed and number in answered:
            item(
                "TYPE",
                typed_path,
                number,
                history_type,
                TYPE_LABEL[typed[number]["type"]],
                answered[number]["response"],
                history=history_type,
            )


def _focal_items(records, item, selected) -> None:
    """FOCAL: the type of each focal point, where the judge gave it."""
    focal, focal_path = records(FOCAL_TYPE_RECORDS)
    for number in selected:
        for i, entry in enumerate((focal.get(number) or {}).get("types", []), 1):
            if entry.get("source") == "judge":
                item("FOCAL", focal_path, number, f"focal point {i}", entry["type"], entry["focal_point"])


def collect_items(root: Path, runs) -> dict[str, list[Item]]:
    """Every saved judge decision of the given runs, per task, in a fixed order."""
    items: dict[str, list[Item]] = {task: [] for task in ANNOTATED_TASKS}
    for run in runs:
        selected = run.selected
        records, item = _task_records(root, run), _item_adder(root, run, items)
        _lca_items(records, item, selected)
        _dcg_items(records, item, selected)
        _ljp_items(records, item, selected)
        for history_type in HISTORY_TYPES:  # only where the plain consultation was run
            if PLAIN_TYPES[history_type].path(root, run.run_id, run.folder).exists():
                _type_items(records, item, selected, history_type)
        if FOCAL_TYPE_RECORDS.path(root, run.run_id, run.folder).exists():  # only the judge's own types
            _focal_items(records, item, selected)
    return items


def balanced_sample(items: list[Item], size: int, rng: random.Random) -> list[Item]:
    """About `size` decisions, in equal shares per stratum (the evaluated model; for LCA the model and the history):
    a stratum with too few gives its unused share to the others. A DCG case's rounds are drawn together, so that a
    case is labelled whole (its success is any round's: show_results.py --corrected corrects whole cases only)."""
    units: dict[object, list[Item]] = {}
    for it in items:
        units.setdefault(_unit(it), []).append(it)
    by_stratum: dict[tuple, list[list[Item]]] = {}
    for unit in units.values():
        by_stratum.setdefault(_stratum(unit[0]), []).append(unit)
    # `size` counts decisions; a DCG case holds several: as many cases as make about that many rounds
    wanted = min(len(units), round(size * len(units) / len(items))) if items else 0
    quota = _quotas({s: len(u) for s, u in by_stratum.items()}, wanted)
    sample = [it for s in sorted(by_stratum) for unit in rng.sample(by_stratum[s], quota[s]) for it in unit]
    rng.shuffle(sample)  # annotators should not see the items in model blocks
    return sample


def _stratum(it: Item) -> tuple:
    """What a sample is balanced over: the evaluated model, and for LCA its history too (Acc_C and Acc_U are
    corrected apart, each from its own labels)."""
    return (it.model, it.history) if it.task == "LCA" else (it.model,)


def _unit(it: Item) -> object:
    """What is drawn together: a DCG case's rounds; any other decision alone."""
    return (it.model, it.run_id, it.case_number) if it.task == "DCG" else id(it)


def _quotas(sizes: dict[tuple, int], wanted: int) -> dict[tuple, int]:
    """`wanted` shared as equally as the strata's sizes allow, in the strata's order."""
    quota = {stratum: 0 for stratum in sizes}
    left = wanted
    while left:
        open_strata = sorted(s for s in sizes if quota[s] < sizes[s])
        share, extra = divmod(left, len(open_strata))
        for i, stratum in enumerate(open_strata):
            give = min(share + (i < extra), sizes[stratum] - quota[stratum])
            quota[stratum] += give
            left -= give
    return quota


def runs_dataset(runs) -> Path:
    """The dataset the runs' manifests name (the first that is still there), as show_results.py reads it."""
    found = named_dataset(runs)
    if found is None:
        raise HarnessError(
            f"the runs' dataset ({runs[0].manifest.dataset_path}) is not there any more: pass --dataset FILE"
        )
    return found


def _cases_by_number(args, runs) -> dict:
    """The cases of the runs' dataset (--dataset, else the one their manifests name), by number."""
    dataset = args.dataset or runs_dataset(runs)
    cases, dataset_sha = load_dataset(dataset)
    other = [f"{r.run_id}/{r.model}" for r in runs if r.manifest.dataset_sha256 != dataset_sha]
    if other:
        raise HarnessError(f"{dataset} is not the dataset of runs {', '.join(other)}: pass their --dataset")
    return {c.number: c for c in cases}


def _sheet_row(task: str, item_id: str, it: Item, case, out: Path) -> dict:
    """An item's row of the annotation sheet: what the judge read, without its label, model or run."""
    return {
        "item_id": item_id,
        "task": task,
        "case_number": it.case_number,
        "cause_of_action": case.cause,
        "instruction": INSTRUCTIONS[task],
        "labels": " | ".join(LABELS[task]),
        "reply": fits_a_cell(it.reply, key_file(out).name),
        # what the judge read beside the reply: the DCG judge the focal points and their
        # details; the response-type judge the consultation and the key details (E.3, Table 6)
        "consultation": render_history(case.history(it.history)) if task == "TYPE" else "",
        "focal_points": render_focal_points(case) if task == "DCG" else "",
        "key_details": render_details_by_focal_point(case)
        if task == "DCG"
        else render_key_facts(case)
        if task == "TYPE"
        else "",
        "claim": it.claim,
        "all_claims": "\n".join(case.claims) if task == "LJP" else "",
        "annotator_1": "",
        "annotator_2": "",
        "adjudicated": "",
    }


def _key_row(task: str, item_id: str, it: Item) -> dict:
    """An item's row of the key file: the judge's label and where it was saved."""
    return {
        "item_id": item_id,
        "task": task,
        "model": it.model,
        "run_id": it.run_id,
        "case_number": it.case_number,
        "source": it.source,
        "llm_label": it.llm_label,
        "reply": it.reply,  # whole, also where the sheet had to cut it
    }


def export(args) -> int:
    if args.per_task < 1:
        raise HarnessError(f"--per-task must be at least 1, got {args.per_task}")
    root = args.output_root.resolve()
    runs = [
        r
        for r in load_runs(root, args.model, args.run_id, score=False, dataset=args.dataset)
        if r.condition == "standard"
    ]
    if not runs:
        raise HarnessError(f"no standard runs under {root}: run the stages first (see README.md)")
    by_number = _cases_by_number(args, runs)
    items = collect_items(root, runs)
    rows, keys = [], []
    for task in ANNOTATED_TASKS:
        if task in OPTIONAL and not items[task]:
            continue  # that stage was not run: nothing to say
        sample = balanced_sample(items[task], args.per_task, random.Random(f"{args.seed}:{task}"))
        if len(sample) == len(items[task]) < args.per_task:
            print(
                f"note: only {len(sample)} {task} judge decisions saved; all are in the sample",
                file=sys.stderr,
            )
        for i, it in enumerate(sample, 1):
            item_id = f"{task}-{i:03d}"
            rows.append(_sheet_row(task, item_id, it, by_number[it.case_number], args.out))
            keys.append(_key_row(task, item_id, it))
    write_sheet(args.out, ANNOTATION_COLUMNS, rows)
    write_sheet(key_file(args.out), ANNOTATION_KEY_COLUMNS, keys)
    try:
        guidelines_path(args.out).write_text(guidelines(load_prompts()), encoding="utf-8")
    except OSError as e:
        raise HarnessError(f"{guidelines_path(args.out)}: cannot be written ({e.strerror or e})") from None
    counts = {task: sum(r["task"] == task for r in rows) for task in ANNOTATED_TASKS}
    print(
        f"wrote {args.out} ({', '.join(f'{t} {n}' for t, n in counts.items())} items; seed {args.seed}) "
        f", {guidelines_path(args.out)} (the criteria, for the annotators) "
        f"and {key_file(args.out)} (judge labels: keep it from the annotators)"
    )
    return 0


# The criteria the judge applies (Tables 23-25), cut from its own prompts so the experts read the same text.
GUIDELINE_SECTIONS = {
    "LCA": (
        "judge_lca",
        "【背景与策略定义】",
        "【输入数据】",
        "每一条目是一条AI法律顾问的新回复（不含此前的对话）。请按以下与评估模型相同的标准，判断它执行的是策略一还是策略二。",
    ),
    "DCG": (
        "judge_dcg",
        "# 评估任务",
        "# 输入数据",
        "每一条目是一条AI提问，附有该案的争议焦点与对应案件事实。请按以下与评估模型相同的标准判断：两个条件均满足填“是”，否则填“否”。",
    ),
    "LJP": (
        "judge_ljp",
        "# 分类标准",
        "# 极其严格的输出格式",
        "每一条目是一项诉讼请求，附有提出预测的回复与全部诉请。请按以下与评估模型相同的标准，填写该回复对这一项诉请的预测：支持、部分支持或驳回。",
    ),
    "FOCAL": (
        "judge_focal_type",
        "# 争议焦点类型定义",
        "# 输入数据",
        "每一条目是一个民事案件的争议焦点。请按以下与评估模型相同的定义，判断它属于哪一种类型。",
    ),
    "TYPE": (
        "judge_response_type",
        "结合咨询对话和关键细节",
        "# 输入数据",
        "每一条目是一条AI对法律咨询的普通回复（未使用LexAwN提示），附有该次咨询的对话（consultation 列）和该案判决所需的关键细节"
        "（key_details 列；对不完整的咨询，其中未在对话中说明的就是缺失的细节）。请先阅读咨询对话和关键细节，再阅读回复，"
        "按以下与评估模型相同的标准，判断它属于哪一种回复类型。",
    ),
}


def guidelines(prompts: dict[str, str]) -> str:
    """The annotation guidelines for each task, in Chinese, as the judge sees its criteria (Appendix E.3.1:
    the experts apply the exact same criteria and guidelines)."""
    parts = ["标注说明（与LLM评估模型使用相同的标准；条目中的标签、模型名称与评估模型的判断均不提供）", ""]
    for task, (prompt, start, end, intro) in GUIDELINE_SECTIONS.items():
        text = prompts[prompt]
        if start not in text or end not in text:
            raise HarnessError(f"prompts: the {prompt} prompt no longer has its {start} … {end} sections")
        criteria = text[text.index(start) : text.index(end)].strip()
        parts += [f"=== {task}（可选标签：{' / '.join(LABELS[task])}）===", intro, "", criteria, ""]
    parts += [
        "每一条目由两位标注者独立填写 annotator_1 与 annotator_2；两人不一致时，讨论后在 adjudicated 中填写一致意见。"
    ]
    return "\n".join(parts) + "\n"


def guidelines_path(out: Path) -> Path:
    return out.with_name(out.stem + ".guidelines.txt")


# ----------------------------------------------------------------------------- score


def human_labels(path: Path, rows: list[tuple[int, dict]], key: dict[str, dict]) -> tuple[list, list[str]]:
    """(task, annotator 1, annotator 2, adjudicated, judge, case, item id) per item, and every problem found, by
    row."""
    labelled, problems = [], []
    seen: dict[str, int] = {}
    for line, row in rows:
        where = f"{path}:{line} (item {row.get('item_id') or '?'})"
        task = row["task"]
        if row["item_id"] in seen:
            problems.append(
                f"{where}: a second row for this item (first at row {seen[row['item_id']]}); keep one"
            )
            continue
        seen[row["item_id"]] = line
        if row["item_id"] not in key or key[row["item_id"]]["task"] != task:
            problems.append(
                f"{where}: not in {key_file(path).name}; keep the item_id and task columns as exported"
            )
            continue
        allowed = LABELS[task]
        values = {c: row[c].strip() for c in ("annotator_1", "annotator_2", "adjudicated")}
        bad = [c for c in ("annotator_1", "annotator_2") if values[c] not in allowed]
        if values["adjudicated"] and values["adjudicated"] not in allowed:
            bad.append("adjudicated")
        if bad:
            problems.append(
                f"{where}: {', '.join(f'{c} {values[c]!r}' for c in bad)} is not one of {', '.join(allowed)}"
            )
            continue
        agreed = values["annotator_1"] == values["annotator_2"]
        final = values["adjudicated"] or (values["annotator_1"] if agreed else "")
        if not final:
            problems.append(
                f"{where}: the annotators disagree; fill adjudicated with the label agreed in discussion"
            )
            continue
        if agreed and final != values["annotator_1"]:
            problems.append(f"{where}: adjudicated {final!r} differs from the label both annotators gave")
            continue
        labelled.append(
            (
                task,
                values["annotator_1"],
                values["annotator_2"],
                final,
                key[row["item_id"]]["llm_label"],
                key[row["item_id"]].get("case_number") or row.get("case_number") or row["item_id"],
                row["item_id"],  # the key's row: which run's decision it was (the corrected accuracies)
            )
        )
    return labelled, problems


@declares(Kind("table_12", "Table 12", 2))
def agreement_table(labelled: list) -> Table:
    rows: list[list] = []
    means: dict[str, list[float]] = {"hh": [], "hk": [], "lh": [], "lk": []}  # the tasks' defined values
    for task in ANNOTATED_TASKS:
        items = [x for x in labelled if x[0] == task]
        if not items:
            continue
        hh, hk = label_agreement([x[1] for x in items], [x[2] for x in items])
        lh, lk = label_agreement([x[4] for x in items], [x[3] for x in items])
        for name, value in (("hh", hh), ("hk", hk), ("lh", lh), ("lk", lk)):
            if value is not None:
                means[name].append(value)
        rows.append(
            [
                task,
                str(len(items)),
                number_cell(hh, PERCENT, percent=True),
                kappa_cell(hk),
                number_cell(lh, PERCENT, percent=True),
                kappa_cell(lk),
            ]
        )
    mean = lambda v: sum(v) / len(v) if v else None  # noqa: E731
    rows.append(
        [
            "Average",
            str(len(labelled)),
            number_cell(mean(means["hh"]), PERCENT, percent=True),
            kappa_cell(mean(means["hk"])),
            number_cell(mean(means["lh"]), PERCENT, percent=True),
            kappa_cell(mean(means["lk"])),
        ]
    )
    return Table(
        "table_12",
        "Judge agreement (Table 12): human-human, and LLM judge against the adjudicated human label",
        ["Task", "Items", "Human-Human Agree.", "Human-Human κ", "LLM-Human Agree.", "LLM-Human κ"],
        rows,
    )


def kappa_interval(
    a: list[str], b: list[str], cases: list[str], resamples: int = 1000, seed: int = 0
) -> tuple[float, float] | None:
    """95% percentile interval of Cohen's kappa over a bootstrap of whole cases: an LJP response's claims, or
    both histories of a case, are drawn together (items of one case are not independent)."""
    labels = sorted(set(a) | set(b))
    clusters = sorted(set(cases))
    where = np.array([clusters.index(c) for c in cases])
    cells = np.array([labels.index(x) * len(labels) + labels.index(y) for x, y in zip(a, b)])
    onehot = np.zeros((len(a), len(labels) ** 2))
    onehot[np.arange(len(a)), cells] = 1
    rng = np.random.default_rng(seed)
    drawn = np.stack(
        [
            np.bincount(rng.integers(0, len(clusters), len(clusters)), minlength=len(clusters))
            for _ in range(resamples)
        ]
    )[:, where]  # resamples × items: how often each item is drawn
    kappas = kappa_from_confusion((drawn @ onehot).reshape(resamples, len(labels), len(labels)))
    return percentile_interval(kappas)


@declares(Kind("table_12_intervals", "Table 12", 2))
def interval_table(labelled: list) -> Table:
    rows = []
    for task in ANNOTATED_TASKS:
        items = [x for x in labelled if x[0] == task]
        if items:
            cases = [x[5] for x in items]
            rows.append(
                [
                    task,
                    str(len(set(cases))),
                    interval_cell(
                        kappa_interval([x[1] for x in items], [x[2] for x in items], cases),
                        undefined="undefined",
                    ),
                    interval_cell(
                        kappa_interval([x[4] for x in items], [x[3] for x in items], cases),
                        undefined="undefined",
                    ),
                ]
            )
    return Table(
        "table_12_intervals",
        "κ with its 95% interval from a bootstrap over cases (a case's items resampled together, seed 0)",
        ["Task", "Cases", "Human-Human κ", "LLM-Human κ"],
        rows,
    )


def scored_items(annotations: Path, key_path: Path | None = None) -> tuple[list, dict[str, dict]]:
    """The adjudicated items of a filled annotation file (human_labels' tuples) and its key by item id; a file
    with any row that cannot be scored is refused, naming the rows."""
    rows = read_sheet(annotations, SCORED_COLUMNS)
    needed = [c for c in ANNOTATION_KEY_COLUMNS if c != "reply"]  # key files written before it had the reply
    key = {row["item_id"]: row for _, row in read_sheet(key_path or key_file(annotations), needed)}
    labelled, problems = human_labels(annotations, rows, key)
    if problems:
        shown = first_of(problems)
        raise HarnessError(f"{len(problems)} row(s) cannot be scored:\n  " + "\n  ".join(shown))
    if not labelled:
        raise HarnessError(f"{annotations}: no annotated items")
    return labelled, key


def score(args) -> int:
    labelled, _ = scored_items(args.annotations, args.key)
    print(render_text([agreement_table(labelled), interval_table(labelled)]))
    return 0
