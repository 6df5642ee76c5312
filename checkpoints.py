"""What a run keeps on disk: the checkpoint files (one synced JSONL record per case and step), the call
journal of replies paid within an unfinished step, the run manifest with the settings that decide the
results, and the lock that allows one writer per run and model.

Layout under the output root (record files: see records.RecordKind):
    runs/<run-id>/<model>/manifest.json, calls_journal.jsonl, .lock
"""
from __future__ import annotations

import ast
import errno
import hashlib
import json
import os
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path

from config import Settings
from dataset import Case
from errors import FatalError, HarnessError
from common import PROMPT_DIR, prompt_files_used
from records import ROLES, SCHEMA_VERSION, RecordKind, canonical_hash, model_folder, read_records

HERE = Path(__file__).resolve().parent


def run_folder(root: Path, run_id: str, model: str) -> Path:
    return root / "runs" / run_id / model_folder(model)


def manifest_path(root: Path, run_id: str, model: str) -> Path:
    return run_folder(root, run_id, model) / "manifest.json"


def journal_path(root: Path, run_id: str, model: str) -> Path:
    return run_folder(root, run_id, model) / "calls_journal.jsonl"


def checkpoint_path(root: Path, run_id: str, model: str, kind: RecordKind) -> Path:
    return kind.path(root, run_id, model_folder(model))


def read_checkpoint(path: Path, kind: RecordKind, cases: dict[str, Case], what_to_do: str,
                    notes: list, repair: bool = True) -> dict[str, tuple[int, dict]]:
    """case_number -> (line, record); a malformed, foreign or stale line is an error, never skipped; a torn
    last line (a crash) is set aside and its case redone, said in `notes`."""
    return read_records(path, kind, {n: c.input_hash for n, c in cases.items()}, what_to_do, repair=repair,
                        notes=notes)


class StorageError(FatalError):
    """Writing to the output root failed (a full disk, a read-only folder): the stage stops."""


def storage_error(error: OSError, path: Path) -> StorageError:
    what = "no space left on device" if error.errno == errno.ENOSPC else (error.strerror or str(error)).lower()
    return StorageError(f"{what} writing {path}; every completed record is kept. Free the space or fix the "
                        "folder, then rerun the same command")


class CheckpointWriter:
    """Appends one record per line; each line is flushed and synced before the case is reported done.
    A file whose last line lost its newline (a crash) gets one before the first append, so no record is
    ever glued onto a fragment."""

    def __init__(self):
        self.lock = threading.Lock()
        self.files = {}

    def append(self, path: Path, record: dict, sync: bool = True) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        with self.lock:
            try:
                f = self.files.get(path)
                if f is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    f = self.files[path] = path.open("ab")
                    if f.tell() > 0 and _last_byte(path) != b"\n":
                        f.write(b"\n")
                f.write(line)
                f.flush()
                if sync:  # the journal is a cache: a line lost in a machine crash only costs that call again
                    os.fsync(f.fileno())
            except OSError as e:
                raise storage_error(e, path) from None

    def close(self) -> None:
        with self.lock:
            for path, f in self.files.items():
                try:
                    f.close()
                except OSError:
                    pass  # every line was flushed when written; what failed then was reported then
            self.files.clear()


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1)


def _journal_lines(path: Path):
    """(raw line, entry or None when unreadable) of a journal file."""
    with path.open("rb") as f:
        for raw in f:
            try:
                entry = json.loads(raw.decode("utf-8"))
                yield raw, entry if isinstance(entry, dict) else None
            except (UnicodeDecodeError, ValueError, RecursionError):
                yield raw, None


