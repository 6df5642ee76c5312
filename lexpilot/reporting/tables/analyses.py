"""The tables of the paper's later analyses, from grouped runs: Table 4 (interaction behaviour and LJP), Figures 3
and 4 as tables (with the --complexity file they read), the plain consultation (Table 6), the simulator audit,
the judges of re-judged runs and the claim-order diagnostic.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

from lexpilot.benchmark.categories import CAUSES, FOCAL_TYPES, cause_class
from lexpilot.benchmark.records import LJP_ORDER, LJP_SETUPS, SETUP
from lexpilot.benchmark.vocabulary import HISTORY_TYPES
from lexpilot.files import check_input
from lexpilot.reporting.scoring.groups import Group, classes_present
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey, saved_records
from lexpilot.reporting.scoring.scoring import AUDITED
from lexpilot.reporting.statistics.bootstrap import Bootstrap, paired_difference
from lexpilot.reporting.tables.formats import (
    HEADLINE,
    PLAIN_TYPE_NAMES,
    average_cell,
    cell,
    difference_cell,
    kappa_cell,
    number_cell,
    parts_cell,
    percent_cell,
    plain_tag,
)
from lexpilot.reporting.tables.table import AVERAGE, METRIC, PERCENT, Figure, Kind, Table, declares
from lexpilot.reporting.validation.judges import (
    REJUDGED_KINDS,
    judges_agreement,
    order_agreement,
)
from lexpilot.text import counted

JUDGED_TASKS = ("LCA", "DCG", "LJP", "interaction rounds")  # what a re-judged run's judge decides again
ORDER_CHANGED = "claim order changed"  # the case list's tag: a verdict changed with the claims shuffled
ORDER_TAGS = {s.name: f"{ORDER_CHANGED}: {s.title}" for s in LJP_SETUPS}  # ... in that setup
# a case with audited replies there
AUDIT_TAGS = {"dcg": "audited: DCG", "interaction": "audited: interaction"}
# in order of audit_counts' flags
AUDIT_FLAGS = (("over_disclosure", "Over-disclosure"), ("error", "Error"), ("non_answer", "Non-answer"))
# a case with a reply of the source flagged so
AUDIT_FLAG_TAGS = {
    (source, metric): f"audit {name.lower()}: {source}"
    for source in AUDIT_TAGS
    for metric, name in AUDIT_FLAGS
}
TYPED = "with focal-point types"  # a standard run's case with focal-point types: what Figure 4's averages are over


PLAIN_TITLES = {
    "underspecified": "Plain consultation (Table 6): response types on underspecified histories, "
    "mean ± SD over runs",
    "complete": "Plain consultation, control: response types on complete histories, mean ± SD over runs",
}


@declares(
    *(Kind(f"plain_types_{t}", "Table 6", 1) for t in HISTORY_TYPES),  # rates in percent
    *(Kind(f"plain_by_class_{t}", "nearest: Table 6", 3) for t in HISTORY_TYPES),
    Kind("plain_against_lexawn", "nearest: Table 6", 3),
)
def plain_tables(groups: list[Group], boot: Bootstrap | None = None) -> list[Table]:
    """Table 6 on the benchmark: the response types of a plain consultation, per model and per class; on the
    same histories, how often LexAwN then asked; and the complete-history control where it was run."""
    tables = []
    for history_type in ("underspecified", "complete"):
        shown = [g for g in groups if g.stat(MetricKey(f"plain_{history_type}", "premature_prediction"))]
        if shown:
            tables += _plain_history_tables(shown, boot, history_type)
    crossed = [g for g in groups if any(g.stat(MetricKey("plain_then_asked", k)) for k in PLAIN_TYPE_NAMES)]
    if crossed:
        tables.append(
            Table(
                "plain_against_lexawn",
                "Plain response type against the LexAwN label on the same underspecified history: "
                "share of those cases where LexAwN asked (策略二), mean over runs",
                ["Model"] + list(PLAIN_TYPE_NAMES.values()),
                [
                    [g.label] + [cell(g.stat(MetricKey("plain_then_asked", k))) for k in PLAIN_TYPE_NAMES]
                    for g in crossed
                ],
                task="plain",
                # a type's cell: the cases answered with that type (what its share is over)
                column_query=_plain_type_links("underspecified"),
            )
        )
    return tables


def _plain_history_tables(shown: list[Group], boot: Bootstrap | None, history_type: str) -> list[Table]:
    """The plain consultation's response types on one kind of history: per model, then per class."""
    task = f"plain_{history_type}"
    suffix = ", [95% bootstrap interval over cases]" if boot else ""
    labels = [g.label for g in shown]
    classes = classes_present(shown) + [OVERALL]
    return [
        Table(
            f"plain_types_{history_type}",
            PLAIN_TITLES[history_type] + suffix,
            ["Model"] + list(PLAIN_TYPE_NAMES.values()),
            [
                [label]
                + [
                    # in percent, as Table 6
                    percent_cell(
                        g.stat(MetricKey(task, k)), boot.interval(g, MetricKey(task, k)) if boot else None
                    )
                    for k in PLAIN_TYPE_NAMES
                ]
                for label, g in zip(labels, shown)
            ],
            task="plain",
            # a type's cell opens the cases answered with that type (not the list sorted by type)
            column_query=_plain_type_links(history_type),
        ),
        Table(
            f"plain_by_class_{history_type}",
            f"Plain consultation by class ({history_type}): "
            "deficiency / conditional / unconditional / premature, share (mean over runs)",
            ["Model"] + classes,
            [[label] + [_plain_shares(g, task, c) for c in classes] for label, g in zip(labels, shown)],
            task="plain",
        ),
    ]


