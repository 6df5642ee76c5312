"""Shared mechanics of the LexPilot harness: dataset, prompts, model calls, checkpoints, stages.

Run as a script, it validates a dataset and prints its statistics (the paper's Table 1):
    python common.py [--dataset PATH]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from categories import CAUSES, CLASS_LABELS, cause_class

HERE = Path(__file__).resolve().parent
PROMPT_DIR = HERE / "prompts"
DATA_DIR = HERE / "data"
DEFAULT_DATASET = DATA_DIR / "LexPilot_release_multiturn.json"
SAMPLE_DATASET = DATA_DIR / "LexPilot_sample.json"
SCHEMA_VERSION = 1

VERDICTS = ("支持", "部分支持", "驳回")  # ordinal 0, 1, 2 for QWK
PLAINTIFF_TYPES = ("自然人", "非自然人")
HISTORY_TYPES = ("complete", "underspecified")
ROLES = ("eval", "user", "judge")
ROLE_NAMES = {"eval": "evaluated model", "user": "User Model", "judge": "judge"}
USER_CONDITIONS = ("standard", "delayed", "self-correction")  # Appendix E.5

# Files whose content decides what a run produces; their hash goes into the manifest.
CODE_FILES = (
    "common.py", "categories.py", "LexAwN_gen.py", "eval_LCA.py", "eval_DCG.py",
    "eval_LJP.py", "eval_LJP_direct.py", "eval_LJP_gold.py", "eval_LJP_interaction.py",
)


class HarnessError(Exception):
    """An error the user must act on; its message says what, where and what to do."""


# ----------------------------------------------------------------------------- dataset

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

    def history(self, history_type: str) -> list[dict]:
        return [dict(m) for m in getattr(self, history_type)]


def canonical_hash(obj) -> str:
    text = json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


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
            problems.append(f"{where}: role is {message.get('role')!r}, expected {expected!r} "
                            "(messages alternate, starting with user)")
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
    focal = raw.get("focal_point")
    focal_points = [focal] if isinstance(focal, str) else focal
    if not _non_empty_strings(focal_points):
        problems.append("focal_point: missing, empty, or not a list of non-empty strings")
        focal_points = None
    details = raw.get("key_details")
    if isinstance(details, dict):
        if not details or not all(_non_empty_strings(v) for v in details.values()):
            problems.append("key_details: every focal point must map to a non-empty list of non-empty strings")
        elif focal_points is not None and set(details) != set(focal_points):
            problems.append("key_details: its focal points do not match focal_point "
                            f"(missing {sorted(set(focal_points) - set(details))}, "
                            f"extra {sorted(set(details) - set(focal_points))})")
    elif not _non_empty_strings(details):
        problems.append("key_details: missing, empty, or not a list of non-empty strings")
    result = raw.get("result_dict")
    if not isinstance(result, dict) or not result:
        problems.append("result_dict: missing or empty (claim text -> verdict)")
    else:
        for claim, verdict in result.items():
            if not claim.strip():
                problems.append("result_dict: empty claim text")
            if verdict not in VERDICTS:
                problems.append(f"result_dict: unknown verdict {verdict!r} for claim {claim[:30]!r} "
                                "(expected 支持, 部分支持 or 驳回)")
    lengths = []
    for history_type in HISTORY_TYPES:
        name = f"{history_type}_consultation"
        if name not in raw:
            problems.append(f"{name}: missing")
            continue
        history_problems = _problems_in_history(raw[name], name)
        problems += history_problems
        lengths.append(len(raw[name]) if isinstance(raw[name], list) else None)
    if len(lengths) == 2 and None not in lengths and lengths[0] != lengths[1]:
        problems.append(f"complete_consultation has {lengths[0]} messages but "
                        f"underspecified_consultation has {lengths[1]}: they must be of equal length")
    return problems


def _freeze_history(messages) -> tuple[dict, ...]:
    return tuple({"role": m["role"], "content": m["content"]} for m in messages)


def case_from_raw(raw: dict) -> Case:
    focal = raw["focal_point"]
    focal_points = (focal,) if isinstance(focal, str) else tuple(focal)
    details = raw["key_details"]
    if isinstance(details, dict):
        key_details = {fp: tuple(details[fp]) for fp in focal_points}
    else:
        key_details = tuple(details)
    result = raw["result_dict"]
    return Case(
        number=raw["case_number"], cause=raw["cause_of_action"],
        cause_class=cause_class(raw["cause_of_action"]), plaintiff_type=raw["plaintiff_type"],
        focal_points=focal_points, key_details=key_details,
        claims=tuple(result), verdicts=tuple(result.values()),
        complete=_freeze_history(raw["complete_consultation"]),
        underspecified=_freeze_history(raw["underspecified_consultation"]),
        input_hash=canonical_hash(raw),
    )


def dataset_problems(path: Path) -> tuple[list, list[str]]:
    """(raw cases, every problem found). Problems name the case and the field."""
    if not path.exists():
        hint = f" Try --dataset {SAMPLE_DATASET.relative_to(HERE)} (the illustrative sample)." \
            if path == DEFAULT_DATASET else ""
        return [], [f"{path}: dataset file not found. Put LexPilot_release_multiturn.json in "
                    f"{DATA_DIR} (see README.md).{hint}"]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        return [], [f"{path}: not UTF-8 text ({e.reason} at byte {e.start})"]
    try:
        raw_cases = json.loads(text)
    except json.JSONDecodeError as e:
        return [], [f"{path}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}"
                    " (is the file truncated?)"]
    if not isinstance(raw_cases, list):
        return [], [f"{path}: must be a JSON array of case objects, found {type(raw_cases).__name__}"]
    if not raw_cases:
        return [], [f"{path}: the array holds no cases"]
    problems = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_cases):
        number = raw.get("case_number") if isinstance(raw, dict) else None
        label = f"case {number} (#{index + 1})" if isinstance(number, str) and number else f"case #{index + 1}"
        problems += [f"{path}: {label}: {p}" for p in case_problems(raw)]
        if isinstance(number, str) and number:
            if number in seen:
                problems.append(f"{path}: {label}: case_number: duplicate of case #{seen[number] + 1}")
            seen.setdefault(number, index)
    return raw_cases, problems


def load_dataset(path: Path) -> tuple[list[Case], str]:
    """All cases in file order and the dataset's sha256; raises HarnessError listing every problem."""
    raw_cases, problems = dataset_problems(path)
    if len(problems) == 1:
        raise HarnessError(problems[0])
    if problems:
        shown = problems[:50] + ([f"... and {len(problems) - 50} more"] if len(problems) > 50 else [])
        raise HarnessError(f"dataset has {len(problems)} problem(s); fix them and rerun:\n  "
                           + "\n  ".join(shown))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return [case_from_raw(raw) for raw in raw_cases], digest