class CallJournal:
    """Every accepted reply of an unfinished step, so that a rerun replays it instead of paying again; and
    every call as it starts and ends, so that calls in flight when a process was killed (paid, never
    answered) are counted.

    A step's record is written only when all its calls succeeded; without the journal, a failure in the
    last call of a step (the underspecified a1 response, round 3 of an interaction) would throw away the
    paid replies before it. Replies are replayed per (case, step, role, prompt) in the order they were
    made, which follows the protocol path exactly because each prompt contains the replies before it.
    Calls started but never ended are added up per role in `unanswered_calls.json` beside the journal
    when it is read, and their lines dropped.
    """

    def __init__(self, path: Path, writer: CheckpointWriter, wanted: set[tuple[str, str]]):
        self.path, self.writer = path, writer
        self.replies: dict[tuple, deque] = {}
        self.lock = threading.Lock()
        self.unreadable = 0
        self.unanswered: dict[str, int] = {}
        if not path.exists():
            return
        started, ended, kept = {}, set(), []
        for raw, e in _journal_lines(path):
            try:
                if e is not None and e.get("t") == "start":
                    started[e["id"]] = e["role"]
                    continue
                if e is not None and e.get("t") == "end":
                    ended.add(e["id"])
                    continue
                key = (e["case_number"], e["step"], e["key"])
                entry = (e["reply"], e["usage"])
            except (KeyError, TypeError):
                self.unreadable += 1  # a line torn by a crash: that call is simply made again
                continue
            kept.append(raw if raw.endswith(b"\n") else raw + b"\n")
            if key[:2] in wanted:
                self.replies.setdefault(key, deque()).append(entry)
        for call_id, role in started.items():
            if call_id not in ended:
                self.unanswered[role] = self.unanswered.get(role, 0) + 1
        if started or self.unreadable:
            if self.unanswered:
                add_unanswered(path.with_name("unanswered_calls.json"), self.unanswered)
            _replace(path, b"".join(kept))

    @staticmethod
    def key(role: str, prompt) -> str:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(f"{role}\0{text}".encode()).hexdigest()[:24]

    def take(self, case_number: str, step: str, role: str, prompt) -> tuple[str, dict] | None:
        with self.lock:
            queue = self.replies.get((case_number, step, self.key(role, prompt)))
            return queue.popleft() if queue else None

    def keep(self, case_number: str, step: str, role: str, prompt, reply: str, usage: dict) -> None:
        self.keep_key(case_number, step, self.key(role, prompt), reply, usage)

    def keep_key(self, case_number: str, step: str, key: str, reply: str, usage: dict,
                 custom_id: str | None = None, sync: bool = False) -> None:
        entry = {"case_number": case_number, "step": step, "key": key, "reply": reply, "usage": usage}
        if custom_id:  # a reply collected from a batch: imported once, whatever happens during the import
            entry["custom_id"] = custom_id
        self.writer.append(self.path, entry, sync=sync)

    @staticmethod
    def custom_ids(path: Path) -> set[str]:
        """The batch requests whose replies the journal already holds."""
        if not path.exists():
            return set()
        return {e["custom_id"] for _, e in _journal_lines(path) if e is not None and isinstance(e.get("custom_id"), str)}

    def started(self, role: str) -> str:
        """Note a call about to be sent; returns its id for `ended`. Not synced: a killed process's writes
        still reach the file (only a machine crash could lose the mark)."""
        call_id = uuid.uuid4().hex[:16]
        self.writer.append(self.path, {"t": "start", "id": call_id, "role": role}, sync=False)
        return call_id

    def ended(self, call_id: str) -> None:
        self.writer.append(self.path, {"t": "end", "id": call_id}, sync=False)

    def compact(self, saved: dict[str, dict]) -> None:
        """Drop the replies of steps whose record is saved now (`saved`: step -> case_number -> record) and
        the start and end marks of finished calls; the file goes when nothing is left. Other stages' steps
        are kept."""
        if not self.path.exists():
            return
        kept = []
        for raw, e in _journal_lines(self.path):
            try:
                if e is None or e.get("t") in ("start", "end"):
                    continue  # torn lines were counted when read; marks of this process's calls are done
                if not (e["step"] in saved and e["case_number"] in saved[e["step"]]):
                    kept.append(raw if raw.endswith(b"\n") else raw + b"\n")
            except (KeyError, TypeError):
                continue
        if not kept:
            self.path.unlink()
            return
        _replace(self.path, b"".join(kept))


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        raise storage_error(e, path) from None


def add_unanswered(path: Path, calls: dict[str, int]) -> None:
    """Add calls paid but never answered (in flight when a process died) to the run's tally."""
    total = read_unanswered(path)
    for role, n in calls.items():
        total[role] = total.get(role, 0) + n
    _replace(path, json.dumps(total).encode("utf-8"))