def _plain_type_links(history_type: str) -> dict:
    """Each response type's column opens the cases answered with that type, on that kind of history."""
    return {name: {"tag": plain_tag(history_type, name)} for name in PLAIN_TYPE_NAMES.values()}


def _plain_shares(g: Group, task: str, cls: str) -> Figure:
    """The four response types' shares of one class, in one cell."""
    return parts_cell(
        {name: (g.stat(MetricKey(task, k, cls)) or {}).get("mean") for k, name in PLAIN_TYPE_NAMES.items()},
        METRIC,
    )


@declares(Kind("judge_labels", "nearest: Table 12", 2), Kind("judge_sensitivity", "nearest: Table 11", 3))
def judge_sensitivity_tables(groups: list[Group], root, boot: Bootstrap) -> list[Table]:
    """For runs re-judged with another judge (rejudge.py): the two judges' agreement on the same items, and
    every metric under each judge with the paired bootstrap difference on the same cases."""
    runs = {(r.model, r.run_id): (g, r) for g in groups for r in g.runs}
    pairs = [
        (runs[(r.model, r.manifest.rejudged_from)], (g, r))
        for g in groups
        for r in g.runs
        if (r.model, r.manifest.rejudged_from) in runs
    ]
    if not pairs:
        return []
    return [_judge_labels_table(pairs, root)] + [
        _judge_metrics_table(boot, *found) for found in rejudged_groups(pairs)
    ]


def _judge(run) -> str:
    """The judge a run's verdicts were made with."""
    return run.manifest.model("judge")


def _judge_labels_table(pairs, root) -> Table:
    """Each re-judged run beside its original: the two judges' agreement per judged task."""
    read = lambda r: {k.name: saved_records(r, root, k) for k in REJUDGED_KINDS}  # noqa: E731
    rows, selects = [], []
    for (_, original), (g_rejudged, rejudged) in pairs:
        for task, (n, agree, kappa) in judges_agreement(read(original), read(rejudged)).items():
            rows.append(
                [
                    original.model,
                    f"{original.run_id} → {rejudged.run_id}",
                    f"{_judge(original)} / {_judge(rejudged)}",
                    task,
                    str(n),
                    number_cell(agree, PERCENT, percent=True),
                    kappa_cell(kappa),
                ]
            )
            # as the viewer names the run
            selects.append({"rejudged": f"{g_rejudged.label} · {rejudged.run_id}"})
    return Table(
        "judge_labels",
        "Judge sensitivity: the two judges' labels on the same items (re-judged "
        "runs; the same judge twice: its test-retest agreement)",
        ["Model", "Runs", "Judges", "Task", "Items", "Agreement", "Cohen's κ"],
        rows,
        row_tasks={t: t for t in JUDGED_TASKS},
        compare="disagree",  # a row: where its two judges
        row_queries=selects,  # disagree, in its re-judged run
    )


