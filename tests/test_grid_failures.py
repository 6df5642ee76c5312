"""Issue 54 item 2, "The grid says why a cell failed": against a server that cuts every User Model reply at the
configured limit (as SmolLM2 on llama.cpp did at --user-max-tokens 256), run_grid.py says each reason once with
the stage, the case count and the option to change, never advises a rerun that would buy the same failure, and
the display says a failed case as it happens, not only at the end."""

import re
import sys
import time

import pytest

import run_grid
from lexpilot.errors import CaseFailure
from lexpilot.running.failures import Reasons, advice
from tests.conftest import sample_cases, write_dataset
from tests.test_run_grid import grid_argv

MODELS = ("model-a", "model-b")


@pytest.fixture
def two_cases(tmp_path):
    return write_dataset(tmp_path / "two.json", sample_cases()[:2])


class CutsTheUserModel:
    """Every User Model reply cut at its output limit; on the first judge request of an LJP stage (which a chain
    reaches only after its LexAwN failed), whether the display has already said a failed case."""

    def __init__(self):
        self.said_before_the_end: bool | None = None

    def __call__(self, kind, prompt, body):
        if kind == "user":
            return {"content": "说" * 40, "finish_reason": "length"}
        if kind == "ljp_judge" and self.said_before_the_end is None:
            self.said_before_the_end = False
            deadline = time.monotonic() + 20  # the display's tick is 0.2 s; slack for a loaded machine
            while time.monotonic() < deadline and not self.said_before_the_end:
                self.said_before_the_end = " failed: User Model" in sys.stderr.getvalue()
                time.sleep(0.05)
        return None


def test_a_grid_whose_user_model_replies_are_all_cut_says_why_once_per_reason(
    tmp_path, http, two_cases, capsys
):
    script = http.script = CutsTheUserModel()
    argv = grid_argv(tmp_path / "out", two_cases, "--user-max-tokens", "256", models=MODELS, runs=1)
    assert run_grid.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert script.said_before_the_end, "the display said no failed case before the grid's end"
    end = err[err.index("[grid] 10 cells: ") :].splitlines()
    # LexAwN's consultations and DCG's answers both need the User Model: one line per stage, two cases per cell
    reason = (
        r"User Model 'DeepSeek-V4\.1-Flash' at 127\.0\.0\.1:\d+: reply truncated at --user-max-tokens 256 "
        r"\(after 4 attempts\); raise --user-max-tokens if the model needs the room"
    )
    for stage in ("LexAwN", "DCG"):
        lines = [line for line in end if line.startswith(f"[grid] {stage}: ")]
        assert len(lines) == 1, end
        assert re.fullmatch(
            rf"\[grid\] {stage}: 4 cases failed in 2 cells \(model-. run1, model-. run1\): {reason}", lines[0]
        ), lines[0]
    assert end[1:3] == sorted(end[1:3], key=lambda line: "DCG" in line)  # in the order they were met
    # the advice names the option and never says to rerun as it is
    assert end[-1] == (
        "[grid] Change --user-max-tokens (see why above), then rerun the same command: as it is, a rerun would "
        "buy the same failure for 8 of them; saved cases are kept."
    )
    assert "Rerun the same command to retry" not in err and "rerun the same command to retry" not in err


def test_a_transient_failure_says_to_rerun_and_a_cut_reply_says_what_to_change():
    transient = CaseFailure("1", "Judge 'J' at h: HTTP 503 (after 4 attempts)")
    cut = CaseFailure(
        "2", "Evaluated model 'M' at h: reply truncated at --max-tokens 64 (after 4 attempts)", "--max-tokens"
    )
    assert advice([transient]) == "Rerun the same command to retry it; saved cases are kept."
    assert advice([transient, cut]).startswith(
        "Change --max-tokens (see why above), then rerun the same command"
    )
    assert "for 1 of them" in advice([transient, cut])


def test_the_evaluated_models_own_cut_replies_are_one_reason_for_every_model():
    """Cells of different evaluated models that failed alike share one line, whatever model each names."""
    reasons = Reasons()
    for model in ("m1", "m2"):
        message = f"Evaluated model '{model}' at h: reply truncated at --max-tokens 64 (after 4 attempts)"
        assert reasons.add(
            "LexAwN", model, f"{model} run1 LexAwN", CaseFailure("1", message, "--max-tokens")
        ) == (model == "m1")
    assert reasons.lines() == [
        "[grid] LexAwN: 2 cases failed in 2 cells (m1 run1, m2 run1): Evaluated model (each cell's model) at h: "
        "reply truncated at --max-tokens 64 (after 4 attempts)"
    ]
