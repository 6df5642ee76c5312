"""Re-judging a saved run with another judge: the new run reuses, byte for byte, every generation and User
Model reply of the source run (no call to the evaluated model or the User Model) and asks only the judge steps
again; and, for the reports, the agreement between the two judges on the same items.

The Interaction-Based dialogue is not replayed: the original judge decided its course (a label 策略一 ended it),
so its rounds are kept as they were; their labels are re-judged and compared, and the verdicts are extracted
again from the same final response.
"""
from __future__ import annotations

import shutil

import numpy as np
from sklearn.metrics import cohen_kappa_score

from checkpoints import manifest_path, read_manifest
from config import Settings
from dataset import load_dataset
from errors import HarnessError
from protocols import CaseCalls, Step, judge_strategy
from records import (A1, DCG, DIRECT_PREDICTION, FORCE_ASK, GOLD_PREDICTION, INTERACTION, INTERACTION_LABELS, LCA,
                     LJP_SETUPS, model_folder, read_records)

REUSED = (A1, INTERACTION, FORCE_ASK, DIRECT_PREDICTION, GOLD_PREDICTION)  # generations and User Model replies
REJUDGED_KINDS = (LCA, DCG, INTERACTION, INTERACTION_LABELS, *(verdicts for _, verdicts, _, _ in LJP_SETUPS))


def copy_source(settings: Settings) -> str | None:
    """Copy the source run's generation files into the new run (once; a resumed re-judge keeps its copies)."""
    source, model = settings.source_run, settings.roles["eval"].model
    root = settings.output_root
    if source == settings.run_id:
        raise HarnessError("--from-run names this run itself: give the re-judged run a new --run-id")
    source_manifest = manifest_path(root, source, model)
    if not source_manifest.exists():
        raise HarnessError(f"{source_manifest}: no run {source!r} of model {model!r} under {root} to re-judge")
    saved = read_manifest(source_manifest)
    if saved.get("user_condition", "standard") != "standard":
        raise HarnessError(f"run {source} was made with the {saved.get('user_condition')} user: re-judging covers "
                           "standard runs (their every task)")
    cases, _ = load_dataset(settings.dataset)
    selected = {c.number: c.input_hash for c in (cases[:settings.limit] if settings.limit else cases)}
    copied = []
    for kind in REUSED:
        target = kind.path(root, settings.run_id, model_folder(model))
        origin = kind.path(root, source, model_folder(model))
        if target.exists():
            continue  # a resumed re-judge keeps what it copied
        found = read_records(origin, kind, selected, f"use the --dataset and --limit of run {source}")
        if len(found) < len(selected):
            raise HarnessError(f"run {source} lacks {kind.name} records for {len(selected) - len(found)} of "
                               f"{len(selected)} cases: run {kind.producer} --run-id {source} first, then re-judge")
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
        rounds.append({"round": entry["round"], "label": label, "original_label": entry["label"], "judge_raw": raw})
    return {"rounds": rounds}


def relabel_calls(upstream: dict, settings: Settings, case=None) -> dict:
    interaction = upstream.get("interaction")
    labelled = sum(1 for r in (interaction or {}).get("rounds", [{}] * 3) if r.get("label") is not None)
    return {"judge": max(labelled - 1, 0) if interaction else 2}


INTERACTION_LABELS_STEP = Step(INTERACTION_LABELS, relabel_rounds, needs=("interaction", "LCA"),
                               max_calls=relabel_calls, prompts={"judge": "judge_lca"})


# ----------------------------------------------------------------------------- the two judges' agreement

def judge_labels(saved: dict) -> dict[str, dict]:
    """Item -> label, per task, of one run's saved judge decisions (`saved`: kind name -> case -> record)."""
    items: dict[str, dict] = {"LCA": {}, "DCG": {}, "LJP": {}, "interaction rounds": {}}
    for n, r in saved.get(LCA.name, {}).items():
        for t, j in r["judgments"].items():
            items["LCA"][(n, t)] = j["label"]
    for n, r in saved.get(DCG.name, {}).items():
        for x in r["rounds"]:
            items["DCG"][(n, x["round"])] = x["label"]
    for setup, verdicts, _, _ in LJP_SETUPS:
        for n, r in saved.get(verdicts.name, {}).items():
            for i, label in enumerate(r["predicted"]):
                items["LJP"][(n, setup, i)] = label
    for n, r in saved.get(INTERACTION.name, {}).items():
        for x in r["rounds"]:
            if x.get("label") is not None:
                items["interaction rounds"][(n, x["round"])] = x["label"]
    return items


def agreement(original: dict, rejudged: dict) -> dict[str, tuple[int, float | None, float | None]]:
    """Per task: (items judged by both, share of equal labels, Cohen's kappa; None where undefined)."""
    out = {}
    a_items, b_items = judge_labels(original), judge_labels(rejudged)
    b_items["interaction rounds"] = {(n, x["round"]): x["label"] for n, r in
                                     rejudged.get(INTERACTION_LABELS.name, {}).items() for x in r["rounds"]}
    for task, a in a_items.items():
        shared = sorted(set(a) & set(b_items[task]), key=str)
        if not shared:
            continue
        x, y = [a[k] for k in shared], [b_items[task][k] for k in shared]
        kappa = None if len(set(x) | set(y)) == 1 else float(cohen_kappa_score(x, y))
        out[task] = (len(shared), float(np.mean([p == q for p, q in zip(x, y)])), kappa)
    return out


def source_of(manifest: dict) -> str | None:
    value = manifest.get("rejudged_from")
    return value if isinstance(value, str) else None
