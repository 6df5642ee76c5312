"""Processes started as a user starts them: at a terminal, in a clean environment."""

import os
import sys
import time

from tests.helpers.paths import ROOT
from tests.helpers.warm import Started


def as_at_a_terminal() -> None:
    """A child process's Ctrl-C as a user's at a terminal: the shell starts a background job (a suite run with `&`)
    with SIGINT ignored, which its children inherit, and a test of Ctrl-C must not depend on how pytest was started.
    Passed to subprocess as `preexec_fn`."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def process_environment(provider) -> dict:
    """The environment of a script started against `provider` alone: no OPENAI_ or LEXPILOT_ variable of the
    suite's own, a short backoff."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LEXPILOT_"))}
    return env | {
        "OPENAI_BASE_URL": provider.base_url,
        "OPENAI_API_KEY": "k",
        "LEXPILOT_BACKOFF_BASE": "0.001",
    }


def at_a_terminal(warm, command: list[str], env: dict) -> Started:
    """The grid started as at a terminal (Ctrl-C reaches it however pytest was started), its output read."""
    return warm.start(command, ROOT, env, terminal=True)


def wait_until_said(process: Started, words: str, deadline: float) -> bool:
    """Wait until the started process has written `words` to its stderr, or `deadline` (time.monotonic) has passed;
    whether it has."""
    while words not in process.said() and time.monotonic() < deadline:
        time.sleep(0.01)
    return words in process.said()


def stage_command(
    script: str, root, dataset, *extra: str, model: str = "eval-model", run: str = "r1"
) -> list[str]:
    """`python SCRIPT --run-id RUN --model MODEL --dataset DATASET --output-root ROOT ...`: a stage script as a user
    runs it."""
    base = [sys.executable, script, "--run-id", run, "--model", model, "--dataset", str(dataset)]
    return [*base, "--output-root", str(root), *extra]


def wait_until(condition, seconds: float = 30) -> None:
    """Wait until `condition()` holds; an assertion error after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.02)
