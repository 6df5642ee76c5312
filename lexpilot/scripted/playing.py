"""The scripted provider playing an abilities file (`--abilities FILE --dataset FILE`): the evaluated models answer
right as often as the file says, and the judge labels them with the file's confusion, each decision drawn by
truth.py. The dataset tells the provider which case and history a prompt holds.

Every reply carries its truth where the judge and an expert can read it, as a real reply does: an LCA reply predicts
(【预测】) or asks (【追问】); a forced question that hits quotes a key detail of the case verbatim, one that misses
asks something else; a prediction states one verdict per claim ("第1项诉请「…」：支持"). Every LexAwN reply states the
verdicts the model leans to, so that whichever reply ends an interaction, its verdicts are the model's for that
setup. Each reply ends with a tag of its model, run, case and step, so that no two judge prompts are alike and the
judge's errors fall independently. The scripted judge reads the truth from its own prompt and gives it with its
recall for that label (truth.judged); the expert labels of bench/scripted_experts.py read it the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import key_detail_lines, render_history
from lexpilot.benchmark.vocabulary import ASKS, HISTORY_TYPES, NO, PREDICTS, VERDICTS, YES
from lexpilot.scripted.abilities import Abilities
from lexpilot.scripted.kinds import between
from lexpilot.scripted.replies import ASK, PREDICT
from lexpilot.scripted.truth import case_key, dcg_hit, draw, judged, lca_right, stated_verdicts, strategy

EVALUATED = ("lexawn", "force_ask", "force_judge")  # the evaluated model's requests the abilities decide
# a stated verdict: its claim by number and text (the judge matches claims by their text, in whatever order its prompt
# lists them: the order diagnostic shuffles them), then the verdict
VERDICT_LINE = re.compile(
    r"第\d+项诉请「(.*?)」：(" + "|".join(sorted(VERDICTS, key=len, reverse=True)) + ")"
)
MISSED = "请问您是通过什么渠道找到我们的？"  # a forced question that misses: no key detail in it


@dataclass(frozen=True)
class Place:
    """Where a prompt's history stands: the case, the history it starts with, and the assistant turns added since."""

    case: Case
    key: str
    history_type: str
    added_turns: int


class CaseIndex:
    """The dataset's histories as the prompts render them, found from a prompt's history in a few dictionary looks."""

    def __init__(self, cases: list[Case]):
        self.by_first: dict[str, list[tuple[str, str, Case]]] = {}
        for case in cases:
            for history_type in HISTORY_TYPES:
                history = case.history(history_type)
                # a slot's content is read stripped (kinds.between): so is the history's, where it ends
                first = render_history(history[:1]).strip()
                self.by_first.setdefault(first, []).append(
                    (render_history(history).strip(), history_type, case)
                )
        self.lengths = sorted({len(first) for first in self.by_first})

    def place(self, history: str) -> Place | None:
        """The case and history `history` is, or continues (the first case of two alike); None: not in the dataset."""
        for n in self.lengths:
            for rendered, history_type, case in sorted(
                self.by_first.get(history[:n], ()), key=lambda e: -len(e[0])
            ):
                if history == rendered or history.startswith(rendered + "\n"):
                    added = history[len(rendered) :].count("\nAssistant: ")
                    return Place(case, case_key(case), history_type, added)
        return None


def tag(*parts) -> str:
    return "（#" + hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:8] + "）"


def claim_line(claim: str) -> str:
    """A claim on one line, as the extraction judge's prompt lists it (prompts.render_claims)."""
    return " ".join(claim.splitlines())


def verdict_lines(case: Case, verdicts: list[str]) -> str:
    return "\n".join(
        f"第{i}项诉请「{claim_line(c)}」：{v}" for i, (c, v) in enumerate(zip(case.claims, verdicts), 1)
    )


def stated(reply: str, claims: list[str]) -> list[str] | None:
    """The verdict a reply states for each claim (matched by its text), or None when it does not state one for each."""
    found = dict(VERDICT_LINE.findall(reply))
    lines = [claim_line(c).strip() for c in claims]
    return [found[c] for c in lines] if all(c in found for c in lines) else None


def hits(question: str, key_details: str) -> bool:
    """A forced question hits when it quotes a key detail of the case (the DCG judge's and the experts' facts,
    one per line, the focal points' 【…】 headings aside)."""
    lines = [line.strip() for line in key_details.splitlines()]
    return any(line and not line.startswith("【") and line in question for line in lines)


