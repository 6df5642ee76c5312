"""The experts' adjudicated labels (the scored annotation file of `judge_agreement.py`, with its key) as right or wrong
decisions of the runs they were drawn from: what the judge-corrected accuracies read beside the judge's own.

A label is matched to its decision by the key's model, run id and source (the record file, case and place). An LCA
label is one decision: the reply after one history, right when its strategy fits the history (Acc_C over complete
histories, Acc_U over underspecified ones). A DCG decision is the case's success, "at least one request meets both
criteria" (Section 6.3), so a case counts only when the experts labelled every round of it; a case drawn with some
rounds only is left out, which keeps the sample random (the rounds were drawn without looking at their labels).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from lexpilot.benchmark.records import DCG, LCA, LJP_SETUPS, RecordKind, digest_holds
from lexpilot.benchmark.vocabulary import ASKS, YES
from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.runs import MetricKey, Run, read_task
from lexpilot.reporting.validation.agreement import scored_items

# the metrics a label can correct, by the place of its decision in the source (the export's `_item_adder`)
LCA_METRICS = {"complete": MetricKey("LCA", "acc_c"), "underspecified": MetricKey("LCA", "acc_u")}
DCG_ACCURACY = MetricKey("DCG", "accuracy")
SOURCE = re.compile(r" case (?P<case>.+) (?P<where>complete|underspecified|round \d+|claim \d+)$")
CORRECTED_TASKS = ("LCA", "DCG", "LJP")


@dataclass(frozen=True)
class ExpertLabel:
    """One adjudicated item of the file: which run's decision, where in it, the judge's label and the experts'."""

    item_id: str
    task: str
    model: str
    run_id: str
    case: str
    where: str  # "complete", "underspecified", "round 1", "claim 1"…
    judge: str
    expert: str
    path: str = ""  # the record file, under the output root: an LJP label's setup


@dataclass(frozen=True)
class LabelledClaim:
    """An LJP claim's verdict as the judge extracted it and as the experts read it, beside the court's: a cell of
    the gold × predicted confusion its setup's QWK is made of."""

    model: str
    run_id: str
    metric: MetricKey  # the setup's QWK
    case: str
    gold: str
    judge: str
    expert: str


@dataclass(frozen=True)
class Labelled:
    """A decision of a run on one metric with the experts' outcome beside the judge's (1 right, 0 wrong)."""

    model: str
    run_id: str
    metric: MetricKey
    case: str
    judge_right: int
    expert_right: int


def read_expert_labels(path: Path) -> list[ExpertLabel]:
    """The file's LCA, DCG and LJP items (the tasks whose metrics are corrected), checked as `judge_agreement.py
    score` checks them."""
    items, key = scored_items(path)
    labels = []
    for task, _, _, adjudicated, judge, case, item_id in items:
        if task not in CORRECTED_TASKS:
            continue
        found = SOURCE.search(key[item_id]["source"])
        if found is None:
            raise HarnessError(
                f"{path}: item {item_id}: its source in the key ({key[item_id]['source']!r}) names no history, "
                "round or claim; use the key file that export wrote"
            )
        row = key[item_id]
        record_file = row["source"][: found.start()]
        labels.append(
            ExpertLabel(
                item_id,
                task,
                row["model"],
                row[KEY_RUN],
                case,
                found["where"],
                judge,
                adjudicated,
                record_file,
            )
        )
    return labels


KEY_RUN = "run_id"  # the key file's column naming a label's run (a key's field, not a manifest's)


def lca_right(label: str, history: str) -> int:
    """An LCA decision is right when the reply's strategy fits the history: ask (策略二) after an underspecified
    one, answer after a complete one."""
    return int((label == ASKS) == (history == "underspecified"))


def _claim(record: dict, label: ExpertLabel) -> int | None:
    """The index of an LJP label's claim in its record, None when the record has no such claim."""
    number = int(label.where.split()[1])
    return number - 1 if 1 <= number <= len(record["predicted"]) else None


def _saved_label(records: dict, label: ExpertLabel) -> str:
    """The judge's label of the item as the run saved it."""
    record = records[label.case]
    if label.task == "LCA":
        return record["judgments"][label.where]["label"]
    if label.task == "LJP":
        claim = _claim(record, label)
        said = None if claim is None else record["predicted"][claim]
    else:
        said = next((r["label"] for r in record["rounds"] if f"round {r['round']}" == label.where), None)
    if said is None:
        raise HarnessError(
            f"expert label {label.item_id}: run {label.run_id}, model {label.model}, case {label.case} has no "
            f"{label.where}; use the key file that export wrote for this output root"
        )
    return said


def _kind(run: Run, root: Path, label: ExpertLabel) -> RecordKind:
    """The record kind a label's decision was saved in: an LJP label's setup by its record file."""
    if label.task != "LJP":
        return LCA if label.task == "LCA" else DCG
    for setup in LJP_SETUPS:
        if setup.verdicts.path(root, run.run_id, run.folder).relative_to(root).as_posix() == label.path:
            return setup.verdicts
    raise HarnessError(
        f"expert label {label.item_id}: its source {label.path} is none of run {label.run_id}'s LJP verdicts; "
        "use the key file that export wrote for this output root"
    )


KEPT = ("judgments", "rounds", "predicted", "gold")  # what a label is checked against: the rest is let go


