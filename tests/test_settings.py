"""The settings (lexpilot/settings.py) read from the command line and the environment: a wrong value is one line
naming the option or the variable, said before any call, and an API key is never printed."""

import json

import pytest

import show_results
import user_probes
from tests.helpers.messages import one_line
from tests.helpers.stages import SECRET


def test_bad_settings_are_one_line(tmp_path, harness, monkeypatch, capsys):
    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "abc")
    assert harness.run("gold") == 2
    assert "LEXPILOT_BACKOFF_BASE='abc': must be a number" in one_line(capsys.readouterr().err)
    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "0.001")
    harness.run_id = "x" * 300
    assert harness.run("gold") == 2
    assert "--run-id is 300 characters long; use at most 100" in one_line(capsys.readouterr().err)
    harness.run_id = "r1"
    harness.root = tmp_path / "a-file"
    harness.root.write_text("not a folder")
    assert harness.run("gold", "--limit", "1") == 2
    message = one_line(capsys.readouterr().err)
    assert "not a directory" in message and str(harness.root) in message


@pytest.mark.parametrize(
    "key, problem",
    [
        (SECRET + "\n", "ends with a line break"),
        (SECRET + "\r\n", "ends with a line break"),
        ("sk-ключ-0123456789", "non-ASCII"),
        (" " + SECRET, "spaces"),
    ],
)
def test_a_malformed_api_key_is_named_before_any_call_and_never_printed(
    harness, provider, monkeypatch, capsys, key, problem
):
    """A key with a line break, a space or a non-ASCII character is named in one line before any call, and the key
    itself is never printed."""
    monkeypatch.setenv("OPENAI_API_KEY", key)
    assert harness.run("gold", "--limit", "1") == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and problem in err and key.strip() not in err and err.count("\n") == 1
    assert not provider.requests


@pytest.mark.parametrize("model", ["gpt-x ", " gpt-x", "gpt-x\t"])
def test_a_model_id_with_surrounding_spaces_is_refused(harness, provider, capsys, model):
    assert harness.run("gold", "--limit", "1", "--model", model) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "spaces" in err and not provider.requests


@pytest.mark.parametrize(
    "script,argv,said",
    [
        (show_results.main, ["--ci", "--seed", "-1"], "argument --seed: -1 is outside 0 to 1000000000"),
        (
            user_probes.main,
            ["template", "--per-cause", "-1", "--dataset", "data/LexPilot_sample.json"],
            "argument --per-cause: -1 is outside 1 to 1000000",
        ),
    ],
)
def test_a_negative_seed_or_sample_size_is_one_line(script, argv, said, capsys):
    """A negative --seed (numpy's SeedSequence refused it with a traceback) or --per-cause (random.sample refused it
    so) is one line naming the option and its bounds."""
    with pytest.raises(SystemExit) as stop:
        script(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and "Traceback" not in err


@pytest.mark.parametrize(
    "name, peak, said",
    [
        (
            "judge",
            None,
            "--off-peak judge: off-peak needs --prices FILE, whose entry for 'DeepSeek-R1' gives its peak",
        ),
        (
            "user",
            ["09:00-12:00"],
            "--off-peak user: {prices} gives no peak windows for 'DeepSeek-V4.1-Flash'",
        ),
        (
            "nobody",
            ["09:00-12:00"],
            "--off-peak 'nobody': not a role (eval, user, judge) nor a model id of this run",
        ),
        (
            "DeepSeek-R1",
            ["00:00-12:00", "12:00-24:00"],
            "the peak windows of 'DeepSeek-R1' cover the whole day",
        ),
    ],
)
def test_an_off_peak_that_cannot_hold_is_refused_in_one_line(
    harness, provider, tmp_path, capsys, name, peak, said
):
    """--off-peak without --prices, for a model without windows, for a name that is no role or model of the run, or
    for windows covering the whole day (its calls would never start): one line, no call."""
    prices = tmp_path / "prices.json"
    judge = {"prompt": 1, "completion": 1, "tz": "Asia/Shanghai", "peak": peak, "peak_multiplier": 2}
    prices.write_text(
        json.dumps({"DeepSeek-R1": judge, "DeepSeek-V4.1-Flash": {"prompt": 1, "completion": 1}})
    )
    extra = ["--prices", str(prices)] if peak else []
    assert harness.run("gold", "--limit", "1", "--off-peak", name, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said.format(prices=prices) in err[0], err
    assert not provider.requests
