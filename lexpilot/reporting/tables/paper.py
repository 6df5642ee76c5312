"""The paper's main tables from grouped runs: main results, per class, LCA detail, LJP accuracy, the Interaction
gain, paired setups, interaction behaviour, non-ideal users (Table 15) and a model comparison; `reporting/catalog.py`
gathers them with the later analyses' (table_4.py, focal_types.py, complexity.py, plain.py, audit.py…).
"""

from __future__ import annotations

import json

import numpy as np

from lexpilot.benchmark.prompts import CONDITION_PROMPTS, PROMPT_FILES
from lexpilot.benchmark.records import LJP_SETUPS, SETUP
from lexpilot.reporting.scoring.groups import (
    NOT_COMPARED,
    Group,
    classes_present,
    recorded_prompts,
)
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey
from lexpilot.reporting.scoring.scoring import STOP_CATEGORIES, STOP_TAGS, TASKS
from lexpilot.reporting.statistics.bootstrap import Bootstrap, paired_difference
from lexpilot.reporting.tables.formats import (
    HEADLINE,
    USER_CONDITION_NAMES,
    cell,
    difference_cell,
    number_cell,
    parts_cell,
)
from lexpilot.reporting.tables.table import AVERAGE, METRIC, RELATIVE, Figure, Kind, Table, declares
from lexpilot.text import counted

PAPER_BY_CLASS = {"interaction": " (Table 17)", "gold": " (Table 16)"}
# (identity, title, metric, the task its cells link to)
CLASS_TABLES = (
    ("lca_by_class", "LCA Macro-F1 by class (Table 2, top)", ("LCA", "macro_f1"), "LCA"),
    ("dcg_by_class", "DCG accuracy by class (Table 2, bottom)", ("DCG", "accuracy"), "DCG"),
    *(
        (
            f"ljp_{s.name}_by_class",
            f"LJP {s.title} QWK by class{PAPER_BY_CLASS.get(s.name, '')}",
            (s.task, "qwk"),
            s.name,
        )
        for s in LJP_SETUPS
    ),
)
MAIN_COLUMN_TASKS = {
    "LCA Macro-F1": "LCA",
    "DCG Acc.": "DCG",
    **{f"{s.short} QWK": s.name for s in LJP_SETUPS},
}
SETUP_COLUMN_TASKS = {s.title: s.name for s in LJP_SETUPS}


@declares(Kind("runs", "the harness's", METRIC))
def runs_table(groups: list[Group]) -> Table:
    """Each group's runs, and what sets it apart from the first."""
    return Table(
        "runs",
        "Runs",
        ["Model", "Runs", "Run ids", "Differs from #1 in"],
        [[g.label, str(len(g.runs)), ", ".join(g.run_ids), ", ".join(g.differs) or "-"] for g in groups],
    )


# the LJP setups' per-class tables: Gold-Standard is the paper's Table 16, Interaction-Based its Table 17
BY_CLASS_PAPER = {"gold": "Table 16", "interaction": "Table 17"}


@declares(
    Kind("main", "Table 11", 3),
    Kind("lca_detail", "Table 14", 4),
    Kind("lca_by_class", "Table 2", 4),
    Kind("dcg_by_class", "Table 2", 4),
    *(
        Kind(f"ljp_{s.name}_by_class", BY_CLASS_PAPER.get(s.name, "nearest: Tables 16-17"), 4)
        for s in LJP_SETUPS
    ),
    Kind("ljp_accuracy", "nearest: Table 3", 3),
)
def results_tables(groups: list[Group], boot: Bootstrap | None) -> list[Table]:
    """The main results (Table 11), the LCA detail, the per-class tables and the LJP accuracy; with `boot`, a 95%
    interval in every metric cell."""
    labels = [g.label for g in groups]
    classes = classes_present(groups) + [OVERALL]
    suffix = ", [95% bootstrap interval over cases]" if boot else ""

    def value(g: Group, key: MetricKey) -> str:
        return cell(g.stat(key), METRIC, boot.interval(g, key) if boot and key.family in TASKS else None)

    tables = [
        Table(
            "main",
            f"Main results (Table 11): mean ± SD over runs{suffix}",
            ["Model", *MAIN_COLUMN_TASKS],
            [
                [label, value(g, MetricKey("LCA", "macro_f1")), value(g, MetricKey("DCG", "accuracy"))]
                + [value(g, MetricKey(s.task, "qwk")) for s in LJP_SETUPS]
                for label, g in zip(labels, groups)
            ],
            column_tasks=MAIN_COLUMN_TASKS,
        ),
        Table(
            "lca_detail",
            f"LCA detail (Table 14){suffix}",
            ["Model", "Macro-F1", "Acc_C", "Acc_U"],
            [
                [label] + [value(g, MetricKey("LCA", m)) for m in ("macro_f1", "acc_c", "acc_u")]
                for label, g in zip(labels, groups)
            ],
            task="LCA",
        ),
    ]
    for table_id, title, key, task in CLASS_TABLES:
        tables.append(
            Table(
                table_id,
                title + suffix,
                ["Model"] + classes,
                [
                    [label] + [value(g, MetricKey(*key, c)) for c in classes]
                    for label, g in zip(labels, groups)
                ],
                task=task,
            )
        )
    tables.append(
        Table(
            "ljp_accuracy",
            f"LJP accuracy{suffix}",
            ["Model", *SETUP_COLUMN_TASKS],
            [
                [label] + [value(g, MetricKey(s.task, "accuracy")) for s in LJP_SETUPS]
                for label, g in zip(labels, groups)
            ],
            column_tasks=SETUP_COLUMN_TASKS,
        )
    )
    return tables


