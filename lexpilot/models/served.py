"""The model that answered each role: the served model ids a role's calls accept, and the stop once another answers.

A role's first reply fixes the model it is served by (an alias or a dated snapshot answered from the first call is
accepted as it is). A later reply served by another id stops that role's calls, until the run is rerun with
--allow-served-model-change. Two scopes are held, and a reply must fit both:

- the role at its endpoint (base URL, requested id, key), shared by every cell of a grid: a provider that re-points
  an alias halfway through a grid stops that role's cells there, and no other role's or model's;
- the role in one run (a (model, run) folder), seeded from the run's manifest: a run resumed after its provider
  changed what answers is stopped the same way, even where this invocation's first reply was the new id.

The reply that shows the change and the calls already in flight are kept (paid work is never lost); no new call of
that role starts (`check`), in this stage or, in a grid, in any cell that shares the scope.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from lexpilot.errors import FatalError
from lexpilot.models.limits import Endpoint
from lexpilot.settings import Role, Settings
from lexpilot.text import counted

ALLOW_OPTION = "--allow-served-model-change"


class ServedModelChanged(FatalError):
    """A role's served model changed: its calls stop (those in flight end and are kept)."""


Scope = tuple[str, ...]


def scopes(role: Role, run: str) -> tuple[Scope, Scope]:
    """The two scopes a call of `role` in the run folder `run` is held to: its endpoint's, and its run's."""
    return ("endpoint", role.name, *Endpoint.of(role).parts()), ("run", role.name, run)


@dataclass
class ServedModels:
    """Per scope, the served ids accepted (the first, then any accepted with --allow-served-model-change) and the
    calls each id answered; the scopes stopped, each with the line it says (written when first said, so that it
    counts the replies of a whole batch, or those in flight, that came in before). One per stage invocation, or the
    grid's (`Sharing.served`), for every cell at once."""

    accepted: dict[Scope, list[str]] = field(default_factory=dict)
    calls: dict[Scope, Counter] = field(default_factory=dict)
    stops: dict[Scope, str | None] = field(default_factory=dict)  # None: stopped, its line not said yet
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seed(
        self, role: Role, run: str, accepted: list[str], calls: dict[str, int], allow: bool
    ) -> list[str]:
        """What the run's manifest says served a role before this invocation (once per run: a later stage of the
        run, opened in the same grid, finds this invocation's own counts here already). Ids served and never
        accepted (a change that stopped an earlier invocation) stop the role now, or are accepted with `allow`:
        returned, for the manifest."""
        scope = ("run", role.name, run)
        with self.lock:
            if scope in self.accepted:
                return []
            self.calls[scope] = Counter(calls)
            refused = [m for m in calls if accepted and m not in accepted]
            self.accepted[scope] = list(accepted) + (refused if allow else [])
            if refused and not allow:
                self.stops[scope] = None
        return refused if allow else []

    def check(self, role: Role, run: str) -> None:
        """Raise the stop when the role's calls were stopped in either scope: no new call of it starts."""
        message = self.stop_of(role, run)
        if message:
            raise ServedModelChanged(message)

    def stop_of(self, role: Role, run: str) -> str:
        """The line of a stop of the role in either scope ("": none), written now if it was not yet."""
        with self.lock:
            for scope in scopes(role, run):
                if scope in self.stops:
                    if self.stops[scope] is None:
                        self.stops[scope] = changed_message(role, self.calls[scope])
                    return self.stops[scope] or ""
        return ""

    def observe(self, role: Role, run: str, model: str, calls: int, allow: bool) -> tuple[list[str], bool]:
        """A reply served by `model` (`calls` of them): counted in both scopes, its id accepted where it is the
        scope's first or `allow` is set, else the scope stopped. Returns the ids accepted through `allow` (for the
        manifest) and whether this reply met a stop."""
        allowed, met = [], False
        with self.lock:
            endpoint, _ = scopes(role, run)
            for scope in scopes(role, run):
                self.calls.setdefault(scope, Counter())[model] += calls
                accepted = self.accepted.setdefault(scope, [])
                if not accepted:
                    # a run's first reply in a grid is held to what its endpoint already serves the other cells, so
                    # that its manifest refuses the change on a rerun too (the other cells may be done by then)
                    accepted.extend(self.accepted.get(endpoint, []) if scope != endpoint else [])
                if not accepted:
                    accepted.append(model)  # the scope's first: an alias answered from the start is accepted
                if model in accepted:
                    continue
                if allow:
                    accepted.append(model)
                    allowed.append(model)
                    continue
                self.stops.setdefault(scope, None)
                met = True
        return sorted(set(allowed)), met

    def refused_at_endpoint(self, role: Role) -> list[str]:
        """The ids a stopped endpoint scope of the role was served by and did not accept."""
        scope = scopes(role, "")[0]
        with self.lock:
            if scope not in self.stops:
                return []
            accepted = self.accepted.get(scope, [])
            return [m for m in self.calls.get(scope, {}) if m not in accepted]

    def accepted_in_run(self, role: str, run: str) -> list[str]:
        with self.lock:
            return list(self.accepted.get(("run", role, run), []))

    def stopped_in_run(self, role: str, run: str) -> bool:
        with self.lock:
            return ("run", role, run) in self.stops


