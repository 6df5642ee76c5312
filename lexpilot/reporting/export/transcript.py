"""The events of an exported Inspect sample, so that `inspect view`'s Transcript tab shows the sample as Inspect shows
its own (without events it says they were removed for size): the sample's start, with the consultation's given
history, and the judge's score. The consultation itself is in the sample's messages (the Messages tab). A model
event per reply, with the message pool it refers to, was tried: it doubled each log, and the export of a 10 × 5 ×
432 grid went from 68 to 88 s (docs/export.md), over its 60 s. Every time is the stage's own labels' time and every
id made from the sample, so that a rerun writes the same bytes."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from lexpilot.reporting.export.instances import DATASET, Instance


def sample_events(instance: Instance, messages: list, score: dict, when: float) -> list:
    """The sample's events (`messages`: its Inspect messages, `score`: its score as a mapping, `when`: the stage's
    time)."""
    from inspect_ai import dataset, event, scorer

    common: dict[str, Any] = {"timestamp": datetime.fromtimestamp(when, timezone.utc), "working_start": 0.0}
    # Inspect gives each event a random uuid: made here from the sample, so that a rerun writes the same bytes
    given = [m for m, source in zip(messages, instance.messages) if source.source == DATASET]
    start = event.SampleInitEvent(
        sample=dataset.Sample(id=instance.sample_id, input=given or "", metadata={"case": instance.case}),
        state={},
        uuid=f"{instance.stage}-{instance.sample_id}-event-start",
        **common,
    )
    target = [label.reference for label in instance.labels]
    scored = event.ScoreEvent(
        score=scorer.Score(**score),
        target=target,
        scorer="lexpilot_judge",
        uuid=f"{instance.stage}-{instance.sample_id}-event-score",
        **common,
    )
    return [start, scored]
