"""What a run keeps on disk, case by case: the checkpoint files (one synced JSONL record per case and step) and
the call journal of replies paid within an unfinished step, with the tally of calls paid but never answered.

Layout under the output root (record files: see lexpilot.benchmark.records.RecordKind):
    runs/<run-id>/<model>/manifest.json, calls_journal.jsonl, unanswered_calls.json, .lock
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import uuid
from collections import Counter, deque
from contextlib import contextmanager
from pathlib import Path

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.records import (
    RecordKind,
    canonical_hash,
    model_folder,
    read_records,
    record_line,
)
from lexpilot.files import check_input, storage_error, write_atomic


def run_folder(root: Path, run_id: str, model: str) -> Path:
    return root / "runs" / run_id / model_folder(model)


def manifest_path(root: Path, run_id: str, model: str) -> Path:
    return run_folder(root, run_id, model) / "manifest.json"


def journal_path(root: Path, run_id: str, model: str) -> Path:
    return run_folder(root, run_id, model) / "calls_journal.jsonl"


NOT_USED_FILE = "paid_not_used.jsonl"  # beside the journal: replies paid for that no record will count
NOT_USED = "paid for replies not used"  # how reports name them: a line of their own, beside the stage files


def checkpoint_path(root: Path, run_id: str, model: str, kind: RecordKind) -> Path:
    return kind.path(root, run_id, model_folder(model))


def read_checkpoint(
    path: Path, kind: RecordKind, cases: dict[str, Case], what_to_do: str, notes: list, repair: bool = True
) -> dict[str, tuple[int, dict]]:
    """case_number -> (line, record); a malformed, foreign or stale line is an error, never skipped; a torn
    last line (a crash) is set aside and its case redone, said in `notes`."""
    return read_records(
        path, kind, {n: c.input_hash for n, c in cases.items()}, what_to_do, repair=repair, notes=notes
    )


class CheckpointWriter:
    """Appends one record per line; each line is flushed and synced before the case is reported done.
    A file whose last line lost its newline (a crash) gets one before the first append, so no record is
    ever glued onto a fragment."""

    def __init__(self):
        self.lock = threading.Lock()
        self.files = {}

    def append(self, path: Path, record: dict, sync: bool = True) -> None:
        line = record_line(record)
        try:
            with self.lock:
                f = self.files.get(path)
                if f is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    f = self.files[path] = path.open("ab")
                    if f.tell() > 0 and _last_byte(path) != b"\n":
                        f.write(b"\n")
                f.write(line)
                f.flush()  # in the kernel now: a killed process loses nothing
                fd = f.fileno()
            # Synced outside the lock, so one file's disk wait holds back no other line. The journal is a cache:
            # a line of it lost in a machine crash only costs that call again, so it is not synced.
            if sync:
                os.fsync(fd)
        except OSError as e:
            raise storage_error(e, path) from None

    def close(self) -> None:
        with self.lock:
            for f in self.files.values():
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
    check_input(path)
    with path.open("rb") as f:
        for raw in f:
            try:
                entry = json.loads(raw.decode("utf-8"))
                yield raw, entry if isinstance(entry, dict) else None
            except (UnicodeDecodeError, ValueError, RecursionError):
                yield raw, None


def journal_usages(path: Path) -> list[dict]:
    """The usage (role -> counts) of every reply the journal keeps, readable or not as a whole: what a run's
    killed invocation paid for before its manifest was told."""
    if not path.exists():
        return []
    return [
        e["usage"]
        for _, e in _journal_lines(path)
        if e is not None and isinstance(e.get("reply"), str) and isinstance(e.get("usage"), dict)
    ]


def journal_custom_ids(path: Path) -> set[str]:
    """The custom ids of every batch reply the journal holds: requests already collected, never to be matched to a
    request the cases need now."""
    if not path.exists():
        return set()
    return {
        e["custom_id"]
        for _, e in _journal_lines(path)
        if e is not None and isinstance(e.get("custom_id"), str)
    }


def reply_digest(reply: str) -> str:
    return hashlib.sha256(reply.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def entry_digest(entry: dict) -> str:
    """A journal reply's digest, as records carry one: a reply edited by hand is never replayed."""
    return canonical_hash({k: v for k, v in entry.items() if k != "digest"})


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

    def __init__(
        self, path: Path, writer: CheckpointWriter, wanted: set[tuple[str, str]], settings: str = ""
    ):
        # `settings`: the run's settings hash; a reply is kept with it and replayed only under the same settings
        # (a manifest deleted and rebuilt at another temperature never takes the replies made at the first)
        self.path, self.writer, self.settings = path, writer, settings
        # call ids: a 48-bit random prefix (other writers' apart) and a count (atomic); a uuid each cost a syscall
        self.call_prefix, self.call_count = uuid.uuid4().hex[:12], itertools.count()
        self.replies: dict[tuple, deque] = {}
        self.taken: dict[str, list] = {}  # case -> (key, reply) taken from `replies`, in order
        self.lock = threading.Lock()
        self.unreadable = self.edited = self.other_settings = 0
        self.unanswered: dict[str, int] = {}
        if not path.exists():
            return
        started, ended, kept, queued = {}, set(), [], []
        retired: Counter[tuple] = Counter()  # (case, step, key, reply digest) -> times retired
        for raw, e in _journal_lines(path):
            try:
                if e is not None and e.get("t") == "start":
                    started[e["id"]] = e["role"]
                    continue
                if e is not None and e.get("t") == "end":
                    ended.add(e["id"])
                    continue
                if e is not None and e.get("t") == "retire":
                    retired.update((e["case_number"], e["step"], e["key"], r) for r in e["replies"])
                    kept.append(raw if raw.endswith(b"\n") else raw + b"\n")
                    continue
                key = (e["case_number"], e["step"], e["key"])
                entry = (e["reply"], e["usage"], e.get("reasoning", ""))
                if not all(isinstance(x, str) for x in (*key, e["reply"], entry[2])) or not isinstance(
                    e["usage"], dict
                ):
                    raise TypeError
            except (KeyError, TypeError):
                self.unreadable += 1  # a line torn by a crash: that call is simply made again
                continue
            if e.get("digest") != entry_digest(e):
                self.edited += 1  # changed by hand after it was saved (or its digest removed): never replayed
                continue
            kept.append(raw if raw.endswith(b"\n") else raw + b"\n")
            if key[:2] in wanted and settings and e.get("settings", settings) != settings:
                self.other_settings += 1  # made under other settings: kept on disk, never replayed here
            elif key[:2] in wanted:
                queued.append((key, entry))
        # a retired reply (its case failed on it) is never replayed: a rerun asks anew
        for key, entry in queued:
            retired_as = (*key, reply_digest(entry[0]))
            if retired[retired_as]:
                retired[retired_as] -= 1
                continue
            self.replies.setdefault(key, deque()).append(entry)
        for call_id, role in started.items():
            if call_id not in ended:
                self.unanswered[role] = self.unanswered.get(role, 0) + 1
        if started or self.unreadable or self.edited:
            if self.unanswered:
                add_unanswered(path.with_name("unanswered_calls.json"), self.unanswered)
            write_atomic(path, b"".join(kept))

    @staticmethod
    def key(role: str, prompt) -> str:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(f"{role}\0{text}".encode()).hexdigest()[:24]

    def take(self, case_number: str, step: str, role: str, prompt) -> tuple[str, dict, str] | None:
        """(reply, usage, reasoning) of the next reply the journal holds for this call, or None."""
        with self.lock:
            key = (case_number, step, self.key(role, prompt))
            queue = self.replies.get(key)
            if not queue:
                return None
            entry = queue.popleft()
            self.taken.setdefault(case_number, []).append((key, entry))
            return entry

    def rewind(self, case_number: str) -> None:
        """Put back every reply of the case taken so far: batch mode replays a case again after each reply
        bought for it synchronously, and that replay must find every earlier reply again."""
        with self.lock:
            for key, entry in reversed(self.taken.pop(case_number, [])):
                self.replies.setdefault(key, deque()).appendleft(entry)

    def add(
        self, case_number: str, step: str, key: str, reply: str, usage: dict, reasoning: str = ""
    ) -> None:
        """Keep a reply just bought and queue it for this process's replay too."""
        self.keep_key(case_number, step, key, reply, usage, reasoning=reasoning)
        with self.lock:
            self.replies.setdefault((case_number, step, key), deque()).append((reply, usage, reasoning))

    def keep(
        self, case_number: str, step: str, role: str, prompt, reply: str, usage: dict, reasoning: str = ""
    ) -> None:
        self.keep_key(case_number, step, self.key(role, prompt), reply, usage, reasoning=reasoning)

    def keep_key(
        self,
        case_number: str,
        step: str,
        key: str,
        reply: str,
        usage: dict,
        custom_id: str | None = None,
        sync: bool = False,
        reasoning: str = "",
    ) -> None:
        entry = {"case_number": case_number, "step": step, "key": key, "reply": reply, "usage": usage}
        if reasoning:  # the reasoning the record keeps (a replayed reply keeps it too)
            entry["reasoning"] = reasoning
        if self.settings:
            entry["settings"] = self.settings
        if custom_id:  # a reply collected from a batch: imported once, whatever happens during the import
            entry["custom_id"] = custom_id
        self.writer.append(self.path, {**entry, "digest": entry_digest(entry)}, sync=sync)

    def retire(self, case_number: str, step: str, role: str, prompt, replies: list[str]) -> None:
        """These replies to the prompt led the case to fail (outputs the judge kept getting wrong): they stay paid,
        and are never replayed, so that the next run asks again instead of failing on them for ever."""
        key = self.key(role, prompt)
        with self.lock:
            gone = Counter(replies)
            taken = []
            for k, entry in self.taken.get(case_number, []):
                if k == (case_number, step, key) and gone[entry[0]]:
                    gone[entry[0]] -= 1
                    continue
                taken.append((k, entry))
            self.taken[case_number] = taken
        self.writer.append(
            self.path,
            {
                "t": "retire",
                "case_number": case_number,
                "step": step,
                "key": key,
                "replies": [reply_digest(r) for r in replies],
            },
            sync=True,
        )

    def not_used(
        self, case_number: str, step: str, usage: dict, why: str, custom_id: str | None = None
    ) -> None:
        """Replies paid for that no record will count (role -> usage): every attempt of a call that failed its case,
        judge outputs retired, a batch line refused. Synced: a bill that loses them under-reports."""
        if not any(u.get("calls") for u in usage.values()):
            return
        entry = {"case_number": case_number, "step": step, "usage": usage, "why": why[:300]}
        if custom_id:  # a refused batch line: counted once, however often its batch is imported
            entry["custom_id"] = custom_id
        self.writer.append(self.path.with_name(NOT_USED_FILE), entry, sync=True)

    @staticmethod
    def custom_ids(path: Path) -> set[str]:
        """The batch requests whose replies the journal already holds."""
        if not path.exists():
            return set()
        return {
            e["custom_id"]
            for _, e in _journal_lines(path)
            if e is not None and isinstance(e.get("custom_id"), str)
        }

    def started(self, role: str) -> str:
        """Note a call about to be sent; returns its id for `ended`. Not synced: a killed process's writes
        still reach the file (only a machine crash could lose the mark)."""
        call_id = f"{self.call_prefix}{next(self.call_count):x}"
        self.writer.append(self.path, {"t": "start", "id": call_id, "role": role}, sync=False)
        return call_id

    def ended(self, call_id: str) -> None:
        self.writer.append(self.path, {"t": "end", "id": call_id}, sync=False)

    @contextmanager
    def marked(self, role: str):
        """The `on_send` of one call (its retries included): its start mark when its first request goes out, so a
        call killed while it waited for a slot is not counted as paid, and its end mark when it ends."""
        call_ids: list[str] = []

        def sent() -> None:
            if not call_ids:
                call_ids.append(self.started(role))

        try:
            yield sent
        finally:
            for call_id in call_ids:
                self.ended(call_id)

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
        write_atomic(self.path, b"".join(kept))