def _judge_metrics_table(boot: Bootstrap, g_original: Group, g_rejudged: Group, sources: Group) -> Table:
    """Every headline metric of a re-judged group and of the very runs it copied, with their paired
    difference."""
    rows = []
    for name, (task, metric) in HEADLINE:
        key = MetricKey(task, metric)
        rows.append(
            [
                name,
                cell(sources.stat(key)),
                cell(g_rejudged.stat(key)),
                difference_cell(paired_difference(boot, (g_rejudged, key), (sources, key))),
            ]
        )
    first, second = _judge(g_original.runs[0]), _judge(g_rejudged.runs[0])
    copied = ", ".join(f"{r.run_id} → {c.run_id}" for r, c in zip(sources.runs, g_rejudged.runs))
    return Table(
        "judge_sensitivity",
        f"{g_rejudged.label}: every metric under each judge ({first} / "
        f"{second}), each re-judged run beside the run it copied ({copied}); difference of "
        "means [95% bootstrap interval over cases, paired], share of resamples below zero",
        ["Metric", f"original ({first})", f"re-judged ({second})", "Re-judged − original"],
        rows,
        part=g_rejudged.label,
    )


def rejudged_groups(pairs) -> list[tuple[Group, Group, Group]]:
    """(the source runs' group, a re-judged group, the very runs it copied, in its order): the re-judged runs are
    compared with their own sources, not with every run of the source group."""
    found: dict[tuple, tuple] = {}
    for (g_original, original), (g_rejudged, rejudged) in pairs:
        entry = found.setdefault((id(g_original), id(g_rejudged)), (g_original, g_rejudged, {}))
        entry[2][rejudged.run_id] = original
    return [
        (
            g_original,
            g_rejudged,
            Group(
                g_original.model,
                g_original.settings,
                [sources[r.run_id] for r in g_rejudged.runs if r.run_id in sources],
                label=g_original.label,
            ),
        )
        for g_original, g_rejudged, sources in found.values()
    ]


@declares(Kind("claim_order", "nearest: Table 3", 3))
def order_table(groups: list[Group], root) -> Table | None:
    """The diagnostic eval_LJP_order.py runs: per run and setup, the extraction judge's verdicts with the claims
    shuffled against its original ones."""
    rows, selects = [], []
    for g in groups:
        for run in g.runs:
            for setup, kind in LJP_ORDER.items():
                if not kind.path(root, run.run_id, run.folder).exists():
                    continue
                found = order_agreement(saved_records(run, root, kind))
                if found:
                    rows.append(
                        [
                            g.label,
                            run.run_id,
                            SETUP[setup].title,
                            str(found["claims"]),
                            number_cell(found["agreement"], PERCENT, percent=True),
                            kappa_cell(found["kappa"]),
                            number_cell(found["control"], PERCENT, percent=True),
                            number_cell(found["effect"], PERCENT, signed=True, percent=True),
                        ]
                    )
                    # its run's cases, in its setup
                    selects.append({"run": run.run_id, "tag": ORDER_TAGS[setup]})
    if not rows:
        return None
    return Table(
        "claim_order",
        "Diagnostic, outside the paper's protocol: the LJP extraction judge with each case's "
        "claims shuffled (eval_LJP_order.py), its verdicts against the original extraction's; the control "
        "asks again in the original order (the judge's own noise), and the order's effect is the control's "
        "agreement less the shuffled one's (n/a: records made before the control)",
        ["Model", "Run", "Setup", "Claims", "Agreement", "Cohen's κ", "Same order (control)", "Order effect"],
        rows,
        query={"tag": ORDER_CHANGED},
        row_queries=selects,
    )


# the replies audited (the User Model's in DCG and in the interaction), as the rows name them
AUDIT_SOURCES = {"dcg": "DCG", "interaction": "interaction"}
# the tasks that rest on the audited replies, recomputed on the cases whose replies were all clean
CLEAN_METRICS = (("DCG", "DCG accuracy"), ("LJP_interaction", "Interaction-Based QWK"))


