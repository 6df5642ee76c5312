"""The truth the scripted provider plays from an abilities file: every evaluated decision (right or wrong, the verdict
stated) and every judge label drawn from a seeded hash, so that a rerun, a resume or a batch replayed gets the same
answer; and, for tests and the try-out, each model's true and judged metrics as the abilities make them expected.

A decision of model m in run r on case c, step s (an LCA history, a DCG round, an LJP setup's claim) is right when
its draw u < P(right). u is the case's own draw, u(m, c, s), the same in every run, except for a `noise` share of
decisions, redrawn per run as u(m, r, c, s): either way u is uniform, so every decision is right with exactly its
probability, and runs differ by the noise only. A wrong verdict is one of the two others, by the same u. The run is
what the request's base URL names (provider.run_of_path): runs sent to one base URL are alike.

The judge gives the true label with its recall for that label, else one of the others, drawn per judge model, run,
prompt and claim: its errors are independent of the model's (no reply is hard for it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import render_history
from lexpilot.benchmark.vocabulary import ASKS, PREDICTS, VERDICTS
from lexpilot.scripted.abilities import SETUPS, Abilities


def draw(*parts) -> float:
    """A uniform number in [0, 1) from the parts: the same parts, the same number, in any process."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def case_key(case: Case) -> str:
    """A case as the provider can tell it from a prompt: its underspecified history (two cases alike there are one
    case to it, whatever their numbers)."""
    return hashlib.sha256(render_history(case.underspecified).encode("utf-8")).hexdigest()[:16]


def chance(abilities: Abilities, model: str, run: str, key: str, step: str) -> float:
    """The draw deciding one decision: the case's own, or for the model's noise share a draw of this run."""
    seed = abilities.seed
    if draw(seed, "noise", model, run, key, step) < abilities.models[model].noise:
        return draw(seed, "run", model, run, key, step)
    return draw(seed, "case", model, key, step)


def lca_right(abilities: Abilities, model: str, run: str, key: str, history_type: str) -> bool:
    """Whether the model's reply after the history fits it (predicts after complete, asks after underspecified)."""
    ability = getattr(abilities.models[model], f"lca_{history_type}")
    return chance(abilities, model, run, key, f"lca/{history_type}") < ability


def dcg_hit(abilities: Abilities, model: str, run: str, key: str, round_number: int) -> bool:
    """Whether the model's forced question of that round hits a key detail of a focal point."""
    return chance(abilities, model, run, key, f"dcg/{round_number}") < abilities.models[model].dcg


def pick_other(u: float, share: float, right: str, labels) -> str:
    """`right` when u < share, else one of the other labels, evenly, by where u falls in [share, 1)."""
    if u < share:
        return right
    others = [label for label in labels if label != right]
    return others[min(int((u - share) / (1 - share) * len(others)), len(others) - 1)]


def stated_verdicts(abilities: Abilities, model: str, run: str, case: Case, setup: str) -> list[str]:
    """The verdict the model states for each claim in that LJP setup: the court's, or another."""
    ability, key = abilities.models[model].ljp[setup], case_key(case)
    return [
        pick_other(chance(abilities, model, run, key, f"ljp/{setup}/{i}"), ability, gold, VERDICTS)
        for i, gold in enumerate(case.verdicts, 1)
    ]


def judged(
    abilities: Abilities, judge: str, run: str, prompt: str, task: str, truth: str, part: int = 0
) -> str:
    """The label the judge gives where `truth` is the true one (part: the claim, for a prompt of several)."""
    labels = tuple(abilities.judge[task])
    u = draw(abilities.seed, "judge", judge, run, hashlib.sha256(prompt.encode()).hexdigest(), part)
    return pick_other(u, abilities.recall(task, truth), truth, labels)


@dataclass(frozen=True)
class CaseTruth:
    """A model's true decisions on one case in one run."""

    lca: dict[str, bool]  # history type -> the reply fits it
    dcg: tuple[bool, ...]  # per round: the question hits
    verdicts: dict[str, list[str]]  # LJP setup -> the verdict stated per claim

    @property
    def dcg_success(self) -> bool:
        return any(self.dcg)


def true_decisions(
    abilities: Abilities, cases: list[Case], model: str, run: str = ""
) -> dict[str, CaseTruth]:
    """Every true decision of the model in the run (as its base URL names it), by case number."""
    truth = {}
    for case in cases:
        key = case_key(case)
        truth[case.number] = CaseTruth(
            {h: lca_right(abilities, model, run, key, h) for h in ("complete", "underspecified")},
            tuple(dcg_hit(abilities, model, run, key, r) for r in (1, 2)),
            {s: stated_verdicts(abilities, model, run, case, s) for s in SETUPS},
        )
    return truth


def strategy(right: bool, history_type: str) -> str:
    """The judge's word for what a reply does: predict (策略一) or ask (策略二)."""
    return PREDICTS if right == (history_type == "complete") else ASKS
