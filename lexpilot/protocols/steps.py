"""The contract every protocol is written in: `Step` (one checkpointed unit: a record per case in one file),
`Stage` (what one entry point runs, declared as data) and `CaseCalls` (the calls of one case, with their usage).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import (
    CONDITION_PROMPTS,
    PROMPT_FILES,
    fill,
    key_detail_lines,
    render_history,
    render_key_facts,
)
from lexpilot.benchmark.records import RecordKind
from lexpilot.errors import RAW_OUTPUT, CaseFailed
from lexpilot.models.served import ServedModelChanged
from lexpilot.models.usage import Usage, served_call
from lexpilot.protocols.judging import fault_parser
from lexpilot.settings import Settings
from lexpilot.storage.checkpoints import CallJournal
from lexpilot.storage.manifest import Manifest

JUDGE_ATTEMPTS = 3


class Caller(Protocol):
    """What a case's calls need of the model caller (models/calls.py `ModelCaller`; in a batch cycle's replay,
    running/batch/replay.py's `BatchCaller`, which turns each call into a batch request)."""

    settings: Settings
    progress: Any  # its retry() said as an invalid output is asked again

    @property
    def chat(
        self,
    ) -> Callable[..., Any]: ...  # (role name, prompt, usage, on_send=None, retry=False) -> reply


@dataclass
class CaseCalls:
    """The calls of one case: everything a protocol step may ask for, with the usage it costs."""

    caller: Caller
    prompts: dict[str, str]
    case: Case
    usage: Usage = field(default_factory=Usage)  # of the record being built, made now
    spent: Usage = field(default_factory=Usage)  # of the whole case, saved or not
    user_condition: str = "standard"
    journal: "CallJournal | None" = None
    step: str = ""  # the step being run, for the journal
    replayed: Usage = field(default_factory=Usage)  # of the record being built, paid in an earlier run
    replays: int = 0
    keep_reasoning: bool = False  # the evaluated model's and User Model's reasoning too (the judge's always)
    reasoning: dict = field(default_factory=dict)  # of the record being built: role -> reasoning per call
    settings: Settings | None = None  # the run's: what a step records of them (the judge's model) or reads
    last_paid: dict = field(default_factory=dict)  # the usage of the last reply taken (bought or replayed)
    served: list = field(
        default_factory=list
    )  # of the record being built: what served each call (served_call)

    @property
    def run_settings(self) -> Settings:
        """The run's settings, for a step that reads them: a stage always gives them (tests of steps that read
        none may leave them out)."""
        assert self.settings is not None, "a stage's CaseCalls carry its settings"
        return self.settings

    def _chat(self, role: str, prompt: str | list[dict], retry: bool = False) -> str:
        """A reply paid for in an earlier, unfinished attempt at this step is replayed, not bought again."""
        if self.journal:
            replayed = self.journal.take(self.case.number, self.step, role, prompt)
            if replayed is not None:
                text, usage, reasoning = replayed
                self.replayed.merge(usage)
                self.replays += 1
                self.keep_reasoning_of(role, reasoning)
                self.last_paid = usage
                self.served.append(served_call(role, usage))
                return text
        # in batch mode the caller raises NeedsReply: the request goes into the next batch, and its reply reaches
        # the journal when the batch is collected (nothing is marked or kept here)
        batched = getattr(self.caller, "batched", False)
        used = Usage()
        marks = self.journal.marked(role) if self.journal and not batched else nullcontext()
        try:
            with (
                marks as sent
            ):  # the reply kept before the call's end mark: a kill between the two loses nothing
                reply = self._bought(role, prompt, used, sent, retry)
        finally:
            self.usage.merge(used.by_role)
        self.last_paid = used.by_role
        self.served.append(served_call(role, used.by_role))
        self.keep_reasoning_of(role, reply.reasoning)
        return reply.text

    def _bought(self, role: str, prompt: str | list[dict], used: Usage, sent, retry: bool):
        """A reply bought from the provider and kept in the journal; every attempt of a call that fails its case is
        kept as paid for and not used."""
        try:
            reply = self.caller.chat(role, prompt, used, on_send=sent, retry=retry)
        except (CaseFailed, ServedModelChanged) as e:
            # a served model's change may stop a call between its attempts: the replies it refused were paid too
            if self.journal:
                self.journal.not_used(self.case.number, self.step, used.by_role, str(e))
            raise
        if self.journal:
            self.journal.keep(
                self.case.number,
                self.step,
                role,
                prompt,
                reply.text,
                used.by_role,
                reply.reasoning if role == "judge" or self.keep_reasoning else "",
            )
        return reply

    def keep_reasoning_of(self, role: str, reasoning: str) -> None:
        """The record keeps the judge's reasoning, and the other roles' with --keep-reasoning."""
        if reasoning and (role == "judge" or self.keep_reasoning):
            self.reasoning.setdefault(role, []).append(reasoning)

    def generate(self, role: str, prompt_name: str, **slots) -> str:
        return self._chat(role, fill(self.prompts[prompt_name], **slots))

    def judge(self, prompt_name: str, parse: Callable[[str], object], **slots):
        """(parsed answer, raw outputs): an invalid output is asked again, up to three attempts."""
        return self.validated("judge", prompt_name, parse, **slots)

    def validated(self, role: str, prompt_name: str, parse: Callable[[str], object], **slots):
        """(parsed output, raw outputs) of a prompt whose output has a required form; an output that `parse`
        rejects (ValueError) is asked for again, within three attempts in all. Every attempt is kept in the
        journal with its usage, the rejected ones too: a rerun replays them (and their cost) in order instead of
        buying them again. When all three are rejected, they are retired: the next run asks anew."""
        prompt = fill(self.prompts[prompt_name], **slots)
        raws, paid = [], Usage()
        for attempt in range(JUDGE_ATTEMPTS):
            raws.append(self._chat(role, prompt, retry=attempt > 0))
            paid.merge(self.last_paid)
            try:
                return parse(raws[-1]), raws
            except ValueError as e:
                problem = str(e)
                # the last one is not asked again: the case fails, saying why
                if attempt + 1 < JUDGE_ATTEMPTS:
                    self.caller.progress.retry(f"invalid {prompt_name} output: {problem}")
        failed = CaseFailed(
            f"{self.caller.settings.roles[role].describe()}: {prompt_name} output invalid after {JUDGE_ATTEMPTS} "
            f"attempts ({problem}){RAW_OUTPUT}{raws[-1][:200]!r}"
        )
        if (
            self.journal
        ):  # counted as not used before retired: a kill between the two over-counts, never loses
            self.journal.not_used(self.case.number, self.step, paid.by_role, str(failed))
            self.journal.retire(self.case.number, self.step, role, prompt, raws)
        raise failed

    def converse(self, role: str, messages: list[dict]) -> str:
        """A reply to a conversation sent as its own messages (the plain consultation), not to a prompt."""
        return self._chat(role, [dict(m) for m in messages])

    def user_reply(self, dialogue: list[dict], prompt_name: str = "user_standard", **slots) -> str:
        """The User Model sees the conversation and the hidden key details, never focal points or verdicts."""
        return self.generate(
            "user",
            prompt_name,
            history=render_history(dialogue),
            key_facts=render_key_facts(self.case),
            **slots,
        )

    def faulty_user_reply(self, dialogue: list[dict]) -> tuple[str, dict]:
        """The self-correcting user's one incomplete or wrong reply, and the fault it recorded: its kind and
        the key detail it concerns (the record is taken off the reply the evaluated model sees)."""
        (reply, fault), _ = self.validated(
            "user",
            "user_self_correction",
            fault_parser(key_detail_lines(self.case)),
            history=render_history(dialogue),
            key_facts=render_key_facts(self.case),
        )
        return reply, fault