@declares(Kind("audit_rates", "nearest: Table 13", 1), Kind("audit_clean_cases", "nearest: Table 13", 3))
def audit_tables(groups: list[Group], boot: Bootstrap | None = None) -> list[Table]:
    """The simulator audit: how often the User Model's replies over-disclosed, erred or did not answer, and
    the tasks that rest on those replies recomputed on the cases whose replies were all clean."""
    audited = [g for g in groups if any(g.stat(MetricKey(f"audit_{s}", "error")) for s in AUDIT_SOURCES)]
    if not audited:
        return []
    return [_audit_rates_table(audited, boot), _audit_clean_table(audited)]


def _audit_rates_table(audited: list[Group], boot: Bootstrap | None) -> Table:
    """Per model and source of replies: how many replies were audited and the share of each flag."""
    suffix = ", [95% bootstrap interval over cases]" if boot else ""
    rows, selects, flags = [], [], []
    for g in audited:
        for source in AUDIT_SOURCES:
            task = f"audit_{source}"
            if g.stat(MetricKey(task, "error")):
                selects.append({"tag": AUDIT_TAGS[source]})  # the cases with replies of this source audited
                flags.append(
                    {name: {"tag": AUDIT_FLAG_TAGS[(source, metric)]} for metric, name in AUDIT_FLAGS}
                )
                replies = sum(int(r.tasks[task].counts[:, 0].sum()) for r in g.runs if task in r.tasks)
                rows.append(
                    [g.label, AUDIT_SOURCES[source], str(replies)]
                    + [
                        # in percent, as Table 13
                        percent_cell(
                            g.stat(MetricKey(task, m)), boot.interval(g, MetricKey(task, m)) if boot else None
                        )
                        for m, _ in AUDIT_FLAGS
                    ]
                )
    return Table(
        "audit_rates",
        "Simulator audit: User Model replies judged over-disclosing (key details not "
        "asked for), erroneous (unsupported or contradicting) or not answering, mean ± SD over "
        f"runs{suffix}",
        ["Model", "Replies of", "Replies audited (all runs)", "Over-disclosure", "Error", "Non-answer"],
        rows,
        task="audit",
        row_queries=selects,
        cell_queries=flags,  # a rate's cell: its flagged cases
    )


def _audit_clean_table(audited: list[Group]) -> Table:
    """The tasks resting on the audited replies, on all cases and on the cases whose replies were all
    clean."""
    rows = []
    for g in audited:
        for task, name in CLEAN_METRICS:
            clean = g.stat(MetricKey("clean", task))
            if clean is not None:
                cases = g.stat(MetricKey("clean cases", task))
                rows.append(
                    [
                        g.label,
                        name,
                        cell(g.stat(MetricKey(task, AUDITED[task][1]))),
                        cell(clean),
                        f"{cases['mean']:.0f}" if cases and cases["mean"] is not None else "n/a",
                    ]
                )
    return Table(
        "audit_clean_cases",
        "Task metrics on all cases and on the cases whose simulator replies "
        "were all clean (no over-disclosure, no error), mean over runs",
        ["Model", "Metric", "All cases", "Clean cases only", "Clean cases (mean per run)"],
        rows,
        row_tasks={"DCG accuracy": "DCG", "Interaction-Based QWK": "interaction"},
    )