def lexawn(abilities: Abilities, model: str, run: str, place: Place) -> str:
    """After a history: predict or ask as the model's LCA ability draws it (after a continued dialogue, predict),
    stating the verdicts it leans to either way."""
    setup = "gold" if place.history_type == "complete" else "interaction"
    verdicts = verdict_lines(place.case, stated_verdicts(abilities, model, run, place.case, setup))
    step = f"lexawn/{place.history_type}/{place.added_turns}"
    if place.added_turns == 0:
        right = lca_right(abilities, model, run, place.key, place.history_type)
        if strategy(right, place.history_type) == ASKS:
            return (
                f"{ASK}还需要核实一个关键点，请问相关事实是怎样的？若情况属实，初步倾向：\n{verdicts}\n"
                + tag(model, run, place.key, step)
            )
    return f"{PREDICT}结合现有事实，各项诉请预测如下：\n{verdicts}\n" + tag(model, run, place.key, step)


def force_ask(abilities: Abilities, model: str, run: str, place: Place) -> str:
    """A forced question: one quoting a key detail when the model's DCG ability draws a hit, else one beside it."""
    round_number = place.added_turns + 1
    mark = tag(model, run, place.key, f"dcg/{round_number}")
    if not dcg_hit(abilities, model, run, place.key, round_number):
        return f"{ASK}{MISSED}{mark}"
    details = key_detail_lines(place.case)
    detail = details[int(draw(abilities.seed, "detail", place.key, round_number) * len(details))]
    return f"{ASK}需要核实一个关键点：{detail}——是这样吗？{mark}"


def force_judge(abilities: Abilities, model: str, run: str, place: Place) -> str:
    """A prediction: Direct after the underspecified history, Gold-Standard after the complete one, else the
    interaction's (a dialogue that ran out of rounds)."""
    setup = (
        "interaction"
        if place.added_turns
        else {"complete": "gold", "underspecified": "direct"}[place.history_type]
    )
    verdicts = verdict_lines(place.case, stated_verdicts(abilities, model, run, place.case, setup))
    return f"{PREDICT}法律分析……各项诉请预测如下：\n{verdicts}\n" + tag(model, run, place.key, setup)


def judge_reply(abilities: Abilities, judge: str, run: str, kind: str, prompt: str) -> str | None:
    """The judge's label: the truth read from its own prompt, given with its recall for that label."""
    if kind == "lca_judge":
        truth = PREDICTS if PREDICT in between(prompt, "待评估回复") else ASKS
        return judged(abilities, judge, run, prompt, "LCA", truth)
    if kind == "dcg_judge":
        truth = YES if hits(between(prompt, "AI提问内容"), between(prompt, "争议焦点对应案件事实")) else NO
        return judged(abilities, judge, run, prompt, "DCG", truth)
    verdicts = stated(between(prompt, "待提取回复"), between(prompt, "正式诉请").split("\n"))
    if verdicts is None:
        return None  # a reply the abilities did not write: the canned extraction
    labels = [judged(abilities, judge, run, prompt, "LJP", v, i) for i, v in enumerate(verdicts, 1)]
    return json.dumps({"results": labels}, ensure_ascii=False)


def playing(provider, abilities: Abilities, cases: list[Case], dataset: str = "the dataset"):
    """The script under which `provider` plays the abilities on `cases`: the evaluated models' replies and the LCA,
    DCG and LJP judges' labels; every other request as by default. An evaluated model the file does not declare,
    or a history not in the dataset, is answered with an error saying so."""
    index = CaseIndex(cases)
    replies = {"lexawn": lexawn, "force_ask": force_ask, "force_judge": force_judge}

    def answer(kind: str, prompt: str, body: dict):
        run, model = provider.run_label(), str(body.get("model"))
        if kind in ("lca_judge", "dcg_judge", "ljp_judge"):
            return judge_reply(abilities, model, run, kind, prompt)
        if kind not in EVALUATED:
            return None
        if model not in abilities.models:
            return refusal(f"model {model!r} is not in {abilities.path}: declare its abilities there", 404)
        place = index.place(between(prompt, "对话历史"))
        if place is None:
            return refusal(
                f"a {kind} prompt's history is not in {dataset}: start the provider with the runs' dataset"
            )
        return replies[kind](abilities, model, run, place)

    return answer


def refusal(message: str, status: int = 400) -> dict:
    return {"status": status, "error": f"scripted provider: {message}", "type": "invalid_request_error"}
