"""The renderings of tables for people: text, Markdown, LaTeX and CSV.
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
import textwrap
import unicodedata

from lexpilot.files import spreadsheet_safe
from lexpilot.reporting.bootstrap import Bootstrap
from lexpilot.reporting.groups import Group
from lexpilot.reporting.scoring import TASKS
from lexpilot.reporting.table import Figure, Table
from lexpilot.storage.manifest import COMPARED_MANIFEST_FIELDS

TEXT_WIDTH = 120  # a text table wider than this is cut into column blocks, each repeating the first column


def display_width(text: str) -> int:
    """The terminal cells a text takes: a wide (CJK) character two, a combining mark none."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int) -> str:
    return text + " " * (width - display_width(text))


def column_blocks(widths: list[int], limit: int) -> list[list[int]]:
    """Columns 1.. in blocks that fit `limit` cells beside column 0 (a column wider than the limit alone)."""
    blocks, current, used = [], [], widths[0]
    for i in range(1, len(widths)):
        if current and used + 2 + widths[i] > limit:
            blocks.append(current)
            current, used = [], widths[0]
        current.append(i)
        used += 2 + widths[i]
    return blocks + [current] if current else blocks or [[]]


def render_text(tables: list[Table], limit: int = TEXT_WIDTH, decimals: int | None = None) -> str:
    """Aligned by display width; a table wider than `limit` is printed in blocks of columns, each block with the
    row labels (the first column) again. Metrics at each table's precision, or at `decimals`."""
    out = []
    for t in (t.at(decimals) for t in tables):
        widths = [max(display_width(r[i]) for r in [t.headers] + t.rows) for i in range(len(t.headers))]
        blocks = column_blocks(widths, limit)
        out += textwrap.wrap(t.title, limit) or [""]  # a long title in lines, not one line past the limit
        for n, block in enumerate(blocks):
            columns = [0] + block
            line = lambda r: "  ".join(pad(r[i], widths[i]) for i in columns).rstrip()  # noqa: E731
            if len(blocks) > 1:
                out.append(f"({n + 1}/{len(blocks)})")
            out += [line(t.headers), "  ".join("-" * widths[i] for i in columns)] + [line(r) for r in t.rows]
        out.append("")
    return "\n".join(out)


def render_markdown(tables: list[Table], decimals: int | None = None) -> str:
    out = []
    for t in (t.at(decimals) for t in tables):
        # no HTML, no column break: a backslash is escaped first, so that `\|` in a model id stays in its cell
        esc = lambda c: html.escape(c, quote=False).replace("\\", "\\\\").replace("|", "\\|")  # noqa: E731
        out += [f"### {t.title}", "", "| " + " | ".join(map(esc, t.headers)) + " |",
                "|" + "|".join("---" for _ in t.headers) + "|"]
        out += ["| " + " | ".join(map(esc, r)) + " |" for r in t.rows] + [""]
    return "\n".join(out)


LATEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "#": r"\#", "_": r"\_",
         "$": r"\$", "^": r"\^{}", "~": r"\~{}", "±": r"$\pm$", "−": "--", "≥": r"$\geq$", "≤": r"$\leq$",
         "<": r"\textless{}", ">": r"\textgreater{}", "α": r"$\alpha$", "κ": r"$\kappa$", "→": r"$\to$"}
LATEX_SPECIAL = re.compile("|".join(map(re.escape, LATEX)))


def render_latex(tables: list[Table], decimals: int | None = None) -> str:
    def esc(text: str) -> str:  # one pass, so that no replacement is escaped again
        return LATEX_SPECIAL.sub(lambda m: LATEX[m.group(0)], text)
    out = []
    for t in (t.at(decimals) for t in tables):
        out += [f"% {esc(t.title)}", r"\begin{tabular}{l" + "c" * (len(t.headers) - 1) + "}", r"\toprule",
                " & ".join(map(esc, t.headers)) + r" \\", r"\midrule"]
        out += [" & ".join(map(esc, r)) + r" \\" for r in t.rows] + [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)


def csv_columns(t: Table) -> list[tuple[int, str | None]]:
    """(column, number key or None for the text) of each CSV column: a column of figures becomes one column per
    number it holds (mean, SD, interval bounds, n…), so that a spreadsheet computes on numbers, not on text."""
    columns = []
    for i in range(1, len(t.headers)):
        keys = list(dict.fromkeys(k for r in t.rows if isinstance(r[i], Figure) for k in r[i].numbers))
        columns += [(i, k) for k in keys] if keys else [(i, None)]
    return columns


def first_key(columns: list[tuple[int, str | None]], i: int) -> str | None:
    return next(k for j, k in columns if j == i)


def csv_value(value) -> str:
    if value is None:
        return ""
    return repr(round(value, 6)) if isinstance(value, float) else str(value)


def render_csv(tables: list[Table], decimals: int | None = None) -> str:
    """Every number whole in its own column; a cell's text (an "Average" row's) at its table's precision."""
    tables = [t.at() for t in tables]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    layouts = [csv_columns(t) for t in tables]
    writer.writerow(["table", "row"] + [f"col{i}" for i in range(1, max(len(c) for c in layouts) + 1)])
    for t, columns in zip(tables, layouts):
        writer.writerow(map(spreadsheet_safe, [t.title, "header"] + [t.headers[i] + (f" {k}" if k else "")
                                                                       for i, k in columns]))
        for r in t.rows:
            cells = [csv_value(r[i].numbers.get(k)) if k and isinstance(r[i], Figure) else
                     r[i] if not k or k == first_key(columns, i) else "" for i, k in columns]  # text in a number
            # column (an "Average" row's cell) is kept, in the column's first place
            writer.writerow(map(spreadsheet_safe, [t.title, r[0]] + cells))
    return buffer.getvalue()


RENDERINGS = {"text": render_text, "markdown": render_markdown, "csv": render_csv, "latex": render_latex}



def render_json(groups: list[Group], boot: Bootstrap | None = None, usage: bool = False,
                tables: list[Table] | None = None) -> str:
    data = []
    for g in groups:
        metrics: dict = {}
        keys = sorted({k for r in g.runs for k in r.metrics}, key=str)
        for task, metric, cls in keys:
            stat = g.stat((task, metric, cls))
            entry = metrics.setdefault(task, {}).setdefault(metric, {})[cls] = {
                "per_run": dict(zip([r.run_id for r in g.runs if (task, metric, cls) in r.metrics], stat["runs"])),
                "mean": stat["mean"], "sd": stat["sd"], "undefined_runs": stat["undefined"]}
            if boot and task in TASKS:
                entry["ci95"] = boot.interval(g, (task, metric, cls))
        group = {"model": g.model, "user_condition": g.condition, "run_ids": g.run_ids,
                 "differs_from_first_group": g.differs,
                 "settings": dict(zip(COMPARED_MANIFEST_FIELDS, map(json.loads, g.settings))),
                 "problems": {r.run_id: r.problems for r in g.runs if r.problems}, "metrics": metrics}
        if usage:
            group["usage"] = {r.run_id: {stage: {role: dict(u) for role, u in roles.items()}
                                         for stage, roles in r.usage.items()} for r in g.runs}
        data.append(group)
    extra = {"tables": [{"id": t.id, "title": t.title, "headers": t.headers, "rows": t.at().rows} for t in tables]} \
        if tables else {}
    return json.dumps({"groups": data, **extra}, ensure_ascii=False, indent=1)
