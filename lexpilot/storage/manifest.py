"""A run's identity on disk: the manifest with the settings that decide the results (which of them are
compared, the code and prompt hashes, the settings hash every record carries), typed (`Manifest`). The lock that
allows one writer per run and model is storage/lock.py's.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import time
import uuid
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import prompt_files_used
from lexpilot.benchmark.records import SCHEMA_VERSION, canonical_hash, readable_records
from lexpilot.benchmark.vocabulary import ROLE_TABLE, ROLES, RoleInfo
from lexpilot.errors import HarnessError
from lexpilot.files import check_input, write_json
from lexpilot.paths import PROMPT_DIR
from lexpilot.settings import Settings
from lexpilot.storage.code import CodeNow, code_hash
from lexpilot.storage.compared import (
    COMPARED_MANIFEST_FIELDS,
    compared_setting,
    manifest_differences,
    settings_digest,
)


@dataclass(frozen=True)
class RoleModel:
    """One role as a run recorded it: its model and its endpoint's host (None: not recorded, or malformed)."""

    model: str | None
    endpoint_host: str | None


@dataclass(frozen=True)
class RoleGeneration:
    """What one role's requests were sent with: a temperature ("default": the provider's) and an output limit."""

    temperature: float | str | None
    max_tokens: int | None


@dataclass(frozen=True)
class RoleServed:
    """The models that served one role's calls in a run, as its manifest keeps them: the calls each served id
    answered, and the ids the run accepts (the first served, then each accepted with --allow-served-model-change)."""

    calls: dict[str, int]
    accepted: list[str]


@dataclass(frozen=True)
class Manifest:
    """A run's manifest, typed: its roles, the settings that decide its results and how its calls travelled.

    Read (`read_manifest`) and written only here; the JSON as saved rides along (`saved`) so that a rewrite keeps
    every field, a later harness's included, in its order. A field a malformed or older manifest lacks is None
    (or empty), never an error here: readers that need it say what is missing."""

    path: Path | None
    run_id: str | None
    dataset_sha256: str | None
    dataset_path: str | None
    selected_cases: list | None
    code_hash: str | None
    prompt_files: dict
    models: dict[str, RoleModel]
    generation: dict[str, RoleGeneration]
    user_condition: str
    rejudged: bool  # a re-judged copy of another run (its field set, whatever its value)
    rejudged_from: str | None  # the run it re-judged (None: not one, or not named by a string)
    incarnation: str | None
    incarnation_late: bool
    rebuilt: bool  # rebuilt from the run's records: its incarnation is new, its batches carry the lost one
    token_fields: dict | None  # the output-limit field each role's endpoint takes, once a call found it
    # role -> the models that served its calls (none for a run made before they were kept)
    served: dict[str, RoleServed]
    # the roles some invocation of the run called without its model's price windows (no --prices, or none for it):
    # their calls were recorded off-peak whatever the hour; None: not recorded (a run made before windows were read)
    unwindowed: tuple[str, ...] | None
    saved: dict = field(repr=False, compare=False)

    @classmethod
    def of(cls, saved: dict, path: Path | None = None) -> Manifest:
        text = lambda name: saved.get(name) if isinstance(saved.get(name), str) else None
        models, generation = _dict_of(saved, "models"), _dict_of(saved, "generation")
        return cls(
            path,
            text("run_id"),
            text("dataset_sha256"),
            text("dataset_path"),
            saved.get("selected_cases") if isinstance(saved.get("selected_cases"), list) else None,
            text("code_hash"),
            _dict_of(saved, "prompt_files"),
            {role: _role_model(entry) for role, entry in models.items()},
            {info.name: _role_generation(generation, info) for info in ROLE_TABLE},
            str(saved.get("user_condition", "standard")),
            bool(saved.get("rejudged_from")),
            text("rejudged_from"),
            text("incarnation") or None,
            saved.get("incarnation_late") is True,
            saved.get("rebuilt_from_records") is True,
            saved.get("token_fields") if isinstance(saved.get("token_fields"), dict) else None,
            _served(_dict_of(saved, SERVED_FIELD)),
            _roles(saved.get(UNWINDOWED_FIELD)),
            saved,
        )

    def model(self, role: str) -> str | None:
        entry = self.models.get(role)
        return entry.model if entry else None

    @functools.cached_property
    def settings_hash(self) -> str:
        """The hash of the settings its records carry (`settings_hash`)."""
        return settings_hash(self.saved)

    def compared(self, name: str):
        """One compared setting as it decides results (`compared_setting`)."""
        return compared_setting(self.saved, name)

    def compared_settings(
        self,
        leave_out: tuple[str, ...] = (),
        prompts: set[str] | None = None,
        files_left_out: frozenset[str] = frozenset(),
        roles_left_out: tuple[str, ...] = (),
    ) -> dict:
        """Every compared setting but those left out, as each decides results: the prompt files on `prompts` only
        (None: every one the run records) and without `files_left_out`; the roles without `roles_left_out`."""
        settings = {name: self.compared(name) for name in COMPARED_MANIFEST_FIELDS if name not in leave_out}
        prompt_files = settings.get("prompt_hash")
        if isinstance(
            prompt_files,
            dict,  # else one digest of every file (a run made before files were listed)
        ):
            settings["prompt_hash"] = {
                file: digest
                for file, digest in prompt_files.items()
                if (prompts is None or file in prompts) and file not in files_left_out
            }
        if roles_left_out and "models" in settings:
            models = settings["models"] if isinstance(settings["models"], dict) else {}
            settings["models"] = {role: m for role, m in models.items() if role not in roles_left_out}
        return settings

    def shared_settings(self, prompts: set[str] | None = None) -> dict:
        """The compared settings a group of runs shares (prompts on `prompts`): a re-judged run counts as
        re-judged, not by the run it re-judged, so that re-judges of several runs by one judge are one group."""
        return self.compared_settings(prompts=prompts) | {"rejudged_from": True if self.rejudged else None}

    def differences(self, current: Manifest | dict, prompt_files: set[str] | None = None) -> list[str]:
        """Each compared setting that differs from `current` (a manifest built now), as `manifest_differences`."""
        built = current.saved if isinstance(current, Manifest) else current
        return manifest_differences(self.saved, built, prompt_files)

    def judge_identity(self) -> dict:
        """The judge as it decides labels: its model and endpoint host (port aside), and its generation."""
        judge = self.generation["judge"]
        return {
            "model": (self.compared("models") or {}).get("judge"),
            "temperature": judge.temperature,
            "max_tokens": judge.max_tokens,
        }