@declares(
    Kind("table_4", "Table 4", 3),
    Kind("table_4_resolved", "Table 4", 3),
    Kind("table_4_attempts", "Table 4", 3),
)
def table_4(groups: list[Group], boot: Bootstrap | None = None) -> list[Table]:
    """Table 4: LJP QWK Direct / Targeted / Off-target over every case and claim (unresolved cases flagged), the
    same over the cases resolved in both conditions as a sensitivity view, with the paired differences under --ci;
    and how many cases each condition's dialogues were accepted at each attempt, with the rejection reasons."""
    shown = [g for g in groups if g.stat(MetricKey("T4_targeted", "qwk"))]
    if not shown:
        return []
    suffix = ", [95% bootstrap interval over cases]" if boot else ""
    main = table_4_qwk(
        shown,
        boot,
        "T4",
        "table_4",
        "Interaction behaviour and LJP (Table 4): QWK over every case and "
        "claim, Direct as in Table 3 (every run); an unresolved case is predicted from its last attempted "
        f"dialogue, mean ± SD over runs{suffix}",
    )
    sensitivity = table_4_qwk(
        shown,
        boot,
        "T4r",
        "table_4_resolved",
        "Table 4, sensitivity: QWK over the cases "
        f"resolved in both conditions only (Direct on the same cases), mean ± SD over runs{suffix}",
    )
    rows = []
    for g in shown:
        for b, name in (("targeted", "Targeted"), ("off_target", "Off-target")):
            counts = [(g.stat(MetricKey("T4 attempts", f"{b} {k}")) or {}).get("mean") for k in range(1, 6)]
            unresolved = g.stat(MetricKey("T4 unresolved", b))
            reasons = Counter()
            for r in g.runs:
                reasons.update(r.rejections.get(b, {}))
            rows.append(
                [
                    g.label,
                    name,
                    parts_cell(dict(zip(map(str, range(1, 6)), counts))),
                    f"{unresolved['mean']:g}" if unresolved else "n/a",
                    "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common(3)) or "-",
                ]
            )
    attempts = Table(
        "table_4_attempts",
        "Table 4 dialogues: cases accepted at attempt 1 / 2 / 3 / 4 / 5 and unresolved "
        "cases (mean per run), and the most frequent rejection reasons (all runs)",
        ["Model", "Condition", "Accepted at attempt", "Unresolved", "Rejections"],
        rows,
        row_tasks={"Targeted": "targeted", "Off-target": "off_target"},
    )
    return [main, attempts, sensitivity]


def table_4_qwk(shown: list[Group], boot: Bootstrap | None, prefix: str, table_id: str, title: str) -> Table:
    key = lambda task: MetricKey(f"{prefix}_{task}", "qwk")  # noqa: E731
    headers = [
        "Model",
        "Cases (unresolved T / O)" if prefix == "T4" else "Resolved cases",
        "Direct",
        "Targeted",
        "Off-target",
    ] + (["Targeted − Direct", "Off-target − Direct"] if boot else [])
    rows = []
    for g in shown:
        cases = g.stat(MetricKey("T4 cases", "all" if prefix == "T4" else "resolved"))
        flagged = [
            (g.stat(MetricKey("T4 unresolved", b)) or {}).get("mean") for b in ("targeted", "off_target")
        ]
        count = f"{cases['mean']:g}" if cases else "n/a"
        if prefix == "T4" and None not in flagged:
            count = Figure(
                f"{count} ({flagged[0]:g} / {flagged[1]:g})",
                {
                    "all": cases["mean"] if cases else None,
                    "unresolved targeted": flagged[0],
                    "unresolved off-target": flagged[1],
                },
            )
        row = [g.label, count]
        # "Direct results are reused from Table 3": over every run of the group, as Table 3 takes them (the
        # paired differences stay within the runs that have the dialogues)
        direct = MetricKey("LJP_direct", "qwk") if prefix == "T4" else key("direct")
        row += [
            cell(g.stat(k), METRIC, boot.interval(g, k) if boot else None)
            for k in (direct, key("targeted"), key("off_target"))
        ]
        if boot:
            row += [
                difference_cell(paired_difference(boot, (g, key(t)), (g, key("direct"))))
                for t in ("targeted", "off_target")
            ]
        rows.append(row)
    return Table(
        table_id,
        title,
        headers,
        rows,
        column_tasks={
            "Direct": "direct",
            "Targeted": "targeted",
            "Off-target": "off_target",
            "Targeted − Direct": "targeted",
            "Off-target − Direct": "off_target",
        },
    )


