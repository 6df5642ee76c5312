"""The renderings of tables for people: text, Markdown, LaTeX and CSV."""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import re
import unicodedata
from collections.abc import Callable, Sequence

from lexpilot.errors import HarnessError
from lexpilot.files import spreadsheet_safe
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.scoring import TASKS
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.tables.table import Figure, Table
from lexpilot.storage.compared import COMPARED_MANIFEST_FIELDS

TEXT_WIDTH = 120  # a text table wider than this is cut into column blocks, each repeating the key columns


def display_width(text: str) -> int:
    """The terminal cells a text takes: a wide (CJK) character two, a combining mark none."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text
    )


def wrap(text: str, limit: int, indent: str = "") -> list[str]:
    """Lines of at most `limit` terminal cells (textwrap counts characters, and a Chinese character takes two):
    broken at spaces, or between two wide characters, which Chinese text is written without spaces between."""
    tokens = re.findall(r"\s+|[^\s\u2e80-\uffef]+|.", text.strip())  # spaces, a word, or one wide character
    lines, line = [], ""
    for token in tokens:
        if token.isspace():
            line += " " if line.strip() else ""
        elif display_width(line) + display_width(token) <= limit or not line.strip():
            line += token  # a word longer than a line stands on its own line, whole
        else:
            lines.append(line.rstrip())
            line = indent + token
    return lines + [line.rstrip()] if line.strip() else lines


def pad(text: str, width: int) -> str:
    return text + " " * (width - display_width(text))


def key_columns(t: Table) -> list[int]:
    """The columns that tell the rows apart (a model, then a metric, a condition or a task…): among the leading
    text columns, each one in turn that tells more rows apart than those before it, until every row is told
    apart (a column that follows from another, a judge from its runs, is left out)."""
    texts = 1
    while texts < len(t.headers) - 1 and not any(isinstance(r[texts], Figure) for r in t.rows):
        texts += 1
    keys = [0]
    apart = lambda columns: len({tuple(r[i] for i in columns) for r in t.rows})  # noqa: E731
    for i in range(1, texts):
        if apart(keys) == len(t.rows):
            break
        if apart(keys + [i]) > apart(keys):
            keys.append(i)
    return keys


def column_blocks(widths: list[int], limit: int, keys: Sequence[int] = (0,)) -> list[list[int]]:
    """The columns other than the key columns in blocks that fit `limit` cells beside them (a column wider than
    the limit alone): as few blocks as fit, and within that count as even as they can be, so that a block holds a
    lone column only when it must."""
    base = sum(widths[i] for i in keys) + 2 * (len(keys) - 1)
    columns = [i for i in range(len(widths)) if i not in keys]
    if not columns:
        return [[]]
    fits = lambda a, b: b - a == 1 or base + sum(2 + widths[c] for c in columns[a:b]) <= limit  # noqa: E731
    count, start = 0, 0
    while start < len(columns):  # greedy: the fewest blocks
        end = start + 1
        while end < len(columns) and fits(start, end + 1):
            end += 1
        count, start = count + 1, end
    # best[j][i]: the largest smallest block over splits of the first i columns into j fitting blocks
    best = [[-1] * (len(columns) + 1) for _ in range(count + 1)]
    cut = [[0] * (len(columns) + 1) for _ in range(count + 1)]
    best[0][0] = len(columns)
    for j in range(1, count + 1):
        for i in range(1, len(columns) + 1):
            for a in range(i):
                if best[j - 1][a] >= 0 and fits(a, i) and min(best[j - 1][a], i - a) >= best[j][i]:
                    best[j][i], cut[j][i] = min(best[j - 1][a], i - a), a
    blocks: list[list[int]] = []
    i = len(columns)
    for j in range(count, 0, -1):
        blocks.insert(0, columns[cut[j][i] : i])
        i = cut[j][i]
    return blocks


def render_text(tables: list[Table], limit: int = TEXT_WIDTH, decimals: int | None = None) -> str:
    """Aligned by display width; a table wider than `limit` is printed in blocks of columns, each block with the
    key columns again (those that tell the rows apart). Metrics at each table's precision, or at `decimals`."""
    out = []
    for t in (t.at(decimals) for t in tables):
        if len(t.headers) == 1:  # a table of notes: each note in lines of the width, not one line past it
            t = dataclasses.replace(
                t, rows=[[line] for r in t.rows for line in wrap(r[0], limit, "  ") or [""]]
            )
        widths = [max(display_width(r[i]) for r in [t.headers] + t.rows) for i in range(len(t.headers))]
        keys = key_columns(t)
        blocks = column_blocks(widths, limit, keys)
        out += wrap(t.title, limit) or [""]  # a long title in lines, not one line past the limit
        for n, block in enumerate(blocks):
            columns = sorted(keys + block)  # in the table's order
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
        out += [
            f"### {t.title}",
            "",
            "| " + " | ".join(map(esc, t.headers)) + " |",
            "|" + "|".join("---" for _ in t.headers) + "|",
        ]
        out += ["| " + " | ".join(map(esc, r)) + " |" for r in t.rows] + [""]
    return "\n".join(out)