# ----------------------------------------------------------------------------- prompts and rendering

PROMPT_FILES = {
    "lexawn": "lexawn.txt",                  # Table 19
    "force_ask": "dcg_force_ask.txt",        # Table 20
    "force_judge": "force_judge.txt",        # Table 21: Direct, Gold-Standard, forced final prediction
    "user_standard": "user_standard.txt",    # Table 22
    # Appendix E.5 non-ideal users, written from the paper's description in the register of Table 22:
    "user_delayed": "user_delayed.txt",                  # the one hesitant, withholding reply
    "user_self_correction": "user_self_correction.txt",  # the one incomplete or mistaken reply
    "user_correction": "user_correction.txt",            # the spontaneous correction in the next user turn
    "judge_lca": "judge_lca.txt",            # Table 23
    "judge_dcg": "judge_dcg.txt",            # Table 24
    "judge_ljp": "judge_ljp_extract.txt",    # Table 25
}
SLOT = re.compile(r"\{(history|key_facts|ai_response|focus_text|claims)\}")


def load_prompts() -> dict[str, str]:
    return {name: (PROMPT_DIR / file).read_text(encoding="utf-8") for name, file in PROMPT_FILES.items()}


def fill(template: str, **slots: str) -> str:
    """Fill the template's slots in one pass: text inserted is never expanded again."""
    def value(match: re.Match) -> str:
        if match.group(1) not in slots:
            raise KeyError(f"prompt slot {{{match.group(1)}}} was given no value")
        return slots[match.group(1)]
    return SLOT.sub(value, template)


def render_history(messages) -> str:
    """Every message in order as 'User: …' / 'Assistant: …' lines (multi-line content kept)."""
    return "\n".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in messages)


def render_claims(case: Case) -> str:
    # One claim per line: the extraction prompt reads each line as one claim.
    return "\n".join(" ".join(claim.splitlines()) for claim in case.claims)


def render_key_facts(case: Case) -> str:
    """Key details alone (the User Model never sees focal-point text)."""
    details = case.key_details
    flat = [d for ds in details.values() for d in ds] if isinstance(details, dict) else details
    return "\n".join(flat)


def render_focal_points(case: Case) -> str:
    return "\n".join(case.focal_points)


def render_details_by_focal_point(case: Case) -> str:
    """Key details for the DCG judge, each focal point next to its details when they are mapped."""
    if not isinstance(case.key_details, dict):
        return "\n".join(case.key_details)
    return "\n".join(f"【{fp}】\n" + "\n".join(ds) for fp, ds in case.key_details.items())


# ----------------------------------------------------------------------------- statistics (Table 1)

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
        rows.append(("Verdict distribution" if verdict == "支持" else "", name,
                     f"{100 * verdicts[verdict] / n_claims:.2f}%"))
    rows.append(("Claims", "Total", n_claims))
    rows.append(("", "Per case", f"{n_claims / len(cases):.2f}"))
    for i, label in enumerate(CLASS_LABELS):
        rows.append(("Cases per class" if i == 0 else "", label, classes[label]))
    width = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{width[0]}}  {b:<{width[1]}}  {v}" for a, b, v in rows)


# ----------------------------------------------------------------------------- configuration

@dataclass(frozen=True)
class Role:
    name: str  # eval | user | judge
    model: str
    base_url: str
    api_key: str = field(repr=False)  # never written anywhere
    temperature: float

    @property
    def host(self) -> str:
        parts = urlsplit(self.base_url)
        return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else self.base_url

    def describe(self) -> str:
        return f"{ROLE_NAMES[self.name]} {self.model!r} at {self.host}"


@dataclass(frozen=True)
class Settings:
    run_id: str
    dataset: Path
    output_root: Path
    limit: int | None
    roles: dict[str, Role]
    max_tokens: int
    timeout: float
    retries: int
    concurrency: int
    keep_going: bool
    stream: bool
    dry_run: bool
    user_condition: str = "standard"


ENV_PREFIX = {"eval": "LEXPILOT_EVAL", "user": "LEXPILOT_USER", "judge": "LEXPILOT_JUDGE"}
MODEL_ENV = {"eval": "LEXPILOT_MODEL", "user": "LEXPILOT_USER_MODEL", "judge": "LEXPILOT_JUDGE_MODEL"}
DEFAULT_MODELS = {"user": "DeepSeek-V4.1-Flash", "judge": "DeepSeek-R1"}
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def resolve_roles(args: argparse.Namespace, env=os.environ) -> dict[str, Role]:
    """Model ids, endpoints and keys per role, with the documented fallbacks."""
    flags = {"eval": args.model, "user": args.user_model, "judge": args.judge_model}
    roles = {}
    for role in ROLES:
        model = flags[role] or env.get(MODEL_ENV[role]) or DEFAULT_MODELS.get(role)
        if not model:
            raise HarnessError("no evaluated model chosen: pass --model MODEL_ID or set LEXPILOT_MODEL")
        prefix = ENV_PREFIX[role]
        base_url = env.get(f"{prefix}_BASE_URL") or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        api_key = env.get(f"{prefix}_API_KEY") or env.get("OPENAI_API_KEY") or ""
        temperature = args.judge_temperature if role == "judge" else args.temperature
        roles[role] = Role(role, model, base_url, api_key, temperature)
    return roles


