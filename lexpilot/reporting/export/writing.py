"""Where an export's files go and how they are written: the output folder checked before anything is read, each file
replaced whole (`files.write_atomic`: a kill leaves the previous file or the new one, never a part) and only when its
bytes changed, so that a rerun over unchanged runs rewrites nothing; and the bad inputs refused before any file is
written (a record file whose last line was torn, a run with nothing to export)."""

from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lexpilot.errors import UsageError
from lexpilot.files import storage_error, write_atomic
from lexpilot.reporting.export.ledger import LEDGER


@dataclass
class Written:
    """What an export did to its files."""

    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)

    def line(self, folder: Path) -> str:
        return f"{len(self.written)} written, {len(self.unchanged)} unchanged under {folder}"


def check_output(folder: Path) -> None:
    """The output folder is a folder or can be made, and takes a file; else one line. Nothing is made here: the
    folder is made by the first file written into it, so a refused export leaves no empty folder behind. Checked by
    making (and removing) a temporary file in the folder or, where it is missing, in its nearest existing parent."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--output {folder} is a file, not a folder: name a folder (it is made if missing)")
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{existing} is a file")
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".export-check-"):
            pass
    except OSError as e:
        raise UsageError(
            f"--output {folder} is not writable ({(e.strerror or str(e)).lower()}): name another folder"
        ) from None


def write_if_changed(path: Path, data: bytes, written: Written) -> None:
    """The file replaced whole when its bytes differ from what is there."""
    if same_bytes(path, data):
        written.unchanged.append(path)
        return
    write_atomic(path, data)
    written.written.append(path)


def write_run(output: Path, files: dict[str, bytes], written: Written, vouched: bool) -> None:
    """A run's files, each replaced whole where it changed, in the order given. `vouched`: the last file states the
    checksum of the others (an EEE aggregate of its instance records), and an instance file without its aggregate is
    no EEE datastore's (--verify refuses it); so when another changes, every changed file is first staged in the
    ledger's folder, and only then the aggregate removed and the staged files moved in, the aggregate last. A kill
    leaves the run's previous files, or (between two renames) its new instance records alone, which --verify names;
    never an aggregate whose instance records are not the ones it states."""
    *others, last = files
    changed = [name for name in others if not same_bytes(output / name, files[name])]
    if not (vouched and changed):
        for name in files:
            write_if_changed(output / name, files[name], written)
        return
    staged = {name: output / LEDGER / "staged" / name for name in (*changed, last)}
    for name, path in staged.items():
        write_atomic(path, files[name])
    try:
        (output / last).unlink(missing_ok=True)
        for name, path in staged.items():
            (output / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, output / name)
    except OSError as e:
        raise storage_error(e, output / last) from None
    written.written += [output / name for name in staged]
    written.unchanged += [output / name for name in others if name not in staged]


def same_bytes(path: Path, data: bytes) -> bool:
    try:
        return path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def torn_tail(path: Path) -> bool:
    """Whether a record file's last line was torn by an interrupted write: bytes after the last newline, or a last
    line that is not JSON. Read from the end, so that a pass over a grid's files costs little."""
    import json

    size = path.stat().st_size
    if size == 0:
        return False
    with path.open("rb") as f:
        chunk, start = b"", size
        while start > 0 and chunk.count(b"\n") < 2:
            start = max(0, start - 65536)
            f.seek(start)
            chunk = f.read(size - start)
    if not chunk.endswith(b"\n"):
        return True
    last = chunk[:-1].rsplit(b"\n", 1)[-1]
    try:
        json.loads(last.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return True
    return False


def refuse_torn(paths: list[Path]) -> None:
    """One line for the first record file whose last line was torn."""
    for path in paths:
        if path.is_file() and torn_tail(path):
            raise UsageError(
                f"{path}: the last line was torn by an interrupted write; rerun that stage with the same --run-id "
                "to finish it (the torn case is redone), then export"
            )


def relative(path: Path, folder: Path) -> str:
    return os.path.relpath(path, folder)
