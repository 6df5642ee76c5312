"""The tests' warm starts (tests/helpers/warm.py) against a fresh `python script.py`: what a forked start prints and
exits with is what a fresh start does, and what a fork cannot honour is refused rather than ignored."""

import os
import sys

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.warm import fresh, run

# forked and fresh interpreters: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--models"],
        ["--models", "m", "--runs", "0"],
        ["--models", "m", "--dataset", "/nowhere.json"],
    ],
)
def test_a_forked_start_says_and_exits_what_a_fresh_one_does(warm, argv):
    command, env = [sys.executable, "run_grid.py", *argv], dict(os.environ)
    forked, started_fresh = run(warm, command, ROOT, env), fresh(command, ROOT, env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        started_fresh.returncode,
        started_fresh.stdout,
        started_fresh.stderr,
    )


def test_a_start_up_variable_a_fork_cannot_honour_is_refused(warm):
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    with pytest.raises(AssertionError, match="start this one fresh"):
        warm.start(
            [sys.executable, "run_grid.py", "--help"], ROOT, dict(os.environ) | {"PYTHONHASHSEED": seed}
        )
