"""PNG figures of the reported tables (per-class bars, Acc_C against Acc_U, QWK across the LJP setups);
matplotlib is imported only here, only when figures are asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lexpilot.benchmark.records import LJP_SETUPS
from lexpilot.reporting.scoring.groups import Group, classes_present
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey
from lexpilot.reporting.scoring.scoring import METRIC_NAMES, TASK_NAMES
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.tables.complexity import figure_3_groups
from lexpilot.reporting.tables.paper import CLASS_TABLES
from lexpilot.reporting.tables.rank_figures import Mark, Panel, Point, TaskFigure
from lexpilot.reporting.tables.table import Table


def write_plots(
    groups: list[Group],
    folder: Path,
    boot: Bootstrap | None,
    complexity: dict[str, float] | None = None,
    tables: Sequence[Table] = (),
    ranked: Sequence[TaskFigure] = (),
) -> list[Path]:
    """PNG figures of the per-class tables, Acc_C against Acc_U, QWK across the three LJP setups, and where the
    data exist Figure 3 (metrics against case complexity) and Figure 4 (DCG by focal-point type, counts); the
    ranking figures, one per task (`ranked`: tables/rank_figures.py)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no screen needed
    import matplotlib.pyplot as plt

    groups = [g for g in groups if g.condition == "standard"]
    labels = [plain_text(g.label) for g in groups]  # a model id is untrusted text: a "$" would start mathtext
    folder.mkdir(parents=True, exist_ok=True)
    written = class_bars(plt, groups, labels, folder, boot)
    written.append(lca_scatter(plt, groups, labels, folder, boot))
    written.append(ljp_setups(plt, groups, labels, folder, boot))
    written += [ranking_plot(plt, figure, folder) for figure in ranked]
    return written + analysis_plots(plt, groups, labels, folder, complexity, list(tables))


def error_bar(g: Group, key: MetricKey, boot: Bootstrap | None) -> tuple[float, float, float]:
    """(mean, lower, upper error): the bootstrap interval with --ci, else ± SD over runs."""
    stat = g.stat(key)
    if stat is None or stat["mean"] is None:
        return np.nan, 0.0, 0.0
    ci = boot.interval(g, key) if boot else None
    if ci is not None:
        return stat["mean"], stat["mean"] - ci[0], ci[1] - stat["mean"]
    sd = stat["sd"] or 0.0
    return stat["mean"], sd, sd


def bar_label(boot: Bootstrap | None) -> str:
    return "95% bootstrap interval" if boot else "± SD over runs"


def two_lines(name: str) -> str:
    """A class's name under its bars, its words on two lines: "Service Contract" beside "Finance Contract" would
    run into each other on one."""
    return name.replace(" ", "\n", 1)


def class_bars(
    plt, groups: list[Group], labels: list[str], folder: Path, boot: Bootstrap | None
) -> list[Path]:
    """One figure per per-class table (Table 2, Tables 16-17): a bar per model and class."""
    classes = classes_present(groups) + [OVERALL]
    written = []
    for _, title, (task, metric), _ in CLASS_TABLES:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(classes) + 1.5), 4.2))
        width = 0.8 / max(len(groups), 1)
        for i, (label, g) in enumerate(zip(labels, groups)):
            values = [error_bar(g, MetricKey(task, metric, c), boot) for c in classes]
            x = np.arange(len(classes)) + (i - (len(groups) - 1) / 2) * width
            ax.bar(
                x,
                [v[0] for v in values],
                width,
                label=label,
                yerr=np.array([[v[1] for v in values], [v[2] for v in values]]),
                capsize=3,
            )
            mark_undefined(ax, x, [v[0] for v in values])
        ax.set_xticks(np.arange(len(classes)), [two_lines(c) for c in classes])
        ax.set_ylabel(f"{TASK_NAMES[task]} {METRIC_NAMES[metric]}")
        ax.set_title(f"{title.split(' (')[0]} (error bars: {bar_label(boot)})", fontsize=10)
        ax.axhline(0, color="black", linewidth=0.6)
        written.append(save(plt, fig, folder / f"by_class_{task}_{metric}.png", ax, legend=8))
    return written


