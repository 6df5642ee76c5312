"""What an exported run says of how it was made, read from its typed manifest: the models of its three roles and
what served them, the generation settings, the prompts' and the code's digests, and every way it departs from the
paper's protocol (another judge or User Model, a temperature or output limit not the paper's, a prompt file not the
shipped one, a dataset not the release, a re-judged copy, fewer cases than the benchmark's), so that no reader takes
such a run for a standard one. The paper's values are read where the harness declares its defaults (ROLE_TABLE,
settings.PAPER_MAX_TOKENS, prompts/ as this checkout ships it, benchmark/dataset.py's DEFAULT_DATASET)."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from lexpilot.benchmark.dataset import DEFAULT_DATASET, file_sha256
from lexpilot.benchmark.prompts import PROMPT_FILES
from lexpilot.benchmark.vocabulary import ROLE, ROLE_TABLE
from lexpilot.reporting.scoring.groups import Group, served_key, served_text, settings_key
from lexpilot.reporting.scoring.runs import Run
from lexpilot.settings import PAPER_MAX_TOKENS
from lexpilot.storage.manifest import prompt_hashes

PAPER_CASES = (
    432  # the benchmark's judgments (Table 1): a run of fewer was limited (--limit) or another dataset's
)
HARNESS = "LexPilot"


@dataclass(frozen=True)
class Provenance:
    """One run's settings as the export states them (strings, as both formats' metadata hold them)."""

    models: dict[str, str]  # role -> the model id asked for
    served: dict[str, list[str]]  # role -> the ids that served it (its manifest's count, else its records')
    temperatures: dict[str, str]
    max_tokens: dict[str, str]
    prompts: dict[str, str]  # prompt file -> its digest
    code_hash: str
    dataset_sha256: str
    user_condition: str
    cases: int
    deviations: list[str]
    settings_digest: str  # what puts the run in a group (settings_digest): --verify pools runs by it

    @property
    def standard(self) -> bool:
        return not self.deviations

    def summary(self) -> dict[str, str]:
        """Every setting in one flat mapping of strings."""
        flat = {
            "code_hash": self.code_hash,
            "dataset_sha256": self.dataset_sha256,
            "user_condition": self.user_condition,
            "cases": str(self.cases),
            "protocol": "the paper's" if self.standard else "differs: " + "; ".join(self.deviations),
            "group_digest": self.settings_digest,
        }
        for role in self.models:
            flat[f"{role}_model"] = self.models[role]
            flat[f"{role}_served"] = ", ".join(self.served.get(role, [])) or "not recorded"
            flat[f"{role}_temperature"] = self.temperatures[role]
            flat[f"{role}_max_tokens"] = self.max_tokens[role]
        flat |= {f"prompt {name}": digest for name, digest in sorted(self.prompts.items())}
        return flat


def temperature_text(value) -> str:
    return "the provider's default" if value in (None, "default") else str(value)


def paper_temperature(role: str) -> float | None:
    """The paper's temperature for a role (Appendix E.1): its own, else the evaluated model's."""
    own = ROLE[role].temperature
    return own if own is not None else ROLE["eval"].temperature


class Departure(NamedTuple):
    """One way a run departs from the paper's protocol: in words, as its protocol line states it, and in a few words,
    as its label names it ("": the label does not: the case count, what served a role, which the label's suffixes
    name as show_results.py's do, a dataset the release could not be compared with)."""

    text: str
    short: str = ""


def deviations(run: Run, served: dict[str, list[str]]) -> list[str]:
    """Each way the run departs from the paper's protocol, in words."""
    return [d.text for d in departures(run, served)]


def departures(run: Run, served: dict[str, list[str]]) -> list[Departure]:
    manifest = run.manifest
    found = []
    for info in ROLE_TABLE[1:]:  # the evaluated model is the one the run is about
        model = manifest.model(info.name)
        if info.default_model and model != info.default_model:
            short = "" if manifest.rejudged and info.name == "judge" else f"{info.display} {model}"
            found.append(Departure(f"{info.display} {model} (the paper's: {info.default_model})", short))
    found += generation_deviations(run)
    for role in ROLE:
        asked = manifest.model(role)
        if served.get(role) and served[role] != [asked]:
            found.append(
                Departure(f"{ROLE[role].display} served by {', '.join(served[role])} (asked for {asked})")
            )
    if manifest.rejudged:
        found.append(
            Departure(
                f"re-judged copy of run {manifest.rejudged_from}", f"re-judged by {manifest.model('judge')}"
            )
        )
    found += input_deviations(run)
    if manifest.user_condition != "standard":
        found.append(Departure(f"{manifest.user_condition} user (Appendix E.5)"))
    return found


def run_label(run: Run) -> str:
    """The run's label: its model where it keeps the paper's settings (a --limit run too: its protocol line says so),
    else its model and how it differs from the paper's settings ("model-a · judge judge-b"); what served a role other
    than asked and a non-ideal user named as show_results.py names them. Made from the run alone, so a run is
    labelled alike whichever runs are exported with it, and a run of the paper's settings is never the one labelled
    by a difference."""
    group = Group(run.model, (), [run], served=served_key(run))
    eval_served, others = served_text(group)
    condition = "" if run.condition == "standard" else f" ({run.condition} user)"
    shorts = list(dict.fromkeys(d.short for d in departures(run, {}) if d.short))
    return run.model + eval_served + condition + (f" · {', '.join(shorts)}" if shorts else "") + others


def generation_deviations(run: Run) -> list[Departure]:
    """Each role's temperature and output limit other than the paper's (Appendix E.1)."""
    found = []
    for info in ROLE_TABLE:
        given = run.manifest.generation[info.name]
        wanted = paper_temperature(info.name)
        if given.temperature != wanted:
            said = temperature_text(given.temperature)
            found.append(
                Departure(
                    f"{info.display} temperature {said} (the paper's: {wanted})",
                    f"{info.display} temperature {said}",
                )
            )
        if given.max_tokens != PAPER_MAX_TOKENS:
            limit = "not recorded" if given.max_tokens is None else given.max_tokens
            found.append(
                Departure(
                    f"{info.display} max_tokens {limit} (the paper's: {PAPER_MAX_TOKENS})",
                    f"{info.display} max_tokens {limit}",
                )
            )
    return found


def input_deviations(run: Run) -> list[Departure]:
    """The cases, the dataset and the prompts other than the benchmark's: fewer cases than 432, a dataset whose sha256
    is not the release file's (or that cannot be compared, the release absent from this checkout), and each prompt
    file whose recorded digest is not the digest of the file this checkout ships."""
    manifest = run.manifest
    found = []
    if len(run.selected) != PAPER_CASES:
        found.append(
            Departure(
                f"{len(run.selected)} cases (the paper's: {PAPER_CASES}; a --limit run or another dataset)"
            )
        )
    release = release_sha256(DEFAULT_DATASET)
    if release is None:
        found.append(
            Departure(
                f"dataset not compared with the release ({DEFAULT_DATASET.name} is not in this checkout's "
                f"{DEFAULT_DATASET.parent.name}/: put the release there to compare)"
            )
        )
    elif manifest.dataset_sha256 != release:
        found.append(
            Departure(
                f"dataset sha256 {manifest.dataset_sha256} (the release's: {release})", "another dataset"
            )
        )
    shipped = shipped_prompts(manifest.user_condition)
    for file, digest in sorted(manifest.prompt_files.items()):
        if digest != shipped.get(file):
            found.append(
                Departure(
                    f"prompt {file} sha256 {digest} (the shipped: {shipped.get(file, 'no such file shipped')})",
                    "other prompts",
                )
            )
    return found


def release_sha256(path: Path) -> str | None:
    """The release dataset's sha256 as benchmark/dataset.py digests a dataset (None: the file is not there)."""
    try:
        status = path.stat()
    except OSError:
        return None
    return _release_sha256(path, status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=2)  # read once per process and file version: every run exported compares with it
def _release_sha256(path: Path, _mtime: int, _size: int) -> str | None:
    try:
        return file_sha256(path)
    except OSError:
        return None


def protocol_reference(condition: str) -> list:
    """What a run of this user condition is compared with beyond the harness's code: the release's sha256 and the
    shipped prompts' digests (the export's ledger makes a run again when either changes)."""
    return [release_sha256(DEFAULT_DATASET), shipped_prompts(condition)]


def shipped_prompts(condition: str) -> dict[str, str]:
    """Each prompt file a run of this user condition sends, and its digest as this checkout ships it (the digests
    the manifest records, made the same way)."""
    try:
        return prompt_hashes(condition)[1]
    except (OSError, KeyError):
        return {}


def provenance(run: Run, recorded: dict[str, list[str]]) -> Provenance:
    """The run's settings; what served each role as the exported records' calls say (`recorded`: a re-judged run's
    generations were copied from its source, whose calls its own usage does not count), else as its usage or
    manifest counts them."""
    manifest = run.manifest
    served = {role: recorded.get(role) or list(run.served_ids(role)) for role in ROLE}
    return Provenance(
        {role: str(manifest.model(role)) for role in ROLE},
        served,
        {role: temperature_text(manifest.generation[role].temperature) for role in ROLE},
        {role: str(manifest.generation[role].max_tokens) for role in ROLE},
        dict(manifest.prompt_files),
        str(manifest.code_hash),
        str(manifest.dataset_sha256),
        manifest.user_condition,
        len(run.selected),
        deviations(run, served),
        settings_digest(run),
    )


def settings_digest(run: Run) -> str:
    """A digest of what show_results.py groups runs by (the model, the compared settings, what served each role),
    the same whichever runs are exported beside it. The label (run_label) names differences from the paper's settings
    only: two runs of one label may differ in what it leaves out (the cases, the code). Prompts are compared on every file the run records."""
    key = (run.model, settings_key(run.manifest), sorted(served_key(run).items()))
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def prompt_digest(prov: Provenance, prompt: str | None) -> str:
    """A prompt (by its name in benchmark/prompts.py) as `file (digest)`; None: the stage sends that role none."""
    if prompt is None:
        return "none (the consultation is sent as it is)"
    file = PROMPT_FILES[prompt]
    return f"prompts/{file} (sha256 {prov.prompts.get(file, 'not recorded')})"


def numeric_or_none(text: str) -> float | None:
    """A setting's text as a number (None: "the provider's default", or not recorded)."""
    try:
        return float(text)
    except ValueError:
        return None
