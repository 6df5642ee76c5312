"""A run's cases as the export writes them, format aside: one `Instance` per consultation of a stage (a case, or a
case's history or probe condition where each is its own consultation), with every message of it (the dataset's
history, the evaluated model's replies, the User Model's turns), the labels against their references, and the tokens
each role spent on it. Read through the one record reader (`runs.read_saved`); the Every Eval Ever records and the
Inspect logs are both made from these. The main stages' instances are made here, the later stages' in
later_instances.py; which stage is made how is declared once, in stages.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lexpilot.benchmark.categories import cause_class
from lexpilot.benchmark.records import SERVED_CALLS_FIELD
from lexpilot.benchmark.vocabulary import HISTORY_TYPES, YES
from lexpilot.reporting.scoring.runs import OVERALL, USAGE_FIELDS, Run, read_saved

if TYPE_CHECKING:
    from lexpilot.reporting.export.stages import ExportedStage

LLM_JUDGE = "llm_judge"  # how a label the judge decided was extracted (EEE's extraction_method)
# where a message came from: the dataset's consultation, the evaluated model, the User Model
DATASET, EVALUATED, USER_MODEL = "dataset", "evaluated model", "User Model"


@dataclass(frozen=True)
class Message:
    role: str  # "user" or "assistant", as the evaluated model saw it
    content: str
    source: str  # DATASET, EVALUATED or USER_MODEL


@dataclass(frozen=True)
class Label:
    """One judge-decided label: what the judge read (a message's index), what it decided, and the reference."""

    turn: int
    predicted: str
    reference: str
    judge_raw: list = field(default_factory=list)
    name: str = ""  # a claim, a history type, a round, a reply's criterion or a focal point
    method: str = LLM_JUDGE  # who decided it: the judge, or the dataset (a focal point's type it gives)


@dataclass
class Instance:
    """One consultation of one stage of one run: a case, or (`part`) one of its histories or probe conditions."""

    stage: str
    case: str
    cause: str
    messages: list[Message]
    labels: list[Label]
    score: float  # the case's own share right (LCA: of its two histories; LJP: of its claims; DCG: success)
    correct: bool  # every label right (DCG: the run's success)
    usage: dict[str, dict[str, int]]  # role -> USAGE_FIELDS sums, the stage's generation and judging together
    served: dict[str, list[str]]  # role -> the model ids that served its calls for this case
    details: dict = field(default_factory=dict)  # stop reason, history type, the DCG rounds
    part: str = ""  # the history type (LCA) or probe condition that makes it a consultation of its own
    # the part (a class, Overall, a probe condition) of its stage's first metric that its score counts toward; None:
    # none (a probe's D reply is not judged; an audited case's share of clean replies is no metric of its own)
    result: str | None = OVERALL

    @property
    def sample_id(self) -> str:
        return f"{self.case}/{self.part}" if self.part else self.case

    @property
    def case_class(self) -> str:
        return cause_class(self.cause)

    @property
    def user_model_turns(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.source == USER_MODEL]


def history(messages: list, source: str = DATASET) -> list[Message]:
    return [Message(str(m["role"]), str(m["content"]), source) for m in messages]


def lca_instances(verdict: dict, generation: dict) -> list[Instance]:
    """Each history of the case its own consultation (the complete and the underspecified one are sent apart): the
    history, the evaluated model's reply, and the judge's label of it (asked, 策略二, is underspecified)."""
    found = []
    for history_type, judged in verdict["judgments"].items():
        shown = generation["responses"][history_type]
        messages = history(shown["history"]) + [Message("assistant", str(shown["response"]), EVALUATED)]
        label = Label(
            len(messages) - 1,
            judged["predicted_type"],
            judged["true_type"],
            judged.get("judge_raw") or [],
            history_type,
        )
        right = label.predicted == label.reference
        found.append(
            Instance(
                "LCA",
                verdict["case_number"],
                verdict["cause_of_action"],
                messages,
                [label],
                float(right),
                right,
                {},
                {},
                {"history_type": history_type},
                part=history_type,
            )
        )
    return found


def dcg_messages(generation: dict) -> tuple[list[Message], dict[int, int]]:
    """The underspecified history, then each forced question and the User Model's reply; and each round's question's
    index among the messages."""
    messages = history(generation["input_history"])
    asked = {}
    for question in generation["rounds"]:
        messages.append(Message("assistant", str(question.get("question", "")), EVALUATED))
        asked[question["round"]] = len(messages) - 1
        if question.get("user_reply") is not None:
            messages.append(Message("user", str(question["user_reply"]), USER_MODEL))
    return messages, asked


def dcg_instances(verdict: dict, generation: dict) -> list[Instance]:
    """The forced questions and the User Model's replies; the judge's yes or no per question (does it ask for a
    focal point), a success when any says yes."""
    messages, asked = dcg_messages(generation)
    labels = [
        Label(asked.get(j["round"], len(messages) - 1), j["label"], YES, j.get("judge_raw") or [], "round")
        for j in verdict["rounds"]
    ]
    success = bool(verdict["success"])
    return [
        Instance(
            "DCG",
            verdict["case_number"],
            verdict["cause_of_action"],
            messages,
            labels,
            float(success),
            success,
            {},
            {},
            {"rounds": len(labels)},
        )
    ]


def ljp_messages(generation: dict, reply_field: str) -> list[Message]:
    """An LJP consultation as the evaluated model saw it (the Interaction-Based setup's with every User Model turn),
    ending with its final reply."""
    if "continued_history" in generation:  # the interaction: the dataset's turns, then the dialogue
        given = len(generation["input_history"])
        messages = history(generation["continued_history"][:given]) + [
            Message(str(m["role"]), str(m["content"]), USER_MODEL if m["role"] == "user" else EVALUATED)
            for m in generation["continued_history"][given:]
        ]
    else:
        messages = history(generation["input_history"])
    final = str(generation[reply_field] or "")
    if not messages or messages[-1].role != "assistant" or messages[-1].content != final:
        messages.append(Message("assistant", final, EVALUATED))
    return messages


def claim_instance(
    stage: str, verdict: dict, messages: list[Message], predicted: str, reference: str
) -> Instance:
    """A case whose labels are a verdict per claim (the judge's `predicted` against `reference`), read from the last
    message; its score the share of claims right."""
    raw = verdict.get("judge_raw") or []
    labels = [
        Label(len(messages) - 1, p, g, raw, claim)
        for claim, g, p in zip(verdict["claims"], verdict[reference], verdict[predicted])
    ]
    right = sum(lab.predicted == lab.reference for lab in labels)
    return Instance(
        stage,
        verdict["case_number"],
        verdict["cause_of_action"],
        messages,
        labels,
        right / len(labels) if labels else 0.0,
        right == len(labels),
        {},
        {},
        {name: verdict[name] for name in ("stop_reason", "status") if name in verdict},
    )


def ljp_instances(stage: str, reply_field: str) -> Callable[[dict, dict], list[Instance]]:
    """An LJP setup's case: its consultation, and the verdict the judge extracted per claim against the court's."""

    def build(verdict: dict, generation: dict) -> list[Instance]:
        return [claim_instance(stage, verdict, ljp_messages(generation, reply_field), "predicted", "gold")]

    return build


def usage_of(*records: dict) -> dict[str, dict[str, int]]:
    """Role -> the usage fields summed over the records: only the fields some record has (a run made before cached or
    reasoning tokens were kept says nothing of them, which is not zero)."""
    total: dict[str, dict[str, int]] = {}
    for record in records:
        for role, used in (record.get("usage") or {}).items():
            sums = total.setdefault(role, {})
            for name in USAGE_FIELDS:
                if isinstance(used.get(name), int):
                    sums[name] = sums.get(name, 0) + used[name]
    return total


def tokens_reported(used: dict) -> bool:
    """Whether a role's token counts are whole: a call whose reply reported none (a provider that does not say, as
    llama.cpp without usage) makes the sum unknown, not the other calls' sum, and no export states it."""
    return bool(used) and not used.get("unreported_calls")


def served_of(*records: dict) -> dict[str, list[str]]:
    """Role -> the served model ids of the records' calls, in order of first use."""
    served: dict[str, list[str]] = {}
    for record in records:
        for call in record.get(SERVED_CALLS_FIELD) or []:
            ids = served.setdefault(str(call.get("role")), [])
            if call.get("served") and call["served"] not in ids:
                ids.append(call["served"])
    return served


def labels_served(records: Sequence[dict]) -> dict[str, list[str]]:
    """Role -> the ids that served the case's calls, the judge's read from the stage's labels (`records[0]`) alone:
    judge calls in the records they label (the Interaction-Based rounds' in-dialogue calls, interaction.jsonl) were
    made by the run that generated them, which in a re-judged run is its source, with its judge, so they are stated
    apart (`judge_in_labelled_records`), never as the labels' judge."""
    served = served_of(*records[::-1])
    served.pop("judge", None)
    if judged := served_of(records[0]).get("judge"):
        served["judge"] = judged
    return served


def stage_files(stage: ExportedStage) -> str:
    return ", ".join(kind.file for kind in stage.sources)


def served_in(stages: dict[str, list[Instance]]) -> dict[str, list[str]]:
    """Role -> the served model ids of every exported instance's records, in order of first use."""
    found: dict[str, list[str]] = {}
    for instances in stages.values():
        for instance in instances:
            for role, ids in instance.served.items():
                known = found.setdefault(role, [])
                known += [i for i in ids if i not in known]
    return found


def stage_instances(run: Run, root: Path, stage: ExportedStage) -> tuple[list[Instance], str | None]:
    """A stage's instances in the run's case order (empty: the stage was not run), or why they cannot be exported: a
    record the reader refuses, a case whose labels have no reply, a record whose fields do not fit."""
    if not stage.verdicts.path(root, run.run_id, run.folder).exists():
        return [], None
    verdicts, problem = read_saved(run, root, stage.verdicts)
    sources = []
    for kind in stage.sources:
        records, source_problem = read_saved(run, root, kind)
        if source_problem and records == {}:
            return [], source_problem
        sources.append(records)
    if problem:
        return [], problem
    instances = []
    for case in (c for c in run.selected if c in verdicts):
        made, problem = case_instances(stage, verdicts[case], [records.get(case) for records in sources])
        if problem:
            return [], f"case {case}: {problem}"
        instances += made
    if run.manifest.rejudged:  # its generations, their in-dialogue judge calls with them, were its source's
        for instance in instances:
            if found := instance.details.get("judge_in_labelled_records"):
                found["run"] = str(run.manifest.rejudged_from)
    return instances, None


def case_instances(
    stage: ExportedStage, verdict: dict, sources: Sequence[dict | None]
) -> tuple[list[Instance], str | None]:
    """One case's instances, each with the tokens and served ids of every record it was made from."""
    missing = [kind.file for kind, record in zip(stage.sources, sources) if record is None]
    if missing:
        return [], f"{stage.title} labels without the records they label ({', '.join(missing)})"
    records = [verdict, *(r for r in sources if r is not None)]
    try:
        made = stage.build(*records)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as e:
        return [], f"{stage.verdicts.file}: a record without the field {e}"
    for instance in made:
        instance.served = labels_served(records)
        if dialogue := served_of(*records[1:]).get("judge"):
            instance.details["judge_in_labelled_records"] = {
                "served": dialogue,
                "records": stage_files(stage),
            }
    # the records' tokens are not kept per consultation where one record holds several (LCA's two histories): they
    # go to its first, the others naming it, so that a sum over instances is the records' sum
    if made:
        made[0].usage = usage_of(*records[::-1])
    for instance in made[1:]:
        instance.details["tokens_counted_with"] = made[0].sample_id
    if made and stage.first_round_with:
        counted_with(made[0], stage.first_round_with)
    return made, None


def counted_with(instance: Instance, stage: str) -> None:
    """Say where the tokens of a consultation's first round are: on `stage`'s instance of the case that holds its
    record's tokens (LCA's first history), named by its evaluation and sample id; where the record holds no other
    call of the evaluated model (a case judged in round 1), all its tokens are there, said as LCA's second history
    says it (`tokens_counted_with`), so a sum per stage never undercounts silently."""
    where = f"{stage} {instance.case}/{HISTORY_TYPES[0]}"
    instance.details["round_1_tokens_counted_with"] = where
    if not instance.usage.get("eval"):
        instance.details["tokens_counted_with"] = where
