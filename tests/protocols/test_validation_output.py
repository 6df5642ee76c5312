"""A judge's validation of a Targeted / Off-target dialogue whose facts are malformed (a fact without an id, an id
given as text, a fact that is no object) is an invalid output, asked for again like any other: not an internal
error (TypeError, AttributeError) that stopped the stage. Found by mypy."""

import json

import pytest

import eval_LJP_behaviour
from lexpilot.benchmark.records import BEHAVIOUR_DIALOGUE
from lexpilot.scripted.kinds import between
from lexpilot.scripted.replies import default_reply
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness


def broken(reply: dict, how: str) -> dict:
    facts = reply["facts"]
    assert len(facts) > 1  # an id among others: alone, it would be refused even before the fix
    if how == "no id":
        del facts[-1]["id"]
    elif how == "text id":
        facts[-1]["id"] = str(facts[-1]["id"])
    else:
        facts.append("not an object")
    return reply


@pytest.mark.parametrize("how", ["no id", "text id", "not an object"])
def test_a_malformed_validation_is_asked_again(tmp_path, provider, monkeypatch, how):
    harness = Harness(
        tmp_path, provider, monkeypatch, write_dataset(tmp_path / "one.json", sample_cases()[:1])
    )
    asked = {"targeted": 0}

    def script(kind, prompt, body):
        if kind == "behaviour_judge" and "【定向】" in between(prompt, "对话"):
            asked["targeted"] += 1
            if asked["targeted"] == 1:
                return json.dumps(broken(json.loads(default_reply(kind, prompt)), how), ensure_ascii=False)
        return None

    provider.script = script
    assert harness.run_stage(eval_LJP_behaviour.STAGE) == 0
    (record,) = harness.records(BEHAVIOUR_DIALOGUE["targeted"])
    assert record["status"] == "accepted" and asked["targeted"] == 2
