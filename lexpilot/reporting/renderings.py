"""The renderings of tables for people: text, Markdown, LaTeX and CSV.
"""
from __future__ import annotations

import csv
import html
import io
import re

from lexpilot.files import spreadsheet_safe
from lexpilot.reporting.table import Table


def render_text(tables: list[Table]) -> str:
    out = []
    for t in tables:
        widths = [max(len(r[i]) for r in [t.headers] + t.rows) for i in range(len(t.headers))]
        line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        out += [t.title, line(t.headers), "  ".join("-" * w for w in widths)] + [line(r) for r in t.rows] + [""]
    return "\n".join(out)


def render_markdown(tables: list[Table]) -> str:
    out = []
    for t in tables:
        esc = lambda c: html.escape(c, quote=False).replace("|", "\\|")  # noqa: E731: no HTML, no column break
        out += [f"### {t.title}", "", "| " + " | ".join(map(esc, t.headers)) + " |",
                "|" + "|".join("---" for _ in t.headers) + "|"]
        out += ["| " + " | ".join(map(esc, r)) + " |" for r in t.rows] + [""]
    return "\n".join(out)


LATEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "#": r"\#", "_": r"\_",
         "$": r"\$", "^": r"\^{}", "~": r"\~{}", "±": r"$\pm$", "−": "--"}
LATEX_SPECIAL = re.compile("|".join(map(re.escape, LATEX)))


def render_latex(tables: list[Table]) -> str:
    def esc(text: str) -> str:  # one pass, so that no replacement is escaped again
        return LATEX_SPECIAL.sub(lambda m: LATEX[m.group(0)], text)
    out = []
    for t in tables:
        out += [f"% {esc(t.title)}", r"\begin{tabular}{l" + "c" * (len(t.headers) - 1) + "}", r"\toprule",
                " & ".join(map(esc, t.headers)) + r" \\", r"\midrule"]
        out += [" & ".join(map(esc, r)) + r" \\" for r in t.rows] + [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)


def render_csv(tables: list[Table]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["table", "row"] + [f"col{i}" for i in range(1, max(len(t.headers) for t in tables))])
    for t in tables:
        writer.writerow(map(spreadsheet_safe, [t.title, "header"] + t.headers[1:]))
        for r in t.rows:
            writer.writerow(map(spreadsheet_safe, [t.title, r[0]] + r[1:]))
    return buffer.getvalue()


RENDERINGS = {"text": render_text, "markdown": render_markdown, "csv": render_csv, "latex": render_latex}
