"""The harness's exceptions: what a user must act on, and how a case or a stage stops."""



# The exit status of a stage that stopped (a setting, a file or an endpoint to fix: a 401, an unknown model); 1 is
# a stage whose cases failed (rerun to retry them), 0 a stage that completed
STOPPED = 2


class HarnessError(Exception):
    """An error the user must act on; its message says what, where and what to do."""


class FatalError(HarnessError):
    """A permanent failure (auth, unknown model, bad request): the stage stops at once."""


class CaseFailed(Exception):
    """This case could not be completed now; it is retried on the next run."""


class Aborted(Exception):
    """The stage is stopping; the case in hand is left for the next run."""


def first_of(items, limit: int = 10) -> list[str]:
    """At most `limit` of a long list of problems or cases, and how many more there are: every message that
    lists them shows them this way."""
    items = [str(x) for x in items]
    return items[:limit] + ([f"... and {len(items) - limit} more"] if len(items) > limit else [])

