"""Files the harness writes whole and files people fill: a file the harness replaces in place (the manifest,
the batch ledger, a compacted journal, the tally of unanswered calls, a batch input file, a sheet) is written through
`write_atomic` (a temporary file, then a rename, so a reader never sees half a file; a failed write is a
`StorageError` naming the file); the CSV sheets for people (UTF-8 with a BOM; every cell safe from spreadsheet
formulas) are written and read back here. Reports written once for people (the viewer's pages) are plain writes."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import stat
from pathlib import Path

from lexpilot.errors import FatalError, HarnessError


class StorageError(FatalError):
    """Writing to the output root failed (a full disk, a read-only folder): the stage stops."""


def storage_error(error: OSError, path: Path) -> StorageError:
    what = (
        "no space left on device" if error.errno == errno.ENOSPC else (error.strerror or str(error)).lower()
    )
    return StorageError(
        f"{what} writing {path}; every completed record is kept. Free the space or fix the "
        "folder, then rerun the same command"
    )


def write_atomic(path: Path, data: bytes) -> None:
    """Replace a file's content whole: a reader (or a crash) sees the old content or the new, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        raise storage_error(e, path) from None


def write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


# a signed number is a number, not a formula
NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?%?", re.I)


def spreadsheet_safe(cell) -> str:
    """A CSV cell a spreadsheet shows as text, never runs as a formula: one apostrophe is put before a cell
    that starts with = + - @ a tab, a carriage return or an apostrophe (not a number, nor a lone "-"). To recover the original text,
    remove the first character of every cell that starts with an apostrophe (`spreadsheet_text`)."""
    text = str(cell)
    # a number, and a lone dash (an empty cell's mark), are no formula
    return (
        "'" + text if text.startswith(FORMULA_START) and not NUMBER.fullmatch(text) and text != "-" else text
    )


def spreadsheet_text(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


SHEET_CELL_LIMIT = 32_000  # spreadsheet programs hold at most 32,767 characters in a cell


def fits_a_cell(text: str, where_full: str) -> str:
    """A cell for a sheet people open: a text over SHEET_CELL_LIMIT is cut, with a marker saying where the whole
    text is."""
    if len(text) <= SHEET_CELL_LIMIT:
        return text
    marker = f"\n…[cut here: {len(text) - SHEET_CELL_LIMIT + 200:,} more characters; the whole text is in {where_full}]"
    return text[: SHEET_CELL_LIMIT - 200] + marker


def write_sheet(path: Path, columns: list[str], rows: list[dict]) -> None:
    """A CSV sheet for people (UTF-8 with a BOM, which spreadsheet programs need), every cell spreadsheet_safe;
    written whole, so a Ctrl-C or a full disk never leaves half a sheet."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows({k: spreadsheet_safe(v) for k, v in row.items()} for row in rows)
    try:
        write_atomic(path, text.getvalue().encode("utf-8-sig"))
    except StorageError as e:
        raise HarnessError(
            f"{path}: cannot be written ({str(e).split(' writing ')[0]}); pass --out a file in a "
            "writable folder"
        ) from None


def read_sheet(path: Path, columns: list[str]) -> list[tuple[int, dict]]:
    """(row number as a spreadsheet shows it, row) of a sheet the harness wrote and people filled, cells as
    they were before spreadsheet_safe; a missing column, a folder, invalid UTF-8 or broken CSV in one line."""
    if not path.is_file():
        raise HarnessError(f"{path}: {'is a folder, not the CSV file' if path.is_dir() else 'not found'}")
    rows: list[tuple[int, dict]] = []  # the header is row 1
    try:
        check_input(path)
        csv.field_size_limit(MAX_INPUT_BYTES)  # a cell the harness wrote may be as long as any reply
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise HarnessError(
                    f"{path}: columns missing: {', '.join(missing)}. Use the file that export wrote."
                )
            for number, row in enumerate(reader, 2):
                rows.append((number, {k: spreadsheet_text(v or "") for k, v in row.items() if k}))
            return rows
    except UnicodeDecodeError as e:
        raise HarnessError(
            f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); save it as CSV UTF-8"
        ) from None
    except csv.Error as e:
        raise HarnessError(f"{path}: row {len(rows) + 2}: unreadable CSV ({e})") from None


def key_file(sheet: Path) -> Path:
    """Where the key of a blind sheet for people goes (what the sheet must not show): beside it, as .key.csv."""
    return sheet.with_name(sheet.stem + ".key.csv")


MAX_INPUT_BYTES = 1 << 30  # 1 GiB: far above any LexPilot file (the release is a few MB; a record file tens)


def input_problem(path: Path) -> str | None:
    """Why a file the harness reads (a dataset, a record file, a sheet, a price file) cannot be read, or None:
    a folder, a device or a FIFO (which would never end, or block), or a file over MAX_INPUT_BYTES."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None  # each reader says what a missing file means for it
    except OSError as e:
        return f"{path}: cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(info.st_mode):
        return f"{path}: is a folder, not a file"
    if not stat.S_ISREG(info.st_mode):
        return f"{path}: not a regular file (a device, a FIFO or a socket); pass a file"
    if info.st_size > MAX_INPUT_BYTES:
        return f"{path}: {info.st_size:,} bytes, over the harness's limit of {MAX_INPUT_BYTES:,} for an input file"
    return None


def check_input(path: Path) -> None:
    problem = input_problem(path)
    if problem:
        raise HarnessError(problem)
