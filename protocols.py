"""The evaluation protocols of the paper (Sections 4-6, Appendices D-F) as checkpointed steps: the LexAwN
responses, LCA labels, the Interaction-Based consultation with the User Model (standard and non-ideal
users), the DCG forced questions and their judging, the direct predictions (Direct, Gold-Standard) and the
claim-level verdict extraction; with the judge-output parsers and `CaseCalls`, the calls of one case.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable

from categories import FOCAL_TYPES
from checkpoints import CallJournal
from common import (ModelCaller, Usage, fill, key_detail_lines, render_claims, render_details_by_focal_point,
                    render_fault, render_focal_points, render_history, render_key_facts)
from config import Settings
from dataset import Case
from errors import CaseFailed
from records import (A1, DCG, DIRECT_PREDICTION, FORCE_ASK, GOLD_PREDICTION, HISTORY_TYPES, INTERACTION, LCA,
                     LJP_DIRECT, LJP_GOLD, LJP_INTERACTION, PLAIN, PLAIN_TYPES, RESPONSE_TYPES, VERDICTS, RecordKind,
                     FOCAL_TYPE_RECORDS)

CLARIFICATION_ROUNDS = 3  # user turns allowed after new assistant turns; pre-existing history turns do not count
DCG_ROUNDS = 2
DISRUPTION_PROMPTS = {"delayed": "user_delayed", "self-correction": "user_self_correction"}

# ----------------------------------------------------------------------------- judge outputs

def clean_judge_output(raw: str) -> str:
    """Drop what reasoning models add around an answer: a <think> block, a code fence, whitespace."""
    text = raw
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    text = text.strip()
    fenced = re.fullmatch(r"```[A-Za-z]*\s*(.*?)\s*```", text, re.S)
    return fenced.group(1).strip() if fenced else text


def judge_json(raw: str) -> dict:
    """A judge output that must be one JSON object (after the usual cleaning), or ValueError."""
    try:
        data = json.loads(clean_judge_output(raw))
    except (ValueError, RecursionError):
        raise ValueError("not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


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


def parse_response_type(raw: str) -> str:
    text = clean_judge_output(raw)
    if text not in RESPONSE_TYPES:
        raise ValueError("expected exactly 缺失识别, 条件性一般建议, 无条件一般建议 or 过早预测")
    return RESPONSE_TYPES[text]


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


FAULT_RECORD = re.compile(r"<故障记录>(.*?)</故障记录>\s*$", re.S)
FAULT_KINDS = {"不完整": "incomplete", "有误": "wrong"}


def fault_parser(details: list[str]) -> Callable[[str], tuple[str, dict]]:
    """The reply and its fault record: {"类型": 不完整|有误, "涉及": one key detail, verbatim}."""
    def parse(raw: str) -> tuple[str, dict]:
        match = FAULT_RECORD.search(raw.strip())
        if not match:
            raise ValueError("no <故障记录> at the end")
        try:
            record = json.loads(match.group(1))
        except ValueError:
            raise ValueError("the <故障记录> is not JSON") from None
        if not isinstance(record, dict) or record.get("类型") not in FAULT_KINDS:
            raise ValueError("类型 must be 不完整 or 有误")
        detail = str(record.get("涉及", "")).strip()
        if detail not in {d.strip() for d in details}:
            raise ValueError("涉及 is not one of the key details, verbatim")
        reply = raw.strip()[:match.start()].strip()
        if not reply:
            raise ValueError("no reply before the <故障记录>")
        return reply, {"kind": FAULT_KINDS[record["类型"]], "detail": detail}
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
    keep_reasoning: bool = False  # the evaluated model's and User Model's reasoning too (the judge's always)
    reasoning: dict = field(default_factory=dict)  # of the record being built: role -> reasoning per call

    def _chat(self, role: str, prompt: str, keep: bool = True) -> str:
        """A reply paid for in an earlier, unfinished attempt at this step is replayed, not bought again."""
        if self.journal:
            replayed = self.journal.take(self.case.number, self.step, role, prompt)
            if replayed is not None:
                self.replayed.merge(replayed[1])
                self.replays += 1
                return replayed[0]
        # in batch mode the caller raises NeedsReply: the request goes into the next batch, and its reply reaches
        # the journal when the batch is collected (nothing is marked or kept here)
        batched = getattr(self.caller, "batched", False)
        used = Usage()
        call_id = self.journal.started(role) if self.journal and not batched else None
        try:
            reply = self.caller.chat(role, prompt, used)
        finally:
            self.usage.merge(used.by_role)
            if call_id:
                self.journal.ended(call_id)
        if reply.reasoning and (role == "judge" or self.keep_reasoning):
            self.reasoning.setdefault(role, []).append(reply.reasoning)
        if keep and self.journal:
            self.journal.keep(self.case.number, self.step, role, prompt, reply.text, used.by_role)
        return reply.text

    def generate(self, role: str, prompt_name: str, **slots) -> str:
        return self._chat(role, fill(self.prompts[prompt_name], **slots))

    def judge(self, prompt_name: str, parse: Callable[[str], object], **slots):
        """(parsed answer, raw outputs): an invalid output is asked again, up to three attempts."""
        return self.validated("judge", prompt_name, parse, **slots)

    def validated(self, role: str, prompt_name: str, parse: Callable[[str], object], **slots):
        """(parsed output, raw outputs) of a prompt whose output has a required form; an output that `parse`
        rejects (ValueError) is asked for again, within three attempts in all."""
        prompt = fill(self.prompts[prompt_name], **slots)
        raws = []
        for _ in range(JUDGE_ATTEMPTS):
            raws.append(self._chat(role, prompt, keep=False))  # only a valid output is worth keeping
            try:
                parsed = parse(raws[-1])
            except ValueError as e:
                problem = str(e)
                self.caller.progress.retry(f"invalid {prompt_name} output: {problem}")
            else:
                if self.journal and not getattr(self.caller, "batched", False):
                    self.journal.keep(self.case.number, self.step, role, prompt, raws[-1], {})
                return parsed, raws
        raise CaseFailed(f"{prompt_name} output invalid after {JUDGE_ATTEMPTS} attempts ({problem}); "
                         f"last raw output: {raws[-1][:200]!r}")

    def converse(self, role: str, messages: list[dict]) -> str:
        """A reply to a conversation sent as its own messages (the plain consultation), not to a prompt."""
        return self._chat(role, [dict(m) for m in messages])

    def user_reply(self, dialogue: list[dict], prompt_name: str = "user_standard", **slots) -> str:
        """The User Model sees the conversation and the hidden key details, never focal points or verdicts."""
        return self.generate("user", prompt_name, history=render_history(dialogue),
                             key_facts=render_key_facts(self.case), **slots)

    def faulty_user_reply(self, dialogue: list[dict]) -> tuple[str, dict]:
        """The self-correcting user's one incomplete or wrong reply, and the fault it recorded: its kind and
        the key detail it concerns (the record is taken off the reply the evaluated model sees)."""
        (reply, fault), _ = self.validated("user", "user_self_correction", fault_parser(key_detail_lines(self.case)),
                                           history=render_history(dialogue), key_facts=render_key_facts(self.case))
        return reply, fault


# ----------------------------------------------------------------------------- steps

@dataclass(frozen=True)
class Step:
    """One checkpointed unit of a protocol: a record per case in one JSONL file."""
    kind: RecordKind
    run: Callable[[CaseCalls, dict], dict] | None  # (calls, upstream records by kind name) -> record body
    needs: tuple[str, ...] = ()  # the kinds of the upstream records this step reads
    max_calls: Callable[[dict, Settings], dict] | dict = field(default_factory=dict)
    prompts: dict = field(default_factory=dict)  # role -> prompt name, for the dry run's token estimate
    when: Callable[[Settings], bool] | None = None  # run only with these settings (e.g. a --histories choice)
    min_calls: dict | None = None  # the calls always made, for a lower bound (default: a fixed max_calls)

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


# ----------------------------------------------------------------------------- LexAwN and LCA

def a1_responses(calls: CaseCalls, upstream: dict) -> dict:
    """One new LexAwN response (Table 19) after each history, complete and underspecified."""
    responses = {}
    for history_type in HISTORY_TYPES:
        history = calls.case.history(history_type)
        responses[history_type] = {
            "history": history, "response": calls.generate("eval", "lexawn", history=render_history(history))}
    return {"responses": responses}


def judge_strategy(calls: CaseCalls, response: str) -> tuple[str, list[str]]:
    """The LCA judge (Table 23) sees only the new response, never the history before it."""
    return calls.judge("judge_lca", parse_lca_label, history=response)


def lca_labels(calls: CaseCalls, upstream: dict) -> dict:
    judgments = {}
    for history_type in HISTORY_TYPES:
        label, raw = judge_strategy(calls, upstream["a1"]["responses"][history_type]["response"])
        judgments[history_type] = {
            "label": label, "true_type": history_type,
            "predicted_type": "underspecified" if label == "策略二" else "complete", "judge_raw": raw,
        }
    return {"judgments": judgments}


# ----------------------------------------------------------------------------- the interaction

def interact(calls: CaseCalls, upstream: dict) -> dict:
    """Rounds of LexAwN response → LCA judge → User Model reply, until a prediction or the budget.

    Non-ideal users disrupt the reply to the first new clarification request the DCG judge accepts
    (relevant to a focal point and answerable from the key details); that decision is saved per round.
    A self-correcting user corrects in the next user turn, even after a prediction, which then gets updated.
    """
    condition = calls.user_condition
    history = calls.case.history("underspecified")
    dialogue = list(history)
    rounds = []
    disrupted_round = corrected_round = fault = None
    # Round 1 is the a1 response to the underspecified history, with the label LCA already gave it.
    response = upstream["a1"]["responses"]["underspecified"]["response"]
    label = upstream["LCA"]["judgments"]["underspecified"]["label"]
    judge_raw = upstream["LCA"]["judgments"]["underspecified"]["judge_raw"]
    for round_number in range(1, CLARIFICATION_ROUNDS + 1):
        if round_number > 1:
            response = calls.generate("eval", "lexawn", history=render_history(dialogue))
            label, judge_raw = judge_strategy(calls, response)
        dialogue.append({"role": "assistant", "content": response})
        entry = {"round": round_number, "prompt": "lexawn", "assistant": response, "label": label,
                 "judge_raw": judge_raw}
        rounds.append(entry)
        correction_due = condition == "self-correction" and disrupted_round == round_number - 1
        if correction_due:
            user_prompt, corrected_round = "user_correction", round_number
        elif label == "策略一":
            return _interaction_record(history, rounds, dialogue, "judged", condition,
                                       disrupted_round, corrected_round, fault)
        else:
            user_prompt = "user_standard"
            if condition in DISRUPTION_PROMPTS and disrupted_round is None:
                relevant, raws = judge_question(calls, response)
                entry["relevance"] = {"label": relevant, "judge_raw": raws}
                if relevant == "是":
                    user_prompt, disrupted_round = DISRUPTION_PROMPTS[condition], round_number
        entry["user_prompt"] = user_prompt
        if user_prompt == "user_self_correction":
            entry["user_reply"], fault = calls.faulty_user_reply(dialogue)
            entry["fault"] = fault
        elif user_prompt == "user_correction":
            entry["user_reply"] = calls.user_reply(dialogue, user_prompt, fault=render_fault(fault))
        else:
            entry["user_reply"] = calls.user_reply(dialogue, user_prompt)
        dialogue.append({"role": "user", "content": entry["user_reply"]})
    final = force_judge(calls, dialogue)
    dialogue.append({"role": "assistant", "content": final})
    rounds.append({"round": CLARIFICATION_ROUNDS + 1, "prompt": "force_judge", "assistant": final, "label": None})
    return _interaction_record(history, rounds, dialogue, "budget", condition, disrupted_round, corrected_round, fault)


def _interaction_record(history, rounds, dialogue, stop_reason, condition, disrupted_round, corrected_round,
                        fault) -> dict:
    record = {"user_condition": condition, "input_history": history, "rounds": rounds,
              "continued_history": dialogue, "stop_reason": stop_reason, "final_response": rounds[-1]["assistant"],
              "disrupted_round": disrupted_round, "corrected_round": corrected_round}
    if fault:  # a self-correcting user's fault: its kind and the key detail it concerned
        record["fault"] = fault
    return record


def interaction_calls(upstream: dict, settings: Settings, case: Case | None = None) -> dict:
    lca = upstream.get("LCA")
    if lca and lca["judgments"]["underspecified"]["label"] == "策略一":
        return {}
    relevance_checks = CLARIFICATION_ROUNDS if settings.user_condition in DISRUPTION_PROMPTS else 0
    return {"eval": CLARIFICATION_ROUNDS, "user": CLARIFICATION_ROUNDS,
            "judge": CLARIFICATION_ROUNDS - 1 + relevance_checks}


# ----------------------------------------------------------------------------- DCG

def force_ask(calls: CaseCalls, upstream: dict) -> dict:
    """Two forced clarification questions (Table 20); the second sees the first and the User Model's reply."""
    history = calls.case.history("underspecified")
    dialogue = list(history)
    rounds = []
    for round_number in range(1, DCG_ROUNDS + 1):
        question = calls.generate("eval", "force_ask", history=render_history(dialogue))
        dialogue.append({"role": "assistant", "content": question})
        rounds.append({"round": round_number, "question": question})
        if round_number < DCG_ROUNDS:
            rounds[-1]["user_reply"] = calls.user_reply(dialogue)
            dialogue.append({"role": "user", "content": rounds[-1]["user_reply"]})
    return {"input_history": history, "rounds": rounds}


