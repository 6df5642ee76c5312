"""The record format: the benchmark's vocabulary, each record kind with its file and fields, the schema
version, record digests, and the one reader of checkpoint files that every tool uses.

A record is one JSON line per case. Every kind carries the common fields (`COMMON_FIELDS`) plus its own.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lexpilot.benchmark.vocabulary import BEHAVIOURS, HISTORY_TYPES
from lexpilot.errors import HarnessError
from lexpilot.files import check_input

SCHEMA_VERSION = 1


# Fields every record has; `upstream_hash` maps each record it was built from to that record's digest.
COMMON_FIELDS = ("case_number", "schema_version", "input_hash", "cause_of_action", "upstream_hash", "usage")
# What served each of a record's calls, in the order they were made (models/usage.py's served_call): kept beside
# the usage's per-record counts so that a role's change of model or tier within a record is seen call by call.
SERVED_CALLS_FIELD = "served_calls"


@dataclass(frozen=True)
class RecordKind:
    """One checkpoint file: where it lives, the fields its records hold, and the script that writes it."""

    name: str
    top: str  # folder under the output root
    file: str
    fields: tuple[str, ...]
    producer: str

    def path(self, root: Path, run_id: str, model_folder: str) -> Path:
        return root / self.top / run_id / model_folder / self.file


A1 = RecordKind("a1", "AwN_gen", "a1.jsonl", ("responses",), "LexAwN_gen.py")
LCA = RecordKind("LCA", "eval_results", "LCA_results.jsonl", ("judgments",), "LexAwN_gen.py")
INTERACTION = RecordKind(
    "interaction",
    "AwN_gen",
    "interaction.jsonl",
    (
        "user_condition",
        "input_history",
        "rounds",
        "continued_history",
        "stop_reason",
        "final_response",
        "disrupted_round",
        "corrected_round",
    ),
    "LexAwN_gen.py",
)
FORCE_ASK = RecordKind(
    "force_ask", "Force_ask_gen", "force_ask.jsonl", ("input_history", "rounds"), "eval_DCG.py"
)
DCG = RecordKind("DCG", "eval_results", "DCG_results.jsonl", ("rounds", "success"), "eval_DCG.py")
PREDICTION_FIELDS = ("history_type", "input_history", "response")
VERDICT_FIELDS = ("setup", "claims", "predicted", "gold", "judge_raw")
DIRECT_PREDICTION = RecordKind(
    "direct_prediction", "Force_judge_gen", "a1_direct.jsonl", PREDICTION_FIELDS, "eval_LJP_direct.py"
)
GOLD_PREDICTION = RecordKind(
    "gold_prediction", "Force_judge_gen", "a1_force_judge.jsonl", PREDICTION_FIELDS, "eval_LJP_gold.py"
)
LJP_DIRECT = RecordKind(
    "LJP_direct", "eval_results", "LJP_direct.jsonl", VERDICT_FIELDS, "eval_LJP_direct.py"
)
LJP_GOLD = RecordKind("LJP_gold", "eval_results", "LJP_gold.jsonl", VERDICT_FIELDS, "eval_LJP_gold.py")
LJP_INTERACTION = RecordKind(
    "LJP_interaction",
    "eval_results",
    "LJP_interaction.jsonl",
    VERDICT_FIELDS + ("stop_reason",),
    "eval_LJP_interaction.py",
)

# A re-judged run's new labels of the interaction rounds, beside the labels the original judge gave.
INTERACTION_LABELS = RecordKind(
    "interaction_labels", "eval_results", "interaction_labels.jsonl", ("rounds",), "rejudge.py"
)
# The simulator audit: the judge's findings on every User Model reply of a run, per source of replies.
AUDIT = {
    source: RecordKind(
        f"audit_{source}",
        "eval_results",
        f"simulator_audit_{source}.jsonl",
        ("replies",),
        "audit_simulator.py",
    )
    for source in ("dcg", "interaction")
}
# The probe study of the User Model (Appendix E.3.2): its replies per condition, and the DCG judge on A-C.
PROBE_REPLIES = RecordKind(
    "probe_replies", "Probe_gen", "probe_replies.jsonl", ("probed", "replies"), "user_probes.py generate"
)
PROBE_DCG = RecordKind("probe_dcg", "eval_results", "probe_dcg.jsonl", ("labels",), "user_probes.py generate")
# Targeted / Off-target dialogues (Section 6.5, Appendix E.7, Table 4): the constructed and validated dialogue,
# the prediction from it, and its verdicts; a case still failing validation after five attempts is unresolved.
BEHAVIOUR_DIALOGUE = {
    b: RecordKind(
        f"dialogue_{b}",
        "Behaviour_gen",
        f"dialogues_{b}.jsonl",
        ("condition", "status", "attempts", "dialogue"),
        "eval_LJP_behaviour.py",
    )
    for b in BEHAVIOURS
}
BEHAVIOUR_PREDICTION = {
    b: RecordKind(
        f"prediction_{b}",
        "Behaviour_gen",
        f"prediction_{b}.jsonl",
        ("condition", "status", "response"),
        "eval_LJP_behaviour.py",
    )
    for b in BEHAVIOURS
}
LJP_BEHAVIOUR = {
    b: RecordKind(
        f"LJP_{b}", "eval_results", f"LJP_{b}.jsonl", VERDICT_FIELDS + ("status",), "eval_LJP_behaviour.py"
    )
    for b in BEHAVIOURS
}
# The Table 18 type of each focal point of a case (Appendix E.8): from the dataset where it gives them, else
# from the judge.
FOCAL_TYPE_RECORDS = RecordKind(
    "focal_types", "eval_results", "focal_types.jsonl", ("types",), "eval_focal_types.py"
)
# The plain consultation (Pilot Study II, Appendix C.2): the history sent as an ordinary chat, and the judge's
# response type; one file per history type (the complete history is an optional control).
PLAIN = {
    t: RecordKind(
        f"plain_{t}",
        "Plain_gen",
        f"plain_{t}.jsonl",
        ("history_type", "messages", "response"),
        "eval_plain.py",
    )
    for t in HISTORY_TYPES
}
PLAIN_TYPES = {
    t: RecordKind(
        f"plain_type_{t}",
        "eval_results",
        f"plain_types_{t}.jsonl",
        ("history_type", "type", "judge_raw"),
        "eval_plain.py",
    )
    for t in HISTORY_TYPES
}

# A diagnostic outside the paper's protocol: the extraction judge asked again with the claims shuffled
LJP_ORDER = {
    setup: RecordKind(
        f"LJP_order_{setup}",
        "eval_results",
        f"LJP_order_{setup}.jsonl",
        ("setup", "order", "claims", "predicted", "original", "gold", "judge_raw"),
        "eval_LJP_order.py",
    )
    for setup in ("direct", "interaction", "gold")
}

RECORD_KINDS = (
    A1,
    LCA,
    INTERACTION,
    FORCE_ASK,
    DCG,
    DIRECT_PREDICTION,
    LJP_DIRECT,
    GOLD_PREDICTION,
    LJP_GOLD,
    LJP_INTERACTION,
    INTERACTION_LABELS,
    *PLAIN.values(),
    *PLAIN_TYPES.values(),
    *AUDIT.values(),
    PROBE_REPLIES,
    PROBE_DCG,
    *BEHAVIOUR_DIALOGUE.values(),
    *BEHAVIOUR_PREDICTION.values(),
    *LJP_BEHAVIOUR.values(),
    FOCAL_TYPE_RECORDS,
    *LJP_ORDER.values(),
)
# What a re-judged run (rejudge.py) copies from its source byte for byte: the generations and User Model replies,
# which carry the source run's settings hash (only the judge differs)
REJUDGE_REUSED = (A1, INTERACTION, FORCE_ASK, DIRECT_PREDICTION, GOLD_PREDICTION)


@dataclass(frozen=True)
class LjpSetup:
    """One of the paper's three LJP setups and every name it goes by, each read from here (issue 37 item 7: `direct`,
    `LJP_direct` and `LJP Direct QWK` were written by hand wherever they were used)."""

    name: str  # "direct": the case list's and the comparison page's field, a column's link, the order diagnostic's
    # its extracted verdicts; their kind's name ("LJP_direct") is its task in the metrics
    verdicts: RecordKind
    generation: RecordKind  # the reply the verdicts are read from
    reply_field: str  # that reply's field
    title: str  # the paper's name: "Direct", "Interaction-Based", "Gold-Standard"
    short: str  # beside the other tasks' columns: "LJP Direct" ("LJP Direct QWK")

    @property
    def task(self) -> str:
        return self.verdicts.name


# in the paper's column order (Table 3)
LJP_SETUPS = (
    LjpSetup("direct", LJP_DIRECT, DIRECT_PREDICTION, "response", "Direct", "LJP Direct"),
    LjpSetup(
        "interaction", LJP_INTERACTION, INTERACTION, "final_response", "Interaction-Based", "LJP Interaction"
    ),
    LjpSetup("gold", LJP_GOLD, GOLD_PREDICTION, "response", "Gold-Standard", "LJP Gold"),
)
SETUP = {s.name: s for s in LJP_SETUPS}


def canonical_text(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def canonical_hash(obj) -> str:
    return text_hash(canonical_text(obj).encode("utf-8"))


def text_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def record_digest(record: Mapping[str, Any]) -> str:
    return canonical_hash(record)


def content_digest(record: dict) -> str:
    """The digest a record carries of its own content (every field but `digest`)."""
    return canonical_hash({k: v for k, v in record.items() if k != "digest"})


DIGEST_TAIL = (b',"digest":"', b'"}')  # how a line written by `record_line` ends, around its 16-digit digest
TAIL_LENGTH = len(DIGEST_TAIL[0]) + 16 + len(DIGEST_TAIL[1])


def record_line(record: dict) -> bytes:
    """A record's line in the file: the canonical text of its content (what its digest hashes) with the digest
    added last, so that a reader checks the digest on the line's own bytes instead of writing the record out
    again (a report over 10 models × 5 runs spent a fifth of its time there; bench/viewer.py)."""
    content = canonical_text({k: v for k, v in record.items() if k != "digest"})
    if "digest" not in record:  # a record made without one (see `_check_record`)
        return (content + "\n").encode("utf-8")
    return content[:-1].encode("utf-8") + DIGEST_TAIL[0] + record["digest"].encode() + DIGEST_TAIL[1] + b"\n"


def digest_holds(raw: bytes, record: dict) -> bool:
    """Whether a record's content still has the digest it carries. A line as `record_line` wrote it is hashed as
    it stands, less its digest; any other (a record saved before lines were canonical, or a line reformatted)
    is checked on its content written out canonically."""
    digest = record["digest"]
    if (
        isinstance(digest, str)
        and raw[-TAIL_LENGTH:] == DIGEST_TAIL[0] + digest.encode() + DIGEST_TAIL[1]
        and text_hash(raw[:-TAIL_LENGTH] + b"}") == digest
    ):
        return True
    return digest == content_digest(record)


def new_record(
    case_number: str,
    input_hash: str,
    cause: str,
    body: dict,
    upstream: Mapping[str, Mapping[str, Any]],
    usage: dict,
    settings_hash: str,
    reasoning: dict | None = None,
    served_calls: list | None = None,
) -> dict:
    """A record of any kind: the common fields around the kind's own `body`, the hash of the settings it
    was made with (so a lost manifest can be rebuilt or refused), the reasoning returned apart from the
    replies (when there was any), what served each call (when there was any), and last the digest of its own
    content (so an edit is noticed)."""
    record = {
        "case_number": case_number,
        "schema_version": SCHEMA_VERSION,
        "input_hash": input_hash,
        "cause_of_action": cause,
        **body,
        "upstream_hash": {name: record_digest(r) for name, r in upstream.items()},
        "usage": usage,
        "settings_hash": settings_hash,
    }
    if reasoning:
        record["reasoning"] = reasoning
    if served_calls is not None:  # a record that made no call lists none
        record[SERVED_CALLS_FIELD] = served_calls
    record["digest"] = content_digest(record)
    return record


def model_folder(model: str) -> str:
    """Filesystem-safe model name plus a hash of the exact id, so two ids never share a folder."""
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._-")[:60] or "model"
    return f"{safe}-{hashlib.sha256(model.encode('utf-8')).hexdigest()[:8]}"


class TornLine(ValueError):
    """Bytes that are not even JSON text: what an interrupted write leaves."""


def _parse_line(raw: bytes) -> dict:
    """One record line; TornLine when it is not JSON text at all, ValueError when it is JSON but not a
    well-formed record."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise TornLine from None
    try:
        if not isinstance(record, dict):
            raise TypeError
        number = record["case_number"]
        record["schema_version"], record["input_hash"]  # noqa: B018 (must exist)
        if not isinstance(number, str) or not isinstance(record.get("upstream_hash", {}), dict):
            raise TypeError
    except (KeyError, TypeError):
        raise ValueError from None
    return record