def _dict_of(saved: dict, name: str) -> dict:
    value = saved.get(name)
    return value if isinstance(value, dict) else {}


SERVED_FIELD = "served_models"  # role -> {"calls": {id: calls}, "accepted": [ids]}
ALLOWED_FIELD = "served_model_changes_allowed"  # [{"role": ..., "served": id}]: accepted with the option


def _served(saved: dict) -> dict[str, RoleServed]:
    """The served models as saved, the malformed parts left out (a hand-edited manifest never stops a report)."""
    served = {}
    for role, entry in saved.items():
        entry = entry if isinstance(entry, dict) else {}
        calls: dict = entry["calls"] if isinstance(entry.get("calls"), dict) else {}
        accepted: list = entry["accepted"] if isinstance(entry.get("accepted"), list) else []
        served[role] = RoleServed(
            {str(m): n for m, n in calls.items() if isinstance(n, int) and not isinstance(n, bool)},
            [m for m in accepted if isinstance(m, str)],
        )
    return served


def _role_model(entry) -> RoleModel:
    entry = entry if isinstance(entry, dict) else {}
    return RoleModel(
        *(entry.get(k) if isinstance(entry.get(k), str) else None for k in ("model", "endpoint_host"))
    )


def _role_generation(generation: dict, info: RoleInfo) -> RoleGeneration:
    """A role's generation settings in the manifest's "generation", named as its options are (`RoleInfo.key`):
    the evaluated model's unprefixed, the others' with their role's prefix (an output limit only where it differs
    from the evaluated model's)."""
    return RoleGeneration(
        generation.get(info.key("temperature")),
        generation.get(info.key("max-tokens"), generation.get(ROLE_TABLE[0].key("max-tokens"))),
    )


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()[:16]


def prompt_hashes(condition: str) -> tuple[str, dict[str, str]]:
    """The hash of the prompts a run of this condition sends, and each file's own hash."""
    paths = [PROMPT_DIR / name for name in prompt_files_used(condition)]
    return _digest(paths), {
        p.name: hashlib.sha256(p.read_bytes().replace(b"\r\n", b"\n")).hexdigest()[:16] for p in paths
    }


