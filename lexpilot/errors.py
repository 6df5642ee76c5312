"""The harness's exceptions: what a user must act on, and how a case, a stage or a tool stops (Ctrl-C and SIGTERM
included)."""

import argparse
import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

# The exit status of a stage that stopped (a setting, a file or an endpoint to fix: a 401, an unknown model); 1 is
# a stage whose cases failed (rerun to retry them), 0 a stage that completed
STOPPED = 2


class HarnessError(Exception):
    """An error the user must act on; its message says what, where and what to do."""


class FatalError(HarnessError):
    """A permanent failure (auth, unknown model, bad request): the stage stops at once."""


class UsageError(Exception):
    """A problem with a file the report reads (--complexity, --prices): said in one line, nothing else printed."""


class CaseFailed(Exception):
    """This case could not be completed now; it is retried on the next run. `change`: the option to change before
    that run when a rerun as it is would buy the same failure (a reply cut at its output limit, a prompt beyond the
    context window); "" when a rerun may pass (a transient failure, an invalid output asked anew)."""

    def __init__(self, message: str, change: str = ""):
        super().__init__(message)
        self.change = change


# where a failure on an invalid output quotes that output: the reason is what comes before it
RAW_OUTPUT = "; last raw output: "

# the change a failure names when a server cut a stream short: it takes fewer requests at once than were sent
ONE_SLOT = "the server's requests at once"


@dataclass(frozen=True)
class CaseFailure:
    """A case that failed in a stage, why (one line, redacted), and the option to change first ("": rerun as it is)."""

    case: str
    message: str
    change: str = ""


class Aborted(Exception):
    """The stage is stopping; the case in hand is left for the next run."""


def first_of(items, limit: int = 10) -> list[str]:
    """At most `limit` of a long list of problems or cases, and how many more there are: every message that
    lists them shows them this way."""
    items = [str(x) for x in items]
    return items[:limit] + ([f"... and {len(items) - limit} more"] if len(items) > limit else [])


