"""Every Eval Ever (schema 0.3) records of a run, through the `every-eval-ever` package's own models and checks: one
aggregate record per model and run (each task's metrics overall and per class, with the run's bootstrap interval
and standard error over cases, the judge, the settings and every departure from the paper's protocol) and its
companion of instance records, one per case and stage (a `multi_turn` consultation with every message).

Laid out as the EEE datastore lays out records: data/lexpilot/<developer>/<model>/<uuid>.json and
<uuid>_samples.jsonl, the uuid made from the model and run, so that a rerun writes the same paths."""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np

from lexpilot.errors import UsageError
from lexpilot.reporting.export.instances import Instance, served_in, tokens_reported
from lexpilot.reporting.export.provenance import HARNESS, Provenance, numeric_or_none, prompt_digest
from lexpilot.reporting.export.stages import COUNT, KAPPA, PROPORTION, STAGE, STAGES, ExportedStage, Value
from lexpilot.reporting.scoring.runs import OVERALL, Run
from lexpilot.reporting.scoring.scoring import METRIC_NAMES
from lexpilot.reporting.statistics.bootstrap import Bootstrap, percentile_interval

COLLECTION = "lexpilot"
UNATTRIBUTED = "unattributed"  # the developer folder of a model id the package cannot attribute
BOUNDS = {
    PROPORTION: (0.0, 1.0),
    KAPPA: (-1.0, 1.0),
}  # a count has none; a difference of proportions: -1 to 1


@dataclass(frozen=True)
class ExportedRun:
    """A run as an export writes it: the run scored, its group's label in show_results.py's tables, its settings, its
    instances per stage (task -> instances; a stage not reported is left out), the numbers each stage's aggregate
    states (stages.ExportedStage.measure), and when each stage's labels were written (the records' own time, so a
    rerun says the same)."""

    run: Run
    label: str
    provenance: Provenance
    stages: dict[str, list[Instance]]
    values: dict[str, list[Value]]
    times: dict[str, float]  # task -> its verdict file's modification time

    @property
    def timestamp(self) -> float:
        """When its last exported labels were written."""
        return max(self.times.values())


def require_package():
    """The package's modules, or one line naming it."""
    try:
        from every_eval_ever import eval_types, instance_level_types
        from every_eval_ever.helpers import developer, io
        from every_eval_ever.validator import validation_core
    except ImportError:
        # requirements-optional.txt's marker leaves it out below 3.12: pip would not help
        if sys.version_info < (3, 12):
            raise UsageError(
                "--format eee needs the every-eval-ever package, which needs Python 3.12 or later (this is "
                f"{sys.version_info[0]}.{sys.version_info[1]}): run export_results.py with python3.12, after "
                "pip install -r requirements-optional.txt there"
            ) from None
        raise UsageError(
            "--format eee needs the every-eval-ever package: pip install -r requirements-optional.txt"
        ) from None
    return eval_types, instance_level_types, developer, io, validation_core


@functools.lru_cache(maxsize=1)
def schema_version() -> str:
    """The package's schema version, read once: the package reads its schema file for it on every call."""
    from every_eval_ever.schema import get_schema_version

    return get_schema_version()


