"""A saved run as the reports see it (its manifest, metrics, task data, usage, the records kept for the viewer),
and the reading of its records: through the one record reader, checked against the run's settings, a task
complete or why not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lexpilot.benchmark.records import (
    REJUDGE_REUSED,
    RecordKind,
    read_records,
)
from lexpilot.errors import HarnessError, first_of
from lexpilot.storage.manifest import Manifest, read_manifest

OVERALL = "Overall"
USAGE_FIELDS = (
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "unreported_calls",
    "reasoning_tokens",
    "batched_calls",
    "cached_prompt_tokens",
)


class MetricKey(NamedTuple):
    """A number a run's scoring made (`Run.metrics`), named by three parts that mean the same in every family:

    - `family`, what kind of number: a task's metric (LCA, DCG, LJP_direct, plain_complete, audit_dcg, T4_targeted,
      T4r_direct…), or a count or share the tables read ("by cause", "cases by cause", "clean", "clean cases",
      "plain_then_asked", "focal points", "DCG typed", "DCG by focal type", "T4 cases", "T4 attempts",
      "T4 unresolved", "behaviour", "faults", "LJP_interaction_by_stop");
    - `name`, which of them: the metric (macro_f1, qwk…), or what is counted (a task, a stop reason, a condition);
    - `part`, over which cases: OVERALL, a class of causes, a cause of action, or a stop reason.

    Two exceptions stay, because the JSON report's keys are these three levels (`renderings.json_metrics`, fixed by
    `json_format` 2): Table 4's QWK over the cases resolved in both conditions is its own family (`T4r_…`), not a
    part; and a "T4 attempts" name holds the condition and the attempt ("targeted 2")."""

    family: str
    name: str
    part: str = OVERALL


@dataclass
class TaskData:
    """Per-case counts of one task of one run, in the run's selected-case order."""

    cases: list[str]
    classes: list[str]
    counts: np.ndarray  # cases × counts


@dataclass
class Run:
    run_id: str
    model: str
    manifest: Manifest
    folder: str
    metrics: dict[MetricKey, float | None] = field(default_factory=dict)
    tasks: dict = field(default_factory=dict)  # task -> TaskData
    usage: dict = field(default_factory=dict)  # checkpoint file -> role -> usage sums
    problems: list[str] = field(default_factory=list)
    input_hashes: dict = field(default_factory=dict)  # selected case -> input hash (None: not checked)
    notes: list[str] = field(default_factory=list)  # torn last lines left out, for stderr
    unanswered: dict = field(default_factory=dict)  # role -> calls paid but never answered (process killed)
    # kind name -> case_number -> record, while a site's build renders them (score_runs)
    saved: dict | None = None
    pages: object = None  # what the site's build made of its records (viewer.CasePages), when --html asked
    # task -> item -> (outcome, right), for consistency over runs (item_outcomes)
    outcomes: dict | None = None
    rejections: dict = field(default_factory=dict)  # Table 4: condition -> Counter of rejection reasons
    focal_types: dict = field(default_factory=dict)  # Figure 4: case -> (class, the type of each focal point)
    # the record kinds its stages were run for, while a site's build reads its records (score_run): a kind not run
    # is no case's failure
    ran: set = field(default_factory=set)
    # role -> served model id -> calls, as its records' usage counts them (score_usage)
    served: dict = field(default_factory=dict)

    def usage_roles(self) -> set[str]:
        """The roles its records count calls of."""
        return {role for roles in self.usage.values() for role, used in roles.items() if used.get("calls")}

    def served_ids(self, role: str) -> tuple[str, ...]:
        """The model ids that served the role's calls: as its records count them, else as its manifest does (empty
        for a run made before replies' models were kept, or at a provider that does not say)."""
        counts = self.served.get(role)
        if not counts:
            saved = self.manifest.served.get(role)
            counts = saved.calls if saved else {}
        return tuple(sorted(counts))

    def served_apart(self, role: str) -> tuple[str, ...]:
        """The served ids where they say another model than the one asked for (more than one, or another id);
        empty where the run was served by the id it asked for, or does not say."""
        ids = self.served_ids(role)
        return () if ids in ((), (self.manifest.model(role),)) else ids

    @property
    def selected(self) -> list[str]:
        selected = self.manifest.selected_cases
        assert selected is not None, "a run's manifest names its selected cases (results.run_manifest)"
        return selected

    @property
    def condition(self) -> str:
        return self.manifest.user_condition


def read_saved(run: Run, root: Path, kind: RecordKind) -> tuple[dict, str | None]:
    """The records of one kind saved so far, complete or not (case_number -> record), or the problem:
    a missing file, a malformed line, another schema version, a case the manifest did not select, a record
    made from other inputs than the dataset shown with."""
    path = kind.path(root, run.run_id, run.folder)
    if not path.exists():
        return {}, f"{path}: not found"
    try:
        loaded = read_records(
            path, kind, run.input_hashes, "the run's files do not match its manifest", notes=run.notes
        )
    except HarnessError as e:
        return {}, str(e)
    expected = accepted_settings(run, root, kind)
    other = [(line, n) for n, (line, r) in loaded.items() if r.get("settings_hash") not in (None, *expected)]
    # the manifest says other settings than these records were made with (it was edited, or swapped)
    if other:
        return {}, (
            f"{path}:{other[0][0]}: case {other[0][1]} (and {len(other) - 1} more) was made with other "
            "settings than the run's manifest says; restore the manifest"
        )
    return {n: r for n, (_, r) in loaded.items()}, None


def saved_records(run: Run, root: Path, kind: RecordKind) -> dict:
    """The records of one kind a run saved (case_number -> record): those scoring kept, else read again."""
    return run.saved[kind.name] if run.saved is not None else read_saved(run, root, kind)[0]


def accepted_settings(run: Run, root: Path, kind: RecordKind) -> set[str]:
    """The settings hashes a run's records of `kind` may carry: its manifest's, and for the generations a re-judged
    run copied from its source, the source run's (made with another judge, the one setting that may differ)."""
    hashes = {run.manifest.settings_hash}
    source = run.manifest.rejudged_from
    if source and kind in REJUDGE_REUSED:
        try:
            hashes.add(read_manifest(root / "runs" / source / run.folder / "manifest.json").settings_hash)
        except HarnessError:
            pass  # the source's manifest is gone: the copies are then refused as made with other settings
    return hashes


def complete_task(
    path: Path, selected: list[str], records: dict, problem: str | None
) -> tuple[dict | None, str | None]:
    """The records in selected-case order, or a problem: the task is incomplete."""
    if problem:
        return None, problem
    missing = [n for n in selected if n not in records]
    if missing:
        shown = ", ".join(first_of(missing))
        return None, f"{path}: incomplete, {len(missing)} of {len(selected)} cases missing: {shown}"
    return {n: records[n] for n in selected}, None


def read_task(run: Run, root: Path, kind: RecordKind) -> tuple[dict | None, str | None]:
    """Every selected case's record of one kind, or why the task cannot be scored."""
    return complete_task(kind.path(root, run.run_id, run.folder), run.selected, *read_saved(run, root, kind))


def named_dataset(runs: list[Run], given: Path | None = None) -> Path | None:
    """The dataset given, else the first the runs' manifests name that is still there (None: none is)."""
    return given or next(
        (
            Path(r.manifest.dataset_path)
            for r in runs
            if r.manifest.dataset_path and Path(r.manifest.dataset_path).is_file()
        ),
        None,
    )