def judge_question(calls: CaseCalls, question: str) -> tuple[str, list[str]]:
    """是 when the question targets a focal point and the key details can answer it (Table 24)."""
    return calls.judge("judge_dcg", parse_dcg_label, ai_response=question, focus_text=render_focal_points(calls.case),
                       key_facts=render_details_by_focal_point(calls.case))


def judge_questions(calls: CaseCalls, upstream: dict) -> dict:
    """The DCG judge sees each new question, the focal points and the key details; questions already in the
    history never count."""
    rounds = []
    for generated in upstream["force_ask"]["rounds"]:
        label, raw = judge_question(calls, generated["question"])
        rounds.append({"round": generated["round"], "label": label, "judge_raw": raw})
    return {"rounds": rounds, "success": any(r["label"] == "是" for r in rounds)}


# ----------------------------------------------------------------------------- LJP

def force_judge(calls: CaseCalls, history: list[dict]) -> str:
    """The direct prediction prompt (Table 21) on a history: a verdict, no further questions."""
    return calls.generate("eval", "force_judge", history=render_history(history))


def extract_verdicts(calls: CaseCalls, response: str) -> dict:
    """The extraction judge (Table 25) reads the response and the claims, never the gold verdicts."""
    case = calls.case
    predicted, raw = calls.judge("judge_ljp", verdict_parser(len(case.claims)),
                                 history=response, claims=render_claims(case))
    return {"claims": list(case.claims), "predicted": predicted, "gold": list(case.verdicts), "judge_raw": raw}


