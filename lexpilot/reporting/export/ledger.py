"""The export's ledger: what each run's files were made from, so that a rerun skips a run nothing of which changed
without reading one of its records. One small JSON file per run and format beside the export,
`.lexpilot-export/<format>/<run id>/<model folder>.json`, holding the digest of the run's sources (every file of
its folders read whole and its inputs' hashes, as the score cache digests them, with the harness's code; the
verdict files' times, which the aggregate's timestamps are; the run's group label; the release's and the shipped
prompts' digests, which its protocol is compared with; the bootstrap's settings; the
format package's version) and the size and modification time of each file as written.

A run is skipped when its digest is the ledger's and every file it lists is there as written (a file edited or
removed by hand is made again). The entry is written last, after the run's files, and atomically: a kill before it
leaves the old entry, whose digest or files no longer match, so the rerun makes the run again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from lexpilot.benchmark.records import model_folder
from lexpilot.files import write_atomic
from lexpilot.reporting.export.provenance import protocol_reference
from lexpilot.reporting.export.stages import STAGES
from lexpilot.reporting.scoring.runs import Run
from lexpilot.reporting.scoring.score_cache import run_key
from lexpilot.reporting.statistics.bootstrap import Bootstrap

LEDGER = ".lexpilot-export"  # under the export's folder; no reader of either format looks there


@dataclass(frozen=True)
class Sources:
    """One run's entry in one format's ledger: where it is kept and the digest of what its files are made from."""

    path: Path
    digest: str


def sources(
    run: Run, root: Path, output: Path, label: str, fmt: str, package: str, boot: Bootstrap
) -> Sources:
    h = hashlib.blake2b(run_key(run, root).encode(), digest_size=32)
    for stage in STAGES:
        verdicts = stage.verdicts.path(root, run.run_id, run.folder)
        h.update(str(verdicts.stat().st_mtime_ns if verdicts.is_file() else None).encode() + b"\0")
    # what the run is compared with to say whether it keeps the paper's protocol (the release, the shipped prompts)
    reference = protocol_reference(run.manifest.user_condition)
    h.update(
        json.dumps([label, fmt, metadata.version(package), boot.resamples, boot.seed, reference]).encode()
    )
    return Sources(entry_path(output, fmt, run), h.hexdigest())


def entry_path(output: Path, fmt: str, run: Run) -> Path:
    return output / LEDGER / fmt / run.run_id / f"{model_folder(run.model)}.json"


def signature(path: Path) -> list[int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return [found.st_size, found.st_mtime_ns]


def kept(entry: Sources) -> dict:
    """The entry as the last export left it (empty: none, or one a kill or a hand left unreadable)."""
    try:
        found = json.loads(entry.path.read_text(encoding="utf-8"))
        if isinstance(found, dict) and isinstance(found.get("files"), dict):
            return found
    except (OSError, ValueError):
        pass
    return {}


def current_files(entry: Sources, before: dict, output: Path) -> list[Path] | None:
    """The run's files when the entry kept (`before`) has the same digest and each file is there as written."""
    if before.get("sources") != entry.digest:
        return None
    files = {output / name: sig for name, sig in before["files"].items()}
    return list(files) if all(signature(path) == sig for path, sig in files.items()) else None


def remove_stale(before: dict, output: Path, names: list[str]) -> None:
    """The files the run had before and has no more (an Inspect log named by a time the records no longer have),
    removed; only inside the export, whatever the entry says."""
    for name in set(before.get("files", {})) - set(names):
        path = (output / name).resolve()
        if path.is_relative_to(output) and path.is_file() and LEDGER not in path.parts:
            path.unlink()


def dropped_entries(
    output: Path, fmt: str, exported: set[Path], chosen: Callable[[str, str], bool]
) -> list[Path]:
    """The format's ledger entries of runs this export did not write (`exported`: the entries it kept) that its
    options chose (`chosen(run id, model folder)`): a run deleted, or left with nothing to export. A run the options
    left out, exported by another command into the same folder, is not one of them."""
    return [
        path
        for path in sorted((output / LEDGER / fmt).glob("*/*.json"))
        if path not in exported and chosen(path.parent.name, path.stem)
    ]


def remove_run(entry: Path, output: Path) -> list[str]:
    """The files the entry lists, removed (the last written, an EEE aggregate, first: what is left is then an
    instance file --verify names, not an aggregate stating missing records), then the entry; only files inside the
    export and outside the ledger, whatever the entry says. Returns each file removed."""
    removed = []
    for name in reversed(list(kept(Sources(entry, "")).get("files", {}))):
        path = (output / name).resolve()
        if path.is_relative_to(output) and path.is_file() and LEDGER not in path.parts:
            path.unlink()
            removed.append(name)
    entry.unlink(missing_ok=True)
    return removed


def keep(entry: Sources, output: Path, names: list[str]) -> None:
    """The entry written once the run's files are: their names under the export, each with its size and time."""
    files = {name: signature(output / name) for name in names}
    write_atomic(entry.path, json.dumps({"sources": entry.digest, "files": files}, indent=1).encode())