def set_aside_torn_tail(path: Path, keep: int) -> Path:
    """Move everything after byte `keep` of a checkpoint to a side file; returns the side file."""
    side = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    with path.open("rb+") as f:
        f.seek(keep)
        side.write_bytes(f.read())
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return side


def readable_records(path: Path):
    """Every well-formed record of a file as it is, unreadable lines skipped: for estimates (usage per case,
    the settings records were made with) that a torn or foreign line must not stop. What a stage resumes from
    or a report counts is read by `read_records`, which never skips."""
    if not path.is_file():
        return
    with path.open("rb") as f:
        for raw in f:
            try:
                yield _parse_line(raw.rstrip(b"\n"))
            except ValueError:
                continue


MALFORMED = "malformed or truncated record. Inspect the line; delete it to have that case generated again, then rerun."


def _parsed_lines(path: Path, repair: bool, notes: list | None) -> list[tuple[int, dict, bytes]]:
    """(line, record, its bytes) of every line; the last line alone may be torn or unterminated (how a crash or a full
    disk leaves a file): a complete record that only lost its newline is kept (with `repair`, the newline is
    added), a torn one left out (with `repair`, set aside in a side file so that its case is redone)."""
    lines = path.read_bytes().split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: bytes after the last newline (empty when terminated)
    parsed: list[tuple[int, dict, bytes]] = []
    for lineno, raw in enumerate(complete, 1):
        try:
            parsed.append((lineno, _parse_line(raw), raw))
        except ValueError as e:
            if isinstance(e, TornLine) and lineno == len(complete) and not tail:
                tail, complete = raw, complete[:-1]  # a torn last line that happens to end in a newline
                break
            raise HarnessError(f"{path}:{lineno}: {MALFORMED}") from None
    if not tail:
        return parsed
    lineno = len(complete) + 1
    try:
        parsed.append((lineno, _parse_line(tail), tail))
    except TornLine:
        keep = sum(len(line) + 1 for line in complete)
        note = (
            (
                f"torn by an interrupted write; set aside in {set_aside_torn_tail(path, keep).name}, that case "
                "will be redone"
            )
            if repair
            else "torn by an interrupted write; left out"
        )
        if notes is not None:
            notes.append(f"{path}:{lineno}: the last line was {note}")
        return parsed
    except ValueError:
        raise HarnessError(f"{path}:{lineno}: {MALFORMED}") from None
    if repair:
        with path.open("ab") as f:
            f.write(b"\n")
    if notes is not None:
        notes.append(f"{path}:{lineno}: the last record had lost its newline; kept")
    return parsed