@declares(Kind("paired_setups", "nearest: Table 3", 3))
def paired_setups_table(groups: list[Group], boot: Bootstrap) -> Table:
    qwk = lambda g, setup: (g, MetricKey(SETUP[setup].task, "qwk"))  # noqa: E731
    return Table(
        "paired_setups",
        "Paired QWK differences on the same cases: difference of means [95% bootstrap interval], "
        "share of resamples below zero",
        ["Model", "Interaction − Direct", "Gold − Interaction"],
        [
            [
                g.label,
                difference_cell(paired_difference(boot, qwk(g, "interaction"), qwk(g, "direct"))),
                difference_cell(paired_difference(boot, qwk(g, "gold"), qwk(g, "interaction"))),
            ]
            for g in groups
        ],
    )


@declares(Kind("comparison", "nearest: Table 11", 3))
def comparison_table(a: Group, b: Group, boot: Bootstrap) -> Table:
    """Model A − model B on every metric, paired on the same resampled cases."""
    rows = []
    for name, (task, metric) in HEADLINE:
        key = MetricKey(task, metric)
        rows.append(
            [
                name,
                cell(a.stat(key)),
                cell(b.stat(key)),
                difference_cell(paired_difference(boot, (a, key), (b, key))),
            ]
        )
    return Table(
        "comparison",
        f"{a.model} − {b.model}: difference of means [95% bootstrap interval over cases], "
        "share of resamples below zero",
        ["Metric", a.model, b.model, "Difference"],
        rows,
    )


STOP_HEADERS = ("Judged in round 1 (premature)", "Round 2", "Round 3", "Budget (forced)")
# a stop reason's cell opens the cases that stopped so: its tag in the case list
STOP_LINKS = {header: {"tag": STOP_TAGS[c]} for header, c in zip(STOP_HEADERS, STOP_CATEGORIES)}


# (identity, title, behaviour metric, digits) of the per-class behaviour tables
BEHAVIOUR_BY_CLASS = (
    ("questions_by_class", "Questions before a prediction by class", "questions", AVERAGE),
    ("premature_by_class", "Premature predictions (judged in round 1) by class", "round 1", METRIC),
)


@declares(
    Kind("behaviour", "nearest: Table 4", 3),
    Kind("qwk_by_stop", "nearest: Table 4", 3),
    Kind("questions_by_class", "nearest: Table 4", 3),
    Kind("premature_by_class", "nearest: Table 4", 3),
    Kind("stop_by_class", "nearest: Table 4", 3),
)
def behaviour_tables(groups: list[Group]) -> list[Table]:
    """Over-asking against premature judgment (Section 6.2, Appendix E.4), from interaction.jsonl."""
    groups = [g for g in groups if g.stat(MetricKey("behaviour", "questions"))]
    if not groups:
        return []
    labels = [g.label for g in groups]
    tables = _stop_tables(groups, labels) + _behaviour_class_tables(groups, labels)
    for table in tables:
        table.task = "interaction"  # every cell here is about the Interaction-Based consultations
    return tables


