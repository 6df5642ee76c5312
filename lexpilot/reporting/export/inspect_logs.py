"""Inspect logs of a run, through `inspect_ai`'s own types and writer: one `EvalLog` per model, run and stage, whose
samples are the stage's cases (every message of the consultation, the judge's labels as the score, the case's
details as metadata, each role's tokens), whose results are the run's metrics, and whose spec carries the run's
settings; `inspect view` opens them as it opens Inspect's own. Written as JSON logs (`.json`), whose bytes depend on
their content alone, so that a rerun over an unchanged run rewrites nothing."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from lexpilot.benchmark.categories import CLASS_LABELS
from lexpilot.benchmark.records import model_folder
from lexpilot.errors import UsageError
from lexpilot.reporting.export.eee import ExportedRun, iso_time
from lexpilot.reporting.export.instances import Instance, tokens_reported
from lexpilot.reporting.export.provenance import HARNESS, numeric_or_none
from lexpilot.reporting.export.stages import STAGE
from lexpilot.reporting.export.transcript import sample_events
from lexpilot.reporting.scoring.runs import OVERALL
from lexpilot.reporting.statistics.bootstrap import Bootstrap

SCORER = "lexpilot_judge"


def require_package():
    """inspect_ai's modules, or one line naming the package."""
    try:
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
    except ImportError:
        raise UsageError(
            "--format inspect needs the inspect-ai package: pip install -r requirements-optional.txt"
        ) from None
    return log, model, scorer


def log_path(er: ExportedRun, stage: str) -> str:
    """inspect/<model folder>/<run>/<created>_lexpilot-<stage>_<id>.json: named as Inspect names its logs (`inspect
    view` lists no JSON log whose name does not start with its time), the time that of the stage's own labels, so
    that a rerun over an unchanged run names the same file, and a stage judged again renames its log alone."""
    created = iso_time(er.times[stage]).replace(":", "-")
    task = stage.replace("_", "-")  # Inspect reads a log's task from its name, up to the next _
    made = hashlib.sha256(f"{er.run.model}\0{er.run.run_id}\0{stage}".encode()).hexdigest()[:12]
    return f"inspect/{model_folder(er.run.model)}/{er.run.run_id}/{created}_lexpilot-{task}_{made}.json"


USAGE_TOTALS = ("input_tokens", "output_tokens", "total_tokens")
USAGE_OPTIONAL = ("input_tokens_cache_read", "reasoning_tokens")  # absent from a record: not zero


