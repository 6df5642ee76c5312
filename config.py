"""Run configuration: the three roles (model, endpoint, key, temperature), the options every stage
takes on the command line and the environment variables behind them, and their validation.
"""
from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from dataset import DEFAULT_DATASET, HERE
from errors import HarnessError
from records import ROLE_NAMES, ROLES, USER_CONDITIONS


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
    allow_code_change: bool = False


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
    a("--allow-code-change", action="store_true",
      help="resume a run started by another version of the harness code (recorded in the manifest)")
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
        user_condition=getattr(args, "user_condition", "standard"), allow_code_change=args.allow_code_change,
    )
