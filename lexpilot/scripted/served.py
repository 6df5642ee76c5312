"""The scripted provider answering a model id as another, switched while it runs: one `--served-as
REQUESTED=SERVED[@N]` (`ServedAs`), and the script that switches the provider's `served_as` when a requested id
reaches its count of requests (`switching`), for the command line and the tests alike."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from lexpilot.scripted.provider import ScriptedProvider


@dataclass(frozen=True)
class ServedAs:
    """One --served-as: the requested id, the id it is answered as, and after how many of its requests."""

    requested: str
    served: str
    after: int = 0

    @classmethod
    def parse(cls, text: str) -> ServedAs:
        requested, _, rest = text.partition("=")
        served, _, after = rest.partition("@")
        if not requested or not served or (after and not after.isdigit()):
            raise ValueError(f"--served-as {text!r}: not REQUESTED=SERVED or REQUESTED=SERVED@N")
        return cls(requested, served, int(after or 0))


def switching(provider: ScriptedProvider, entries: list[ServedAs], script=None):
    """The script that switches `provider.served_as` as each requested id reaches its count of requests (those
    from the first request on are set at once), then answers as `script` does."""
    seen: Counter = Counter()
    lock = threading.Lock()
    provider.served_as.update({e.requested: e.served for e in entries if e.after == 0})

    def answer(kind, prompt, body):
        with lock:
            seen[body["model"]] += 1
            for e in entries:
                if e.requested == body["model"] and seen[body["model"]] == e.after + 1:
                    provider.served_as[e.requested] = e.served
        return script(kind, prompt, body) if script else None

    return answer