def _check_record(
    where: str,
    record: dict,
    raw: bytes,
    kind: RecordKind,
    selected: Mapping[str, str | None],
    records: dict,
    what_to_do: str,
) -> None:
    number, version, input_hash = record["case_number"], record["schema_version"], record["input_hash"]
    if version != SCHEMA_VERSION:
        raise HarnessError(
            f"{where}: record has schema version {version}, this harness reads and writes "
            f"{SCHEMA_VERSION}. Use a new --run-id."
        )
    missing = [name for name in COMMON_FIELDS + kind.fields if name not in record]
    if missing:
        raise HarnessError(
            f"{where}: a {kind.name} record without {', '.join(missing)}. Delete the line "
            "to have that case redone, then rerun."
        )
    if "digest" in record and not digest_holds(raw, record):
        raise HarnessError(
            f"{where}: the record of case {number} was changed after it was saved (its "
            "digest does not match). Delete the line to have that case redone."
        )
    if number in records:
        raise HarnessError(
            f"{where}: second record for case {number} (first at line "
            f"{records[number][0]}). Delete one of them, then rerun."
        )
    if number not in selected:
        raise HarnessError(f"{where}: case {number} is not among this run's selected cases ({what_to_do}).")
    if selected[number] is not None and input_hash != selected[number]:
        raise HarnessError(
            f"{where}: case {number} was generated from different inputs (the dataset changed). {what_to_do}."
        )


def read_records(
    path: Path,
    kind: RecordKind,
    selected: Mapping[str, str | None],
    what_to_do: str,
    repair: bool = False,
    notes: list | None = None,
) -> dict[str, tuple[int, dict]]:
    """case_number -> (line, record) of one checkpoint file; a missing file holds no record.

    `selected` maps the run's selected cases to their input hash (None: not known, not checked): a record of
    another case, or one made from other inputs, is an error. A malformed line, a record of another schema
    version, an edited record or a second record of a case is an error naming file:line, never skipped; only
    the last line may be torn (see `_parsed_lines`), which is said in `notes`.
    """
    records: dict[str, tuple[int, dict]] = {}
    if not path.exists():
        return records
    check_input(path)
    with collector_paused():
        for lineno, record, raw in _parsed_lines(path, repair, notes):
            _check_record(f"{path}:{lineno}", record, raw, kind, selected, records, what_to_do)
            records[record["case_number"]] = (lineno, record)
    return records


@contextmanager
def collector_paused():
    """Python's cycle collector paused, and resumed after as it was: parsed records hold no cycles, and while
    they are made the collector runs every few hundred new objects, walking every record read before (a report
    over 10 models × 5 runs spent a third of its time there; bench/viewer.py)."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()
