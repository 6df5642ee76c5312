"""What a run notes in its manifest as it goes, beside the settings it was started with (none of them compared): the
output-limit field each endpoint takes, the service tiers and price windows each invocation had, the models that
served each role, the run's incarnation and its batches submitted. Each note rewrites the saved manifest only when
it adds something.
"""

from __future__ import annotations

from collections.abc import Mapping

from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.settings import Settings
from lexpilot.storage.manifest import (
    ALLOWED_FIELD,
    SERVED_FIELD,
    UNWINDOWED_FIELD,
    Manifest,
    RoleServed,
    new_incarnation,
    rewrite,
    service_tiers,
)


def record_transport(manifest: Manifest, token_fields: dict) -> Manifest:
    """Note in the manifest the output-limit field each role's endpoint takes (not a compared setting)."""
    return rewrite(manifest, token_fields=token_fields)


def record_windows(manifest: Manifest, settings: Settings, called: set[str]) -> Manifest:
    """The manifest noting the roles this invocation calls (`called`) without their model's price windows (the
    first invocation writes the field even when empty, so that a report tells a run that always had them)."""
    prices = settings.spending.prices or {}
    without = {
        name
        for name, role in settings.roles.items()
        if name in called and (prices.get(role.model) is None or prices[role.model].windows is None)
    }
    known = set(manifest.unwindowed or ())
    roles = sorted(known | without, key=ROLES.index)
    if manifest.unwindowed is not None and set(roles) == known:
        return manifest
    return rewrite(manifest, **{UNWINDOWED_FIELD: roles})


def record_tiers(manifest: Manifest, settings: Settings) -> Manifest:
    """The manifest with this invocation's service tiers noted (rewritten only when they add one)."""
    saved = manifest.saved.get("service_tiers")
    saved = saved if isinstance(saved, dict) else {}
    tiers = service_tiers(settings, saved)
    return manifest if tiers == saved or not tiers else rewrite(manifest, service_tiers=tiers)


def record_served(
    manifest: Manifest,
    calls: Mapping[str, Mapping[str, int]],
    accepted: dict[str, list[str]],
    allowed: list[tuple[str, str]],
) -> Manifest:
    """Add an invocation's served counts (role -> served id -> calls) to the manifest's, with every role's accepted
    ids in the run and the ids accepted through --allow-served-model-change (not compared settings: what answered,
    not what was asked). Unchanged, the manifest is not rewritten."""
    counts = {role: dict(s.calls) for role, s in manifest.served.items()}
    ids = {role: list(s.accepted) for role, s in manifest.served.items()}
    for role in sorted(set(calls) | set(accepted)):
        for model, n in calls.get(role, {}).items():
            counts.setdefault(role, {})[model] = counts.get(role, {}).get(model, 0) + n
        ids[role] = list(dict.fromkeys([*ids.get(role, []), *accepted.get(role, [])]))
    saved_allowed = manifest.saved.get(ALLOWED_FIELD)
    earlier = saved_allowed if isinstance(saved_allowed, list) else []
    new = [{"role": role, "served": model} for role, model in allowed]
    every_allowed = earlier + [a for a in new if a not in earlier]
    served = {role: RoleServed(counts.get(role, {}), ids.get(role, [])) for role in {**counts, **ids}}
    if served == manifest.served and every_allowed == earlier:
        return manifest
    saved = {role: {"calls": s.calls, "accepted": s.accepted} for role, s in served.items()}
    return rewrite(
        manifest, **{SERVED_FIELD: saved}, **({ALLOWED_FIELD: every_allowed} if every_allowed else {})
    )


def earlier_served(manifest: Manifest | None) -> dict[str, tuple[list[str], dict[str, int]]]:
    """Role -> (accepted ids, calls per served id) of the run's earlier calls, to seed a stage's check."""
    if manifest is None:
        return {}
    return {role: (s.accepted or list(s.calls)[:1], dict(s.calls)) for role, s in manifest.served.items()}


def run_incarnation(manifest: Manifest) -> Manifest:
    """The run's manifest with an incarnation id: a run whose manifest was written before manifests carried one
    is given one now, and marked `incarnation_late`: its earlier batches carry no incarnation, and are still its
    own."""
    if manifest.incarnation:
        return manifest
    return rewrite(manifest, incarnation=new_incarnation(), incarnation_late=True)


def note_batches_submitted(manifest: Manifest, stage: str, cycle: int) -> Manifest:
    """Note in the manifest the stage's last cycle that submits batches, before it submits them: a ledger that
    records fewer cycles of the stage after that was lost, or is a stale copy."""
    stages = manifest.saved.get("batches_submitted")
    # an older manifest's `true` (every stage) is kept as "*", its list of stages as a first cycle each
    stages = (
        dict(stages)
        if isinstance(stages, dict)
        else {"*": 1}
        if stages is True
        else {name: 1 for name in stages}
        if isinstance(stages, list)
        else {}
    )
    if stages.get(stage) == cycle:
        return manifest
    return rewrite(manifest, batches_submitted={**stages, stage: cycle})


def submitted_batches(manifest: Manifest, stage: str) -> int:
    """The stage's last cycle that submitted batches, as the manifest says (0: none; 1 where an older manifest
    says only that it did: `true` for every stage, or a list of stages)."""
    stages = manifest.saved.get("batches_submitted")
    if isinstance(stages, dict):
        cycle = stages.get(stage, stages.get("*", 0))
        return cycle if isinstance(cycle, int) and not isinstance(cycle, bool) else 1
    return int(stages is True or (isinstance(stages, list) and stage in stages))