@declares(
    Kind("figure_4a", "nearest: Table 2 (Figure 4)", 4),
    Kind("figure_4b", "nearest: Table 2 (Figure 4)", 4),
    Kind("figure_4c", "Figure 4 (counts)", METRIC),
)
def figure_4_tables(groups: list[Group]) -> list[Table]:
    """Figure 4 as tables: (a) DCG accuracy per focal-point type, (b) per class, (c) focal points per type and
    class (from eval_focal_types.py)."""
    # the models with the analysis (a model without focal-point types is not in the average); a re-judged copy is
    # the judge's analysis, not another model
    groups = [g for g in groups if g.condition == "standard" and not g.rejudged]
    typed = [g for g in groups if any(k.family == "focal points" for r in g.runs for k in r.metrics)]
    if not typed:
        return []
    types = list(FOCAL_TYPES.values())
    classes = classes_present(typed)
    with_types = sum(1 for g in typed for r in g.runs if r.focal_types)
    runs = (
        f"over the {with_types} of {counted(sum(len(g.runs) for g in typed), 'run')} with focal-point types"
    )
    panels = []
    for panel, key, columns, title in (  # (a) and (b) over the same runs: those with focal-point types
        (
            "figure_4a",
            lambda c: MetricKey("DCG by focal type", c),
            types,
            f"Figure 4 (a): DCG accuracy by focal-point type (a case counts in each type among its focal points), "
            f"{runs}",
        ),
        (
            "figure_4b",
            lambda c: MetricKey("DCG typed", "accuracy", c),
            classes,
            f"Figure 4 (b): DCG accuracy by class, {runs}",
        ),
    ):
        panels.append(_figure_4_panel(typed, panel, key, columns, title))
    panels.append(_figure_4c(typed, types, classes))
    return panels


def _figure_4_panel(typed: list[Group], panel: str, key, columns: list[str], title: str) -> Table:
    """Panel (a) or (b): DCG accuracy per column for each model, and the average the figure plots."""
    rows = [[g.label] + [cell(g.stat(key(c))) for c in columns] for g in typed]
    # the figure plots the average over the models shown (the paper: three; choose them with --model)
    rows.append(
        [f"Average over {counted(len(typed), 'model')} with focal-point types"]
        + [average_cell([g.stat(key(c)) for g in typed]) for c in columns]
    )
    return Table(
        panel,
        f"{title}, mean ± SD over runs; the last row averages the models' means",
        ["Model"] + columns,
        rows,
        task="DCG",  # the average's cells: the typed runs' cases
        row_queries=[{}] * (len(rows) - 1) + [{"tag": TYPED}],
    )


def _figure_4c(typed: list[Group], types: list[str], classes: list[str]) -> Table:
    """Panel (c): focal points per type and class over the benchmark, every case typed in any run shown
    once."""
    counts = Counter()
    cases: dict = {}
    for g in typed:
        for r in g.runs:
            for number, typed_case in r.focal_types.items():
                cases.setdefault(number, typed_case)
    for cls, of_case in cases.values():
        counts.update((t, cls) for t in of_case)
    return Table(
        "figure_4c",
        f"Figure 4 (c): focal points per type and class, over the {len(cases)} typed cases of the benchmark",
        ["Type"] + classes + ["Total"],
        [
            [t] + [str(counts[(t, c)]) for c in classes] + [str(sum(counts[(t, c)] for c in classes))]
            for t in types
        ],
        task="DCG",
    )


def figure_3_groups(groups: list[Group]) -> list[Group]:
    """Figure 3's series: the models' runs with standard users and LCA results. A re-judged copy is the judge's
    analysis (Tables 6, 13), not another model's series."""
    return [
        g
        for g in groups
        if g.condition == "standard" and not g.rejudged and g.stat(MetricKey("LCA", "macro_f1"))
    ]


