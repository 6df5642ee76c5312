"""The experts' adjudicated labels (the scored annotation file of `judge_agreement.py`, with its key) as right or wrong
decisions of the runs they were drawn from: what the judge-corrected accuracies read beside the judge's own.

A label is matched to its decision by the key's model, run id and source (the record file, case and place). An LCA
label is one decision: the reply after one history, right when its strategy fits the history (Acc_C over complete
histories, Acc_U over underspecified ones). A DCG decision is the case's success, "at least one request meets both
criteria" (Section 6.3), so a case counts only when the experts labelled every round of it; a case drawn with some
rounds only is left out, which keeps the sample random (the rounds were drawn without looking at their labels).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lexpilot.benchmark.records import DCG, LCA
from lexpilot.benchmark.vocabulary import ASKS, YES
from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.runs import MetricKey, Run, read_task
from lexpilot.reporting.validation.agreement import scored_items

# the metrics a label can correct, by the place of its decision in the source (the export's `_item_adder`)
LCA_METRICS = {"complete": MetricKey("LCA", "acc_c"), "underspecified": MetricKey("LCA", "acc_u")}
DCG_ACCURACY = MetricKey("DCG", "accuracy")
SOURCE = re.compile(r" case (?P<case>.+) (?P<where>complete|underspecified|round (?P<round>\d+))$")


@dataclass(frozen=True)
class ExpertLabel:
    """One adjudicated item of the file: which run's decision, where in it, the judge's label and the experts'."""

    item_id: str
    task: str
    model: str
    run_id: str
    case: str
    where: str  # "complete", "underspecified", "round 1"…
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
    """The file's LCA and DCG items (the tasks whose accuracies are corrected), checked as `judge_agreement.py
    score` checks them."""
    items, key = scored_items(path)
    labels = []
    for task, _, _, adjudicated, judge, case, item_id in items:
        if task not in ("LCA", "DCG"):
            continue
        found = SOURCE.search(key[item_id]["source"])
        if found is None:
            raise HarnessError(
                f"{path}: item {item_id}: its source in the key ({key[item_id]['source']!r}) names no history "
                "or round; use the key file that export wrote"
            )
        row = key[item_id]
        labels.append(
            ExpertLabel(item_id, task, row["model"], row[KEY_RUN], case, found["where"], judge, adjudicated)
        )
    return labels


KEY_RUN = "run_id"  # the key file's column naming a label's run (a key's field, not a manifest's)


def lca_right(label: str, history: str) -> int:
    """An LCA decision is right when the reply's strategy fits the history: ask (策略二) after an underspecified
    one, answer after a complete one."""
    return int((label == ASKS) == (history == "underspecified"))


def _saved_label(records: dict, label: ExpertLabel) -> str:
    """The judge's label of the item as the run saved it."""
    record = records[label.case]
    if label.task == "LCA":
        return record["judgments"][label.where]["label"]
    said = next((r["label"] for r in record["rounds"] if f"round {r['round']}" == label.where), None)
    if said is None:
        raise HarnessError(
            f"expert label {label.item_id}: run {label.run_id}, model {label.model}, case {label.case} has no "
            f"{label.where}; use the key file that export wrote for this output root"
        )
    return said


def _records(run: Run, root: Path, label: ExpertLabel) -> dict:
    """The run's records of the label's task, holding the item (the run's task is complete: it was scored)."""
    records, problem = read_task(run, root, LCA if label.task == "LCA" else DCG)
    if records is None or label.case not in records:
        raise HarnessError(
            f"expert label {label.item_id}: run {label.run_id}, model {label.model} has no complete "
            f"{label.task} record of case {label.case} ({problem or 'not selected'}); label its saved runs"
        )
    return records


def labelled_decisions(labels: list[ExpertLabel], runs: list[Run], root: Path) -> tuple[list[Labelled], int]:
    """The labels matched to the given runs' decisions, as right/wrong decisions per metric, and how many DCG cases
    were left out for a round without a label. A label whose judge label is not the saved one is refused: the run was
    judged again after the sample was drawn."""
    by_run = {(r.model, r.run_id): r for r in runs}
    cache: dict[tuple, dict] = {}
    decisions: list[Labelled] = []
    rounds: dict[tuple, dict[str, ExpertLabel]] = {}
    for label in labels:
        run = by_run.get((label.model, label.run_id))
        if run is None:
            continue  # a run this report does not show
        if (label.model, label.run_id, label.task) not in cache:  # each record file read once
            cache[(label.model, label.run_id, label.task)] = _records(run, root, label)
        records = cache[(label.model, label.run_id, label.task)]
        if _saved_label(records, label) != label.judge:
            raise HarnessError(
                f"expert label {label.item_id}: the key's judge label {label.judge} is not run {label.run_id}'s "
                f"({_saved_label(records, label)}): the run was judged again since the export; export again"
            )
        if label.task == "LCA":
            right = (lca_right(label.judge, label.where), lca_right(label.expert, label.where))
            decisions.append(
                Labelled(label.model, label.run_id, LCA_METRICS[label.where], label.case, *right)
            )
        else:
            rounds.setdefault((label.model, label.run_id, label.case), {})[label.where] = label
    decisions += [d for d in (_dcg_case(key, got, cache) for key, got in rounds.items()) if d]
    partial = len(rounds) - sum(d.metric == DCG_ACCURACY for d in decisions)
    return decisions, partial


def _dcg_case(key: tuple, labelled: dict[str, ExpertLabel], cache: dict) -> Labelled | None:
    """A DCG case's success by the judge and by the experts, when the experts labelled every round of it."""
    model, run_id, case = key
    saved = {f"round {r['round']}" for r in cache[(model, run_id, "DCG")][case]["rounds"]}
    if set(labelled) != saved:
        return None
    judge = int(any(x.judge == YES for x in labelled.values()))
    expert = int(any(x.expert == YES for x in labelled.values()))
    return Labelled(model, run_id, DCG_ACCURACY, case, judge, expert)