def package_versions() -> dict[str, str]:
    return dict(_package_versions())


@functools.lru_cache(maxsize=1)  # read once per process: every cell of a grid records them
def _package_versions() -> tuple:
    from importlib import metadata

    versions = {"python": sys.version.split()[0]}
    for package in ("openai", "numpy", "scikit-learn"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return tuple(versions.items())


def generation_settings(settings: Settings) -> dict:
    """What is sent with every request. A temperature left to the provider is "default"; a role's output
    limit appears on its own only where it differs from --max-tokens (so earlier manifests still match)."""
    roles = settings.roles
    first, *others = ROLE_TABLE  # the evaluated model's output limit is every role's unless its own differs
    generation: dict[str, object] = {
        info.key("temperature"): "default"
        if roles[info.name].temperature is None
        else roles[info.name].temperature
        for info in ROLE_TABLE
    }
    generation |= {first.key("max-tokens"): roles[first.name].max_tokens, "n": 1}
    for info in others:
        if roles[info.name].max_tokens != roles[first.name].max_tokens:
            generation[info.key("max-tokens")] = roles[info.name].max_tokens
    return generation


def build_manifest(
    settings: Settings, dataset_sha256: str, selected: list[Case], code_now: CodeNow | None = None
) -> dict:
    """The manifest these settings make, with the code as `code_now` read it (None: as it is now)."""
    prompt_hash, prompt_files = prompt_hashes(settings.user_condition)
    code = (code_now or CodeNow.read()).digests()
    roles = settings.roles
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "run_id": settings.run_id,
        "dataset_sha256": dataset_sha256,
        "dataset_path": str(settings.dataset),
        "selected_cases": [c.number for c in selected],
        "code_hash": code_hash(code),
        "code_files": code,
        "prompt_hash": prompt_hash,
        "prompt_files": prompt_files,
        "models": {r: {"model": roles[r].model, "endpoint_host": roles[r].host} for r in ROLES},
        "generation": generation_settings(settings),
        "user_condition": settings.user_condition,
        **({"rejudged_from": settings.source_run} if settings.source_run else {}),
        **({"service_tiers": tiers} if (tiers := service_tiers(settings, {})) else {}),
        "package_versions": package_versions(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # this run's own id, made when its manifest is first written: a batch carries it in its metadata and in
        # every custom id, so a later run of the same id, root, model and stage never takes it as its own
        "incarnation": new_incarnation(),
    }
    return manifest | {"settings_digest": settings_digest(manifest)}


# The settings every record carries a hash of: what decides a record's content, apart from the code
# (which an upgrade may change) and the case selection (which the records themselves show).
SETTINGS_IN_RECORDS = ("dataset_sha256", "prompt_hash", "models", "generation", "user_condition")


def run_dataset(path: Path, default: Path) -> Path:
    """The dataset a run's manifest (at `path`) names, or `default` where there is no readable one."""
    try:
        named = read_manifest(path).dataset_path
    except HarnessError:
        return default
    return Path(named) if named else default


def settings_hash(manifest: dict) -> str:
    return canonical_hash({name: compared_setting(manifest, name) for name in SETTINGS_IN_RECORDS})


def saved_settings(paths: list[Path]) -> set[str | None]:
    """The settings hashes of the records saved in these files (None for a record made before records
    carried one); a line that cannot be read says nothing about settings and is skipped here."""
    return {record.get("settings_hash") for path in paths for record in readable_records(path)}


def check_manifest(
    path: Path,
    built: Manifest,
    code_now: CodeNow,
    script: str,
    write: bool,
    allow_code_change: bool = False,
    record_files: Sequence[Path] = (),
    prompt_files: AbstractSet[str] = frozenset(),
    condition_scripts: tuple[str, ...] = (),
) -> tuple[Manifest | None, str | None]:
    """Stop before any call when the run's saved settings differ; write the manifest on first use. Returns the
    run's manifest as saved (None: none is, and `write` is false) and a note for the user.

    Prompt files are compared where the stage sends them (`prompt_files`): a prompt only another stage sends
    never blocks this one. Harness code that changed since the run started (any file the stage of `script` runs:
    see lexpilot.storage.code; as `code_now` read it, which `built` was made with) is accepted with
    `allow_code_change`, and the new code hash is added to the manifest's `code_hashes_resumed_with`. A manifest
    that is gone while records of the run remain is rebuilt when every record was made with the current settings,
    and refused otherwise; the note returned says so."""
    current = built.saved
    if not path.exists():
        return _first_manifest(path, current, list(record_files), write)
    saved = read_manifest(path)
    differing = [d for d in saved.differences(current, set(prompt_files)) if not d.startswith("code_hash:")]
    differing += code_now.changes(saved.saved, script)
    if saved.user_condition != current.get("user_condition"):
        raise HarnessError(
            f"{path}: this run's user condition is {saved.user_condition!r}, not "
            f"{current.get('user_condition')!r}. Pass --user-condition {saved.user_condition} "
            f"({', '.join(condition_scripts) or 'the stages of such runs'} take it; the other stages "
            "belong to standard runs), or use a new --run-id."
        )
    code_changed = [d for d in differing if d.startswith("code")]
    if code_changed and allow_code_change and len(code_changed) == len(differing):
        resumed = list(saved.saved.get("code_hashes_resumed_with") or [])
        if current["code_hash"] not in resumed and write:
            saved = rewrite(saved, code_hashes_resumed_with=[*resumed, current["code_hash"]])
        return saved, None
    if differing:
        hint = (
            " If the harness was upgraded and the change does not alter results, add --allow-code-change "
            "(recorded in the manifest);"
            if code_changed
            else ""
        )
        raise HarnessError(
            f"{path}: this run was started with other settings ({'; '.join(differing)}).{hint} "
            "Rerun with the run's settings, or use a new --run-id."
        )
    return saved, None


def _first_manifest(
    path: Path, current: dict, record_files: list[Path], write: bool
) -> tuple[Manifest | None, str | None]:
    """A run without a manifest: written now (rebuilt, where records of the run remain and every one was made
    with these settings), refused where the records say other settings."""
    found = saved_settings(record_files)
    if found and found != {settings_hash(current)}:
        raise HarnessError(
            f"{path}: the run's manifest is missing and its saved records were made with other "
            "settings (or by a harness that did not record them). Restore the manifest with "
            "the run's settings, or use a new --run-id."
        )
    if not write:
        return None, None
    saved = {**current, "rebuilt_from_records": True} if found else current
    write_json(path, saved)
    return Manifest.of(saved, path), (
        f"{path} was missing: rebuilt, since every saved record was made with these settings"
        if found
        else None
    )


def rewrite(manifest: Manifest, **changes) -> Manifest:
    """The manifest with these fields changed, written over the saved one."""
    saved = {**manifest.saved, **changes}
    assert manifest.path is not None, "a run's manifest, rewritten, has its file's path"
    write_json(manifest.path, saved)
    return Manifest.of(saved, manifest.path)


def service_tiers(settings: Settings, saved: dict) -> dict[str, list[str]]:
    """Each role's service tiers as a run's invocations asked for them, in order (`saved`: the manifest's so far),
    for roles that ever asked for one: "default" where an invocation asked for none. Not a compared setting (a tier
    changes the price and the speed, not the model), but recorded, so that a report can say what a run paid for."""
    tiers = {
        role: [t for t in kept if isinstance(t, str)]
        for role, kept in saved.items()
        if role in settings.roles and isinstance(kept, list)
    }
    for name, role in settings.roles.items():
        if role.service_tier or name in tiers:
            asked = role.service_tier or "default"
            if asked not in tiers.setdefault(name, []):
                tiers[name].append(asked)
    return tiers


UNWINDOWED_FIELD = "called_without_price_windows"


def _roles(value) -> tuple[str, ...] | None:
    return tuple(r for r in value if isinstance(r, str)) if isinstance(value, list) else None


def new_incarnation() -> str:
    return uuid.uuid4().hex[:12]


def read_manifest(path: Path) -> Manifest:
    """A run's manifest (the one reader: stages and reports alike)."""
    try:
        check_input(path)
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise HarnessError(
            f"{path}: unreadable manifest ({type(e).__name__}: {' '.join(str(e).split())[:120]}). "
            "Restore it or use a new --run-id."
        ) from None
    if not isinstance(saved, dict):
        raise HarnessError(f"{path}: the manifest is not a JSON object. Restore it or use a new --run-id.")
    if "settings_digest" in saved and saved["settings_digest"] != settings_digest(saved):
        raise HarnessError(
            f"{path}: the run's settings were changed after it started (the manifest's settings "
            "digest does not match). Restore the manifest, or use a new --run-id."
        )
    return Manifest.of(saved, path)