def record_uuid(model: str, run_id: str) -> str:
    """A version-4 uuid made from the model and run: the same files on every export of the run."""
    digest = hashlib.sha256(f"{model}\0{run_id}".encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


def folder_of(model: str) -> str:
    """data/lexpilot/<developer>/<model>: the datastore's folder for a model id, as the package resolves it."""
    _, _, developer, io, _ = require_package()
    attributed = developer.get_developer(model)
    try:
        parts = io.datastore_path_components(
            COLLECTION, model, UNATTRIBUTED if attributed == "unknown" else attributed
        )
    except ValueError as e:
        raise UsageError(f"model {model!r}: model_info.id cannot name a datastore folder: {e}") from None
    return "/".join(("data", *parts))


def developer_of(model: str) -> str:
    _, _, developer, _, _ = require_package()
    attributed = developer.get_developer(model)
    return UNATTRIBUTED if attributed == "unknown" else attributed


def model_info(model: str, served: list[str]) -> dict:
    details = {"deployment_type": "unknown", "model_availability": "unknown"}
    if served:
        details["served_model"] = ", ".join(served)
    return {"name": model, "id": model, "developer": developer_of(model), "additional_details": details}


def judge_scoring(prov: Provenance, stage: ExportedStage, instances: list[Instance]) -> dict:
    """The judge as a metric's llm_scoring: the model asked for, the ids that served the stage's labels (its verdict
    records' judge calls in this run), its temperature, its prompt."""
    return {
        "judges": [
            {
                "model_info": model_info(
                    prov.models["judge"], served_in({stage.task: instances}).get("judge", [])
                ),
                **(
                    {"temperature": float(t)}
                    if (t := numeric_or_none(prov.temperatures["judge"])) is not None
                    else {}
                ),
                "additional_details": {"requested_model": prov.models["judge"]},
            }
        ],
        "input_prompt": prompt_digest(prov, stage.prompts[1]),
    }


def uncertainty(boot: Bootstrap, run: Run, value: Value, cases: int) -> dict:
    """A value scored per case (its key a task of the run's scoring): the run's 95% bootstrap interval over cases and
    its standard error (the SD of the resampled values), and the cases it rests on; else the cases alone (`cases`:
    the stage's instances), for the harness states no spread of a run's count or diagnostic summary."""
    key, data = value.key, run.tasks.get(value.key.family) if value.key else None
    if key is None or data is None:
        return {"num_samples": cases}
    rest = len(data.cases) if key.part == OVERALL else int((np.array(data.classes) == key.part).sum())
    found: dict = {"num_samples": rest}
    values = boot.run_values(run, key)
    interval = percentile_interval(values)
    if values is not None and interval is not None:
        defined = values[~np.isnan(values)]
        method = f"bootstrap over whole cases, {boot.resamples} resamples, seed {boot.seed}"
        found |= {
            "standard_error": {"value": float(np.std(defined, ddof=1)), "method": method},
            "confidence_interval": {
                "lower": interval[0],
                "upper": interval[1],
                "confidence_level": 0.95,
                "method": "percentile " + method,
            },
            "num_bootstrap_samples": boot.resamples,
        }
    return found


def result_id(task: str, metric: str, part: str) -> str:
    return f"{task}.{metric}.{part}"


def evaluation_results(er: ExportedRun, boot: Bootstrap) -> list[dict]:
    """Each exported stage's numbers, overall and per class, where the run defines them."""
    return [
        evaluation_result(er, stage, value, boot)
        for stage in STAGES
        if stage.task in er.stages
        for value in er.values[stage.task]
    ]


def evaluation_result(er: ExportedRun, stage: ExportedStage, value: Value, boot: Bootstrap) -> dict:
    prov, name = er.provenance, METRIC_NAMES.get(value.metric, value.metric)
    bounds = BOUNDS.get(value.unit, (-1.0, 1.0) if value.unit != COUNT else None)
    source = "/".join(value.key) if value.key else f"{stage.title}: the stage's own summary"
    details = {"part": value.part, "task": stage.task, "scoring": source}
    if stage.diagnostic:
        details["protocol"] = stage.diagnostic
    return {
        "evaluation_result_id": result_id(stage.task, value.metric, value.part),
        "evaluation_name": f"{COLLECTION}.{stage.task}",
        "source_data": {
            "dataset_name": "LexPilot",
            "source_type": "other",
            "additional_details": {"dataset_sha256": prov.dataset_sha256, "cases": str(prov.cases)},
        },
        "metric_config": {
            "evaluation_description": f"{stage.title}: {name}, {value.part}",
            "metric_id": f"{COLLECTION}.{stage.task.lower()}.{value.metric}",
            "metric_name": name,
            "metric_kind": value.metric,
            "metric_unit": value.unit,
            "lower_is_better": value.lower_is_better,
            **(
                {"score_type": "continuous", "min_score": bounds[0], "max_score": bounds[1]} if bounds else {}
            ),
            "llm_scoring": judge_scoring(prov, stage, er.stages[stage.task]),
            "additional_details": details,
        },
        "score_details": {
            "score": value.value,
            "uncertainty": uncertainty(boot, er.run, value, len(er.stages[stage.task])),
        },
        "generation_config": generation_config(prov, stage),
    }


def generation_config(prov: Provenance, stage: ExportedStage) -> dict:
    args: dict = {"prompt_template": prompt_digest(prov, stage.prompts[0])}
    if (t := numeric_or_none(prov.temperatures["eval"])) is not None:
        args["temperature"] = t
    if (m := numeric_or_none(prov.max_tokens["eval"])) is not None and m >= 1:
        args["max_tokens"] = int(m)
    return {"generation_args": args, "additional_details": prov.summary()}


def aggregate(er: ExportedRun, results: list[dict], samples: PurePosixPath, rows: int, checksum: str) -> dict:
    """The aggregate record of one model and run (`samples`: its companion's repository path)."""
    run, prov = er.run, er.provenance
    return {
        "schema_version": schema_version(),
        "evaluation_id": evaluation_id(run),
        "evaluation_timestamp": iso_time(er.timestamp),
        "retrieved_timestamp": str(int(er.timestamp)),
        "source_metadata": {
            "source_name": HARNESS,
            "source_type": "evaluation_run",
            "source_organization_name": "LexPilot harness user",
            "evaluator_relationship": "third_party",
            "additional_details": {
                "lexpilot_run": run.run_id,
                "group": er.label,
                "group_digest": prov.settings_digest,
                "protocol": prov.summary()["protocol"],
                "standard_run": "yes" if prov.standard else "no",
                "stages_outside_protocol": ", ".join(
                    s.task for s in STAGES if s.diagnostic and s.task in er.stages
                )
                or "none",
            },
        },
        "eval_library": {
            "name": "lexpilot",
            "version": prov.code_hash,
            "additional_details": {"code_hash": prov.code_hash, "exported_by": "export_results.py"},
        },
        "model_info": model_info(run.model, prov.served.get("eval", [])),
        "evaluation_results": results,
        "detailed_evaluation_results": {
            "format": "jsonl",
            "file_path": str(samples),
            "hash_algorithm": "sha256",
            "checksum": checksum,
            "total_rows": rows,
        },
    }


def evaluation_id(run: Run) -> str:
    return f"{COLLECTION}/{run.model}/{run.run_id}"


def iso_time(seconds: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


def messages_of(instance: Instance) -> list[dict]:
    return [{"turn_idx": i, "role": m.role, "content": m.content} for i, m in enumerate(instance.messages)]


def token_usage(instance: Instance) -> dict | None:
    """The evaluated model's tokens for the case (cached prompt and reasoning tokens where its records keep them);
    none where a call's tokens were never reported (the metadata's usage_by_role counts those calls)."""
    used = instance.usage.get("eval")
    if not used or not tokens_reported(used):
        return None
    prompt, completion = used.get("prompt_tokens", 0), used.get("completion_tokens", 0)
    found = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}
    if "cached_prompt_tokens" in used:
        found["input_tokens_cache_read"] = used["cached_prompt_tokens"]
    if "reasoning_tokens" in used:
        found["reasoning_tokens"] = used["reasoning_tokens"]
    return found


def instance_record(er: ExportedRun, instance: Instance, results: set[str]) -> dict:
    """One consultation of one stage as an EEE instance record: a multi_turn consultation, the labels as its answer
    attribution (the judge's: llm_judge), the reference each is scored against; tied to the aggregate's result its
    score counts toward (`results`: the aggregate's result ids), where there is one."""
    stage = STAGE[instance.stage]
    given = "\n".join(f"{m.role}: {m.content}" for m in instance.messages if m.source == "dataset")
    reference = [label.reference for label in instance.labels if label.reference]
    counted = instance.result and result_id(instance.stage, stage.metrics[0], instance.result)
    return {
        "schema_version": schema_version(),
        "evaluation_id": evaluation_id(er.run),
        "model_id": er.run.model,
        "evaluation_name": f"{COLLECTION}.{instance.stage}",
        "evaluation_result_id": counted if counted in results else None,
        "sample_id": instance.sample_id,
        "sample_hash": hashlib.sha256((given + "\0" + "\0".join(reference)).encode("utf-8")).hexdigest(),
        "interaction_type": "multi_turn",
        "input": {"raw": given, "reference": reference},
        "messages": messages_of(instance),
        "answer_attribution": [
            {
                "turn_idx": label.turn,
                "source": f"messages[{label.turn}].content",
                "extracted_value": label.predicted,
                "extraction_method": label.method,
                "is_terminal": True,
            }
            for label in instance.labels
        ],
        "evaluation": {
            "score": instance.score,
            "is_correct": instance.correct,
            "num_turns": len(instance.messages),
        },
        "token_usage": token_usage(instance),
        "metadata": instance_metadata(instance, er.provenance),
    }


def instance_metadata(instance: Instance, prov: Provenance) -> dict:
    diagnostic = STAGE[instance.stage].diagnostic
    return {
        "stage": instance.stage,
        "case_number": instance.case,
        "cause_of_action": instance.cause,
        "class": instance.case_class,
        **({"protocol": diagnostic} if diagnostic else {}),
        "labels": [
            {
                "name": lab.name,
                "predicted": lab.predicted,
                "reference": lab.reference,
                "decided_by": lab.method,
                "judge_raw": lab.judge_raw,
            }
            for lab in instance.labels
        ],
        "message_sources": [m.source for m in instance.messages],
        "user_model_turns": instance.user_model_turns,
        "judge": {"requested": prov.models["judge"], "served": instance.served.get("judge", [])},
        "user_model": {"requested": prov.models["user"], "served": instance.served.get("user", [])},
        "usage_by_role": instance.usage,
        **instance.details,
    }


def checked(model_class, data: dict, where: str) -> str:
    """The record validated by the package's model, as the JSON written; one line naming where and the field if not."""
    try:
        model = model_class.model_validate(data)
    except ValueError as e:  # pydantic's ValidationError, which the package's models raise
        listed = getattr(e, "errors", None)
        first = listed()[0] if callable(listed) else {"loc": (), "msg": str(e)}
        field = ".".join(str(p) for p in first["loc"]) or "(record)"
        raise UsageError(
            f"{where}: the EEE record fails its schema at {field}: {first['msg']}; nothing written"
        ) from None
    return model.model_dump_json(exclude_none=True)


def run_files(er: ExportedRun, boot: Bootstrap) -> dict[str, bytes]:
    """The run's two files (repository path -> bytes, the aggregate last), each validated by the package before
    anything is written."""
    eval_types, instance_types, _, _, core = require_package()
    run = er.run
    folder = PurePosixPath(folder_of(run.model))
    name = record_uuid(run.model, run.run_id)
    samples_path, aggregate_path = folder / f"{name}_samples.jsonl", folder / f"{name}.json"
    results = evaluation_results(er, boot)
    ids = {r["evaluation_result_id"] for r in results}
    lines = []
    for instances in er.stages.values():
        for instance in instances:
            where = f"run {run.run_id}, model {run.model}, case {instance.sample_id}, stage {instance.stage}"
            record = instance_record(er, instance, ids)
            lines.append(checked(instance_types.InstanceLevelEvaluationLog, record, where))
    samples = ("\n".join(lines) + "\n").encode("utf-8")
    record = aggregate(er, results, samples_path, len(lines), hashlib.sha256(samples).hexdigest())
    where = f"run {run.run_id}, model {run.model}"
    text = checked(eval_types.EvaluationLog, record, where)
    semantic = core.check_path_structure(str(aggregate_path)) + core.check_score_metadata(json.loads(text))
    semantic += core.check_model_deployment(json.loads(text))
    if semantic:
        raise UsageError(
            f"{where}: the EEE record fails the package's checks: {semantic[0]}; nothing written"
        )
    # the aggregate last: it states the instance file's checksum (writing.write_run)
    return {
        str(samples_path): samples,
        str(aggregate_path): json.dumps(json.loads(text), ensure_ascii=False, indent=1).encode("utf-8"),
    }
