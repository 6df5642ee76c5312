"""Targeted and Off-target dialogues (Section 6.5, Appendix E.7, Table 4): how interaction behaviour drives
judgment prediction, under controlled conditions.

Per case and condition, from an independent copy of the underspecified history: the evaluated model, given the
key details (never the verdicts), writes one question per round meant to recover the missing facts (Targeted)
or to leave them undisclosed (Off-target), the Standard User Model answers, three rounds in both conditions;
the judge checks each missing fact (a key detail the initial history does not already state: "given") against
the whole dialogue, marking it recovered, absent or contradicted and citing the user turns, and flags, each as
its own reason, unsupported assertions, questions that reveal the answer and replies beyond the question's
scope. "Targeted requires complete, accurate recovery; Off-target requires no disclosure, including by
implication" (Appendix E.7). A failed dialogue is rebuilt from scratch, at most five attempts ("rejection
reasons and unresolved cases are retained"); then the same model predicts in a fresh context from the validated
dialogue alone with the direct prediction prompt (Table 21), and the extraction judge (Table 25) gives the
verdicts, as in Direct LJP. An unresolved case is predicted from its last attempted dialogue, and flagged, so
that Table 4 covers every case and every claim.
"""

from __future__ import annotations

from lexpilot.benchmark.prompts import (
    key_detail_lines,
    render_history,
    render_key_facts,
    render_numbered_details,
)
from lexpilot.benchmark.records import (
    BEHAVIOUR_DIALOGUE,
    BEHAVIOUR_PREDICTION,
    LJP_BEHAVIOUR,
    LJP_DIRECT,
    model_folder,
)
from lexpilot.benchmark.vocabulary import BEHAVIOURS
from lexpilot.protocols.judging import judge_json
from lexpilot.protocols.ljp import extract_verdicts, force_judge
from lexpilot.protocols.steps import CaseCalls, Stage, Step

ROUNDS = 3
ATTEMPTS = 5
# given: the initial history states the fact already (not a missing fact); partly_given: it states only part of
# it, and the new turns add nothing to it (its rest is still missing)
STATUSES = ("given", "partly_given", "recovered", "absent", "contradicted")
FLAGS = {
    "unsupported_assertion": "unsupported assertion",
    "question_reveals_answer": "a question reveals the answer",
    "beyond_scope": "a reply beyond the question's scope",
}
# "Targeted requires complete, accurate recovery; Off-target requires no disclosure" (Appendix E.7): a fact the
# history gives only in part must be completed in Targeted, and left as it is in Off-target
WANTED = {"targeted": ("recovered",), "off_target": ("absent", "partly_given")}
FROM_HISTORY = ("given", "partly_given")  # statuses that cite the initial history's user turns


def validation_parser(n_details: int):
    def parse(raw: str) -> dict:
        data = judge_json(raw)
        facts = data.get("facts")
        ids = [f.get("id") for f in facts if isinstance(f, dict)] if isinstance(facts, list) else []
        # numbers only: an id of another kind (text, none at all) cannot be sorted with the rest (a TypeError)
        numbers = [i for i in ids if isinstance(i, (int, float))]
        if not isinstance(facts, list) or numbers != ids or sorted(numbers) != list(range(1, n_details + 1)):
            raise ValueError(f"facts must hold ids 1 to {n_details}, once each")
        if any(
            not isinstance(f, dict)
            or f.get("status") not in STATUSES
            or not isinstance(f.get("turns", []), list)
            for f in facts
        ):
            raise ValueError(f"every status must be one of {', '.join(STATUSES)}")
        if any(not isinstance(data.get(flag), bool) for flag in FLAGS):
            raise ValueError(f"{', '.join(FLAGS)} must be true or false")
        return {
            "facts": sorted(
                ({"id": f["id"], "status": f["status"], "turns": f.get("turns", [])} for f in facts),
                key=lambda f: f["id"],
            ),
            **{flag: data[flag] for flag in FLAGS},
        }

    return parse


def rejection(validation: dict, condition: str, initial_turns: int = 0) -> list[str]:
    """Why a dialogue fails its condition (empty: accepted). Acceptance depends on these criteria only, never
    on whether a verdict would be right. A fact recovered must cite a user turn of the new part of the dialogue
    (after the `initial_turns` of the history): a recovery the judge cannot point to is not one."""
    wanted = WANTED[condition]
    facts = validation["facts"]
    reasons = [
        f"fact {f['id']} {f['status'].replace('_', ' ')}"
        for f in facts
        if f["status"] not in (*wanted, "given")
    ]
    reasons += [
        f"fact {f['id']} recovered without a cited new user turn"
        for f in facts
        if f["status"] == "recovered"
        and not any(isinstance(t, int) and t > initial_turns for t in f["turns"])
    ]
    # a fact the history states is checked against the turns it cites as a recovered one is: only the initial
    # history's user turns (a fact leaked in the new turns and labelled "given" is not given)
    reasons += [
        f"fact {f['id']} {f['status'].replace('_', ' ')} without citing only the initial history's user turns"
        for f in facts
        if f["status"] in FROM_HISTORY
        and not (f["turns"] and all(isinstance(t, int) and 0 < t <= initial_turns for t in f["turns"]))
    ]
    return reasons + [name for flag, name in FLAGS.items() if validation[flag]]


