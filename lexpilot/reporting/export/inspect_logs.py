"""Inspect logs of a run, through `inspect_ai`'s own types and writer: one `EvalLog` per model, run and stage, whose
samples are the stage's cases (every message of the consultation, the judge's labels as the score, the case's
details as metadata, each role's tokens), whose results are the run's metrics, and whose spec carries the run's
settings; `inspect view` opens them as it opens Inspect's own. Written as JSON logs (`.json`), whose bytes depend on
their content alone, so that a rerun over an unchanged run rewrites nothing."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from lexpilot.benchmark.records import model_folder
from lexpilot.errors import UsageError
from lexpilot.reporting.export.eee import ExportedRun, iso_time
from lexpilot.reporting.export.instances import STAGE, Instance
from lexpilot.reporting.export.provenance import HARNESS, numeric_or_none
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey
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
    return f"inspect/{model_folder(er.run.model)}/{er.run.run_id}/lexpilot-{stage}.json"


def usage_of(role_usage: dict, model) -> object:
    """A role's tokens as Inspect counts them: input tokens at the full rate, the cached ones apart."""
    prompt, cached = role_usage.get("prompt_tokens", 0), role_usage.get("cached_prompt_tokens")
    completion = role_usage.get("completion_tokens", 0)
    return model.ModelUsage(
        input_tokens=prompt - (cached or 0),
        output_tokens=completion,
        total_tokens=prompt + completion,
        input_tokens_cache_read=cached,
        reasoning_tokens=role_usage.get("reasoning_tokens"),
    )


def chat(instance: Instance, model) -> list:
    made = {"user": model.ChatMessageUser, "assistant": model.ChatMessageAssistant}
    # ids made from the case and the turn: Inspect's own are random, and a rerun would rewrite every log
    return [
        made.get(m.role, model.ChatMessageUser)(
            id=f"{instance.stage}-{instance.case}-{i}", content=m.content, metadata={"source": m.source}
        )
        for i, m in enumerate(instance.messages)
    ]


def sample(er: ExportedRun, instance: Instance, modules) -> Any:
    log, model, scorer = modules
    messages = chat(instance, model)
    last_reply = next(m for m in reversed(messages) if m.role == "assistant")
    given = [m for m, source in zip(messages, instance.messages) if source.source == "dataset"]
    roles = {role: usage_of(used, model) for role, used in instance.usage.items() if used}
    prov = er.provenance
    return log.EvalSample(
        id=instance.case,
        epoch=1,
        input=given,
        target=[label.reference for label in instance.labels],
        messages=messages,
        output=model.ModelOutput(
            model=er.run.model, choices=[model.ChatCompletionChoice(message=last_reply, stop_reason="stop")]
        ),
        scores={
            SCORER: scorer.Score(
                value=instance.score,
                answer=", ".join(label.predicted for label in instance.labels),
                explanation=f"judge {prov.models['judge']}: "
                + "; ".join(
                    f"{lab.name}: {lab.predicted} (reference {lab.reference})" for lab in instance.labels
                ),
                metadata={"labels": [vars(lab) for lab in instance.labels], "correct": instance.correct},
            )
        },
        metadata={
            "cause_of_action": instance.cause,
            "class": instance.case_class,
            "user_model_turns": instance.user_model_turns,
            "judge_served": instance.served.get("judge", []),
            **instance.details,
        },
        model_usage=by_model(prov.models, roles),
        role_usage=roles,
    )


def by_model(models: dict[str, str], roles: dict) -> dict:
    """Model id -> its tokens over the roles it played (a model that is both User Model and judge counts once)."""
    total: dict = {}
    for role, used in roles.items():
        name = models[role]
        total[name] = total[name] + used if name in total else used
    return total


def results(er: ExportedRun, task: str, modules) -> object:
    log = modules[0]
    metrics = {}
    for metric in STAGE[task].metrics:
        value = er.run.metrics.get(MetricKey(task, metric, OVERALL))
        if value is not None:
            metrics[metric] = log.EvalMetric(name=metric, value=value)
    count = len(er.stages[task])
    return log.EvalResults(
        total_samples=count,
        completed_samples=count,
        scores=[log.EvalScore(name=SCORER, scorer=SCORER, metrics=metrics)],
    )


def eval_log(er: ExportedRun, task: str, modules) -> object:
    log, model, _ = modules
    prov, run = er.provenance, er.run
    instances = er.stages[task]
    samples = [sample(er, instance, modules) for instance in instances]
    total: dict = {}
    for s in samples:
        for name, used in s.model_usage.items():
            total[name] = total[name] + used if name in total else used
    created = iso_time(er.timestamp)
    return log.EvalLog(
        status="success",
        eval=log.EvalSpec(
            eval_id=f"{run.run_id}-{task}",
            run_id=run.run_id,
            created=created,
            task=f"lexpilot/{task}",
            task_display_name=f"{HARNESS} {STAGE[task].title}",
            dataset=log.EvalDataset(
                name="LexPilot", samples=len(run.selected), sample_ids=[i.case for i in instances]
            ),
            model=run.model,
            model_generate_config=model.GenerateConfig(
                temperature=numeric_or_none(prov.temperatures["eval"]),
                max_tokens=int(m) if (m := numeric_or_none(prov.max_tokens["eval"])) else None,
            ),
            config=log.EvalConfig(),
            metadata={"group": er.label, **prov.summary()},
        ),
        results=results(er, task, modules),
        stats=log.EvalStats(started_at=created, completed_at=created, model_usage=total),
        samples=samples,
    )


def run_files(er: ExportedRun, boot: Bootstrap) -> dict[str, bytes]:
    """The run's logs (path under the export -> bytes), each written by Inspect's own writer."""
    modules = require_package()
    files = {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in er.stages:
            where = Path(tmp) / f"{task}.json"
            try:
                modules[0].write_eval_log(eval_log(er, task, modules), str(where), format="json")
            except ValueError as e:  # pydantic's ValidationError is one
                raise UsageError(
                    f"run {er.run.run_id}, model {er.run.model}, stage {task}: the Inspect log fails its schema: "
                    f"{str(e).splitlines()[0]}; nothing written"
                ) from None
            files[log_path(er, task)] = where.read_bytes()
    return files
