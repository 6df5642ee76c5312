"""Grouping runs with equal settings (a model's runs; its runs with other settings apart), each group's statistics
over its runs, and a group's label by what differs from its model's first group.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from lexpilot.benchmark.categories import CLASS_LABELS
from lexpilot.benchmark.vocabulary import ROLE, ROLES
from lexpilot.reporting.scoring.runs import MetricKey, Run
from lexpilot.storage.compared import COMPARED_MANIFEST_FIELDS
from lexpilot.storage.manifest import Manifest
from lexpilot.text import counted


@dataclass
class Group:
    model: str
    settings: tuple
    runs: list[Run]
    differs: list[str] = field(default_factory=list)
    label: str = ""  # given by group_runs over every group of the report: the same in every table and link
    # role -> the ids that served it where they are not the id asked for (runs served apart are grouped apart)
    served: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def condition(self) -> str:
        return self.runs[0].condition

    @property
    def rejudged(self) -> bool:
        """A re-judged copy of runs (rejudge.py): the judge's analysis, never another model in a comparison."""
        return self.runs[0].manifest.rejudged

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    def values(self, key: MetricKey) -> list:
        return [r.metrics[key] for r in self.runs if key in r.metrics]

    def stat(self, key: MetricKey) -> dict | None:
        """Mean and sample SD over the runs where the metric is defined; counts the others."""
        values = self.values(key)
        if not values:
            return None
        defined = [v for v in values if v is not None]
        return {
            "runs": values,
            "mean": float(np.mean(defined)) if defined else None,
            "sd": float(np.std(defined, ddof=1)) if len(defined) > 1 else None,
            "n": len(defined),
            "undefined": len(values) - len(defined),
        }


def settings_key(manifest: Manifest, prompts: set[str] | None = None) -> tuple:
    """What a group shares. A re-judged run counts as re-judged, not by its source: re-judges of several runs by
    one judge are one group, "re-judged by X", with its SD over them. Prompts are compared on `prompts`, the files
    every run of the report records (a prompt file added to the harness since a run was made is no difference)."""

    settings = manifest.shared_settings(prompts)
    return tuple(json.dumps(settings[name], sort_keys=True) for name in COMPARED_MANIFEST_FIELDS)


def served_key(run: Run) -> dict[str, tuple[str, ...]]:
    """Role -> the ids that served it, where they are not (only) the id asked for: runs whose evaluated model, User
    Model or judge answered as another model, or as more than one, are never pooled with runs served as asked."""
    return {role: run.served_apart(role) for role in ROLES if run.served_apart(role)}


def served_text(group: Group) -> tuple[str, str]:
    """How a label names what served the group where it is not the id asked for: after the model (the evaluated
    model's: "deepseek-chat (served: deepseek-v4-flash)"), and after the label (the other roles')."""
    manifest = group.runs[0].manifest
    named = {role: f"(served: {', '.join(ids)})" for role, ids in group.served.items()}
    others = "".join(
        f" · {ROLE[role].display} {manifest.model(role)} {text}"
        for role, text in named.items()
        if role != "eval"
    )
    return (f" {named['eval']}" if "eval" in named else ""), others


def recorded_prompts(runs: list[Run]) -> set[str] | None:
    """The prompt files every run records (None: some run records its prompts only as one digest)."""
    files = [r.manifest.compared("prompt_hash") for r in runs]
    return set.intersection(*map(set, files)) if files and all(isinstance(f, dict) for f in files) else None


def group_runs(runs: list[Run]) -> list[Group]:
    groups: dict[tuple, Group] = {}
    prompts = recorded_prompts(runs)
    for run in sorted(runs, key=lambda r: (r.model, r.run_id)):
        served = served_key(run)
        key = (run.model, settings_key(run.manifest, prompts), tuple(served.items()))
        groups.setdefault(key, Group(run.model, key[1], [], served=served)).runs.append(run)
    ordered = list(groups.values())
    for group in ordered:
        first = next(g for g in ordered if g.model == group.model)
        group.differs = [
            name for name, a, b in zip(COMPARED_MANIFEST_FIELDS, group.settings, first.settings) if a != b
        ] + [f"served.{role}" for role in ROLES if group.served.get(role) != first.served.get(role)]
    for group in ordered:  # over all groups: a table that shows a few keeps each one's name (and its links)
        group.label = group_label(group, ordered)
    return ordered