LATEX = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "_": r"\_",
    "$": r"\$",
    "^": r"\^{}",
    "~": r"\~{}",
    "±": r"$\pm$",
    "−": "--",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "α": r"$\alpha$",
    "κ": r"$\kappa$",
    "→": r"$\to$",
}
LATEX_SPECIAL = re.compile("|".join(map(re.escape, LATEX)))


def render_latex(tables: list[Table], decimals: int | None = None) -> str:
    def esc(text: str) -> str:  # one pass, so that no replacement is escaped again
        return LATEX_SPECIAL.sub(lambda m: LATEX[m.group(0)], text)

    out = []
    for t in (t.at(decimals) for t in tables):
        out += [
            f"% {esc(t.title)}",
            r"\begin{tabular}{l" + "c" * (len(t.headers) - 1) + "}",
            r"\toprule",
            " & ".join(map(esc, t.headers)) + r" \\",
            r"\midrule",
        ]
        out += [" & ".join(map(esc, r)) + r" \\" for r in t.rows] + [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)


def csv_columns(t: Table) -> list[tuple[int, str | None]]:
    """(column, number key or None for the text) of each CSV column: a column of figures becomes one column per
    number it holds (mean, SD, interval bounds, n…), so that a spreadsheet computes on numbers, not on text."""
    columns: list[tuple[int, str | None]] = []
    for i in range(1, len(t.headers)):
        cells = [r[i] for r in t.rows]
        keys = list(dict.fromkeys(k for c in cells if isinstance(c, Figure) for k in c.numbers))
        columns += [(i, k) for k in keys] if keys else [(i, None)]
    return columns


def first_key(columns: list[tuple[int, str | None]], i: int) -> str | None:
    return next(k for j, k in columns if j == i)


def csv_value(value) -> str:
    if value is None:
        return ""
    value = value.item() if hasattr(value, "item") else value  # a numpy scalar, as the plain number it holds
    # every digit: a spreadsheet computes on it
    return repr(value) if isinstance(value, float) else str(value)


def render_csv(tables: list[Table], decimals: int | None = None) -> str:
    """Every number whole in its own column; a cell's text (an "Average" row's) at its table's precision."""
    tables = [t.at() for t in tables]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    layouts = [csv_columns(t) for t in tables]
    writer.writerow(["table", "row"] + [f"col{i}" for i in range(1, max(len(c) for c in layouts) + 1)])
    for t, columns in zip(tables, layouts):
        writer.writerow(
            map(
                spreadsheet_safe,
                [t.title, "header"] + [t.headers[i] + (f" {k}" if k else "") for i, k in columns],
            )
        )
        for r in t.rows:
            cells = [csv_cell(r[i], k, k == first_key(columns, i)) for i, k in columns]
            writer.writerow(map(spreadsheet_safe, [t.title, r[0]] + cells))
    return buffer.getvalue()


def csv_cell(cell: str, key: str | None, first: bool) -> str:
    """A CSV cell: a figure's number under `key`; text in a number column (an "Average" row's cell) is kept, in
    the column's `first` place."""
    if key and isinstance(cell, Figure):
        return csv_value(cell.numbers.get(key))
    return cell if not key or first else ""


# format -> its rendering of tables (text's second argument is its width; the others' their decimals)
RENDERINGS: dict[str, Callable[..., str]] = {
    "text": render_text,
    "markdown": render_markdown,
    "csv": render_csv,
    "latex": render_latex,
}


def add_format_option(parser, help: str | None = None, json: bool = False) -> None:
    """--format, as the scripts that print tables take it: one of the renderings, text by default (`json`: a report,
    which show_results.py also writes whole as JSON)."""
    choices = sorted([*RENDERINGS, "json"] if json else RENDERINGS)
    parser.add_argument("--format", choices=choices, default="text", help=help)