# The exit status of a program stopped by Ctrl-C (128 + SIGINT), as shells report it
INTERRUPTED = 130
# ... and by SIGTERM (128 + SIGTERM): what Slurm (a job's time limit, scancel, preemption), Kubernetes and systemd
# send, then SIGKILL after a grace period (Slurm's KillWait, 30 s by default)
TERMINATED = 143
# ... and by a shared store (Redis) out of reach longer than --redis-wait allows (EX_TEMPFAIL: rerun when it is back)
STORE_AWAY = 75


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where a Ctrl-C's KeyboardInterrupt is, and handled there as a grid's first
    Ctrl-C: no new call, the calls in flight end and are saved or journalled, then the program leaves; a second
    one leaves at once. A KeyboardInterrupt, so that every place that leaves cleanly on Ctrl-C leaves on it too."""


@dataclass(frozen=True)
class Stop:
    """What asked a program to stop, as its lines name it, the exit status it leaves with, and how its closing line
    begins ("[stage] interrupted: ...", "[stage] stopped by SIGTERM: ...")."""

    name: str
    status: int
    said: str


STOPS = (signal.SIGINT, signal.SIGTERM)  # Ctrl-C and SIGTERM: the stops a program handles

BY_CTRL_C = Stop("Ctrl-C", INTERRUPTED, "interrupted")
BY_SIGTERM = Stop("SIGTERM", TERMINATED, "stopped by SIGTERM")


def stop_of(interrupt: BaseException) -> Stop:
    """The stop a KeyboardInterrupt stands for: SIGTERM's, or Ctrl-C's."""
    return BY_SIGTERM if isinstance(interrupt, Terminated) else BY_CTRL_C


class Draining(threading.Event):
    """Set by a stop that lets no new call start while the calls in flight end (a grid's first Ctrl-C, any SIGTERM);
    `by` says which stop, for the lines that name it and the exit status."""

    def __init__(self) -> None:
        super().__init__()
        self.by = BY_CTRL_C

    def start(self, by: Stop) -> None:
        self.by = by  # before it is set: whoever sees it set reads the stop that set it
        self.set()


def leave_quietly_on_interrupt(entry_points: str) -> None:
    """When the program is one of the entry points in the folder `entry_points`: until it sets its own handling,
    Ctrl-C or SIGTERM ends it with one line instead of a traceback, or than no word (SIGTERM's default). Called first
    thing, while it is still importing and nothing has been done; a program that only imports the harness (a test
    runner) keeps its own Ctrl-C."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if not script or os.path.dirname(os.path.abspath(script)) != os.path.abspath(entry_points):
        return
    name = os.path.basename(script).removesuffix(".py")

    def leave(signum, _frame):
        stop = BY_SIGTERM if signum == signal.SIGTERM else BY_CTRL_C
        os.write(
            2, f"\n[{name}] {stop.said} while starting: nothing was done; rerun the same command.\n".encode()
        )
        os._exit(stop.status)

    signal.signal(signal.SIGINT, leave)
    signal.signal(signal.SIGTERM, leave)


def _terminated(_signum, _frame):
    raise Terminated()


def own_interrupts() -> None:
    """From here Ctrl-C raises KeyboardInterrupt and SIGTERM Terminated, which the program handles (signals belong
    to the main thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminated)


class _Hold:
    """The handler of Ctrl-C and SIGTERM while stops are held: each is kept for later; once released (the handlers
    being put back) one goes to its own handler at once, so that a stop met between two restores is never lost nor
    leaves the other signal held for good."""

    def __init__(self) -> None:
        self.held: list[int] = []
        self.before: dict[int, Any] = {}
        self.released = False

    def __call__(self, signum: int, frame) -> None:
        if not self.released:
            self.held.append(signum)
            return
        if self.before[signum] != signal.SIG_IGN:  # its own handler put back, and met now
            signal.signal(signum, self.before[signum])
            signal.raise_signal(signum)


@contextlib.contextmanager
def stops_held():
    """A Ctrl-C or SIGTERM that comes while the context lasts is handled as it ends, by the handler it would have met:
    for a step a stop must not cut in two, such as starting the workers that make calls (a grid's chains, a stage's
    cases), where it left calls in flight that no drain waited for. The caller leaves the context inside the `try`
    that handles the stop. Two stops held come as the first. Python runs signal handlers in the main thread only:
    elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hold, failed = _Hold(), True
    hold.before = {signum: signal.signal(signum, hold) for signum in STOPS}
    try:
        yield
        failed = False
    finally:
        hold.released = True
        for signum, handler in hold.before.items():
            signal.signal(signum, handler)
        # the first stop, to its own handler (raise_signal runs it before it returns); an error raised within goes
        # on instead: it is what the user must act on, and ends the program all the same
        if hold.held and not failed:
            signal.raise_signal(hold.held[0])


BROKEN_PIPE = 141  # 128 + SIGPIPE: a reporting tool whose reader closed the pipe


def run_tool(main, name: str) -> int:
    """A reporting tool's main, with Ctrl-C or SIGTERM as one line and status 130 or 143 (its files are written
    whole, so none is left half-written), and a reader that closed the pipe (`| head`) as no word at all."""
    own_interrupts()
    try:
        status = main()
        sys.stdout.flush()  # here, not at the interpreter's exit: a reader that left is met below
        return status
    except BrokenPipeError:
        # the reader of its output left (`| head`): nothing more to say. stdout goes to /dev/null so that the
        # interpreter's last flush raises nothing; the status is a process's killed by SIGPIPE
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    except KeyboardInterrupt as interrupt:
        stop = stop_of(interrupt)
        print(
            # a tool that writes several files (--html's pages, an export) may have written some: each is whole
            f"\n[{name}] {stop.said}: any file written so far is whole; rerun the same command.",
            file=sys.stderr,
            flush=True,
        )
        return stop.status


class OneLineParser(argparse.ArgumentParser):
    """The entry points' command line: a mistake in it is one line naming the flag and what is wrong (argparse's own
    error repeats the whole usage first); --help shows the usage."""

    def error(self, message: str):
        self.exit(STOPPED, f"{self.prog}: {message} (see --help)\n")