def lca_scatter(plt, groups: list[Group], labels: list[str], folder: Path, boot: Bootstrap | None) -> Path:
    """Acc_C against Acc_U: over-asking against premature judgment."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    points = []
    for label, g in zip(labels, groups):
        (xc, xl, xu) = error_bar(g, MetricKey("LCA", "acc_c"), boot)
        (yu, yl, yh) = error_bar(g, MetricKey("LCA", "acc_u"), boot)
        ax.errorbar([xc], [yu], xerr=[[xl], [xu]], yerr=[[yl], [yh]], fmt="o", capsize=3, label=label)
        if not np.isnan(xc) and not np.isnan(yu):
            points.append((label, xc, yu))
    for label, (x, y), (lx, ly) in dodged(points):  # ten models close together stay readable
        ax.annotate(
            label,
            (x, y),
            xytext=(lx, ly),
            fontsize=8,
            arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5} if (lx, ly) != (x, y) else None,
        )
    ax.plot([0, 1], [1, 0], color="grey", linewidth=0.6, linestyle="--")
    ax.set_xlim(0, 1.02), ax.set_ylim(0, 1.02)
    ax.set_xlabel("Acc_C: complete histories answered (low = over-asking)")
    ax.set_ylabel("Acc_U: underspecified histories asked (low = premature judgment)")
    ax.set_title("LCA: over-asking against premature judgment", fontsize=10)
    return save(plt, fig, folder / "lca_acc_c_vs_acc_u.png")


def ljp_setups(plt, groups: list[Group], labels: list[str], folder: Path, boot: Bootstrap | None) -> Path:
    """QWK across Direct, Interaction-Based and Gold-Standard, a line per model."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    setups = [s.title for s in LJP_SETUPS]
    for i, (label, g) in enumerate(zip(labels, groups)):
        values = [error_bar(g, MetricKey(s.task, "qwk"), boot) for s in LJP_SETUPS]
        x = np.arange(len(setups)) + 0.04 * (i - (len(groups) - 1) / 2)  # overlapping bars stay apart
        ax.errorbar(
            x,
            [v[0] for v in values],
            yerr=[[v[1] for v in values], [v[2] for v in values]],
            marker="o",
            capsize=3,
            label=label,
        )
    ax.set_xticks(range(len(setups)), setups, fontsize=8)  # the three setups' names side by side, apart
    ax.set_ylabel("QWK")
    ax.set_title(f"LJP: Direct → Interaction-Based → Gold-Standard ({bar_label(boot)})", fontsize=10)
    return save(plt, fig, folder / "ljp_setups.png", ax, legend=8)


# in axis units (0 to 1): two labels closer than this in both directions would overprint
LABEL_GAP = (0.14, 0.04)


def dodged(points: list[tuple[str, float, float]]) -> list[tuple[str, tuple, tuple]]:
    """(label, point, where its text goes): each label just above and right of its point, moved up, one step at a
    time, while it would overprint a label already placed."""
    placed: list[tuple[float, float]] = []  # where the labels so far go
    out = []
    for label, x, y in sorted(points, key=lambda p: (p[2], p[1])):
        lx, ly = x + 0.01, y + 0.01
        while any(abs(lx - px) < LABEL_GAP[0] and abs(ly - py) < LABEL_GAP[1] for px, py in placed):
            ly += LABEL_GAP[1]
        placed.append((lx, ly))
        out.append((label, (x, y), (lx, ly)))
    return out


def mark_undefined(ax, xs, values) -> None:
    """An undefined value is written as n/a where its bar would stand, not left as an empty bar that reads as 0."""
    for x, v in zip(xs, values):
        if v is None or np.isnan(v):
            ax.text(x, 0.01, "n/a", ha="center", va="bottom", fontsize=7, rotation=90, color="dimgray")


def beside(ax, size: int) -> None:
    """The axes' legend right of them: never on a bar or a point (at 10 models it covered the Family bars)."""
    ax.legend(fontsize=size, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)


