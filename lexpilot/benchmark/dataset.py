"""The dataset: the case schema, its validation (every problem named by case and field), loading,
and the paper's Table 1 statistics.

`python common.py [--dataset PATH]` runs `main` here: it validates a dataset and prints them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import stat
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lexpilot.benchmark.categories import CAUSES, CLASS_LABELS, FOCAL_TYPES, cause_class
from lexpilot.benchmark.records import canonical_hash
from lexpilot.benchmark.vocabulary import HISTORY_TYPES, VERDICTS
from lexpilot.errors import HarnessError, OneLineParser, first_of
from lexpilot.files import input_problem
from lexpilot.paths import DATA_DIR, PROJECT_ROOT

DEFAULT_DATASET = DATA_DIR / "LexPilot_release_multiturn.json"
SAMPLE_DATASET = DATA_DIR / "LexPilot_sample.json"
PLAINTIFF_TYPES = ("自然人", "非自然人")


@dataclass(frozen=True)
class Case:
    number: str
    cause: str
    cause_class: str
    plaintiff_type: str
    focal_points: tuple[str, ...]
    key_details: tuple[str, ...] | dict[str, tuple[str, ...]]
    claims: tuple[str, ...]  # result_dict insertion order
    verdicts: tuple[str, ...]
    complete: tuple[dict, ...]
    underspecified: tuple[dict, ...]
    input_hash: str  # of the whole case object, so any change to it is noticed
    focal_types: tuple[str, ...] | None = None  # optional: the Table 18 type of each focal point
    # optional: the cause's average number of legal provisions cited (Figure 3)
    complexity: float | None = None

    def history(self, history_type: str) -> list[dict]:
        return [dict(m) for m in getattr(self, history_type)]


def _problems_in_history(value, field_name: str) -> list[str]:
    if not isinstance(value, list) or not value:
        return [f"{field_name}: must be a non-empty array of messages"]
    problems = []
    for i, message in enumerate(value):
        where = f"{field_name}[{i}]"
        if not isinstance(message, dict):
            problems.append(f"{where}: must be an object with role and content")
            continue
        expected = "user" if i % 2 == 0 else "assistant"
        if message.get("role") != expected:
            problems.append(
                f"{where}: role is {message.get('role')!r}, expected {expected!r} "
                "(messages alternate, starting with user)"
            )
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            problems.append(f"{where}: content is empty or not a string")
    if len(value) % 2 == 0:
        problems.append(f"{field_name}: has {len(value)} messages; a history must end with a user message")
    return problems


def _non_empty_strings(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(s, str) and s.strip() for s in value)


def case_problems(raw) -> list[str]:
    """Every schema problem of one case object, as 'field: what is wrong' strings."""
    if not isinstance(raw, dict):
        return ["case: must be a JSON object"]
    problems = _identity_problems(raw)
    focal_points, focal_problems = _focal_point_problems(raw)
    problems += focal_problems + _key_detail_problems(raw, focal_points)
    for where, key in _duplicated_keys(raw, ""):
        problems.append(f"{where or 'case'}: {key[:30]!r} appears more than once (JSON keeps only the last)")
    try:
        json.dumps(raw, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        problems.append("text: holds invalid Unicode (a lone surrogate escape such as \\ud800)")
    return problems + _verdict_problems(raw) + _history_pair_problems(raw)


def _identity_problems(raw: dict) -> list[str]:
    problems = []
    number = raw.get("case_number")
    if not isinstance(number, str) or not number.strip():
        problems.append("case_number: missing or empty")
    cause = raw.get("cause_of_action")
    if cause is None or cause == "":
        problems.append("cause_of_action: missing or empty")
    elif cause not in CAUSES:
        problems.append(f"cause_of_action: unknown cause {cause!r} (not one of the 36 of Appendix D)")
    ptype = raw.get("plaintiff_type")
    if ptype not in PLAINTIFF_TYPES:
        problems.append(f"plaintiff_type: {ptype!r} is not 自然人 or 非自然人")
    complexity = raw.get("complexity")
    if complexity is not None and (
        isinstance(complexity, bool)
        or not isinstance(complexity, (int, float))
        or not math.isfinite(complexity)
        or complexity < 0
    ):
        problems.append(f"complexity: {str(complexity)[:20]!r} is not a non-negative number")
    return problems


def _focal_point_problems(raw: dict) -> tuple[list[str] | None, list[str]]:
    """The focal points (None when unusable) and the problems of them and of their types."""
    problems = []
    focal = raw.get("focal_point")
    focal_points = [focal] if isinstance(focal, str) else focal
    if not _non_empty_strings(focal_points):
        problems.append("focal_point: missing, empty, or not a list of non-empty strings")
        focal_points = None
    types = raw.get("focal_point_types")
    if types is not None:
        if not isinstance(types, list) or (focal_points is not None and len(types) != len(focal_points)):
            problems.append("focal_point_types: must list one type per focal point, in the same order")
        else:
            unknown = [t for t in types if t not in FOCAL_TYPES]
            if unknown:
                problems.append(
                    f"focal_point_types: unknown type {unknown[0]!r} (one of {', '.join(FOCAL_TYPES)})"
                )
    return focal_points, problems


def _key_detail_problems(raw: dict, focal_points: list[str] | None) -> list[str]:
    details = raw.get("key_details")
    if isinstance(details, dict):
        if not details or not all(_non_empty_strings(v) for v in details.values()):
            return ["key_details: every focal point must map to a non-empty list of non-empty strings"]
        if focal_points is not None and set(details) != set(focal_points):
            return [
                "key_details: its focal points do not match focal_point "
                f"(missing {sorted(set(focal_points) - set(details))}, "
                f"extra {sorted(set(details) - set(focal_points))})"
            ]
        return []
    return (
        []
        if _non_empty_strings(details)
        else ["key_details: missing, empty, or not a list of non-empty strings"]
    )


def _verdict_problems(raw: dict) -> list[str]:
    result = raw.get("result_dict")
    if not isinstance(result, dict) or not result:
        return ["result_dict: missing or empty (claim text -> verdict)"]
    problems = []
    for claim, verdict in result.items():
        if not claim.strip():
            problems.append("result_dict: empty claim text")
        if verdict not in VERDICTS:
            problems.append(
                f"result_dict: unknown verdict {verdict!r} for claim {claim[:30]!r} "
                "(expected 支持, 部分支持 or 驳回)"
            )
    return problems


def _history_pair_problems(raw: dict) -> list[str]:
    problems, lengths = [], []
    for history_type in HISTORY_TYPES:
        name = f"{history_type}_consultation"
        if name not in raw:
            problems.append(f"{name}: missing")
            continue
        problems += _problems_in_history(raw[name], name)
        lengths.append(len(raw[name]) if isinstance(raw[name], list) else None)
    if len(lengths) == 2 and None not in lengths and lengths[0] != lengths[1]:
        problems.append(
            f"complete_consultation has {lengths[0]} messages but "
            f"underspecified_consultation has {lengths[1]}: they must be of equal length"
        )
    return problems


def _freeze_history(messages) -> tuple[dict, ...]:
    return tuple({"role": m["role"], "content": m["content"]} for m in messages)


def case_from_raw(raw: dict) -> Case:
    focal = raw["focal_point"]
    focal_points = (focal,) if isinstance(focal, str) else tuple(focal)
    details = raw["key_details"]
    key_details: tuple[str, ...] | dict[str, tuple[str, ...]]
    if isinstance(details, dict):
        key_details = {fp: tuple(details[fp]) for fp in focal_points}
    else:
        key_details = tuple(details)
    result = raw["result_dict"]
    return Case(
        number=raw["case_number"],
        cause=raw["cause_of_action"],
        cause_class=cause_class(raw["cause_of_action"]),
        plaintiff_type=raw["plaintiff_type"],
        focal_points=focal_points,
        key_details=key_details,
        claims=tuple(result),
        verdicts=tuple(result.values()),
        complete=_freeze_history(raw["complete_consultation"]),
        underspecified=_freeze_history(raw["underspecified_consultation"]),
        input_hash=canonical_hash(raw),
        focal_types=tuple(raw["focal_point_types"]) if raw.get("focal_point_types") is not None else None,
        complexity=float(raw["complexity"]) if raw.get("complexity") is not None else None,
    )


class _Object(dict):
    """A JSON object that remembers the keys it held more than once (json keeps only the last)."""

    duplicates: tuple = ()


def _duplicated_keys(value, where: str):
    """(where, key) of every key a JSON object of the case holds twice, at any depth."""
    if isinstance(value, dict):
        yield from ((where, key) for key in getattr(value, "duplicates", ()))
        for key, sub in value.items():
            yield from _duplicated_keys(sub, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _duplicated_keys(sub, f"{where}[{i}]")


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _object(pairs) -> _Object:
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        seen, duplicates = set(), []
        for key, _ in pairs:
            if key in seen:
                duplicates.append(key)
            seen.add(key)
        obj.duplicates = tuple(duplicates)
    return obj


def dataset_problems(path: Path) -> tuple[list, list[str]]:
    """(raw cases, every problem found). Problems name the case and the field."""
    if not path.exists():
        hint = (
            f" Try --dataset {SAMPLE_DATASET.relative_to(PROJECT_ROOT)} (the illustrative sample)."
            if path == DEFAULT_DATASET
            else ""
        )
        return [], [
            f"{path}: dataset file not found. Put LexPilot_release_multiturn.json in "
            f"{DATA_DIR} (see README.md).{hint}"
        ]
    problem = input_problem(path)
    if problem:
        return [], [problem + " (the dataset's JSON file)"]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        return [], [f"{path}: not UTF-8 text ({e.reason} at byte {e.start})"]
    except OSError as e:
        return [], [f"{path}: cannot be read ({e.strerror or e})"]
    try:
        raw_cases = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        return [], [
            f"{path}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg} (is the file truncated?)"
        ]
    except RecursionError:
        return [], [f"{path}: nested too deeply to be a LexPilot dataset"]
    except ValueError as e:  # e.g. a number of thousands of digits
        return [], [f"{path}: not a usable JSON dataset ({' '.join(str(e).split())[:120]})"]
    if not isinstance(raw_cases, list):
        return [], [f"{path}: must be a JSON array of case objects, found {type(raw_cases).__name__}"]
    if not raw_cases:
        return [], [f"{path}: the array holds no cases"]
    problems = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_cases):
        number = raw.get("case_number") if isinstance(raw, dict) else None
        label = (
            f"case {number} (#{index + 1})" if isinstance(number, str) and number else f"case #{index + 1}"
        )
        problems += [f"{path}: {label}: {p}" for p in case_problems(raw)]
        if isinstance(number, str) and number:
            if number in seen:
                problems.append(f"{path}: {label}: case_number: duplicate of case #{seen[number] + 1}")
            seen.setdefault(number, index)
    return raw_cases, problems


def load_dataset(path: Path) -> tuple[list[Case], str]:
    """All cases in file order and the dataset's sha256; raises HarnessError listing every problem. A file read
    before in this process with the same content is not parsed again (the grid's cells all read one dataset)."""
    path = Path(path)
    try:
        # a file, not a device or a pipe: nothing is read before dataset_problems checks it
        status = path.stat()
        key = (status.st_ino, status.st_mtime_ns, status.st_size) if stat.S_ISREG(status.st_mode) else None
    except OSError:
        key = None  # dataset_problems says what is wrong with it
    cases, digest = _parsed(path, key) if key else _parsed.__wrapped__(path, None)
    return list(cases), digest


def load_selection(path: Path, limit: int | None) -> tuple[list[Case], str]:
    """The cases a run uses, `--limit`'s first N in file order (all without one), and the dataset's sha256."""
    cases, digest = load_dataset(path)
    return (cases[:limit] if limit else cases), digest


# by the file's inode, time and size (a changed file is parsed again); cases are frozen
@functools.lru_cache(maxsize=4)
def _parsed(path: Path, key: tuple | None) -> tuple[tuple[Case, ...], str]:
    raw_cases, problems = dataset_problems(path)
    if len(problems) == 1:
        raise HarnessError(problems[0])
    if problems:
        shown = first_of(problems, 50)
        raise HarnessError(
            f"dataset has {len(problems)} problem(s); fix them and rerun:\n  " + "\n  ".join(shown)
        )
    return tuple(case_from_raw(raw) for raw in raw_cases), file_sha256(path)


def file_sha256(path: Path) -> str:
    """A dataset file's sha256, as a run's manifest records it (dataset_sha256)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dataset_statistics(cases: list[Case]) -> str:
    histories = [h for c in cases for h in (c.complete, c.underspecified)]
    chars = [sum(len(m["content"]) for m in h) for h in histories]
    verdicts = Counter(v for c in cases for v in c.verdicts)
    n_claims = sum(verdicts.values())
    plaintiffs = Counter(c.plaintiff_type for c in cases)
    classes = Counter(c.cause_class for c in cases)
    rows = [
        ("Consultation counts by type", "Total", len(histories)),
        ("", "Underspecified", len(cases)),
        ("", "Complete", len(cases)),
        ("Dataset", "Avg. length (chars)", f"{sum(chars) / len(chars):.2f}"),
        ("", "Avg. messages per history", f"{sum(map(len, histories)) / len(histories):.2f}"),
        ("", "Causes of action", len({c.cause for c in cases})),
        ("Plaintiff type", "Natural person", plaintiffs["自然人"]),
        ("", "Non-natural person", plaintiffs["非自然人"]),
    ]
    for verdict, name in zip(VERDICTS, ("Supported", "Partially Supported", "Dismissed")):
        rows.append(
            (
                "Verdict distribution" if verdict == "支持" else "",
                name,
                f"{100 * verdicts[verdict] / n_claims:.2f}%",
            )
        )
    rows.append(("Claims", "Total", n_claims))
    rows.append(("", "Per case", f"{n_claims / len(cases):.2f}"))
    for i, label in enumerate(CLASS_LABELS):
        rows.append(("Cases per class" if i == 0 else "", label, classes[label]))
    width = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{width[0]}}  {b:<{width[1]}}  {v}" for a, b, v in rows)


def main(argv=None) -> int:
    parser = OneLineParser(description="Validate a LexPilot dataset and print its statistics.")
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="default: %(default)s")
    args = parser.parse_args(argv)
    _, problems = dataset_problems(args.dataset)
    if problems:
        print(f"{len(problems)} problem(s) in {args.dataset}:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    cases, digest = load_dataset(args.dataset)
    print(f"{args.dataset}: {len(cases)} cases, valid (sha256 {digest[:16]})")
    print(dataset_statistics(cases))
    return 0