@declares(Kind("figure_3", "nearest: Table 2 (Figure 3)", 4))
def figure_3_tables(groups: list[Group], complexity: dict[str, float] | None) -> list[Table]:
    """Figure 3 as tables: per cause of action its complexity, LCA Macro-F1 and DCG accuracy (mean over runs),
    and Spearman's rho between complexity and each metric across the causes."""
    groups = figure_3_groups(groups)
    if not groups:
        return []
    if not complexity:
        return [
            Table(
                "figure_3",
                "Case complexity (Figure 3)",
                ["Note"],
                [
                    [
                        "no complexity data: pass --complexity FILE (cause_of_action,complexity: provisions cited "
                        "per cause; for the sample, data/LexPilot_sample_complexity.csv)"
                    ]
                ],
            )
        ]
    tables = []
    for g in groups:
        rows, points = _figure_3_cause_rows(g, complexity)
        for task, name in (("LCA", "LCA Macro-F1"), ("DCG", "DCG Acc.")):
            rows.append(_spearman_row(task, name, points[task]))
        tables.append(
            Table(
                "figure_3",
                f"Case complexity (Figure 3): {g.label}, per cause of action (mean over "
                "runs); rho over the causes with complexity data",
                ["Cause of action", "Class", "Cases", "Complexity", "LCA Macro-F1", "DCG Acc."],
                rows,
                column_tasks={"LCA Macro-F1": "LCA", "DCG Acc.": "DCG"},
                group=g.label,
                row_filter="cause",
            )
        )
    return tables


def _figure_3_cause_rows(g: Group, complexity: dict[str, float]) -> tuple[list, dict[str, list]]:
    """A group's row per cause of action, least complex first, and each task's (complexity, mean) points."""
    causes = sorted(
        {k.part for r in g.runs for k in r.metrics if k.family == "by cause"},
        key=lambda c: complexity.get(c, 0),
    )
    rows, points = [], {"LCA": [], "DCG": []}
    for cause in causes:
        row = [
            cause,
            cause_class(cause),
            f"{(g.stat(MetricKey('cases by cause', 'LCA', cause)) or {}).get('mean') or 0:.0f}",
            f"{complexity[cause]:.{AVERAGE}f}" if cause in complexity else "n/a",
        ]
        for task in ("LCA", "DCG"):
            stat = g.stat(MetricKey("by cause", task, cause))
            row.append(cell(stat))
            if stat and stat["mean"] is not None and cause in complexity:
                points[task].append((complexity[cause], stat["mean"]))
        rows.append(row)
    return rows, points


def _spearman_row(task: str, name: str, points: list[tuple[float, float]]) -> list:
    """Spearman's rho between complexity and one task's metric over the causes, under that metric's column."""
    from scipy.stats import spearmanr  # scipy (scikit-learn brings it) loaded only when Figure 3 has data

    xs, ys = zip(*points) if points else ((), ())
    rho = spearmanr(xs, ys).statistic if len(xs) > 2 and len(set(xs)) > 1 and len(set(ys)) > 1 else None
    shown = number_cell(None if rho is None or rho != rho else float(rho), METRIC, signed=True)
    return [f"Spearman's rho, complexity vs {name}", "", str(len(xs)), ""] + (
        [shown, ""] if task == "LCA" else ["", shown]  # under its own metric's column
    )


def read_complexity(path: Path) -> dict[str, float]:
    """--complexity: a CSV of cause_of_action,complexity; unknown causes, missing or non-numeric values and a
    cause listed twice are errors naming the line."""
    if not path.is_file():
        raise UsageError(f"--complexity {path}: not found")
    values, lines = {}, {}
    try:
        check_input(path)
        with path.open(encoding="utf-8-sig", newline="") as f:
            for line, row in enumerate(csv.reader(f), 1):
                if not row or (line == 1 and row[0].strip() == "cause_of_action"):
                    continue
                cause = row[0].strip()
                where = f"--complexity {path}:{line}"
                if cause not in CAUSES:
                    raise UsageError(f"{where}: unknown cause of action {cause!r}")
                if len(row) < 2 or not row[1].strip():
                    raise UsageError(f"{where}: missing complexity for {cause}")
                try:
                    value = float(row[1])
                    if not math.isfinite(value) or value < 0:
                        raise ValueError
                except ValueError:
                    raise UsageError(f"{where}: {row[1]!r} is not a non-negative number") from None
                if cause in values:  # the last would win silently
                    raise UsageError(
                        f"{where}: {cause} is listed twice (lines {lines[cause]} and {line}); give "
                        "each cause one complexity"
                    )
                values[cause], lines[cause] = value, line
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"--complexity {path}: unreadable CSV ({e})") from None
    return values


class UsageError(Exception):
    """A problem with a file the report reads (--complexity, --prices): said in one line, nothing else printed."""