def add_unanswered(path: Path, calls: dict[str, int]) -> None:
    """Add calls paid but never answered (in flight when a process died) to the run's tally."""
    total = read_unanswered(path)
    for role, n in calls.items():
        total[role] = total.get(role, 0) + n
    write_atomic(path, json.dumps(total).encode("utf-8"))


def read_unanswered(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {r: n for r, n in data.items() if isinstance(n, int)} if isinstance(data, dict) else {}


def paid_not_used(folder: Path, saved: dict[str, set[str]]) -> tuple[dict[str, Counter], int]:
    """What a run paid for that none of its records counts, per role (usage fields summed), and the unreadable lines
    left out: the file of replies not used, and the replies the journal keeps for a rerun (a failed case's
    accepted replies, which its rerun replays; not those of a step saved since, nor those retired). `saved`:
    step -> the cases whose record of it is saved."""
    totals: dict[str, Counter] = {}
    entries, unreadable = not_used_entries(folder / NOT_USED_FILE)
    for e in entries:
        unreadable += not add_usage(totals, e["usage"])
    journal = folder / "calls_journal.jsonl"
    for entry, usage in _kept_for_a_rerun(journal) if journal.exists() else ():
        if entry["case_number"] not in saved.get(entry["step"], ()):
            unreadable += not add_usage(totals, usage)
    return totals, unreadable


def not_used_entries(path: Path) -> tuple[list[dict], int]:
    """The entries of a file of replies not used (a refused batch line once, however often it was imported), and how
    many lines are unreadable."""
    entries, unreadable, refused_lines = [], 0, set()
    for _, e in _journal_lines(path) if path.exists() else ():
        if e is None or not isinstance(e.get("usage"), dict) or not isinstance(e.get("step"), str):
            unreadable += 1
        elif e.get("custom_id") is None or e["custom_id"] not in refused_lines:
            refused_lines.add(e.get("custom_id"))
            entries.append(e)
    return entries, unreadable


def steps_paid_for(folder: Path) -> set[str]:
    """The steps (record kinds) a run's journal or file of replies not used names: a stage whose every case failed
    saved no record, and leaves no record file, but it ran (the viewer says "not run" of the others)."""
    steps = set()
    for path in (folder / NOT_USED_FILE, folder / "calls_journal.jsonl"):
        for _, e in _journal_lines(path) if path.exists() else ():
            if e is not None and isinstance(e.get("step"), str):
                steps.add(e["step"])
    return steps


def _kept_for_a_rerun(path: Path):
    """(entry, usage) of every reply the journal holds that a rerun may replay (retired ones left out)."""
    entries: list[dict] = []  # journal entries of replies
    retired: Counter[tuple] = Counter()  # (case, step, key, reply digest) -> times retired
    for _, e in _journal_lines(path):
        if e is None or e.get("t") in ("start", "end"):
            continue
        if e.get("t") == "retire" and isinstance(e.get("replies"), list):
            retired.update((e.get("case_number"), e.get("step"), e.get("key"), r) for r in e["replies"])
        elif (
            isinstance(e.get("usage"), dict)
            and isinstance(e.get("reply"), str)
            and e.get("digest") == entry_digest(e)
        ):
            entries.append(e)
    for e in entries:
        key = (e["case_number"], e["step"], e["key"], reply_digest(e["reply"]))
        if retired[key]:
            retired[key] -= 1
            continue
        yield e, e["usage"]


def add_usage(totals: dict[str, Counter], usage: dict) -> bool:
    """Add a role -> usage entry to the totals; False (nothing added) when any count is not a whole number."""
    counts = {role: u for role, u in usage.items() if isinstance(u, dict)}
    if len(counts) != len(usage) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for u in counts.values() for v in u.values()
    ):
        return False
    for role, u in counts.items():
        totals.setdefault(role, Counter()).update(u)
    return True
