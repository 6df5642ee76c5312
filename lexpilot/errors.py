"""The harness's exceptions: what a user must act on, and how a case or a stage stops."""



class HarnessError(Exception):
    """An error the user must act on; its message says what, where and what to do."""


class FatalError(HarnessError):
    """A permanent failure (auth, unknown model, bad request): the stage stops at once."""


class CaseFailed(Exception):
    """This case could not be completed now; it is retried on the next run."""


class Aborted(Exception):
    """The stage is stopping; the case in hand is left for the next run."""