def prediction_steps(setup: str, history_type: str, generation: RecordKind, results: RecordKind) -> tuple[Step, Step]:
    """Direct and Gold-Standard differ only in the history they predict from."""
    def predict(calls: CaseCalls, upstream: dict) -> dict:
        history = calls.case.history(history_type)
        return {"history_type": history_type, "input_history": history, "response": force_judge(calls, history)}

    def extract(calls: CaseCalls, upstream: dict) -> dict:
        return {"setup": setup, **extract_verdicts(calls, upstream[generation.name]["response"])}

    return (Step(generation, predict, max_calls={"eval": 1}, prompts={"eval": "force_judge"}),
            Step(results, extract, needs=(generation.name,), max_calls={"judge": 1}, prompts={"judge": "judge_ljp"}))


def interaction_verdicts(calls: CaseCalls, upstream: dict) -> dict:
    interaction = upstream["interaction"]
    return {"setup": "interaction", "stop_reason": interaction["stop_reason"],
            **extract_verdicts(calls, interaction["final_response"])}


# ----------------------------------------------------------------------------- the plain consultation (C.2)

def plain_steps(history_type: str) -> tuple[Step, Step]:
    """The evaluated model answers the history as an ordinary chat (its messages in order, no task prompt:
    the one place where a history is not rendered into a prompt slot); the judge names the response type."""
    generation, types = PLAIN[history_type], PLAIN_TYPES[history_type]
    chosen = (lambda settings: history_type in settings.histories)

    def answer(calls: CaseCalls, upstream: dict) -> dict:
        messages = calls.case.history(history_type)
        return {"history_type": history_type, "messages": messages, "response": calls.converse("eval", messages),
                "sent_as": "messages"}

    def classify(calls: CaseCalls, upstream: dict) -> dict:
        kind, raw = calls.judge("judge_response_type", parse_response_type,
                                ai_response=upstream[generation.name]["response"])
        return {"history_type": history_type, "type": kind, "judge_raw": raw}

    return (Step(generation, answer, max_calls={"eval": 1}, when=chosen),
            Step(types, classify, needs=(generation.name,), max_calls={"judge": 1},
                 prompts={"judge": "judge_response_type"}, when=chosen))