# ----------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Step:
    """One checkpointed unit of a protocol: a record per case in one JSONL file."""

    kind: RecordKind
    run: Callable[[CaseCalls, dict], dict]  # (calls, upstream records by kind name) -> record body
    needs: tuple[str, ...] = ()  # the kinds of the upstream records this step reads
    # the most calls per role for a case: (upstream records, settings, the case) -> role -> calls, or fixed
    max_calls: Callable[[dict, Settings, Case | None], dict] | dict = field(default_factory=dict)
    prompts: dict = field(default_factory=dict)  # role -> prompt name, for the dry run's token estimate
    when: Callable[[Settings], bool] | None = None  # run only with these settings (e.g. a --histories choice)
    min_calls: dict | None = None  # the calls always made, for a lower bound (default: a fixed max_calls)
    also_sends: tuple[str, ...] = ()  # prompts it may send beyond `prompts` (a stage compares all it sends)

    @property
    def name(self) -> str:
        return self.kind.name

    def surely_made(self) -> dict:
        """The calls the step makes whatever the replies (a conditional count makes none sure)."""
        if self.min_calls is not None:
            return self.min_calls
        return {} if callable(self.max_calls) else self.max_calls

    def calls_for(self, upstream: dict, settings: Settings, case: Case | None = None) -> dict:
        """The most calls per role the step makes for a case (its upstream records and the case as given)."""
        return self.max_calls(upstream, settings, case) if callable(self.max_calls) else self.max_calls


@dataclass(frozen=True)
class Stage:
    """What one entry point runs: its steps in order, the record kinds other scripts must have finished
    first, and whether it takes --user-condition."""

    name: str
    script: str  # the entry point that runs it (its code hash starts there)
    steps: tuple[Step, ...]
    upstream: tuple[RecordKind, ...] = ()
    user_condition: bool = False
    history_choice: bool = False  # takes --histories
    probe_file: bool = False  # takes --probes
    source_run: bool = False  # takes --from-run
    # called under the run's lock before anything is loaded (re-judging copies the source, probes are checked)
    prepare: Callable[[Settings], str | None] | None = None
    # called with the new run's manifest before it is compared or written (re-judging: the source's settings)
    check_first: Callable[[Settings, Manifest], None] | None = None
    # the cases the stage has nothing to ask about (probes: a case not in the probe file), and why, so the closing
    # line counts the cases worked on apart from them: (reason, case -> True when it has nothing to ask)
    idle: tuple[str, Callable[[Settings, Case], bool]] | None = None

    def enabled_steps(self, settings: Settings) -> list[Step]:
        return [s for s in self.steps if s.when is None or s.when(settings)]

    def prompt_files(self, settings: Settings) -> set[str]:
        """The prompt files this stage's enabled steps can send (a user condition's own prompts with the User
        Model's): a run is compared on these, so a prompt another stage sends never blocks this one."""
        names = {n for s in self.enabled_steps(settings) for n in (*s.prompts.values(), *s.also_sends)}
        if any("user" in s.prompts for s in self.enabled_steps(settings)):
            names |= set(CONDITION_PROMPTS.get(settings.user_condition, ()))
        return {PROMPT_FILES[n] for n in names}

    def kinds(self, settings: Settings) -> tuple[RecordKind, ...]:
        """Every record kind the stage reads or writes with these settings (an upstream kind only where an
        enabled step reads it)."""
        steps = self.enabled_steps(settings)
        needed = {need for s in steps for need in s.needs}
        return tuple(k for k in self.upstream if k.name in needed) + tuple(s.kind for s in steps)
