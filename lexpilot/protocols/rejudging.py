"""Re-judging a saved run with another judge: the new run reuses, byte for byte, every generation and User
Model reply of the source run (no call to the evaluated model or the User Model) and asks only the judge steps
again.

The Interaction-Based dialogue is not replayed: the original judge decided its course (a label 策略一 ended it),
so its rounds are kept as they were; their labels are re-judged, and the verdicts are extracted again from the
same final response.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lexpilot.benchmark.dataset import load_selection
from lexpilot.benchmark.records import (
    A1,
    DIRECT_PREDICTION,
    FORCE_ASK,
    GOLD_PREDICTION,
    INTERACTION,
    INTERACTION_LABELS,
    REJUDGE_REUSED,
    model_folder,
    read_records,
)
from lexpilot.benchmark.vocabulary import ROLE_TABLE
from lexpilot.errors import HarnessError
from lexpilot.protocols.consultation import LCA_STEP, judge_strategy
from lexpilot.protocols.dcg import DCG_STEP
from lexpilot.protocols.ljp import DIRECT_STEPS, GOLD_STEPS, LJP_INTERACTION_STEP
from lexpilot.protocols.steps import CaseCalls, Stage, Step
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import manifest_path
from lexpilot.storage.manifest import Manifest, read_manifest

REUSED = REJUDGE_REUSED  # generations and User Model replies


# What the copied generations were made with: every compared setting but the judge's (a re-judged run must not
# claim settings its copied generations were not made with)
GENERATED_BY = tuple(r for r in ROLE_TABLE if r.name != "judge")  # the roles whose replies are copied
GENERATION_SETTINGS = (
    "dataset_sha256",
    "selected_cases",
    *(f"models.{r.name}" for r in GENERATED_BY),
    *(f"generation.{r.key(setting)}" for setting in ("temperature", "max-tokens") for r in GENERATED_BY),
    "generation.n",
)
# the option to pass for each: a role's endpoint host is compared with its model (the evaluated model's id names
# the source run, so only its host can differ there)
FLAGS = {
    **{
        f"models.{r.name}": r.flag("model") + ("" if r is ROLE_TABLE[0] else f" (and {r.env}_BASE_URL)")
        for r in GENERATED_BY
    },
    **{
        f"generation.{r.key(setting)}": r.flag(setting)
        for setting in ("temperature", "max-tokens")
        for r in GENERATED_BY
    },
    "selected_cases": "--limit",
    "dataset_sha256": "--dataset",
}


def source_manifest(settings: Settings) -> Path:
    """The source run's manifest, or why there is nothing to re-judge."""
    source, model = settings.source_run, settings.roles["eval"].model
    assert source is not None, "the re-judge stage requires --from-run"
    if source == settings.run_id:
        raise HarnessError("--from-run names this run itself: give the re-judged run a new --run-id")
    path = manifest_path(settings.output_root, source, model)
    if not path.exists():
        raise HarnessError(
            f"{path}: no run {source!r} of model {model!r} under {settings.output_root} to re-judge"
        )
    return path


def check_source_settings(settings: Settings, manifest: Manifest) -> None:
    """Before anything is written (a failed re-judge leaves no run behind): there is a source run, and the new
    run's settings for every role but the judge are its settings."""
    saved = read_manifest(source_manifest(settings))
    if saved.user_condition != "standard":
        raise HarnessError(
            f"run {settings.source_run} was made with the {saved.user_condition} user: "
            "re-judging covers standard runs (their every task)"
        )
    differing = [
        d
        for d in saved.differences(manifest)
        if any(d.startswith(name + ":") or d.startswith(name + ".") for name in GENERATION_SETTINGS)
        or (d.startswith("prompt_hash.") and not d.startswith("prompt_hash.judge_"))
    ]
    if differing:
        flags = sorted({flag for name, flag in FLAGS.items() for d in differing if d.startswith(name)})
        raise HarnessError(
            f"run {settings.source_run} made the generations this run reuses with other settings "
            f"({'; '.join(differing)}); pass its settings ({', '.join(flags) or 'its prompts'}): "
            "only the judge may differ"
        )


def copy_source(settings: Settings) -> str | None:
    """Copy the source run's generation files into the new run (once; a resumed re-judge keeps its copies)."""
    source, model = settings.source_run, settings.roles["eval"].model
    assert source is not None, "the re-judge stage requires --from-run"
    root = settings.output_root
    cases, _ = load_selection(settings.dataset, settings.limit)
    selected = {c.number: c.input_hash for c in cases}
    copied = []
    for kind in REUSED:
        target = kind.path(root, settings.run_id, model_folder(model))
        origin = kind.path(root, source, model_folder(model))
        if target.exists():
            continue  # a resumed re-judge keeps what it copied
        found = read_records(origin, kind, selected, f"use the --dataset and --limit of run {source}")
        if len(found) < len(selected):
            raise HarnessError(
                f"run {source} lacks {kind.name} records for {len(selected) - len(found)} of "
                f"{len(selected)} cases: run {kind.producer} --run-id {source} first, then re-judge"
            )
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, target)  # byte for byte
            copied.append(kind.file)
    return f"reused from run {source}: {', '.join(copied)}" if copied else None


def relabel_rounds(calls: CaseCalls, upstream: dict) -> dict:
    """The LCA label of every new response of the interaction, asked again (round 1 is the a1 response, whose
    new label the LCA step gave); the dialogue itself is the source run's."""
    rounds = []
    for entry in upstream["interaction"]["rounds"]:
        if entry.get("label") is None:  # the forced prediction after the budget has no label
            continue
        if entry["round"] == 1:
            judged = upstream["LCA"]["judgments"]["underspecified"]
            label, raw = judged["label"], judged["judge_raw"]
        else:
            label, raw = judge_strategy(calls, entry["assistant"])
        rounds.append(
            {"round": entry["round"], "label": label, "original_label": entry["label"], "judge_raw": raw}
        )
    return {"rounds": rounds}


def relabel_calls(upstream: dict, settings: Settings, case=None) -> dict:
    interaction = upstream.get("interaction")
    labelled = sum(1 for r in (interaction or {}).get("rounds", [{}] * 3) if r.get("label") is not None)
    return {"judge": max(labelled - 1, 0) if interaction else 2}


INTERACTION_LABELS_STEP = Step(
    INTERACTION_LABELS,
    relabel_rounds,
    needs=("interaction", "LCA"),
    max_calls=relabel_calls,
    prompts={"judge": "judge_lca"},
)

REJUDGE_STAGE = Stage(
    "rejudge",
    "rejudge.py",
    (LCA_STEP, INTERACTION_LABELS_STEP, DCG_STEP, DIRECT_STEPS[1], GOLD_STEPS[1], LJP_INTERACTION_STEP),
    upstream=(A1, INTERACTION, FORCE_ASK, DIRECT_PREDICTION, GOLD_PREDICTION),
    source_run=True,
    prepare=copy_source,
    check_first=check_source_settings,
)
