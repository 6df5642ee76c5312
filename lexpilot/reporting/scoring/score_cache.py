"""A cache of scored runs, so that a second report of unchanged runs does not parse and digest-check every record
again: one file per run, kept outside the output root (in the user's cache folder), keyed by the digest of every
file the run's scoring reads (each read whole, so a changed byte is a changed key, whatever its size or time),
the dataset's inputs it was checked against, and the reporting code. A key that differs is a miss: the run is
scored from its records and the entry replaced. Entries are signed with a key only this user can read, so an entry
copied from elsewhere is never loaded (a pickle runs code). LEXPILOT_CACHE=off turns the cache off;
LEXPILOT_CACHE=DIR puts it in DIR. An entry neither read nor written for 30 days is removed, so the cache does
not grow with every output root ever reported (a benchmark's temporary roots included).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import pickle
import secrets
import time
from pathlib import Path

from lexpilot.benchmark.records import RECORD_KINDS
from lexpilot.reporting.scoring.runs import Run

PACKAGE = Path(__file__).resolve().parents[2]  # lexpilot/: scoring is a function of its code too
UNUSED_FOR = 30 * 24 * 3600  # seconds: an entry neither read nor written for this long is removed


def file_digest(path: Path) -> bytes:
    """A file's BLAKE2b digest, read in blocks (hashlib.file_digest is Python 3.11's; the harness runs on 3.10)."""
    h = hashlib.blake2b()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def cache_folder() -> Path | None:
    setting = os.environ.get("LEXPILOT_CACHE", "")
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lexpilot" / "scores"


def signing_key(folder: Path) -> bytes:
    """This user's key (created on first use, readable by the user only)."""
    path = folder / "key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        folder.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as f:
            f.write(key)
        return key


def run_key(run: Run, root: Path) -> str:
    """The digest of everything a run's score depends on: every file in its folders, read whole, its inputs'
    hashes and the package's code."""
    h = hashlib.blake2b(digest_size=32)
    folders = sorted(
        {kind.path(root, run.run_id, run.folder).parent for kind in RECORD_KINDS}
        | {root / "runs" / run.run_id / run.folder}
    )
    for folder in folders:
        for path in sorted(folder.glob("*")) if folder.is_dir() else ():
            if path.is_file():
                h.update(str(path.relative_to(root)).encode() + b"\0")
                h.update(file_digest(path))
    h.update(json.dumps(run.input_hashes, sort_keys=True).encode())
    h.update(code_digest())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest() -> bytes:
    """The package's code, read once per process (a pure function of the files for the report's duration)."""
    h = hashlib.blake2b(digest_size=32)
    for source in sorted(PACKAGE.rglob("*.py")):
        h.update(str(source.relative_to(PACKAGE)).encode() + b"\0" + source.read_bytes())
    return h.digest()


def entry_path(folder: Path, root: Path, run: Run) -> Path:
    name = hashlib.sha256(f"{root.resolve()}\0{run.run_id}\0{run.folder}".encode()).hexdigest()[:32]
    return folder / f"{name}.pickle"


def cached_score(run: Run, root: Path, key: str) -> Run | None:
    """The run as scored before under this key, or None (no entry, another key, a bad signature)."""
    folder = cache_folder()
    if folder is None:
        return None
    try:
        data = entry_path(folder, root, run).read_bytes()
        signature, body = data[:32], data[32:]
        if not hmac.compare_digest(signature, hmac.digest(signing_key(folder), body, "sha256")):
            return None
        stored_key, scored = pickle.loads(body)
    # ImportError, AttributeError: written by code whose classes have moved since (a miss too)
    except (OSError, ValueError, pickle.UnpicklingError, EOFError, TypeError, ImportError, AttributeError):
        return None
    if stored_key != key:
        return None
    try:
        os.utime(entry_path(folder, root, run))  # read: in use, kept by the pruning
    except OSError:
        pass
    return scored


@functools.lru_cache(maxsize=None)
def pruned(folder: Path) -> None:
    """The entries unused for UNUSED_FOR removed, once per process and folder (what cannot be removed stays)."""
    cutoff = time.time() - UNUSED_FOR
    for path in folder.glob("*.pickle"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass


def store_score(run: Run, root: Path, key: str) -> None:
    """Keep the scored run (never its records); a cache that cannot be written is no error: the report goes on."""
    folder = cache_folder()
    if folder is None or run.saved is not None:
        return
    pruned(folder)
    try:
        body = pickle.dumps((key, run), protocol=pickle.HIGHEST_PROTOCOL)
        path = entry_path(folder, root, run)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(hmac.digest(signing_key(folder), body, "sha256") + body)
        os.replace(tmp, path)
    except OSError:
        pass