def add_common_args(parser: argparse.ArgumentParser, user_condition: bool = False) -> None:
    a = parser.add_argument
    a("--run-id", required=True, help="name of this run; rerunning with the same id resumes it")
    a("--model", help="evaluated model id (else $LEXPILOT_MODEL)")
    a("--user-model", help="User Model id (else $LEXPILOT_USER_MODEL, else DeepSeek-V4.1-Flash)")
    a("--judge-model", help="judge model id (else $LEXPILOT_JUDGE_MODEL, else DeepSeek-R1)")
    a("--dataset", type=Path, default=DEFAULT_DATASET, help="dataset JSON (default: %(default)s)")
    a("--output-root", type=Path, default=HERE, help="where results go (default: next to the scripts)")
    a("--limit", type=int, help="evaluate only the first N cases in file order")
    a("--temperature", type=float, default=0.7, help="evaluated model and User Model (default 0.7)")
    a("--judge-temperature", type=float, default=0.1, help="judge (default 0.1)")
    a("--max-tokens", type=int, default=8192, help="per call, all roles (default 8192)")
    a("--timeout", type=float, default=120.0, help="seconds without a byte before a call is retried (default 120)")
    a("--retries", type=int, default=3, help="retries of a transient failure per call (default 3)")
    a("--concurrency", type=int, default=8, help="cases run at once (default 8)")
    a("--keep-going", action="store_true", help="on a failed case, go on with the others")
    a("--stream", action="store_true",
      help="stream replies, so --timeout bounds a stalled connection, not a long generation")
    a("--dry-run", action="store_true", help="print the cases and calls the stage would make; call nothing")
    if user_condition:
        a("--user-condition", choices=USER_CONDITIONS, default="standard",
          help="simulated user behaviour (default standard)")


