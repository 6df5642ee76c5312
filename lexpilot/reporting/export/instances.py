"""A run's cases as the export writes them, format aside: one `Instance` per case and stage (LCA, DCG and the three LJP
setups), with every message of its consultation (the dataset's history, the evaluated model's replies, the User
Model's turns), the judge-decided labels against their references, and the tokens each role spent on it. Read through
the one record reader (`runs.read_saved`); the Every Eval Ever records and the Inspect logs are both made from these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lexpilot.benchmark.categories import cause_class
from lexpilot.benchmark.records import (
    A1,
    DCG,
    FORCE_ASK,
    LCA,
    LJP_SETUPS,
    SERVED_CALLS_FIELD,
    RecordKind,
)
from lexpilot.benchmark.vocabulary import YES
from lexpilot.reporting.scoring.runs import USAGE_FIELDS, Run, read_saved

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
    name: str = ""  # a claim, a history type or a round


@dataclass
class Instance:
    """One case of one stage of one run."""

    stage: str
    case: str
    cause: str
    messages: list[Message]
    labels: list[Label]
    score: float  # the case's own share right (LCA: of its two histories; LJP: of its claims; DCG: success)
    correct: bool  # every label right (DCG: the run's success)
    usage: dict[str, dict[str, int]]  # role -> USAGE_FIELDS sums, the stage's generation and judging together
    served: dict[str, list[str]]  # role -> the model ids that served its calls for this case
    details: dict = field(default_factory=dict)  # stop reason, history types, the DCG rounds

    @property
    def case_class(self) -> str:
        return cause_class(self.cause)

    @property
    def user_model_turns(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.source == USER_MODEL]


def history(messages: list, source: str = DATASET) -> list[Message]:
    return [Message(str(m["role"]), str(m["content"]), source) for m in messages]


def lca_instance(verdict: dict, generation: dict) -> Instance:
    """Both histories of the case, one after the other, each with the evaluated model's reply and the judge's label of
    it (asked, 策略二, is underspecified)."""
    messages: list[Message] = []
    labels = []
    for history_type, judged in verdict["judgments"].items():
        shown = generation["responses"][history_type]
        messages += history(shown["history"])
        messages.append(Message("assistant", str(shown["response"]), EVALUATED))
        labels.append(
            Label(
                len(messages) - 1,
                judged["predicted_type"],
                judged["true_type"],
                judged.get("judge_raw") or [],
                history_type,
            )
        )
    right = sum(lab.predicted == lab.reference for lab in labels)
    return Instance(
        "LCA",
        verdict["case_number"],
        verdict["cause_of_action"],
        messages,
        labels,
        right / len(labels),
        right == len(labels),
        {},
        {},
        {"histories": list(verdict["judgments"])},
    )


def dcg_instance(verdict: dict, generation: dict) -> Instance:
    """The underspecified history, then each forced question and the User Model's reply; the judge's yes or no per
    question (does it ask for a focal point), a success when any says yes."""
    messages = history(generation["input_history"])
    labels = []
    asked = {r["round"]: r for r in generation["rounds"]}
    for judged in verdict["rounds"]:
        question = asked.get(judged["round"], {})
        messages.append(Message("assistant", str(question.get("question", "")), EVALUATED))
        labels.append(Label(len(messages) - 1, judged["label"], YES, judged.get("judge_raw") or [], "round"))
        if question.get("user_reply") is not None:
            messages.append(Message("user", str(question["user_reply"]), USER_MODEL))
    success = bool(verdict["success"])
    return Instance(
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


def ljp_instance(stage: str, reply_field: str) -> Callable[[dict, dict], Instance]:
    """An LJP setup's case: the consultation as the evaluated model saw it (the Interaction-Based setup's with every
    User Model turn), its final reply, and the verdict the judge extracted per claim against the court's."""

    def build(verdict: dict, generation: dict) -> Instance:
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
        raw = verdict.get("judge_raw") or []
        labels = [
            Label(len(messages) - 1, p, g, raw, claim)
            for claim, g, p in zip(verdict["claims"], verdict["gold"], verdict["predicted"])
        ]
        right = sum(lab.predicted == lab.reference for lab in labels)
        details = {"stop_reason": verdict["stop_reason"]} if "stop_reason" in verdict else {}
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
            details,
        )

    return build


@dataclass(frozen=True)
class ExportedStage:
    """A stage the export carries: its task's name in the metrics, the records of its labels and of its replies, how a
    case becomes an instance, and its metrics (the first is the one each instance counts toward)."""

    task: str
    title: str
    verdicts: RecordKind
    generation: RecordKind
    build: Callable[[dict, dict], Instance]
    metrics: tuple[str, ...]
    prompts: tuple[str, str]  # the evaluated model's prompt and the judge's (benchmark/prompts.py's names)


STAGES = (
    ExportedStage(
        "LCA",
        "Legal Completeness Assessment",
        LCA,
        A1,
        lca_instance,
        ("macro_f1", "acc_c", "acc_u"),
        ("lexawn", "judge_lca"),
    ),
    ExportedStage(
        "DCG",
        "Detail Completion Guidance",
        DCG,
        FORCE_ASK,
        dcg_instance,
        ("accuracy",),
        ("force_ask", "judge_dcg"),
    ),
    *(
        ExportedStage(
            s.task,
            f"Legal Judgment Prediction, {s.title}",
            s.verdicts,
            s.generation,
            ljp_instance(s.task, s.reply_field),
            ("qwk", "accuracy"),
            ("force_judge" if s.name != "interaction" else "lexawn", "judge_ljp"),
        )
        for s in LJP_SETUPS
    ),
)
STAGE = {s.task: s for s in STAGES}


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


def stage_instances(run: Run, root: Path, stage: ExportedStage) -> tuple[list[Instance], str | None]:
    """A stage's instances in the run's case order (empty: the stage was not run), or why they cannot be exported: a
    record the reader refuses, a case whose labels have no reply, a record whose fields do not fit."""
    if not stage.verdicts.path(root, run.run_id, run.folder).exists():
        return [], None
    verdicts, problem = read_saved(run, root, stage.verdicts)
    generations, gen_problem = read_saved(run, root, stage.generation)
    if problem or (gen_problem and generations == {}):
        return [], problem or gen_problem
    instances = []
    for case in run.selected:
        if case not in verdicts:
            continue
        verdict, generation = verdicts[case], generations.get(case)
        if generation is None:
            return (
                [],
                f"case {case}: {stage.title} labels without the reply they label ({stage.generation.file})",
            )
        try:
            instance = stage.build(verdict, generation)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            return [], f"case {case}: {stage.verdicts.file}: a record without the field {e}"
        instance.usage = usage_of(generation, verdict)
        instance.served = served_of(generation, verdict)
        instances.append(instance)
    return instances, None