def construct(condition: str):
    def run(calls: CaseCalls, upstream: dict) -> dict:
        history = calls.case.history("underspecified")
        attempts = []
        for attempt in range(1, ATTEMPTS + 1):
            dialogue = list(history)
            for _ in range(ROUNDS):
                question = calls.generate(
                    "eval",
                    f"behaviour_{condition}",
                    history=render_history(dialogue),
                    key_facts=render_key_facts(calls.case),
                )
                dialogue.append({"role": "assistant", "content": question})
                dialogue.append({"role": "user", "content": calls.user_reply(dialogue)})
            validation, raw = calls.judge(
                "behaviour_validation",
                validation_parser(len(key_detail_lines(calls.case))),
                history=render_constructed(history, dialogue[len(history) :]),
                key_facts=render_numbered_details(calls.case),
            )
            reasons = rejection(validation, condition, user_turns(history))
            attempts.append(
                {
                    "attempt": attempt,
                    "dialogue": dialogue[len(history) :],
                    "validation": validation,
                    "judge_raw": raw,
                    "rejected": reasons,
                }
            )
            if not reasons:
                return {
                    "condition": condition,
                    "status": "accepted",
                    "attempts": attempts,
                    "dialogue": dialogue,
                }
        # unresolved: the last attempted dialogue is kept for the prediction, which is flagged as unresolved
        return {"condition": condition, "status": "unresolved", "attempts": attempts, "dialogue": dialogue}

    return run


def render_constructed(history: list[dict], turns: list[dict]) -> str:
    """The dialogue the validator reads: the initial history, then the constructed questions and replies, every
    user turn numbered over the whole dialogue (the numbers the validator cites)."""
    numbered, n = [], 0
    for m in history + turns:
        if m["role"] == "user":
            n += 1
            numbered.append(f"User（第{n}次发言）: {m['content']}")
        else:
            numbered.append(f"Assistant: {m['content']}")
    return "\n".join(numbered[: len(history)] + ["【以下为新增的提问与回答】"] + numbered[len(history) :])


def user_turns(messages: list[dict]) -> int:
    return sum(m["role"] == "user" for m in messages)


def predict(condition: str):
    def run(calls: CaseCalls, upstream: dict) -> dict:
        dialogue = upstream[BEHAVIOUR_DIALOGUE[condition].name]
        # a fresh context: the validated (or, unresolved, the last attempted) dialogue alone, with the direct
        # prediction prompt
        return {
            "condition": condition,
            "status": dialogue["status"],
            "response": force_judge(calls, dialogue["dialogue"]),
        }

    return run


def extract(condition: str):
    def run(calls: CaseCalls, upstream: dict) -> dict:
        prediction = upstream[BEHAVIOUR_PREDICTION[condition].name]
        return {
            "setup": condition,
            "status": prediction["status"],
            **extract_verdicts(calls, prediction["response"]),
        }

    return run


def steps(condition: str) -> tuple[Step, Step, Step]:
    dialogue, prediction = BEHAVIOUR_DIALOGUE[condition], BEHAVIOUR_PREDICTION[condition]
    worst = {"eval": ATTEMPTS * ROUNDS, "user": ATTEMPTS * ROUNDS, "judge": ATTEMPTS}
    return (
        Step(
            dialogue,
            construct(condition),
            max_calls=worst,
            min_calls={"eval": ROUNDS, "user": ROUNDS, "judge": 1},
            prompts={
                "eval": f"behaviour_{condition}",
                "user": "user_standard",
                "judge": "behaviour_validation",
            },
        ),
        Step(
            prediction,
            predict(condition),
            needs=(dialogue.name,),
            max_calls={"eval": 1},
            prompts={"eval": "force_judge"},
        ),
        Step(
            LJP_BEHAVIOUR[condition],
            extract(condition),
            needs=(prediction.name,),
            max_calls={"judge": 1},
            prompts={"judge": "judge_ljp"},
        ),
    )


BEHAVIOUR_STEPS = tuple(step for condition in BEHAVIOURS for step in steps(condition))


def direct_note(settings) -> str | None:
    """Table 4 compares with the run's Direct LJP: say so when it is not there yet."""
    path = LJP_DIRECT.path(settings.output_root, settings.run_id, model_folder(settings.roles["eval"].model))
    if not path.exists():
        return (
            f"Table 4 compares with Direct LJP, which this run does not have yet: run eval_LJP_direct.py "
            f"--run-id {settings.run_id} with the same options"
        )
    return None


BEHAVIOUR_STAGE = Stage("LJP behaviour", "eval_LJP_behaviour.py", BEHAVIOUR_STEPS, prepare=direct_note)
