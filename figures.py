"""PNG figures of the reported tables (per-class bars, Acc_C against Acc_U, QWK across the LJP setups);
matplotlib is imported only here, only when figures are asked for.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from records import LJP_SETUPS
from results import METRIC_NAMES, OVERALL, TASK_NAMES, Bootstrap, Group, group_label
from tables import CLASS_TABLES, SETUP_NAMES, classes_present


def write_plots(groups: list[Group], folder: Path, boot: Bootstrap | None) -> list[Path]:
    """PNG figures of the per-class tables, Acc_C against Acc_U, and QWK across the three LJP setups."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no screen needed
    import matplotlib.pyplot as plt

    groups = [g for g in groups if g.condition == "standard"]
    labels = [group_label(g, groups) for g in groups]
    classes = classes_present(groups) + [OVERALL]
    folder.mkdir(parents=True, exist_ok=True)
    written = []

    def error(g: Group, key: tuple) -> tuple[float, float, float]:
        """(mean, lower, upper error): the bootstrap interval with --ci, else ± SD over runs."""
        stat = g.stat(key)
        if stat is None or stat["mean"] is None:
            return np.nan, 0.0, 0.0
        ci = boot.interval(g, key) if boot else None
        if ci is not None:
            return stat["mean"], stat["mean"] - ci[0], ci[1] - stat["mean"]
        sd = stat["sd"] or 0.0
        return stat["mean"], sd, sd

    bar = "95% bootstrap interval" if boot else "± SD over runs"
    for title, (task, metric), _ in CLASS_TABLES:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(classes) + 1.5), 4.2))
        width = 0.8 / max(len(groups), 1)
        for i, (label, g) in enumerate(zip(labels, groups)):
            values = [error(g, (task, metric, c)) for c in classes]
            x = np.arange(len(classes)) + (i - (len(groups) - 1) / 2) * width
            ax.bar(x, [v[0] for v in values], width, label=label,
                   yerr=np.array([[v[1] for v in values], [v[2] for v in values]]), capsize=3)
        ax.set_xticks(np.arange(len(classes)), classes)
        ax.set_ylabel(f"{TASK_NAMES[task]} {METRIC_NAMES[metric]}")
        ax.set_title(f"{title.split(' (')[0]} (error bars: {bar})", fontsize=10)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(folder / f"by_class_{task}_{metric}.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for label, g in zip(labels, groups):
        (xc, xl, xu), (yu, yl, yh) = error(g, ("LCA", "acc_c", OVERALL)), error(g, ("LCA", "acc_u", OVERALL))
        ax.errorbar([xc], [yu], xerr=[[xl], [xu]], yerr=[[yl], [yh]], fmt="o", capsize=3, label=label)
        if not np.isnan(xc) and not np.isnan(yu):
            ax.annotate(label, (xc, yu), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.plot([0, 1], [1, 0], color="grey", linewidth=0.6, linestyle="--")
    ax.set_xlim(0, 1.02), ax.set_ylim(0, 1.02)
    ax.set_xlabel("Acc_C: complete histories answered (low = over-asking)")
    ax.set_ylabel("Acc_U: underspecified histories asked (low = premature judgment)")
    ax.set_title("LCA: over-asking against premature judgment", fontsize=10)
    fig.tight_layout()
    written.append(folder / "lca_acc_c_vs_acc_u.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4.5))
    setups = [SETUP_NAMES[s] for s, _, _, _ in LJP_SETUPS]
    for i, (label, g) in enumerate(zip(labels, groups)):
        values = [error(g, (f"LJP_{s}", "qwk", OVERALL)) for s, _, _, _ in LJP_SETUPS]
        x = np.arange(len(setups)) + 0.04 * (i - (len(groups) - 1) / 2)  # overlapping bars stay apart
        ax.errorbar(x, [v[0] for v in values], yerr=[[v[1] for v in values], [v[2] for v in values]],
                    marker="o", capsize=3, label=label)
    ax.set_xticks(range(len(setups)), setups)
    ax.set_ylabel("QWK")
    ax.set_title(f"LJP: Direct → Interaction-Based → Gold-Standard ({bar})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(folder / "ljp_setups.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written
