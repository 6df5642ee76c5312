"""The settings that decide a run's results, as two manifests are compared: which fields, each as it decides
results (an endpoint's port aside, prompts file by file), the differences said one per line, and the digest of them a
hand edit cannot hide.
"""

from __future__ import annotations

from lexpilot.benchmark.prompts import prompt_files_used
from lexpilot.benchmark.records import canonical_hash

COMPARED_MANIFEST_FIELDS = (
    "dataset_sha256",
    "selected_cases",
    "code_hash",
    "prompt_hash",
    "models",
    "generation",
    "user_condition",
    "rejudged_from",
)

# Manifests written before they listed each prompt file's hash (up to commit b1ddf54) hashed all ten prompt
# files together; this is what each file held then, so such a run is compared on the prompts it uses.
LEGACY_PROMPT_SETS = {
    "ed0912c173dde14c": {
        "dcg_force_ask.txt": "e7110e6bd24558ec",
        "force_judge.txt": "00b732d489ffef92",
        "judge_dcg.txt": "a63f915dfd185b30",
        "judge_lca.txt": "9132ef54552e082f",
        "judge_ljp_extract.txt": "def1bfdab21e6c47",
        "lexawn.txt": "e84776b5dad5a374",
        "user_correction.txt": "8df7a24b819dabef",
        "user_delayed.txt": "fb05dda110120af5",
        "user_self_correction.txt": "45f7c615ce7e32c8",
        "user_standard.txt": "ebd9b5bb8ecf57b8",
    }
}


def settings_digest(manifest: dict) -> str:
    """The digest of a manifest's compared settings: an edit by hand (a temperature changed after the run) is
    seen by every reader."""
    return canonical_hash({name: manifest.get(name) for name in COMPARED_MANIFEST_FIELDS})


def compared_setting(manifest: dict, name: str):
    """A compared field as it decides results: an endpoint's port does not (a local server restarted on
    another port is the same model), so hosts are compared without it; prompts are compared file by file,
    on the files the run's user condition sends."""
    value = manifest.get(name)
    if name == "prompt_hash":
        legacy = LEGACY_PROMPT_SETS.get(value) if isinstance(value, str) else None  # a list is unhashable
        files = manifest.get("prompt_files") or legacy
        if not isinstance(files, dict):
            return value
        used = set(prompt_files_used(str(manifest.get("user_condition", "standard"))))
        return {file: digest for file, digest in files.items() if file in used}
    if name == "models" and isinstance(value, dict):
        return {
            role: {
                **m,
                "endpoint_host": str(m.get("endpoint_host", "")).rsplit(":", 1)[0]
                if str(m.get("endpoint_host", "")).count(":") == 1
                else m.get("endpoint_host"),
            }
            if isinstance(m, dict)
            else m
            for role, m in value.items()
        }
    return value


def _leaves(value, prefix: str) -> dict[str, object]:
    if isinstance(value, dict) and value:
        return {k: v for key, sub in value.items() for k, v in _leaves(sub, f"{prefix}.{key}").items()}
    return {prefix: value}


def manifest_differences(saved: dict, current: dict, prompt_files: set[str] | None = None) -> list[str]:
    """Each compared setting that differs, as 'field: run X, now Y' (nested fields by their dotted path);
    with `prompt_files`, prompts are compared on those files only (the ones a stage sends)."""
    differences = []
    for name in COMPARED_MANIFEST_FIELDS:
        before, now = compared_setting(saved, name), compared_setting(current, name)
        if name == "prompt_hash" and isinstance(before, dict) and isinstance(now, dict):
            # a prompt file added since the run started was never used by it: only shared files must match
            before, now = (
                {
                    f: h
                    for f, h in d.items()
                    if f in before and f in now and (prompt_files is None or f in prompt_files)
                }
                for d in (before, now)
            )
        if before == now:
            continue
        if name == "selected_cases":
            differences.append(
                f"selected_cases: run {len(before or [])} cases, now {len(now or [])} "
                "(same --dataset and --limit)"
            )
            continue
        a, b = _leaves(before, name), _leaves(now, name)
        differences += [
            f"{key}: run {a.get(key, 'absent')}, now {b.get(key, 'absent')}"
            for key in list(dict.fromkeys([*a, *b]))
            if a.get(key) != b.get(key)
        ]
    return differences