def _records(run: Run, root: Path, label: ExpertLabel, kind: RecordKind, cases: set[str]) -> dict:
    """The run's records of the label's kind for the labelled `cases`, cut to what a label is checked against
    (fifty runs' whole records held at once took hundreds of MB). The run's task was read whole and checked when it
    was scored for this report; only the labelled cases' lines are parsed again here (a tenth of a report's lines
    at the paper's scale), each held to its digest."""
    path = kind.path(root, run.run_id, run.folder)
    found = _labelled_lines(path, cases) if path.is_file() and kind.name in run.tasks else None
    if found is None or label.case not in found:
        records, problem = read_task(run, root, kind)  # the long way, for its checks and its reason
        if records is None or label.case not in records:
            raise HarnessError(
                f"expert label {label.item_id}: run {label.run_id}, model {label.model} has no complete "
                f"{kind.name} record of case {label.case} ({problem or 'not selected'}); label its saved runs"
            )
        found = {c: records[c] for c in cases if c in records}
    return {c: {k: record[k] for k in KEPT if k in record} for c, record in found.items()}


CASE_KEY = b'{"case_number":'  # how a canonical record line begins (its keys sorted)


def _labelled_lines(path: Path, cases: set[str]) -> dict[str, dict] | None:
    """The records of `cases` in a record file, parsed from their lines alone; None where a line is not as the
    harness writes it (then the file is read the long way)."""
    found = {}
    for raw in path.read_bytes().split(b"\n"):
        if not raw:
            continue
        end = raw.find(b'",', len(CASE_KEY))
        if not raw.startswith(CASE_KEY) or end < 0:
            return None
        if json.loads(raw[len(CASE_KEY) : end + 1]) not in cases:
            continue
        record = json.loads(raw)
        if "digest" not in record or not digest_holds(raw, record):
            return None
        found[record["case_number"]] = record
    return found


@dataclass
class Matched:
    """Labels matched to the runs' decisions: right/wrong decisions per accuracy, LJP claims per setup, and how many
    DCG cases were left out for a round without a label."""

    decisions: list[Labelled]
    claims: list[LabelledClaim]
    partial: int


def labelled_decisions(labels: list[ExpertLabel], runs: list[Run], root: Path) -> Matched:
    """The labels matched to the given runs' decisions. A label whose judge label is not the saved one is refused:
    the run was judged again after the sample was drawn."""
    by_run = {(r.model, r.run_id): r for r in runs}
    shown = [
        (label, run, _kind(run, root, label))
        for label in labels
        if (run := by_run.get((label.model, label.run_id)))
    ]
    cases: dict[tuple, set[str]] = {}  # the labelled cases of each record file
    for label, _, kind in shown:
        cases.setdefault((label.model, label.run_id, kind.name), set()).add(label.case)
    cache: dict[tuple, dict] = {}
    matched = Matched([], [], 0)
    rounds: dict[tuple, dict[str, ExpertLabel]] = {}
    _no_decision_twice(shown)
    for label, run, kind in shown:
        file = (label.model, label.run_id, kind.name)
        if file not in cache:  # each record file read once
            cache[file] = _records(run, root, label, kind, cases[file])
        records = cache[file]
        if _saved_label(records, label) != label.judge:
            raise HarnessError(
                f"expert label {label.item_id}: the key's judge label {label.judge} is not run {label.run_id}'s "
                f"({_saved_label(records, label)}): the run was judged again since the export, or the file was exported "
                "from another output root; export again from this one"
            )
        if label.task == "LCA":
            right = (lca_right(label.judge, label.where), lca_right(label.expert, label.where))
            matched.decisions.append(
                Labelled(label.model, label.run_id, LCA_METRICS[label.where], label.case, *right)
            )
        elif label.task == "LJP":
            gold = records[label.case]["gold"][_claim(records[label.case], label)]
            metric = MetricKey(kind.name, "qwk")
            matched.claims.append(
                LabelledClaim(label.model, label.run_id, metric, label.case, gold, label.judge, label.expert)
            )
        else:
            rounds.setdefault((label.model, label.run_id, label.case), {})[label.where] = label
    matched.decisions += [d for d in (_dcg_case(key, got, cache) for key, got in rounds.items()) if d]
    matched.partial = len(rounds) - sum(d.metric == DCG_ACCURACY for d in matched.decisions)
    return matched


def _no_decision_twice(shown: list[tuple[ExpertLabel, Run, RecordKind]]) -> None:
    """Two key rows that name one decision would count it twice (a key edited by hand, two files joined)."""
    seen: dict[tuple, str] = {}
    for label, _, kind in shown:
        decision = (label.model, label.run_id, kind.name, label.case, label.where)
        if decision in seen:
            raise HarnessError(
                f"expert labels {seen[decision]} and {label.item_id} name the same decision (run {label.run_id}, "
                f"model {label.model}, case {label.case}, {label.where}); keep one of them in the key"
            )
        seen[decision] = label.item_id


def _dcg_case(key: tuple, labelled: dict[str, ExpertLabel], cache: dict) -> Labelled | None:
    """A DCG case's success by the judge and by the experts, when the experts labelled every round of it."""
    model, run_id, case = key
    saved = {f"round {r['round']}" for r in cache[(model, run_id, DCG.name)][case]["rounds"]}
    if set(labelled) != saved:
        return None
    judge = int(any(x.judge == YES for x in labelled.values()))
    expert = int(any(x.expert == YES for x in labelled.values()))
    return Labelled(model, run_id, DCG_ACCURACY, case, judge, expert)