# ----------------------------------------------------------------------------- focal-point types (E.8)

def parse_focal_type(raw: str) -> str:
    text = clean_judge_output(raw)
    if text not in FOCAL_TYPES:
        raise ValueError(f"expected exactly one of {', '.join(FOCAL_TYPES)}")
    return text


def focal_types(calls: CaseCalls, upstream: dict) -> dict:
    """Each focal point's type: the dataset's where it gives them (no call), else the judge's (Table 18)."""
    case = calls.case
    if case.focal_types is not None:
        return {"types": [{"focal_point": fp, "type": t, "source": "dataset"}
                          for fp, t in zip(case.focal_points, case.focal_types)]}
    types = []
    for fp in case.focal_points:
        label, raw = calls.judge("judge_focal_type", parse_focal_type, focus_text=fp)
        types.append({"focal_point": fp, "type": label, "source": "judge", "judge_raw": raw})
    return {"types": types}


def focal_type_calls(upstream: dict, settings: Settings, case: Case | None = None) -> dict:
    if case is not None and case.focal_types is not None:
        return {}
    return {"judge": len(case.focal_points) if case else 2}


# ----------------------------------------------------------------------------- the steps

A1_STEP = Step(A1, a1_responses, max_calls={"eval": 2}, prompts={"eval": "lexawn"})
LCA_STEP = Step(LCA, lca_labels, needs=("a1",), max_calls={"judge": 2}, prompts={"judge": "judge_lca"})
INTERACTION_STEP = Step(INTERACTION, interact, needs=("a1", "LCA"), max_calls=interaction_calls,
                        prompts={"eval": "lexawn", "user": "user_standard", "judge": "judge_lca"})
FORCE_ASK_STEP = Step(FORCE_ASK, force_ask, max_calls={"eval": DCG_ROUNDS, "user": DCG_ROUNDS - 1},
                      prompts={"eval": "force_ask", "user": "user_standard"})
DCG_STEP = Step(DCG, judge_questions, needs=("force_ask",), max_calls={"judge": DCG_ROUNDS},
                prompts={"judge": "judge_dcg"})
DIRECT_STEPS = prediction_steps("direct", "underspecified", DIRECT_PREDICTION, LJP_DIRECT)
GOLD_STEPS = prediction_steps("gold", "complete", GOLD_PREDICTION, LJP_GOLD)
LJP_INTERACTION_STEP = Step(LJP_INTERACTION, interaction_verdicts, needs=("interaction",), max_calls={"judge": 1},
                            prompts={"judge": "judge_ljp"})
PLAIN_STEPS = (*plain_steps("underspecified"), *plain_steps("complete"))
FOCAL_TYPE_STEP = Step(FOCAL_TYPE_RECORDS, focal_types, max_calls=focal_type_calls,
                       prompts={"judge": "judge_focal_type"})