@dataclass
class ServedCalls:
    """One stage invocation's side of the check (its model caller's): the run its calls belong to, what served them
    since the run's manifest was last told, the ids it accepted through the option, the roles whose replies met a
    stop."""

    models: ServedModels
    roles: dict[str, Role]
    run: str
    allow: bool
    now: dict[str, Counter] = field(default_factory=dict)  # role -> served id -> calls, for the manifest
    seen: dict[str, Counter] = field(default_factory=dict)  # the same, over the whole invocation
    allowed: list[tuple[str, str]] = field(default_factory=list)  # (role, id) accepted through the option
    met: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, settings: Settings, models: ServedModels) -> ServedCalls:
        # the run: its output root, run id and evaluated model, as its folder is named by them
        run = f"{settings.output_root}\0{settings.run_id}\0{settings.roles['eval'].model}"
        return cls(models, settings.roles, run, settings.allow_served_model_change)

    def note(self, role: str, model: str | None, calls: int = 1) -> None:
        """Replies of a role served by `model` (a reply that does not say is not counted): counted for the manifest,
        and held to the model the role was served by so far; the replies are kept whatever they say."""
        if not model:
            return
        allowed, met = self.models.observe(self.roles[role], self.run, model, calls, self.allow)
        with self.lock:
            self.now.setdefault(role, Counter())[model] += calls
            self.seen.setdefault(role, Counter())[model] += calls
            self.allowed += [(role, m) for m in allowed]
            if met:
                self.met.add(role)

    def answered_as(self) -> str:
        """The roles this invocation's replies say another model answered than the id asked for, each with its
        calls, for the stage's closing lines ("": none)."""
        with self.lock:
            seen = {role: dict(counts) for role, counts in self.seen.items()}
        said = [
            f"{self.roles[role].describe()} answered as "
            + ", ".join(
                f"{model} ({counted(n, 'call')})" for model, n in sorted(counts.items(), key=_most_first)
            )
            for role, counts in seen.items()
            if set(counts) != {self.roles[role].model}
        ]
        return "; ".join(said)

    def check(self, role: str) -> None:
        """Raise the stop of a role whose served model changed: no call of it is sent, nor a batch request made."""
        self.models.check(self.roles[role], self.run)

    def changed(self, asks: Iterable[str] = ()) -> str:
        """The line this stage must stop with ("": none): a change its own replies met, or one its run holds for a
        role it `asks` (seen by an earlier invocation, or by another stage of the run in a grid), even when it has
        nothing left to ask that role (its replies replayed from the journal)."""
        asks = set(asks)
        for name, role in self.roles.items():
            if name in self.met or (name in asks and self.models.stopped_in_run(name, self.run)):
                message = self.models.stop_of(role, self.run)
                if message:
                    return message
        return ""

    def take(self) -> tuple[dict[str, Counter], dict[str, list[str]], list[tuple[str, str]]]:
        """What the manifest gains since it was last told: the calls per role and served id, every role's accepted
        ids in the run, and the ids accepted through the option (storage/manifest.py record_served's order)."""
        with self.lock:
            counts, allowed = self.now, self.allowed
            self.now, self.allowed = {}, []
        for name, role in self.roles.items():
            # an id the role's endpoint refused, though none of this run's calls met it (another cell's did): noted
            # with no call, so that a rerun of this run is stopped before its first call instead of buying one
            for model in self.models.refused_at_endpoint(role):
                counts.setdefault(name, Counter())[model] += 0
        accepted = {name: self.models.accepted_in_run(name, self.run) for name in self.roles}
        return counts, {name: ids for name, ids in accepted.items() if ids}, allowed

    def seed(self, earlier: dict[str, tuple[list[str], dict[str, int]]]) -> None:
        """The run's earlier calls, as its manifest counts them: role -> (accepted ids, calls per served id)."""
        for name, (accepted, calls) in earlier.items():
            if name in self.roles:
                allowed = self.models.seed(self.roles[name], self.run, accepted, calls, self.allow)
                with self.lock:
                    self.allowed += [(name, m) for m in allowed]


def changed_message(role: Role, calls: Counter) -> str:
    """The one line a stopped role says: the role, the requested id, the ids served and their calls, the option."""
    served = ", ".join(
        f"{model} ({counted(n, 'call')})" for model, n in sorted(calls.items(), key=_most_first)
    )
    return (
        f"{role.describe()}: the served model changed (requested {role.model}; served {served}): its calls "
        f"stop. Rerun with {ALLOW_OPTION} to accept it (recorded in the manifest)"
    )


def _most_first(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]