def differing_settings(a: dict, b: dict, prefix: str = "") -> list[str]:
    """The settings two groups differ in, down to the sub-setting (models.judge, generation.judge_temperature)."""
    differing = []
    for name in dict.fromkeys([*a, *b]):
        x, y = a.get(name), b.get(name)
        if prefix == "prompt_hash." and (x is None or y is None):
            continue  # a prompt file one run's harness did not have yet: neither sent it in what both ran
        if isinstance(x, dict) and isinstance(y, dict) and not prefix:
            differing += differing_settings(x, y, f"{name}.")
        elif json.dumps(x, sort_keys=True) != json.dumps(y, sort_keys=True):
            differing.append(prefix + name)
    return differing


# what two groups may differ in and still be compared (the rankings) or paired (Table 15): a fix elsewhere in the
# harness does not make runs incomparable
NOT_COMPARED = ("code_hash",)
WORDS_FOR = {
    "selected_cases": "other cases",
    "dataset_sha256": "another dataset",
    "code_hash": "other code",
    "prompt_hash": "other prompts",
    "user_condition": "another user condition",
}


def what_differs(settings: dict, name: str) -> str:
    """A differing setting in a few words: its value where it is short (a temperature, a judge's model)."""
    top, _, sub = name.partition(".")
    if top == "selected_cases" and isinstance(settings.get(top), list):  # a --limit run beside a full one
        return f"{counted(len(settings[top]), 'case')}"
    if top in WORDS_FOR:
        return WORDS_FOR[top]
    value = settings.get(top, {}).get(sub) if sub else settings.get(top)
    value = value.get("model", value) if isinstance(value, dict) else value
    return f"{sub or top} {str(value)[:24]}"


def same_code(a: Group, b: Group) -> bool:
    code = COMPARED_MANIFEST_FIELDS.index("code_hash")
    return a.settings[code] == b.settings[code]


def group_label(group: Group, groups: list[Group]) -> str:
    """The model (and a non-ideal user); a further group of the same model is labelled by what differs from its
    first group (re-judged by a judge, another temperature, other code), not by a number."""
    siblings = [g for g in groups if g.model == group.model and g.condition == group.condition]
    eval_served, served = served_text(group)
    label = (
        group.model + eval_served + ("" if group.condition == "standard" else f" ({group.condition} user)")
    )
    if len(siblings) == 1 or siblings[0] is group:  # a re-judged copy shown alone still says it is one
        return (f"{label} · {difference_text(group, group)}" if group.rejudged else label) + served
    text = difference_text(group, siblings[0])
    if text == SAME and group.served != siblings[0].served:
        return label + served  # told apart by what served them alone
    clash = any(difference_text(g, siblings[0]) == text for g in siblings[1:] if g is not group)
    return f"{label} · {text}" + (f" #{siblings.index(group) + 1}" if clash else "") + served


def difference_text(group: Group, first: Group) -> str:
    theirs, mine = (
        {n: json.loads(v) for n, v in zip(COMPARED_MANIFEST_FIELDS, g.settings)} for g in (first, group)
    )
    if group.rejudged:
        return f"re-judged by {group.runs[0].manifest.model('judge') or '?'}"
    return ", ".join(dict.fromkeys(what_differs(mine, n) for n in differing_settings(theirs, mine))) or SAME


SAME = "other runs"  # what a further group of equal settings is labelled by


def classes_present(groups: list[Group]) -> list[str]:
    present = {k.part for g in groups for r in g.runs for k in r.metrics}
    return [c for c in CLASS_LABELS if c in present]