# Issue 35 item 13: "use one style for JSON metric keys". Every key of the JSON that names what was measured (a
# task, a metric, a number of a cell) or over which cases (Overall, a class, a stop reason) is written in one style,
# snake_case, by `json_key`; a name in Chinese (a cause of action) keeps its characters. Table 4's families carry
# their table's identity, as its tables do (`table_4`, `table_4_attempts`, `table_4_resolved`). JSON_FORMAT tells a
# reader which keys a report has: 2 these, none the older reports' (the tables' and records' own names).
JSON_FORMAT = 2
JSON_KEY_PREFIXES = (("T4r_", "table_4_resolved"), ("T4 ", "table_4"), ("T4_", "table_4"))  # prefix, table id


def json_key(name: str) -> str:
    """A metric's or a number's key in the JSON: `LJP_gold` → `ljp_gold`, `T4 attempts` → `table_4_attempts`,
    `off_target 1` → `off_target_1`, `SD` → `sd`, `Cond. generic advice` → `cond_generic_advice`."""
    for old, new in JSON_KEY_PREFIXES:
        if name.startswith(old):
            name = f"{new}_{name[len(old) :]}"
            break
    return re.sub(r"[\W_]+", "_", name.lower()).strip("_")  # letters and digits of any script kept


def json_keyed(items) -> dict:
    """A dict of (name, value) pairs under their JSON keys; two names that would share a key are a bug here."""
    out = {}
    for name, value in items:
        key = json_key(str(name))
        if key in out:  # a harness bug, said in a line: a merged number would be a wrong one
            raise HarnessError(
                f"--format json: two metric names would share the key {key!r} ({name!r} and one "
                "before it); report this, and use --format csv meanwhile"
            )
        out[key] = value
    return out


def json_cell(c):
    """A table cell in the JSON: a cell with numbers is {"text", and each number under its JSON key}, for a reader
    computes on the numbers, not on the display text; a count written as text ("24") is given as its number too."""
    if isinstance(c, Figure):
        return {"text": str(c), **json_keyed(c.numbers.items())}
    return {"text": c, "value": int(c)} if isinstance(c, str) and c.isascii() and c.isdigit() else c


def json_metrics(g: Group, boot: Bootstrap | None) -> dict:
    """A group's metrics as task → metric → case group → {per_run, mean, sd, undefined_runs[, ci95]}."""
    metrics: dict = {}
    for key in sorted({k for r in g.runs for k in r.metrics}, key=str):
        task, metric, cls = key
        stat = g.stat(key)
        assert stat is not None, "a metric some run of the group has"
        entry = {
            "per_run": dict(zip([r.run_id for r in g.runs if key in r.metrics], stat["runs"])),
            "mean": stat["mean"],
            "sd": stat["sd"],
            "undefined_runs": stat["undefined"],
        }
        if boot and task in TASKS:
            entry["ci95"] = boot.interval(g, key)
        metrics.setdefault(task, {}).setdefault(metric, {})[cls] = entry
    return json_keyed(
        (task, json_keyed((metric, json_keyed(per_cls.items())) for metric, per_cls in by_metric.items()))
        for task, by_metric in metrics.items()
    )


def render_json(
    groups: list[Group], boot: Bootstrap | None = None, usage: bool = False, tables: list[Table] | None = None
) -> str:
    data = []
    for g in groups:
        group = {
            "model": g.model,
            "user_condition": g.condition,
            "run_ids": g.run_ids,
            "differs_from_first_group": g.differs,
            "settings": dict(zip(COMPARED_MANIFEST_FIELDS, map(json.loads, g.settings))),
            "problems": {r.run_id: r.problems for r in g.runs if r.problems},
            # per run, role and served model id: the calls its records count (docs/results.md)
            "served_models": {r.run_id: {role: dict(c) for role, c in r.served.items()} for r in g.runs},
            "metrics": json_metrics(g, boot),
        }
        if usage:  # the records' own usage fields, and the calls in flight when a stage stopped, per role
            group["usage"] = {
                r.run_id: {
                    stage: {role: dict(u) for role, u in roles.items()} for stage, roles in r.usage.items()
                }
                for r in g.runs
            }
            group["unanswered_calls"] = {r.run_id: dict(r.unanswered) for r in g.runs}
        data.append(group)
    extra = (
        {
            "tables": [
                {
                    "id": t.id,
                    **({"part": t.part} if t.part else {}),
                    "title": t.title,
                    "headers": t.headers,
                    "rows": [[json_cell(c) for c in r] for r in t.at().rows],
                }
                for t in tables
            ]
        }
        if tables
        else {}
    )
    return json.dumps({"json_format": JSON_FORMAT, "groups": data, **extra}, ensure_ascii=False, indent=1)