def _stop_tables(groups: list[Group], labels: list[str]) -> list[Table]:
    """Questions asked and the shares of stop reasons per model; the Interaction-Based QWK per stop reason."""
    return [
        Table(
            "behaviour",
            "Interaction behaviour: mean questions before a prediction and share of stop "
            "reasons, mean ± SD over runs",
            ["Model", "Questions", *STOP_HEADERS],
            [
                [label, cell(g.stat(MetricKey("behaviour", "questions")), AVERAGE)]
                + [cell(g.stat(MetricKey("behaviour", c))) for c in STOP_CATEGORIES]
                for label, g in zip(labels, groups)
            ],
            column_query=STOP_LINKS,
        ),
        Table(
            "qwk_by_stop",
            "Interaction-Based QWK by stop reason, mean ± SD over runs",
            ["Model", *STOP_HEADERS],
            [
                [label]
                + [cell(g.stat(MetricKey("LJP_interaction_by_stop", "qwk", c))) for c in STOP_CATEGORIES]
                for label, g in zip(labels, groups)
            ],
            column_query=STOP_LINKS,
        ),
    ]


def _behaviour_class_tables(groups: list[Group], labels: list[str]) -> list[Table]:
    """Questions, premature predictions and the stop reasons per cause-of-action class."""
    classes = classes_present(groups) + [OVERALL]
    tables = [
        Table(
            table_id,
            title,
            ["Model"] + classes,
            [
                [label] + [cell(g.stat(MetricKey("behaviour", metric, c)), digits) for c in classes]
                for label, g in zip(labels, groups)
            ],
            query={"tag": STOP_TAGS[metric]} if metric in STOP_TAGS else {},
        )
        for table_id, title, metric, digits in BEHAVIOUR_BY_CLASS
    ]
    tables.append(
        Table(
            "stop_by_class",
            "Stop reasons by class: judged in round 1 / 2 / 3 / budget, share (mean over runs)",
            ["Model"] + classes,
            [[label] + [_stop_shares(g, c) for c in classes] for label, g in zip(labels, groups)],
        )
    )
    return tables


def _stop_shares(g: Group, cls: str) -> Figure:
    """The shares of the four stop reasons in one class, in one cell."""
    return parts_cell(
        {
            category: (g.stat(MetricKey("behaviour", category, cls)) or {}).get("mean")
            for category in STOP_CATEGORIES
        },
        METRIC,
    )


def paired_settings(group: Group, prompts: set[str] | None = None) -> str:
    """What must be equal for a non-ideal run to pair with standard runs in Table 15: every compared setting but
    the user condition and the prompt files only a user condition sends (a delayed-disclosure run sends one
    more prompt file than a standard run, and that must not keep them apart), and the models that served them."""
    manifest = group.runs[0].manifest
    # the code hash apart, as the rankings compare (a comment added to a module does not change the protocol)
    condition_files = frozenset(PROMPT_FILES[name] for names in CONDITION_PROMPTS.values() for name in names)
    # prompts on the files every run records: a file added since is no difference
    settings = manifest.compared_settings(("user_condition", *NOT_COMPARED), prompts, condition_files)
    # runs served by other models than asked are never paired or pooled with others (docs/results.md)
    settings["served"] = {role: list(ids) for role, ids in group.served.items()}
    return json.dumps(settings, sort_keys=True, ensure_ascii=False)


@declares(Kind("non_ideal", "Table 15", 4))
def non_ideal_table(groups: list[Group], boot: Bootstrap | None = None) -> Table | None:
    """Table 15: Interaction-Based QWK per user condition, for groups equal in every other setting; with
    `boot`, each condition's decline from Standard on the same resampled cases (paired)."""
    rows = _conditions_paired(groups)
    if not rows:
        return None
    key = MetricKey("LJP_interaction", "qwk")
    non_standard = [(c, name) for c, name in USER_CONDITION_NAMES if c != "standard"]
    table = Table(
        "non_ideal",
        "Non-ideal users (Table 15): Interaction-Based LJP QWK, mean ± SD over runs"
        + (", [95% bootstrap interval over cases]; differences paired on the same cases" if boot else ""),
        ["Model"]
        + [name for _, name in USER_CONDITION_NAMES]
        + ([f"{name} − Standard" for _, name in non_standard] if boot else []),
        [],
        task="interaction",
    )
    for (model, others), by_condition in rows.items():
        same_model = [k for k in rows if k[0] == model]
        # the row's name: its standard-user group's, as every table names it (or its own group's, where it names
        # the models that served it)
        standard, first = by_condition.get("standard"), next(iter(by_condition.values()))
        label = (
            model
            if len(same_model) == 1
            else standard.label
            if standard
            else first.label
            if first.served
            else f"{model} #{same_model.index((model, others)) + 1}"
        )
        if len({r.manifest.code_hash for g in by_condition.values() for r in g.runs}) > 1:
            label += " (its conditions' runs differ in code)"
        row = [label] + [
            cell(by_condition[c].stat(key), METRIC, boot.interval(by_condition[c], key) if boot else None)
            if c in by_condition
            else "n/a"
            for c, _ in USER_CONDITION_NAMES
        ]
        if boot:
            standard = by_condition.get("standard")
            row += [
                difference_cell(paired_difference(boot, (by_condition[c], key), (standard, key)))
                if standard and c in by_condition
                else "n/a"
                for c, _ in non_standard
            ]
        table.rows.append(row)
        # a condition's cell opens its own runs (a delayed user's), not the row's standard ones
        table.cell_queries.append(
            {name: {"group": by_condition[c].label} for c, name in USER_CONDITION_NAMES if c in by_condition}
        )
    return table


