"""The events of an exported Inspect sample: the judge's score, so that `inspect view`'s Transcript tab shows it (a
sample with messages and no event at all is shown as one whose events "were removed because this sample exceeds
the browser's size limit"). The consultation itself is in the sample's messages (the Messages tab). A model event
per reply, with the message pool it refers to, doubled each log, and the start event repeats the whole history:
either took the export of a 10 × 5 × 432 grid over its 60 s (docs/export.md). Its time is the stage's own labels'
time and its id made from the sample, so that a rerun writes the same bytes."""

from __future__ import annotations

from datetime import datetime, timezone

from lexpilot.reporting.export.instances import Instance


def sample_events(instance: Instance, score: dict, when: float) -> list:
    """The sample's events (`score`: its score as a mapping, `when`: the stage's time)."""
    from inspect_ai import event, scorer

    scored = event.ScoreEvent(
        score=scorer.Score(**score),
        target=[label.reference for label in instance.labels],
        scorer="lexpilot_judge",
        # Inspect gives each event a random uuid: made from the sample, so that a rerun writes the same bytes
        uuid=f"{instance.stage}-{instance.sample_id}-score",
        timestamp=datetime.fromtimestamp(when, timezone.utc),
        working_start=0.0,
    )
    return [scored]