def usage_of(role_usage: dict) -> dict:
    """A role's tokens as Inspect's `ModelUsage` counts them: input tokens at the full rate, the cached ones apart."""
    prompt, cached = role_usage.get("prompt_tokens", 0), role_usage.get("cached_prompt_tokens")
    completion = role_usage.get("completion_tokens", 0)
    found = {
        "input_tokens": prompt - (cached or 0),
        "output_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        found["input_tokens_cache_read"] = cached
    if role_usage.get("reasoning_tokens") is not None:
        found["reasoning_tokens"] = role_usage["reasoning_tokens"]
    return found


def add_usage(total: dict, used: dict) -> dict:
    """Two usages summed as `ModelUsage.__add__` sums them (an optional count absent from both stays absent)."""
    found = {name: total.get(name, 0) + used.get(name, 0) for name in USAGE_TOTALS}
    for name in USAGE_OPTIONAL:
        if name in total or name in used:
            found[name] = total.get(name, 0) + used.get(name, 0)
    return found


def chat(instance: Instance, model) -> list:
    made = {"user": model.ChatMessageUser, "assistant": model.ChatMessageAssistant}
    # ids made from the case and the turn: Inspect's own are random, and a rerun would rewrite every log
    return [
        made.get(m.role, model.ChatMessageUser)(
            id=f"{instance.stage}-{instance.sample_id}-{i}", content=m.content, metadata={"source": m.source}
        )
        for i, m in enumerate(instance.messages)
    ]


def sample(er: ExportedRun, instance: Instance, modules) -> Any:
    """One case as an `EvalSample`: its messages validated once each, as they are made, and the sample validated
    without them, then given them (validated with the sample, every message was validated again at each place it
    sits in, and each time against each kind of message: a third of the export's time)."""
    log, model, _ = modules
    messages = chat(instance, model)
    last_reply = next((m for m in reversed(messages) if m.role == "assistant"), None)
    roles = {role: usage_of(used) for role, used in instance.usage.items() if tokens_reported(used)}
    unreported = {
        r: used["unreported_calls"] for r, used in instance.usage.items() if used and r not in roles
    }
    prov = er.provenance
    made = log.EvalSample.model_validate(
        {
            "id": instance.sample_id,
            "epoch": 1,
            "input": "",
            "target": [label.reference for label in instance.labels],
            "scores": {SCORER: judge_score(instance, prov.models["judge"])},
            "metadata": {
                "case_number": instance.case,
                "cause_of_action": instance.cause,
                "class": instance.case_class,
                "user_model_turns": instance.user_model_turns,
                "judge_served": instance.served.get("judge", []),
                # role -> calls whose tokens the provider never reported: that role's tokens are left out, unknown
                **({"tokens_unreported_calls": unreported} if unreported else {}),
                **instance.details,
            },
            "model_usage": {
                name: used
                for name, used in by_model(prov.models, roles).items()
                if name
                not in {prov.models[r] for r in unreported}  # a model of a role whose tokens are unknown
            },
            "role_usage": roles,
        }
    )
    made.input = [m for m, source in zip(messages, instance.messages) if source.source == "dataset"]
    made.messages = messages
    when = er.times[instance.stage]
    made.events = sample_events(instance, made.scores[SCORER].model_dump(), when)
    replied = [model.ChatCompletionChoice(message=last_reply, stop_reason="stop")] if last_reply else []
    made.output = model.ModelOutput(model=er.run.model, choices=replied)  # a focal point's type has no reply
    return made


def judge_score(instance: Instance, judge: str) -> dict:
    """The case's score: its share right, the judge's labels as the answer, each against its reference."""
    return {
        "value": instance.score,
        "answer": ", ".join(label.predicted for label in instance.labels),
        "explanation": f"judge {judge}: "
        + "; ".join(f"{lab.name}: {lab.predicted} (reference {lab.reference})" for lab in instance.labels),
        "metadata": {"labels": [vars(lab) for lab in instance.labels], "correct": instance.correct},
    }


def by_model(models: dict[str, str], roles: dict) -> dict:
    """Model id -> its tokens over the roles it played (a model that is both User Model and judge counts once)."""
    total: dict = {}
    for role, used in roles.items():
        name = models[role]
        total[name] = add_usage(total[name], used) if name in total else used
    return total


def results(er: ExportedRun, task: str) -> dict:
    """The stage's numbers over the run (Overall, or a part that is no class: a probe condition), as its aggregate
    states them."""
    metrics = {
        name: {"name": name, "value": value.value}
        for value in er.values[task]
        if value.part not in CLASS_LABELS
        for name in [value.metric if value.part == OVERALL else f"{value.metric} {value.part}"]
    }
    count = len(er.stages[task])
    return {
        "total_samples": count,
        "completed_samples": count,
        "scores": [{"name": SCORER, "scorer": SCORER, "metrics": metrics}],
    }


def eval_log(er: ExportedRun, task: str, modules) -> Any:
    """One stage's log, validated by `EvalLog` without its samples, which are validated each once and then put in
    (given to `EvalLog`, every sample would be validated again)."""
    prov, run = er.provenance, er.run
    instances = er.stages[task]
    samples = [sample(er, instance, modules) for instance in instances]
    total: dict = {}
    for s in samples:
        for name, used in s.model_usage.items():
            total[name] = total[name] + used if name in total else used
    for role in {r for i in instances for r, used in i.usage.items() if used and not tokens_reported(used)}:
        total.pop(
            prov.models[role], None
        )  # some of its tokens unknown: the log's sum would be a part taken for all
    created = iso_time(er.times[task])
    max_tokens = numeric_or_none(prov.max_tokens["eval"])
    made = modules[0].EvalLog.model_validate(
        {
            "status": "success",
            "eval": {
                "eval_id": f"{run.run_id}-{task}",
                "run_id": run.run_id,
                "created": created,
                "task": f"lexpilot/{task}",
                "task_display_name": f"{HARNESS} {STAGE[task].title}",
                "dataset": {
                    "name": "LexPilot",
                    "samples": len(run.selected),
                    "sample_ids": [i.case for i in instances],
                },
                "model": run.model,
                "model_generate_config": {
                    "temperature": numeric_or_none(prov.temperatures["eval"]),
                    "max_tokens": int(max_tokens) if max_tokens else None,
                },
                "config": {},
                "metadata": {
                    "group": er.label,
                    **prov.summary(),
                    **({"stage_protocol": STAGE[task].diagnostic} if STAGE[task].diagnostic else {}),
                },
            },
            "results": results(er, task),
            "stats": {"started_at": created, "completed_at": created, "model_usage": total},
        }
    )
    made.samples = samples
    return made


def run_files(er: ExportedRun, boot: Bootstrap) -> dict[str, bytes]:
    """The run's logs (path under the export -> bytes), each written by Inspect's own writer."""
    modules = require_package()
    log = modules[0]
    files = {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in er.stages:
            where = Path(tmp) / f"{task}.json"
            try:
                log.write_eval_log(eval_log(er, task, modules), str(where), format="json")
            except ValueError as e:  # pydantic's ValidationError is one
                raise UsageError(
                    f"run {er.run.run_id}, model {er.run.model}, stage {task}: the Inspect log fails its schema: "
                    f"{str(e).splitlines()[0]}; nothing written"
                ) from None
            files[log_path(er, task)] = where.read_bytes()
    return files
