"""The events of an exported Inspect sample, so that `inspect view`'s Transcript tab shows the consultation as Inspect
shows its own samples (without events it says they were removed for size): the sample's start, one model event per
reply of the evaluated model or the User Model (its input the messages before it, by reference into the sample's
message pool, as Inspect condenses its own logs), and the judge's score. Every time is the stage's own labels' time
and every id made from the sample, so that a rerun writes the same bytes."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from lexpilot.reporting.export.instances import EVALUATED, USER_MODEL, Instance

# the role a model event names for each source of a reply, and the model role whose model it was
REPLIED = {EVALUATED: ("evaluated model", "eval"), USER_MODEL: ("User Model", "user")}


def sample_events(
    instance: Instance, messages: list, score: dict, models: dict[str, str], when: float
) -> list:
    """The sample's events (`messages`: its Inspect messages, `score`: its score as a mapping, `models`: role -> the
    model asked for, `when`: the stage's time)."""
    from inspect_ai import dataset, event, model, scorer

    common: dict[str, Any] = {"timestamp": datetime.fromtimestamp(when, timezone.utc), "working_start": 0.0}
    # Inspect gives each event a random uuid: made here from the sample, so that a rerun writes the same bytes
    ids = (f"{instance.stage}-{instance.sample_id}-event-{n}" for n in range(len(messages) + 2))
    given = [m for m, source in zip(messages, instance.messages) if source.source == "dataset"]
    found: list = [
        event.SampleInitEvent(
            sample=dataset.Sample(id=instance.sample_id, input=given or "", metadata={"case": instance.case}),
            state={},
            uuid=next(ids),
            **common,
        )
    ]
    for i, (message, source) in enumerate(zip(messages, instance.messages)):
        if source.source not in REPLIED:
            continue
        shown, role = REPLIED[source.source]
        reply = model.ChatMessageAssistant(id=f"{message.id}-reply", content=source.content)
        found.append(
            event.ModelEvent(
                model=models[role],
                role=shown,
                input=[],
                input_refs=[(0, i)] if i else [],
                tools=[],
                tool_choice="none",
                config=model.GenerateConfig(),
                output=model.ModelOutput(
                    model=models[role],
                    choices=[model.ChatCompletionChoice(message=reply, stop_reason="stop")],
                ),
                uuid=next(ids),
                **common,
            )
        )
    target = [label.reference for label in instance.labels]
    found.append(
        event.ScoreEvent(
            score=scorer.Score(**score), target=target, scorer="lexpilot_judge", uuid=next(ids), **common
        )
    )
    return found