def read_unanswered(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {r: n for r, n in data.items() if isinstance(n, int)} if isinstance(data, dict) else {}


COMPARED_MANIFEST_FIELDS = ("dataset_sha256", "selected_cases", "code_hash", "prompt_hash",
                            "models", "generation", "user_condition", "rejudged_from")


def code_files(start: str) -> list[Path]:
    """The project's modules `start` imports, directly or through others, and itself: the code that
    decides what a run produces (found from the import statements, so no list is kept by hand)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        path = HERE / f"{name}.py"
        if name in seen or not path.exists():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                todo += [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                todo.append(node.module.split(".")[0])
    return sorted(HERE / f"{name}.py" for name in seen)


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()[:16]


def code_hash(start: str = "runner") -> str:
    return _digest(code_files(start))


def prompt_hashes(condition: str) -> tuple[str, dict[str, str]]:
    """The hash of the prompts a run of this condition sends, and each file's own hash."""
    paths = [PROMPT_DIR / name for name in prompt_files_used(condition)]
    return _digest(paths), {p.name: hashlib.sha256(p.read_bytes().replace(b"\r\n", b"\n")).hexdigest()[:16]
                            for p in paths}


# Manifests written before they listed each prompt file's hash (up to commit b1ddf54) hashed all ten prompt
# files together; this is what each file held then, so such a run is compared on the prompts it uses.
LEGACY_PROMPT_SETS = {"ed0912c173dde14c": {
    "dcg_force_ask.txt": "e7110e6bd24558ec", "force_judge.txt": "00b732d489ffef92",
    "judge_dcg.txt": "a63f915dfd185b30", "judge_lca.txt": "9132ef54552e082f",
    "judge_ljp_extract.txt": "def1bfdab21e6c47", "lexawn.txt": "e84776b5dad5a374",
    "user_correction.txt": "8df7a24b819dabef", "user_delayed.txt": "fb05dda110120af5",
    "user_self_correction.txt": "45f7c615ce7e32c8", "user_standard.txt": "ebd9b5bb8ecf57b8"}}


def package_versions() -> dict[str, str]:
    from importlib import metadata
    versions = {"python": sys.version.split()[0]}
    for package in ("openai", "numpy", "scikit-learn"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def generation_settings(settings: Settings) -> dict:
    """What is sent with every request. A temperature left to the provider is "default"; a role's output
    limit appears on its own only where it differs from --max-tokens (so earlier manifests still match)."""
    roles = settings.roles
    temperature = {name: "default" if r.temperature is None else r.temperature for name, r in roles.items()}
    generation = {"temperature": temperature["eval"], "user_temperature": temperature["user"],
                  "judge_temperature": temperature["judge"], "max_tokens": roles["eval"].max_tokens, "n": 1}
    for name in ("user", "judge"):
        if roles[name].max_tokens != roles["eval"].max_tokens:
            generation[f"{name}_max_tokens"] = roles[name].max_tokens
    return generation


def build_manifest(settings: Settings, dataset_sha256: str, selected: list[Case]) -> dict:
    prompt_hash, prompt_files = prompt_hashes(settings.user_condition)
    roles = settings.roles
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": settings.run_id,
        "dataset_sha256": dataset_sha256,
        "dataset_path": str(settings.dataset),
        "selected_cases": [c.number for c in selected],
        "code_hash": code_hash(),
        "prompt_hash": prompt_hash,
        "prompt_files": prompt_files,
        "models": {r: {"model": roles[r].model, "endpoint_host": roles[r].host} for r in ROLES},
        "generation": generation_settings(settings),
        "user_condition": settings.user_condition,
        **({"rejudged_from": settings.source_run} if settings.source_run else {}),
        "package_versions": package_versions(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def compared_setting(manifest: dict, name: str):
    """A compared field as it decides results: an endpoint's port does not (a local server restarted on
    another port is the same model), so hosts are compared without it; prompts are compared file by file,
    on the files the run's user condition sends."""
    value = manifest.get(name)
    if name == "prompt_hash":
        files = manifest.get("prompt_files") or LEGACY_PROMPT_SETS.get(value)
        if not isinstance(files, dict):
            return value
        used = set(prompt_files_used(str(manifest.get("user_condition", "standard"))))
        return {file: digest for file, digest in files.items() if file in used}
    if name == "models" and isinstance(value, dict):
        return {role: {**m, "endpoint_host": str(m.get("endpoint_host", "")).rsplit(":", 1)[0]
                       if str(m.get("endpoint_host", "")).count(":") == 1 else m.get("endpoint_host")}
                if isinstance(m, dict) else m for role, m in value.items()}
    return value


def _leaves(value, prefix: str) -> dict[str, object]:
    if isinstance(value, dict) and value:
        return {k: v for key, sub in value.items() for k, v in _leaves(sub, f"{prefix}.{key}").items()}
    return {prefix: value}


def manifest_differences(saved: dict, current: dict) -> list[str]:
    """Each compared setting that differs, as 'field: run X, now Y' (nested fields by their dotted path)."""
    differences = []
    for name in COMPARED_MANIFEST_FIELDS:
        before, now = compared_setting(saved, name), compared_setting(current, name)
        if name == "prompt_hash" and isinstance(before, dict) and isinstance(now, dict):
            # a prompt file added since the run started was never used by it: only shared files must match
            before, now = ({f: h for f, h in d.items() if f in before and f in now} for d in (before, now))
        if before == now:
            continue
        if name == "selected_cases":
            differences.append(f"selected_cases: run {len(before or [])} cases, now {len(now or [])} "
                               "(same --dataset and --limit)")
            continue
        a, b = _leaves(before, name), _leaves(now, name)
        differences += [f"{key}: run {a.get(key, 'absent')}, now {b.get(key, 'absent')}"
                        for key in list(dict.fromkeys([*a, *b])) if a.get(key) != b.get(key)]
    return differences


# The settings every record carries a hash of: what decides a record's content, apart from the code
# (which an upgrade may change) and the case selection (which the records themselves show).
SETTINGS_IN_RECORDS = ("dataset_sha256", "prompt_hash", "models", "generation", "user_condition")


def settings_hash(manifest: dict) -> str:
    return canonical_hash({name: compared_setting(manifest, name) for name in SETTINGS_IN_RECORDS})


def saved_settings(paths: list[Path]) -> set[str | None]:
    """The settings hashes of the records saved in these files (None for a record made before records
    carried one); a line that cannot be read says nothing about settings and is skipped here."""
    found: set[str | None] = set()
    for path in paths:
        if not path.is_file():
            continue
        with path.open("rb") as f:
            for line in f:
                try:
                    record = json.loads(line)
                    found.add(record.get("settings_hash") if isinstance(record, dict) else None)
                except (ValueError, RecursionError):
                    continue
    return found


def check_manifest(path: Path, current: dict, write: bool, allow_code_change: bool = False,
                   record_files: list[Path] = ()) -> str | None:
    """Stop before any call when the run's saved settings differ; write the manifest on first use.

    Harness code that changed since the run started (an upgrade) is accepted with `allow_code_change`,
    and the new code hash is added to the manifest's `code_hashes_resumed_with`. A manifest that is gone
    while records of the run remain is rebuilt when every record was made with the current settings, and
    refused otherwise; the note returned says so."""
    if not path.exists():
        found = saved_settings(list(record_files))
        if found and found != {settings_hash(current)}:
            raise HarnessError(f"{path}: the run's manifest is missing and its saved records were made with other "
                               "settings (or by a harness that did not record them). Restore the manifest with "
                               "the run's settings, or use a new --run-id.")
        if found and write:
            _write_json(path, {**current, "rebuilt_from_records": True})
            return f"{path} was missing: rebuilt, since every saved record was made with these settings"
        if write:
            _write_json(path, current)
        return None
    if path.exists():
        saved = read_manifest(path)
        differing = manifest_differences(saved, current)
        if saved.get("user_condition") != current.get("user_condition"):
            raise HarnessError(f"{path}: this run's user condition is {saved.get('user_condition')!r}, not "
                               f"{current.get('user_condition')!r}. Pass --user-condition "
                               f"{saved.get('user_condition')} (LexAwN_gen.py and eval_LJP_interaction.py take it; "
                               "the other stages belong to standard runs), or use a new --run-id.")
        code_changed = [d for d in differing if d.startswith("code_hash:")]
        if code_changed and allow_code_change and len(differing) == 1:
            resumed = saved.setdefault("code_hashes_resumed_with", [])
            if current["code_hash"] not in resumed:
                resumed.append(current["code_hash"])
                if write:
                    _write_json(path, saved)
            return None
        if differing:
            hint = (" If the harness was upgraded and the change does not alter results, add --allow-code-change "
                    "(recorded in the manifest);" if code_changed else "")
            raise HarnessError(f"{path}: this run was started with other settings ({'; '.join(differing)}).{hint} "
                               "Rerun with the run's settings, or use a new --run-id.")
    return None


def record_transport(path: Path, token_fields: dict) -> None:
    """Note in the manifest the output-limit field each role's endpoint takes (not a compared setting)."""
    manifest = read_manifest(path)
    manifest["token_fields"] = token_fields
    _write_json(path, manifest)


def read_manifest(path: Path) -> dict:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:
        raise HarnessError(f"{path}: unreadable manifest ({' '.join(str(e).split())[:120]}). "
                           "Restore it or use a new --run-id.") from None
    if not isinstance(saved, dict):
        raise HarnessError(f"{path}: the manifest is not a JSON object. Restore it or use a new --run-id.")
    return saved


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


class RunLock:
    """One writer per run and model; the OS releases the lock when its process dies."""

    def __init__(self, path: Path):
        self.path = path
        self.file = None

    def __enter__(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("a+")
        except IsADirectoryError:
            raise HarnessError(f"{self.path}: the run's lock file is a folder; remove it, then rerun") from None
        except OSError as e:
            raise storage_error(e, self.path) from None
        try:
            if os.name == "nt":
                import msvcrt
                msvcrt.locking(self.file.fileno(), msvcrt.LK_NBLCK, 1)
            else:
                import fcntl
                fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise HarnessError(f"{self.path}: this run and model are being written by {holder}. "
                               "Wait for it to finish; do not run two writers on one run id.") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()}")
        self.file.flush()
        return self

    def __exit__(self, *exc):
        self.file.close()
