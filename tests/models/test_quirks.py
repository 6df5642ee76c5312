"""Provider quirks, one entry each in lexpilot/models/quirks.py: every entry's example is read as
its refusal by that entry, and by no earlier one (each entry earns its place); a provider's wording reaches the
harness the same way through a synchronous call and a batch line; and every refusal a synchronous stage stops on
stops a batch stage in its first cycle, with the same message, instead of "failed in the batch" for --retries + 1
cycles (each up to 24 h at a real provider)."""

import json

import pytest

from lexpilot.models.quirks import (
    CACHED_TOKENS,
    QUIRKS,
    REASONING_TEXT,
    REASONING_TOKENS,
    Refusal,
    first_field,
    provider_error,
    refusal_of,
)
from lexpilot.models.replies import parse_completion, parse_stream
from lexpilot.running.batch.collect import line_error
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.replies import TEMPERATURE_REFUSED
from tests.helpers.stages import Harness


@pytest.mark.parametrize("quirk", QUIRKS, ids=[q.name for q in QUIRKS])
def test_each_quirk_reads_its_own_example(quirk):
    assert refusal_of(quirk.example) is quirk.refusal
    first = next(q for q in QUIRKS if q.matches(quirk.example))
    assert first is quirk, f"{quirk.name}: its example is read by {first.name!r} first"


def test_an_error_no_quirk_names_is_no_refusal_and_only_a_400_is_read():
    assert refusal_of(provider_error(400, {"error": {"message": "unknown parameter n"}})) is None
    context = QUIRKS[0].example
    assert (
        refusal_of(provider_error(500, {"error": {"message": context.message, "code": context.code}})) is None
    )


# one error, as each path receives it: the body of an HTTP 400, and a batch output line that carries that body
LLAMA_CPP_CONTEXT = {
    "error": {
        "code": 400,
        "message": "request (4476 tokens) exceeds the available context size "
        "(4096 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 4476,
        "n_ctx": 4096,
    }
}


@pytest.mark.parametrize(
    "body, refusal",
    [
        (LLAMA_CPP_CONTEXT, Refusal.CONTEXT_WINDOW),
        ({"error": {"message": "x", "param": "temperature"}}, Refusal.TEMPERATURE),
    ],
)
def test_a_synchronous_error_and_a_batch_line_are_read_alike(body, refusal):
    synchronous = provider_error(400, body)
    line = {"custom_id": "c", "response": {"status_code": 400, "body": body}, "error": None}
    assert line_error(line) == synchronous and refusal_of(synchronous) is refusal
    error_file = {"custom_id": "c", "response": None, "error": body["error"]}  # an error-file line: no status
    assert refusal_of(line_error(error_file)) is refusal


def test_a_llama_cpp_context_overflow_fails_its_case_not_the_stage(tmp_path, provider, monkeypatch, capsys):
    """llama.cpp's server says "exceeds the available context size", which the harness once read as a request it
    cannot mend: the whole stage stopped, instead of the one case whose prompt is too long."""
    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])
    first = sample_cases()[0]["complete_consultation"][0]["content"]
    provider.script = lambda kind, prompt, body: (
        {"status": 400, "error": LLAMA_CPP_CONTEXT["error"]["message"], "type": "exceed_context_size_error"}
        if first in prompt
        else None
    )
    h = Harness(tmp_path, provider, monkeypatch, dataset)
    assert h.run("gold", "--keep-going") == 1
    err = capsys.readouterr().err
    assert "exceed the model's context window" in err and "Lower --max-tokens" in err
    assert len(h.records("eval_results", "LJP_gold.jsonl")) == 2, err


OUTPUT_LIMIT_REFUSED = {
    "status": 400,
    "error": "max_tokens is too large: 8192. This model supports at most 4096 completion tokens",
}
STOPPING = {  # (the stage's flag the message names, what the provider refuses, for which request kind)
    "temperature": ("Pass --temperature default", TEMPERATURE_REFUSED, "force_judge"),
    "judge temperature": ("Pass --judge-temperature default", TEMPERATURE_REFUSED, "ljp_judge"),
    "output limit": ("Pass --max-tokens with the model's limit", OUTPUT_LIMIT_REFUSED, "force_judge"),
}


@pytest.mark.parametrize("name", STOPPING)
def test_a_refusal_that_stops_a_synchronous_stage_stops_a_batch_stage_in_one_cycle(
    tmp_path, provider, monkeypatch, capsys, name
):
    flag, refusal, kind = STOPPING[name]
    provider.script = lambda k, prompt, body: refusal if k == kind else None
    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])
    said = {}
    for mode, extra in (("sync", ()), ("batch", ("--batch", "--batch-poll", "1", "--retries", "2"))):
        h = Harness(tmp_path / mode, provider, monkeypatch, dataset)
        assert h.run("gold", *extra) == 2, mode
        said[mode] = [line for line in capsys.readouterr().err.splitlines() if "does not accept" in line]
        assert len(said[mode]) == 1 and flag in said[mode][0], (mode, said[mode])
    assert said["batch"][0].split(": ", 1)[1] == said["sync"][0].split(": ", 1)[1]  # the stage's prefix aside
    ledger = json.loads(next((tmp_path / "batch" / "out").glob("runs/*/*/batches.json")).read_text())
    # the judge asks after the model
    assert sum(ledger["cycles"].values()) == (2 if kind == "ljp_judge" else 1)


FIELDS = [
    (kind, f)
    for kind, fields in (
        ("cached", CACHED_TOKENS),
        ("reasoning tokens", REASONING_TOKENS),
        ("reasoning", REASONING_TEXT),
    )
    for f in fields
]


@pytest.mark.parametrize("kind, field", FIELDS, ids=[f.name for _, f in FIELDS])
def test_each_providers_field_is_read_from_its_own_example_in_a_reply_and_a_stream(kind, field):
    """Each field's example holds 7 there (the reasoning text: "7"), and a reply carrying it is read so, as a body
    and as a stream; no other provider's field is needed."""
    assert first_field(field.example, (field,)) == 7
    example = (
        {k: "想一想" if v == 7 else v for k, v in field.example.items()}
        if kind == "reasoning"
        else field.example
    )
    usage = {"prompt_tokens": 9, "completion_tokens": 9, **example} if kind != "reasoning" else None
    message = {"role": "assistant", "content": "答", **(example if kind == "reasoning" else {})}
    body = {"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}
    delta = {
        "content": "答",
        **({k: v for k, v in example.items() if k != "content"} if kind == "reasoning" else {}),
    }
    events = [
        f"data: {json.dumps({'choices': [{'delta': delta, 'finish_reason': 'stop'}]})}",
        f"data: {json.dumps({'choices': [], 'usage': usage})}",
        "data: [DONE]",
    ]
    for reply in (
        parse_completion(json.dumps(body).encode()),
        parse_stream(events, float("inf"), lambda: False),
    ):
        got = {
            "cached": reply.cached_tokens,
            "reasoning tokens": reply.reasoning_tokens,
            "reasoning": reply.reasoning,
        }
        assert got[kind] == ("想一想" if kind == "reasoning" else 7), (field.name, reply)