def settings_from_args(args: argparse.Namespace, env=os.environ) -> Settings:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.run_id):
        raise HarnessError(f"--run-id {args.run_id!r}: use letters, digits, '.', '_' or '-' only")
    for name in ("limit", "concurrency", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise HarnessError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.retries < 0 or args.timeout <= 0:
        raise HarnessError("--retries must be >= 0 and --timeout > 0")
    return Settings(
        run_id=args.run_id, dataset=args.dataset.resolve(), output_root=args.output_root.resolve(),
        limit=args.limit, roles=resolve_roles(args, env), max_tokens=args.max_tokens,
        timeout=args.timeout, retries=args.retries, concurrency=args.concurrency,
        keep_going=args.keep_going, stream=args.stream, dry_run=args.dry_run,
        user_condition=getattr(args, "user_condition", "standard"),
    )


# ----------------------------------------------------------------------------- output layout

def model_dirname(model: str) -> str:
    """Filesystem-safe model name plus a hash of the exact id, so two ids never share a folder."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._-")[:60] or "model"
    return f"{safe}-{hashlib.sha256(model.encode('utf-8')).hexdigest()[:8]}"


# Checkpoint files, as the reference README lists them: (top folder, file name).
A1 = ("AwN_gen", "a1.jsonl")
INTERACTION = ("AwN_gen", "interaction.jsonl")
FORCE_ASK = ("Force_ask_gen", "force_ask.jsonl")
DIRECT_GEN = ("Force_judge_gen", "a1_direct.jsonl")
GOLD_GEN = ("Force_judge_gen", "a1_force_judge.jsonl")
LCA_RESULTS = ("eval_results", "LCA_results.jsonl")
DCG_RESULTS = ("eval_results", "DCG_results.jsonl")
LJP_DIRECT = ("eval_results", "LJP_direct.jsonl")
LJP_GOLD = ("eval_results", "LJP_gold.jsonl")
LJP_INTERACTION = ("eval_results", "LJP_interaction.jsonl")


def checkpoint_path(root: Path, run_id: str, model: str, where: tuple[str, str]) -> Path:
    return root / where[0] / run_id / model_dirname(model) / where[1]


def manifest_path(root: Path, run_id: str, model: str) -> Path:
    return root / "runs" / run_id / model_dirname(model) / "manifest.json"


# ----------------------------------------------------------------------------- model calls

class FatalError(HarnessError):
    """A permanent failure (auth, unknown model, bad request): the stage stops at once."""


class CaseFailed(Exception):
    """This case could not be completed now; it is retried on the next run."""


class Aborted(Exception):
    """The stage is stopping; the case in hand is left for the next run."""


TRANSIENT_STATUS = {408, 409, 429}
# HTTP 400 for a prompt longer than the context: OpenAI, vLLM and llama.cpp word it like this
CONTEXT_WINDOW = re.compile(r"context_length_exceeded|maximum context length|context window|context length", re.I)
MAX_BACKOFF = 60.0


def retry_after_seconds(headers) -> float | None:
    if headers is None:
        return None
    if headers.get("retry-after-ms"):
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def backoff_seconds(attempt: int, retry_after: float | None, base: float) -> float:
    if retry_after is not None:
        return min(retry_after, 10 * MAX_BACKOFF)
    return min(MAX_BACKOFF, base * 2 ** attempt) * random.uniform(0.5, 1.0)


@dataclass
class Usage:
    """Calls and tokens per role, for one record or a whole stage."""
    by_role: dict = field(default_factory=dict)

    def add(self, role: str, prompt_tokens: int, completion_tokens: int, calls: int = 1, unreported: int = 0) -> None:
        """`unreported`: calls whose reply carried no token counts (e.g. llama.cpp's streamed replies)."""
        entry = self.by_role.setdefault(role, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        entry["calls"] += calls
        entry["prompt_tokens"] += prompt_tokens
        entry["completion_tokens"] += completion_tokens
        if unreported:
            entry["unreported_calls"] = entry.get("unreported_calls", 0) + unreported

    def merge(self, other: dict) -> None:
        for role, e in other.items():
            self.add(role, e["prompt_tokens"], e["completion_tokens"], e["calls"], e.get("unreported_calls", 0))


class Progress:
    """Counters shared by the workers of a stage, drawn on stderr so retrying never looks like a hang."""

    def __init__(self, stage: str, total: int, stream=None):
        self.stage, self.total, self.stream = stage, total, stream or sys.stderr
        self.done = self.failed = self.in_flight = self.retries = 0
        self.last_error = ""
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_draw = self.start

    def update(self, **deltas) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def retry(self, message: str) -> None:
        with self.lock:
            self.retries += 1
            self.last_error = message

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        finished = self.done + self.failed
        eta = f"{elapsed / finished * (self.total - finished):.0f}s" if finished else "?"
        text = (f"[{self.stage}] {self.done}/{self.total} done, {self.failed} failed, "
                f"{self.in_flight} calls in flight, {self.retries} retries, "
                f"elapsed {elapsed:.0f}s, remaining ~{eta}")
        return text + (f" | last retry: {self.last_error}" if self.last_error else "")

    def draw(self, final: bool = False) -> None:
        if not self.total:
            return
        now = time.monotonic()
        if self.tty:
            if final or now - self._last_draw >= 0.2:
                self.stream.write("\r\033[K" + self.line()[:200] + ("\n" if final else ""))
                self.stream.flush()
                self._last_draw = now
        elif final or now - self._last_draw >= 30:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last_draw = now


class Throttle:
    """Requests in flight to one endpoint: on HTTP 429 every worker waits out Retry-After and the limit
    halves; each success raises it again (AIMD), so a rate-limited provider is not hammered."""

    def __init__(self, limit: int):
        self.max_limit, self.limit, self.in_flight = limit, float(limit), 0
        self.resume_at = self.last_cut = 0.0
        self.cond = threading.Condition()

    def acquire(self, abort: threading.Event) -> None:
        with self.cond:
            while True:
                if abort.is_set():
                    raise Aborted()
                wait = self.resume_at - time.monotonic()
                if wait <= 0 and self.in_flight < int(self.limit):
                    self.in_flight += 1
                    return
                self.cond.wait(min(max(wait, 0.01), 0.5))

    def release(self, rate_limited: bool, retry_after: float | None) -> None:
        with self.cond:
            self.in_flight -= 1
            now = time.monotonic()
            if rate_limited:
                pause = retry_after if retry_after is not None else 1.0
                self.resume_at = max(self.resume_at, now + pause)
                if now - self.last_cut > pause:  # one cut per push-back, not one per rejected request
                    self.limit, self.last_cut = max(1.0, self.limit / 2), now
            else:
                self.limit = min(self.max_limit, self.limit + 1 / self.limit)
            self.cond.notify_all()


RATE_LIMITED_ATTEMPTS = 30  # 429s mean "slow down", not "failed": waited out under their own cap


def _message_of(error: Exception) -> str:
    text = getattr(error, "message", None) or str(error)
    return " ".join(text.split())[:160]


class ModelCaller:
    """Chat completions for the three roles, with the retry rules of the harness."""

    def __init__(self, settings: Settings, progress: Progress, abort: threading.Event,
                 clients: dict | None = None, backoff_base: float | None = None):
        import openai  # imported here so that offline commands (validation, results) never need it
        self.openai = openai
        self.settings, self.progress, self.abort = settings, progress, abort
        self.backoff_base = backoff_base if backoff_base is not None else \
            float(os.environ.get("LEXPILOT_BACKOFF_BASE", "1.0"))
        self.throttles = {url: Throttle(settings.concurrency * 2)
                          for url in {r.base_url for r in settings.roles.values()}}
        self.clients = clients or {
            role: openai.OpenAI(base_url=r.base_url, api_key=r.api_key or "EMPTY",
                                timeout=settings.timeout, max_retries=0)
            for role, r in settings.roles.items()
        }

    def _request(self, role: Role, prompt: str):
        kwargs = dict(model=role.model, messages=[{"role": "user", "content": prompt}],
                      temperature=role.temperature, max_tokens=self.settings.max_tokens, n=1)
        client = self.clients[role.name]
        if not self.settings.stream:
            response = client.chat.completions.create(**kwargs)
            if not response.choices:
                return "", None, response.usage
            choice = response.choices[0]
            return choice.message.content or "", choice.finish_reason, response.usage
        parts, finish, usage = [], None, None
        stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
        try:
            for chunk in stream:
                if self.abort.is_set():
                    raise Aborted()
                usage = chunk.usage or usage
                for choice in chunk.choices or ():
                    if choice.delta and choice.delta.content:
                        parts.append(choice.delta.content)
                    finish = choice.finish_reason or finish
        finally:
            stream.close()
        return "".join(parts), finish, usage

    def chat(self, role_name: str, prompt: str, usage: Usage) -> str:
        """One non-empty, untruncated reply; transient failures are retried, permanent ones raise FatalError."""
        role = self.settings.roles[role_name]
        throttle = self.throttles[role.base_url]
        attempts = self.settings.retries + 1
        attempt = rate_limited = 0
        problem = ""
        while attempt < attempts:
            retry_after, problem = None, ""
            throttle.acquire(self.abort)
            self.progress.update(in_flight=1)
            try:
                text, finish, tokens = self._request(role, prompt)
            except self.openai.APIStatusError as e:
                status = e.status_code
                if status == 400 and CONTEXT_WINDOW.search(f"{getattr(e, 'code', '')} {e.message}"):
                    # this case's prompt is too long for this model: no retry helps, the other cases may fit
                    raise CaseFailed(f"{role.describe()}: the prompt plus --max-tokens {self.settings.max_tokens} "
                                     f"exceed the model's context window ({' '.join(e.message.split())[:240]}). "
                                     "Lower --max-tokens or serve the model with a longer context") from None
                if status not in TRANSIENT_STATUS and status < 500:
                    hint = {401: "check the API key variable for this role",
                            403: "check the API key's permissions",
                            404: "check the model id and the base URL"}.get(status, "check the request settings")
                    raise FatalError(f"{role.describe()}: HTTP {status}: {_message_of(e)} ({hint})") from None
                problem = f"HTTP {status}"
                retry_after = retry_after_seconds(e.response.headers)
            except self.openai.APITimeoutError:
                problem = f"no response within --timeout {self.settings.timeout:g}s"
            except self.openai.APIConnectionError as e:
                problem = f"connection error: {_message_of(e.__cause__ or e)}"
            else:
                if tokens is not None and tokens.prompt_tokens is not None:
                    usage.add(role_name, tokens.prompt_tokens or 0, tokens.completion_tokens or 0)
                else:
                    usage.add(role_name, 0, 0, unreported=1)
                if finish == "length":
                    problem = f"reply truncated at --max-tokens {self.settings.max_tokens}"
                elif not text.strip():
                    problem = "empty reply"
                else:
                    return text
            finally:
                self.progress.update(in_flight=-1)
                pushed_back = problem == "HTTP 429"
                throttle.release(pushed_back, retry_after)
            self.progress.retry(f"{role.describe()}: {problem}")
            if pushed_back and retry_after is not None and rate_limited < RATE_LIMITED_ATTEMPTS:
                rate_limited += 1  # the throttle makes every worker wait out Retry-After
                continue
            attempt += 1
            if attempt < attempts and self.abort.wait(backoff_seconds(attempt - 1, retry_after, self.backoff_base)):
                raise Aborted()
        hint = ("; raise --max-tokens if the model needs the room" if problem.startswith("reply truncated") else
                "; raise --timeout, or use --stream so that only a stalled connection times out"
                if problem.startswith("no response") else "")
        raise CaseFailed(f"{role.describe()}: {problem} (after {attempts} attempts"
                         + (f" and {rate_limited} rate-limited ones)" if rate_limited else ")") + hint)


# ----------------------------------------------------------------------------- judge outputs

def clean_judge_output(raw: str) -> str:
    """Drop what reasoning models add around an answer: a <think> block, a code fence, whitespace."""
    text = raw
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    text = text.strip()
    fenced = re.fullmatch(r"```[A-Za-z]*\s*(.*?)\s*```", text, re.S)
    return fenced.group(1).strip() if fenced else text


def parse_lca_label(raw: str) -> str:
    text = clean_judge_output(raw)
    if text not in ("策略一", "策略二"):
        raise ValueError("expected exactly 策略一 or 策略二")
    return text


def parse_dcg_label(raw: str) -> str:
    text = clean_judge_output(raw)
    if text not in ("是", "否"):
        raise ValueError("expected exactly 是 or 否")
    return text


def verdict_parser(n_claims: int) -> Callable[[str], list[str]]:
    def parse(raw: str) -> list[str]:
        try:
            data = json.loads(clean_judge_output(raw))
        except json.JSONDecodeError:
            raise ValueError("not JSON") from None
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise ValueError('expected {"results": [...]}')
        labels = ["驳回" if label == "被驳回" else label for label in data["results"]]
        if any(label not in VERDICTS for label in labels):
            raise ValueError("every label must be 支持, 部分支持 or 驳回")
        if len(labels) != n_claims:
            raise ValueError(f"{len(labels)} labels for {n_claims} claims")
        return labels
    return parse


JUDGE_ATTEMPTS = 3


@dataclass
class CaseCalls:
    """The calls of one case: everything a protocol step may ask for, with the usage it costs."""
    caller: ModelCaller
    prompts: dict[str, str]
    case: Case
    usage: Usage = field(default_factory=Usage)  # of the record being built, made now
    spent: Usage = field(default_factory=Usage)  # of the whole case, saved or not
    user_condition: str = "standard"
    journal: "CallJournal | None" = None
    step: str = ""  # the step being run, for the journal
    replayed: Usage = field(default_factory=Usage)  # of the record being built, paid in an earlier run
    replays: int = 0

    def _chat(self, role: str, prompt: str, keep: bool = True) -> str:
        """A reply paid for in an earlier, unfinished attempt at this step is replayed, not bought again."""
        if self.journal:
            replayed = self.journal.take(self.case.number, self.step, role, prompt)
            if replayed is not None:
                self.replayed.merge(replayed[1])
                self.replays += 1
                return replayed[0]
        used = Usage()
        try:
            reply = self.caller.chat(role, prompt, used)
        finally:
            self.usage.merge(used.by_role)
        if keep and self.journal:
            self.journal.keep(self.case.number, self.step, role, prompt, reply, used.by_role)
        return reply

    def generate(self, role: str, prompt_name: str, **slots) -> str:
        return self._chat(role, fill(self.prompts[prompt_name], **slots))

    def judge(self, prompt_name: str, parse: Callable[[str], object], **slots):
        """(parsed answer, raw outputs): an invalid output is asked again, up to three attempts."""
        prompt = fill(self.prompts[prompt_name], **slots)
        raws = []
        for _ in range(JUDGE_ATTEMPTS):
            raws.append(self._chat("judge", prompt, keep=False))  # only a valid output is worth keeping
            try:
                parsed = parse(raws[-1])
            except ValueError as e:
                problem = str(e)
                self.caller.progress.retry(f"invalid {prompt_name} output: {problem}")
            else:
                if self.journal:
                    self.journal.keep(self.case.number, self.step, "judge", prompt, raws[-1], {})
                return parsed, raws
        raise CaseFailed(f"{prompt_name} output invalid after {JUDGE_ATTEMPTS} attempts ({problem}); "
                         f"last raw output: {raws[-1][:200]!r}")

    def user_reply(self, dialogue: list[dict], prompt_name: str = "user_standard") -> str:
        """The User Model sees the conversation and the hidden key details, never focal points or verdicts."""
        return self.generate("user", prompt_name, history=render_history(dialogue),
                             key_facts=render_key_facts(self.case))


# ----------------------------------------------------------------------------- checkpoints

def record_digest(record: dict) -> str:
    return canonical_hash(record)


def upstream_digest(records: dict[str, dict]) -> str:
    return canonical_hash({name: record_digest(r) for name, r in sorted(records.items())})


def read_checkpoint(path: Path, cases: dict[str, Case], what_to_do: str) -> dict[str, tuple[int, dict]]:
    """case_number -> (line, record); a malformed, foreign or stale line is an error, never skipped."""
    records: dict[str, tuple[int, dict]] = {}
    if not path.exists():
        return records
    with path.open("r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
                number = record["case_number"]
                version = record["schema_version"]
                input_hash = record["input_hash"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise HarnessError(f"{where}: malformed or truncated record. Inspect the line; delete it "
                                   f"to have that case generated again, then rerun.") from None
            if version != SCHEMA_VERSION:
                raise HarnessError(f"{where}: record has schema version {version}, this harness writes "
                                   f"{SCHEMA_VERSION}. Use a new --run-id.")
            if number in records:
                raise HarnessError(f"{where}: second record for case {number} (first at line "
                                   f"{records[number][0]}). Delete one of them, then rerun.")
            if number not in cases:
                raise HarnessError(f"{where}: case {number} is not among this run's selected cases "
                                   f"({what_to_do}).")
            if input_hash != cases[number].input_hash:
                raise HarnessError(f"{where}: case {number} was generated from different inputs "
                                   f"(the dataset changed). {what_to_do}.")
            records[number] = (lineno, record)
    return records


class CheckpointWriter:
    """Appends one record per line; each line is flushed and synced before the case is reported done."""

    def __init__(self):
        self.lock = threading.Lock()
        self.files = {}

    def append(self, path: Path, record: dict, sync: bool = True) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self.lock:
            f = self.files.get(path)
            if f is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                f = self.files[path] = path.open("a", encoding="utf-8")
            f.write(line)
            f.flush()
            if sync:  # the journal is a cache: a line lost in a machine crash only costs that call again
                os.fsync(f.fileno())

    def close(self) -> None:
        with self.lock:
            for f in self.files.values():
                f.close()
            self.files.clear()


class CallJournal:
    """Every accepted reply of an unfinished step, so that a rerun replays it instead of paying again.

    A step's record is written only when all its calls succeeded; without the journal, a failure in the
    last call of a step (the underspecified a1 response, round 3 of an interaction) would throw away the
    paid replies before it. Replies are replayed per (case, step, role, prompt) in the order they were
    made, which follows the protocol path exactly because each prompt contains the replies before it.
    """

    def __init__(self, path: Path, writer: CheckpointWriter, wanted: set[tuple[str, str]]):
        self.path, self.writer = path, writer
        self.replies: dict[tuple, deque] = {}
        self.lock = threading.Lock()
        self.unreadable = 0
        if path.exists():
            with path.open(encoding="utf-8") as f:
                for line in f:
                    try:
                        e = json.loads(line)
                        key = (e["case_number"], e["step"], e["key"])
                        entry = (e["reply"], e["usage"])
                    except (json.JSONDecodeError, KeyError, TypeError):
                        self.unreadable += 1  # a line torn by a crash: that call is simply made again
                        continue
                    if key[:2] in wanted:
                        self.replies.setdefault(key, deque()).append(entry)

    @staticmethod
    def key(role: str, prompt: str) -> str:
        return hashlib.sha256(f"{role}\0{prompt}".encode()).hexdigest()[:24]

    def take(self, case_number: str, step: str, role: str, prompt: str) -> tuple[str, dict] | None:
        with self.lock:
            queue = self.replies.get((case_number, step, self.key(role, prompt)))
            return queue.popleft() if queue else None

    def keep(self, case_number: str, step: str, role: str, prompt: str, reply: str, usage: dict) -> None:
        self.writer.append(self.path, {"case_number": case_number, "step": step, "key": self.key(role, prompt),
                                       "reply": reply, "usage": usage}, sync=False)

    def compact(self, saved: dict[str, dict]) -> None:
        """Drop the replies of steps whose record is saved now (`saved`: step -> case_number -> record);
        the file goes when nothing is left. Other stages' steps are kept."""
        if not self.path.exists():
            return
        kept = []
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    e = json.loads(line)
                    done = e["case_number"] in saved[e["step"]] if e["step"] in saved else False
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # torn: counted when it was read
                if not done:
                    kept.append(line)
        if not kept:
            self.path.unlink()
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, self.path)


def journal_path(root: Path, run_id: str, model: str) -> Path:
    return manifest_path(root, run_id, model).with_name("calls_journal.jsonl")


# ----------------------------------------------------------------------------- manifest and lock

COMPARED_MANIFEST_FIELDS = ("dataset_sha256", "selected_cases", "code_hash", "prompt_hash",
                            "models", "generation", "user_condition")


def code_and_prompt_hashes() -> tuple[str, str]:
    def digest(paths):
        h = hashlib.sha256()
        for p in paths:
            h.update(p.name.encode() + b"\0" + p.read_bytes().replace(b"\r\n", b"\n") + b"\0")
        return h.hexdigest()[:16]
    prompt_files = sorted(PROMPT_DIR.glob("*.txt"))
    return digest([HERE / f for f in CODE_FILES if (HERE / f).exists()]), digest(prompt_files)


def package_versions() -> dict[str, str]:
    from importlib import metadata
    versions = {"python": sys.version.split()[0]}
    for package in ("openai", "numpy", "scikit-learn"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def build_manifest(settings: Settings, dataset_sha256: str, selected: list[Case]) -> dict:
    code_hash, prompt_hash = code_and_prompt_hashes()
    roles = settings.roles
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": settings.run_id,
        "dataset_sha256": dataset_sha256,
        "dataset_path": str(settings.dataset),
        "selected_cases": [c.number for c in selected],
        "code_hash": code_hash,
        "prompt_hash": prompt_hash,
        "models": {r: {"model": roles[r].model, "endpoint_host": roles[r].host} for r in ROLES},
        "generation": {"temperature": roles["eval"].temperature, "user_temperature": roles["user"].temperature,
                       "judge_temperature": roles["judge"].temperature,
                       "max_tokens": settings.max_tokens, "n": 1},
        "user_condition": settings.user_condition,
        "package_versions": package_versions(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def manifest_differences(saved: dict, current: dict) -> list[str]:
    return [name for name in COMPARED_MANIFEST_FIELDS if saved.get(name) != current.get(name)]


def check_manifest(path: Path, current: dict, write: bool) -> None:
    """Stop before any call when the run's saved settings differ; write the manifest on first use."""
    if path.exists():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise HarnessError(f"{path}: unreadable manifest ({e.msg} at line {e.lineno}). "
                               "Restore it or use a new --run-id.") from None
        differing = manifest_differences(saved, current)
        if "user_condition" in differing:
            raise HarnessError(f"{path}: this run's user condition is {saved.get('user_condition')!r}, not "
                               f"{current.get('user_condition')!r}. Pass --user-condition "
                               f"{saved.get('user_condition')} (LexAwN_gen.py and eval_LJP_interaction.py take it; "
                               "the other stages belong to standard runs), or use a new --run-id.")
        if differing:
            raise HarnessError(f"{path}: this run was started with other settings ({', '.join(differing)} "
                               "differ). Rerun with the run's settings, or use a new --run-id.")
    elif write:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(current, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, path)


class RunLock:
    """One writer per run and model; the OS releases the lock when its process dies."""

    def __init__(self, path: Path):
        self.path = path
        self.file = None

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a+")
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


# ----------------------------------------------------------------------------- stages

@dataclass(frozen=True)
class Step:
    """One checkpointed unit of a protocol: a record per case in one JSONL file."""
    name: str
    where: tuple[str, str]
    run: Callable[[CaseCalls, dict], dict]  # (calls, upstream records by step name) -> record body
    needs: tuple[str, ...] = ()
    max_calls: Callable[[dict, Settings], dict] | dict = field(default_factory=dict)
    producer: str = ""  # script that writes this step's file, for messages
    prompts: dict = field(default_factory=dict)  # role -> prompt name, for the dry run's token estimate

    def calls_for(self, upstream: dict, settings: Settings) -> dict:
        return self.max_calls(upstream, settings) if callable(self.max_calls) else self.max_calls


@dataclass
class StageState:
    settings: Settings
    steps: list[Step]
    cases: list[Case]
    paths: dict[str, Path]
    records: dict[str, dict[str, dict]]  # step -> case_number -> record

    def pending(self) -> list[Case]:
        return [c for c in self.cases if any(c.number not in self.records[s.name] for s in self.steps)]


def load_state(settings: Settings, steps: list[Step], external: dict[str, Step],
               cases: list[Case]) -> StageState:
    model = settings.roles["eval"].model
    by_number = {c.number: c for c in cases}
    all_steps = list(external.values()) + steps
    paths = {s.name: checkpoint_path(settings.output_root, settings.run_id, model, s.where) for s in all_steps}
    records = {}
    for s in all_steps:
        loaded = read_checkpoint(paths[s.name], by_number, "Use the same --dataset and --limit as the "
                                 "rest of this run, or a new --run-id")
        records[s.name] = {n: r for n, (_, r) in loaded.items()}
        lines = {n: line for n, (line, _) in loaded.items()}
        for need in s.needs:  # a record must have been built from the upstream records that exist now
            for number, record in records[s.name].items():
                upstream = records[need].get(number)
                if upstream is None or record.get("upstream_hash", {}).get(need) != record_digest(upstream):
                    raise HarnessError(
                        f"{paths[s.name]}:{lines[number]}: case {number} was built from a {need} record "
                        f"that {'no longer exists' if upstream is None else 'has changed'}. Delete this line "
                        "to have it redone, or use a new --run-id.")
    for s in external.values():
        missing = [c.number for c in cases if c.number not in records[s.name]]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise HarnessError(f"{paths[s.name]}: the {s.name} stage is incomplete ({len(missing)} of "
                               f"{len(cases)} cases missing: {shown}). Run {s.producer} for this run first.")
    return StageState(settings, steps, cases, paths, records)


def run_case(state: StageState, calls: CaseCalls, writer: CheckpointWriter) -> None:
    case = calls.case
    for step in state.steps:
        if case.number in state.records[step.name]:
            continue
        calls.usage, calls.replayed, calls.step = Usage(), Usage(), step.name
        upstream = {need: state.records[need][case.number] for need in step.needs}
        try:
            body = step.run(calls, upstream)
        finally:
            calls.spent.merge(calls.usage.by_role)
        cost = Usage()  # what this record cost, including replies paid in an earlier run and replayed
        cost.merge(calls.usage.by_role)
        cost.merge(calls.replayed.by_role)
        record = {"case_number": case.number, "schema_version": SCHEMA_VERSION, "input_hash": case.input_hash,
                  "cause_of_action": case.cause, **body,
                  "upstream_hash": {need: record_digest(r) for need, r in upstream.items()},
                  "usage": cost.by_role}
        writer.append(state.paths[step.name], record)
        state.records[step.name][case.number] = record


def planned_calls(state: StageState, cases: list[Case], prompts: dict[str, str] | None = None) -> tuple[Counter, Counter]:
    """Calls per role at most, and the characters of the known prompt text they would send: the prompt and
    the case's inputs (the complete history standing for either history); earlier replies are not known."""
    calls, chars = Counter(), Counter()
    for case in cases:
        inputs = {"history": len(render_history(case.complete)), "key_facts": len(render_details_by_focal_point(case)),
                  "focus_text": len(render_focal_points(case)), "claims": len(render_claims(case)), "ai_response": 0}
        for step in state.steps:
            if case.number in state.records[step.name]:
                continue
            upstream = {need: state.records[need].get(case.number) for need in step.needs}
            planned = step.calls_for(upstream, state.settings)
            calls.update(planned)
            for role, n in planned.items():
                template = (prompts or {}).get(step.prompts.get(role), "")
                # the judges' {history} slot holds a reply to judge, not the case's history
                known = {**inputs, "history": 0} if role == "judge" else inputs
                chars[role] += n * (len(SLOT.sub("", template)) + sum(known[slot] for slot in SLOT.findall(template)))
    return calls, chars


def _format_usage(usage: Usage) -> str:
    parts = []
    for role in ROLES:
        e = usage.by_role.get(role)
        if e:
            parts.append(f"{role} {e['calls']} calls/{e['prompt_tokens']}+{e['completion_tokens']} tokens"
                         + (f" ({e['unreported_calls']} calls without token counts)" if e.get("unreported_calls") else ""))
    return "; ".join(parts) or "no calls"


def run_stage(name: str, settings: Settings, steps: list[Step], external: list[Step] | None = None,
              clients: dict | None = None, out=None, err=None) -> int:
    """Load, resume, run every pending case of the given steps, save; returns the exit status.

    `external` are upstream steps written by another script: their files must be complete.
    """
    external = {s.name: s for s in external or ()}
    out, err = out or sys.stdout, err or sys.stderr
    all_cases, dataset_sha = load_dataset(settings.dataset)
    selected = all_cases[:settings.limit] if settings.limit else all_cases
    model = settings.roles["eval"].model
    manifest = build_manifest(settings, dataset_sha, selected)
    mpath = manifest_path(settings.output_root, settings.run_id, model)
    if settings.dry_run:
        check_manifest(mpath, manifest, write=False)
        state = load_state(settings, steps, external, selected)
        pending = state.pending()
        calls, chars = planned_calls(state, pending, load_prompts())
        print(f"[{name}] dry run: {len(pending)} of {len(selected)} selected cases to do "
              f"(run {settings.run_id}, model {model!r})", file=out)
        print("cases: " + (", ".join(c.number for c in pending) or "none"), file=out)
        print("calls at most (not counting retries): " + ", ".join(
            f"{role} {calls.get(role, 0)}" for role in ROLES), file=out)
        print("tokens, estimated: " + "; ".join(
            f"{role} prompt ~{chars.get(role, 0):,}, completion <= {calls.get(role, 0) * settings.max_tokens:,}"
            for role in ROLES if calls.get(role)), file=out)
        print("  (prompt: the prompts and case inputs at one token per character, about right for Chinese; "
              "replies carried into later prompts come on top, up to --max-tokens each)", file=out)
        return 0
    with RunLock(mpath.with_name(".lock")):
        check_manifest(mpath, manifest, write=True)
        state = load_state(settings, steps, external, selected)
        return _execute(name, state, clients, out, err)


def _execute(name: str, state: StageState, clients, out, err) -> int:
    settings = state.settings
    pending = state.pending()
    skipped = len(state.cases) - len(pending)
    if not pending:  # nothing to do: no client, no pool
        print(f"[{name}] cases: 0 done, {skipped} skipped (already saved), 0 failed; no calls", file=out)
        return 0
    progress = Progress(name, len(pending), err)
    abort, stop_new = threading.Event(), threading.Event()
    caller = ModelCaller(settings, progress, abort, clients)
    prompts = load_prompts()
    writer = CheckpointWriter()
    failures: list[tuple[str, str]] = []
    fatal: list[str] = []
    total_usage = Usage()
    replays = {"count": 0}
    journal = CallJournal(journal_path(settings.output_root, settings.run_id, settings.roles["eval"].model), writer,
                          {(c.number, s.name) for c in pending for s in state.steps
                           if c.number not in state.records[s.name]})
    if journal.unreadable:
        print(f"[{name}] {journal.path}: {journal.unreadable} unreadable line(s) ignored (probably torn by a "
              "crash); those calls are made again", file=err)
    usage_lock = threading.Lock()
    started = time.monotonic()

    finished = {"count": 0}
    all_finished = threading.Event()

    def work(case: Case) -> None:
        try:
            work_on(case)
        finally:
            with usage_lock:
                finished["count"] += 1
                if finished["count"] == len(pending):
                    all_finished.set()

    def work_on(case: Case) -> None:
        if stop_new.is_set():
            return
        calls = CaseCalls(caller, prompts, case, user_condition=settings.user_condition, journal=journal)
        try:
            run_case(state, calls, writer)
            progress.update(done=1)
        except FatalError as e:
            fatal.append(str(e))
            abort.set()
            stop_new.set()
        except Aborted:
            pass
        except CaseFailed as e:
            failures.append((case.number, str(e)))
            progress.update(failed=1)
            if not settings.keep_going:
                stop_new.set()
        except Exception as e:  # a bug must not lose the other cases' work: report it like a failure
            failures.append((case.number, f"internal error {type(e).__name__}: {e}"))
            progress.update(failed=1)
            stop_new.set()
        finally:
            with usage_lock:
                total_usage.merge(calls.spent.by_role)
                replays["count"] += calls.replays

    pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="case")
    for case in pending:
        pool.submit(work, case)
    try:
        # A counter, not wait() over every future: that would cost O(cases) per completion.
        while not all_finished.wait(0.2):
            progress.draw()
    except KeyboardInterrupt:
        abort.set()
        stop_new.set()
        with writer.lock:  # no record is half-written when we leave
            progress.draw(final=True)
            print(f"\n[{name}] interrupted: completed cases are saved; rerun the same command to resume.",
                  file=err, flush=True)
            os._exit(130)
    pool.shutdown()
    writer.close()
    journal.compact({s.name: state.records[s.name] for s in state.steps})
    progress.draw(final=True)
    failed_numbers = sorted(n for n, _ in failures)
    print(f"[{name}] cases: {progress.done} done, {skipped} skipped (already saved), "
          f"{len(failures)} failed; {_format_usage(total_usage)}"
          + (f"; {replays['count']} replies paid in an earlier run replayed" if replays["count"] else "")
          + f"; wall {time.monotonic() - started:.1f}s",
          file=out, flush=True)
    if fatal:
        print(f"[{name}] stopped: {fatal[0]}", file=err)
        return 1
    if failures:
        for number, message in sorted(failures):
            print(f"[{name}] case {number} failed: {message}", file=err)
        not_started = len(pending) - progress.done - len(failures)
        tail = f"; {not_started} cases not started" if not_started > 0 else ""
        print(f"[{name}] {len(failures)} case(s) failed ({', '.join(failed_numbers)}){tail}. "
              "Rerun the same command to retry them; saved cases are kept.", file=err)
        return 1
    return 0


def stage_main(doc: str, name: str, steps: list[Step], external: list[Step] | None = None,
               user_condition: bool = False, argv=None) -> int:
    """Parse the common flags and run a stage; errors are one clear message and a non-zero status."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, user_condition)
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
        return run_stage(name, settings, steps, external)
    except HarnessError as e:
        print(f"[{name}] error: {e}", file=sys.stderr)
        return 2


# ----------------------------------------------------------------------------- command line

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Validate a LexPilot dataset and print its statistics.")
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


if __name__ == "__main__":
    sys.exit(main())
