"""The renderings of tables for people: text, Markdown, LaTeX and CSV, and the CSV sheets the harness writes
for people to fill (UTF-8 with a BOM; every cell safe from spreadsheet formulas) and reads back.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from errors import HarnessError
from tables import Table

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
        esc = lambda c: c.replace("|", "\\|")  # noqa: E731
        out += [f"### {t.title}", "", "| " + " | ".join(map(esc, t.headers)) + " |",
                "|" + "|".join("---" for _ in t.headers) + "|"]
        out += ["| " + " | ".join(map(esc, r)) + " |" for r in t.rows] + [""]
    return "\n".join(out)


def render_latex(tables: list[Table]) -> str:
    def esc(text: str) -> str:
        for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("#", r"\#"), ("_", r"\_"),
                     ("±", r"$\pm$"), ("−", "--")):
            text = text.replace(a, b)
        return text
    out = []
    for t in tables:
        out += [f"% {esc(t.title)}", r"\begin{tabular}{l" + "c" * (len(t.headers) - 1) + "}", r"\toprule",
                " & ".join(map(esc, t.headers)) + r" \\", r"\midrule"]
        out += [" & ".join(map(esc, r)) + r" \\" for r in t.rows] + [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def spreadsheet_safe(cell) -> str:
    """A CSV cell a spreadsheet shows as text, never runs as a formula: one apostrophe is put before a cell
    that starts with = + - @ a tab, a carriage return or an apostrophe. To recover the original text,
    remove the first character of every cell that starts with an apostrophe (`spreadsheet_text`)."""
    text = str(cell)
    return "'" + text if text.startswith(FORMULA_START) else text


def spreadsheet_text(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


def write_sheet(path: Path, columns: list[str], rows: list[dict]) -> None:
    """A CSV sheet for people (UTF-8 with a BOM, which spreadsheet programs need), every cell spreadsheet_safe."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8-sig", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows({k: spreadsheet_safe(v) for k, v in row.items()} for row in rows)
    except OSError as e:
        raise HarnessError(f"{path}: cannot be written ({e.strerror or e}); pass --out a file in a writable "
                           "folder") from None


def read_sheet(path: Path, columns: list[str]) -> list[tuple[int, dict]]:
    """(row number as a spreadsheet shows it, row) of a sheet the harness wrote and people filled, cells as
    they were before spreadsheet_safe; a missing column, a folder, invalid UTF-8 or broken CSV in one line."""
    if not path.is_file():
        raise HarnessError(f"{path}: {'is a folder, not the CSV file' if path.is_dir() else 'not found'}")
    rows: list[tuple[int, dict]] = []  # the header is row 1
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise HarnessError(f"{path}: columns missing: {', '.join(missing)}. Use the file that export wrote.")
            for number, row in enumerate(reader, 2):
                rows.append((number, {k: spreadsheet_text(v or "") for k, v in row.items() if k}))
            return rows
    except UnicodeDecodeError as e:
        raise HarnessError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); save it as CSV UTF-8") from None
    except csv.Error as e:
        raise HarnessError(f"{path}: row {len(rows) + 2}: unreadable CSV ({e})") from None


def render_csv(tables: list[Table]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["table", "row"] + [f"col{i}" for i in range(1, max(len(t.headers) for t in tables))])
    for t in tables:
        writer.writerow(map(spreadsheet_safe, [t.title, "header"] + t.headers[1:]))
        for r in t.rows:
            writer.writerow(map(spreadsheet_safe, [t.title, r[0]] + r[1:]))
    return buffer.getvalue()