def _conditions_paired(groups: list[Group]) -> dict[tuple, dict[str, Group]]:
    """Table 15's rows: per (model, every other setting), its group under each user condition; only the rows
    with some non-standard condition."""
    rows: dict[tuple, dict[str, Group]] = {}
    prompts = recorded_prompts([g.runs[0] for g in groups])
    for g in groups:
        by_condition = rows.setdefault((g.model, paired_settings(g, prompts)), {})
        first = by_condition.setdefault(g.condition, g)
        if first is not g:  # runs of one condition apart only in their code: one cell over all of them
            by_condition[g.condition] = Group(
                first.model, first.settings, first.runs + g.runs, first.differs, first.label
            )
    return {key: by_condition for key, by_condition in rows.items() if set(by_condition) - {"standard"}}


@declares(Kind("non_ideal_faults", "nearest: Table 15", 4))
def fault_table(groups: list[Group]) -> Table | None:
    """What the non-ideal users did: the share of interactions with a disrupted reply, and for the
    self-correcting user the kind of fault it recorded (incomplete or wrong)."""
    groups = [g for g in groups if g.condition != "standard" and g.stat(MetricKey("faults", "disrupted"))]
    if not groups:
        return None
    return Table(
        "non_ideal_faults",
        "Non-ideal users: disrupted interactions and the self-correcting user's faults, mean over runs",
        ["Model", "Condition", "Disrupted", "Incomplete", "Wrong"],
        [
            [g.label, g.condition]
            + [cell(g.stat(MetricKey("faults", m))) for m in ("disrupted", "incomplete", "wrong")]
            for g in groups
        ],
        task="interaction",
    )


@declares(Kind("interaction_gain", "nearest: Table 3", 3))
def interaction_gain_table(groups: list[Group]) -> Table:
    """Interaction − Direct and (Interaction − Gold) / Gold on the group means (Section 6.4)."""
    rows, gains, changes = [], [], []
    for g in groups:
        label = g.label
        means = {s.name: (g.stat(MetricKey(s.task, "qwk")) or {}).get("mean") for s in LJP_SETUPS}
        interaction, direct, gold = means["interaction"], means["direct"], means["gold"]
        gain = interaction - direct if interaction is not None and direct is not None else None
        # relative to Gold only where Gold is above 0: a ratio to a QWK at or below chance reads as nonsense
        change = (
            (interaction - gold) / gold if interaction is not None and gold is not None and gold > 0 else None
        )
        copy = g.rejudged  # a re-judged copy is no further model in the average
        gains += [gain] if gain is not None and not copy else []
        changes += [change] if change is not None and not copy else []
        rows.append(
            [
                label,
                number_cell(gain, METRIC, signed=True),
                number_cell(change, RELATIVE, signed=True, percent=True),
            ]
        )
    over = (
        counted(len(gains), "model")
        if len(gains) == len(changes)
        else f"{len(gains)} / {len(changes)} models"
    )
    rows.append(
        [
            f"Average over {over}",
            number_cell(float(np.mean(gains)) if gains else None, METRIC, signed=True),
            # at the model rows' decimals: the paper's headline is this average, "23.84%" (Section 6.4)
            number_cell(float(np.mean(changes)) if changes else None, RELATIVE, signed=True, percent=True),
        ]
    )
    return Table(
        "interaction_gain",
        "Interaction-Based against Direct and Gold-Standard (QWK)",
        ["Model", "Interaction − Direct", "Interaction vs Gold (relative)"],
        rows,
        task="interaction",
    )
