"""The judge tables of re-judged runs: the two judges' labels side by side and the metrics each judge gives the
same generations.
"""

from __future__ import annotations

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey, Run, saved_records
from lexpilot.reporting.statistics.bootstrap import Bootstrap, paired_difference
from lexpilot.reporting.tables.formats import (
    HEADLINE,
    cell,
    difference_cell,
    kappa_cell,
    number_cell,
)
from lexpilot.reporting.tables.table import PERCENT, Kind, Table, declares
from lexpilot.reporting.validation.judges import (
    REJUDGED_KINDS,
    judges_agreement,
)

JUDGED_TASKS = ("LCA", "DCG", "LJP", "interaction rounds")  # what a re-judged run's judge decides again


@declares(Kind("judge_labels", "nearest: Table 12", 2), Kind("judge_sensitivity", "nearest: Table 11", 3))
def judge_sensitivity_tables(groups: list[Group], root, boot: Bootstrap) -> list[Table]:
    """For runs re-judged with another judge (rejudge.py): the two judges' agreement on the same items, and
    every metric under each judge with the paired bootstrap difference on the same cases."""
    # looked up by a run's source too (None: it re-judged no run)
    runs: dict[tuple[str, str | None], tuple[Group, Run]] = {
        (r.model, r.run_id): (g, r) for g in groups for r in g.runs
    }
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
    """The judge a run's verdicts were made with, and what served it where that is not the id asked for."""
    apart = run.served_apart("judge")
    return f"{run.manifest.model('judge')}" + (f" (served: {', '.join(apart)})" if apart else "")


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