def save(plt, fig, path: Path, ax=None, legend: int = 7) -> Path:
    """Lay out, write and close a figure (with the axes' legend, when given); no label is cut off at the edge."""
    if ax is not None:
        beside(ax, legend)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def figure_4_bars(plt, table: Table, folder: Path, name: str, ylabel: str) -> Path:
    """Figure 4 (a) or (b) drawn from its table: a bar per row (each model, then the average over the models) and
    column, with the table's mean ± SD over runs, so that the image shows the numbers the table prints."""
    columns = table.headers[1:]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(table.rows)
    for i, row in enumerate(table.rows):
        numbers = [getattr(c, "numbers", {}) for c in row[1:]]
        means = [np.nan if n.get("mean") is None else n["mean"] for n in numbers]
        errors = [n.get("SD") or 0.0 for n in numbers]
        x = np.arange(len(columns)) + (i - (len(table.rows) - 1) / 2) * width
        average = i == len(table.rows) - 1
        ax.bar(
            x,
            means,
            width,
            label=row[0],
            yerr=errors,
            capsize=2,
            **({"color": "dimgray", "hatch": "//"} if average else {}),
        )
        mark_undefined(ax, x, means)
    ax.set_xticks(np.arange(len(columns)), columns, rotation=20, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(table.title.split(",")[0] + " (± SD over runs; the hatched bar: the average)", fontsize=10)
    return save(plt, fig, folder / name, ax)


def figure_4_counts(plt, table: Table, folder: Path) -> Path:
    """Figure 4 (c) from its table: focal points per type (stacked) and class, over the typed cases."""
    classes = table.headers[1:-1]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bottom = np.zeros(len(classes))
    for row in table.rows:
        heights = np.array([int(c) for c in row[1:-1]])
        ax.bar([two_lines(c) for c in classes], heights, bottom=bottom, label=row[0])
        bottom += heights
    ax.set_ylabel("focal points")
    ax.set_title(table.title.split(",")[0], fontsize=10)
    return save(plt, fig, folder / "fig4c_focal_points.png", ax)


def analysis_plots(
    plt, groups: list[Group], labels: list[str], folder: Path, complexity, tables: list[Table]
) -> list[Path]:
    written = []
    panels = {t.id: t for t in tables if t.id.startswith("figure_4")}
    if "figure_4a" in panels:
        written.append(
            figure_4_bars(plt, panels["figure_4a"], folder, "fig4a_dcg_by_focal_type.png", "DCG accuracy")
        )
        written.append(
            figure_4_bars(plt, panels["figure_4b"], folder, "fig4b_dcg_by_class.png", "DCG accuracy")
        )
        written.append(figure_4_counts(plt, panels["figure_4c"], folder))
    series = figure_3_groups(groups)
    shown = {id(g) for g in series}
    if complexity and series:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
        for ax, (task, name) in zip(axes, (("LCA", "LCA Macro-F1"), ("DCG", "DCG accuracy"))):
            for label, g in ((label, g) for label, g in zip(labels, groups) if id(g) in shown):
                points = [
                    (complexity[k.part], *error_bar(g, k, None)[:2])
                    for k in {
                        k for r in g.runs for k in r.metrics if (k.family, k.name) == ("by cause", task)
                    }
                    if k.part in complexity
                ]
                points = [(x, y, e) for x, y, e in points if not np.isnan(y)]
                if not points:
                    continue
                xs, ys, errors = np.array(points).T
                # ± SD
                drawn = ax.errorbar(xs, ys, yerr=errors, fmt="o", markersize=4, capsize=2, label=label)
                if len(set(xs)) > 1:
                    slope, intercept = np.polyfit(xs, ys, 1)  # least squares
                    grid = np.linspace(xs.min(), xs.max(), 20)
                    # its group's
                    ax.plot(grid, slope * grid + intercept, linewidth=1, color=drawn[0].get_color())
            ax.set_xlabel("complexity (average legal provisions cited per cause)")
            ax.set_ylabel(name)
            ax.set_title(f"Figure 3: {name} by cause against complexity (± SD over runs)", fontsize=9)
        beside(axes[-1], 7)  # one legend for both panels, right of the second: on no point of either
        written.append(save(plt, fig, folder / "fig3_complexity.png"))
    return written


# ----------------------------------------------------------------------------- the ranking figures

RAW_COLOUR, CORRECTED_COLOUR = "#1558b0", "#c4620a"  # the site's (site/web/style.css)
SIDE_BY_SIDE = 0.18  # the corrected mark below the raw one in a model's row, in rows


def plain_text(value: str) -> str:
    """Untrusted text drawn as itself: a "$" would start matplotlib's mathtext (and an odd one fail the figure)."""
    return value.replace("$", r"\$")


def ranking_plot(plt, figure: TaskFigure, folder: Path) -> Path:
    """A task's ranking figure: a panel per headline metric, a row per model in rank order with its raw mean ● and
    corrected mean ◆ side by side, each with its 95% interval and its Holm letters right of the axes."""
    heights = [len(p.marks) + 1.5 for p in figure.panels]
    fig, axes = plt.subplots(
        len(figure.panels),
        1,
        figsize=(8.5, 0.9 + 0.32 * sum(heights) * (1.4 if figure.corrected else 1.0)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, panel in zip(axes[:, 0], figure.panels):
        ranking_panel(ax, panel, figure)
    from matplotlib.lines import Line2D  # matplotlib is imported only when figures are drawn

    kinds = [("raw mean, 95% bootstrap interval over cases", "o", RAW_COLOUR)]
    if figure.corrected:
        kinds.append(("corrected for the judge, 95% interval with the expert sample", "D", CORRECTED_COLOUR))
    handles = [Line2D([], [], marker=m, color=c, label=label) for label, m, c in kinds]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8)
    notes = f" ({'; '.join(figure.notes)})" if figure.notes else ""
    fig.suptitle(
        f"{figure.title}: models in rank order; a shared letter: not different after Holm{notes}", fontsize=9
    )
    return save(plt, fig, folder / f"ranking_{figure.task}.png")


def ranking_panel(ax, panel: Panel, figure: TaskFigure) -> None:
    """One metric: each model's marks and letters, the rows named by rank and model, the best at the top."""
    shift = SIDE_BY_SIDE if figure.corrected else 0.0
    for row, mark in enumerate(panel.marks):
        ranking_point(ax, row - shift, mark.raw, "o", RAW_COLOUR, 1.02)
        if mark.corrected is not None:
            ranking_point(ax, row + shift, mark.corrected, "D", CORRECTED_COLOUR, 1.12)
        elif mark.refused:
            ax.text(1.12, row + shift, "refused", transform=ax.get_yaxis_transform(), fontsize=7, va="center")
    ax.set_yticks(range(len(panel.marks)), [ranking_label(m) for m in panel.marks], fontsize=8)
    ax.set_ylim(len(panel.marks) - 0.5, -0.5)  # the first rank at the top
    heads = [(1.02, "raw" if figure.ranked else "")] + [(1.12, "corrected")] * figure.corrected
    for x, head in heads:
        ax.text(x, -0.5, head, transform=ax.get_yaxis_transform(), fontsize=7, va="bottom", weight="bold")
    ax.set_title(plain_text(panel.metric), fontsize=9, loc="left")
    ax.grid(axis="x", color="#e3e3e3")
    ax.tick_params(axis="x", labelsize=8)


def ranking_label(mark: Mark) -> str:
    """A row's name: its rank, its comparable set when there are several, its model."""
    where = f" (set {mark.comparable_set})" if mark.comparable_set else ""
    return plain_text(f"{mark.rank}. {mark.model}{where}")


def ranking_point(ax, y: float, point: Point, marker: str, colour: str, letters_at: float) -> None:
    """One estimate with its interval, and its letters at `letters_at` (in axes widths) on its row."""
    error = (
        None
        if point.interval is None
        else [[point.value - point.interval[0]], [point.interval[1] - point.value]]
    )
    ax.errorbar([point.value], [y], xerr=error, fmt=marker, color=colour, markersize=5, capsize=2)
    ax.text(
        letters_at,
        y,
        plain_text(point.letters),
        transform=ax.get_yaxis_transform(),
        fontsize=8,
        va="center",
        weight="bold",
        color=colour,
    )
