"""Prices by the clock and off-peak holds on runs the stage scripts wrote against the scripted provider: each call
billed at the window it was sent in, the bill equal to the dry run's per-window quote; --off-peak holding a role's
calls until its window closes while the other roles go on; --max-cost counting a call at the window it is sent in.
Windows are written relative to now (tests/helpers/clock.py) and sized from the time a run takes here, so that a
busy machine only makes the test slower."""

import csv
import io
import json
import re
import time
from datetime import datetime, timezone

import pytest

import quote_grid
import show_results
from lexpilot.windows import utc_now
from tests.helpers.clock import price_file, seconds_until_change, windows_from_now, windows_of
from tests.helpers.reports import json_table
from tests.helpers.stages import judge_kinds

pytestmark = pytest.mark.slow  # each waits for a window to close

FLAT = {
    "DeepSeek-V4.1-Flash": {"prompt": 500, "completion": 2000},
    "DeepSeek-R1": {"prompt": 2000, "completion": 8000},
}


def timed(harness, stage: str, *extra: str) -> float:
    start = time.monotonic()
    assert harness.run(stage, *extra) == 0
    return time.monotonic() - start


def role_usage(harness, run_id: str, role: str) -> dict:
    """A role's usage summed over the run's records (every record file of the run)."""
    total: dict = {}
    for path in harness.root.glob(f"*/{run_id}/*/*.jsonl"):
        if "journal" in path.name:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            for key, n in json.loads(line).get("usage", {}).get(role, {}).items():
                total[key] = total.get(key, 0) + n
    return total


def quoted(out: str, role: str) -> dict[str, float]:
    """The dry run's expected figures for a role priced by the clock: off-peak and at peak."""
    block = out.split(f"  {role} (", 1)[1]
    figures = {}
    for name in ("off-peak", "at peak"):
        figures[name] = float(
            re.search(rf"    {name}(?: \([^)]*\))?: [^\n]*expected ~([\d.,]+)", block)[1].replace(",", "")
        )
    return figures


def test_each_call_is_billed_at_the_window_it_was_sent_in_and_the_bill_matches_the_quote(
    harness, tmp_path, capsys
):
    """The evaluated model costs 1,000 and 4,000 per million tokens, three times that in its peak windows: one open
    now, one opening a few seconds after it closes. The same case is run in the first window, between the two and in
    the second: billed at peak, off-peak, at peak, each to the dry run's per-window expected figure and to the
    tokens times the price computed here."""
    # run r1: the saved usage the quote's expected figure comes from
    took = timed(harness, "gold", "--limit", "1")
    d = 3 * took + 1  # the first window holds a dry run and a run; the gap between the windows, a run
    evaluated = {
        "prompt": 1000,
        "completion": 4000,
        **windows_from_now((-60, d), (2 * d, 600)),
        "peak_multiplier": 3,
    }
    prices = price_file(tmp_path, {"eval-model": evaluated, **FLAT})
    windows = windows_of(prices, "eval-model")
    capsys.readouterr()
    harness.run_id = "peak1"
    assert harness.run("gold", "--limit", "1", "--dry-run", "--prices", str(prices)) == 0
    quote = quoted(capsys.readouterr().out, "eval")
    assert windows.at(utc_now()) == "peak"
    timed(harness, "gold", "--limit", "1", "--prices", str(prices))
    time.sleep(seconds_until_change(windows) + 0.05)  # the first window closes
    assert windows.at(utc_now()) == ""
    harness.run_id = "off"
    timed(harness, "gold", "--limit", "1", "--prices", str(prices))
    time.sleep(seconds_until_change(windows) + 0.05)  # the second opens
    assert windows.at(utc_now()) == "peak"
    harness.run_id = "peak2"
    timed(harness, "gold", "--limit", "1", "--prices", str(prices))

    used = {run: role_usage(harness, run, "eval") for run in ("peak1", "off", "peak2")}
    assert [used[run].get("peak:calls", 0) for run in used] == [1, 0, 1]  # the call sent in each window
    p, c = used["off"]["prompt_tokens"], used["off"]["completion_tokens"]
    assert all((u["prompt_tokens"], u["completion_tokens"]) == (p, c) for u in used.values())  # the same case
    by_hand = {"off": (p * 1000 + c * 4000) / 1e6, "peak": 3 * (p * 1000 + c * 4000) / 1e6}
    assert quote["off-peak"] == pytest.approx(by_hand["off"], abs=1e-4)
    assert quote["at peak"] == pytest.approx(by_hand["peak"], abs=1e-4)
    check_the_bill_per_window(harness, prices, used, by_hand, capsys)


def check_the_bill_per_window(harness, prices, used: dict, by_hand: dict, capsys) -> None:
    """The report's bill per run: the evaluated model's calls at their window's price, the judge's at its flat price,
    and the share sent at peak."""
    rows = json_table(
        capsys,
        "--output-root",
        str(harness.root),
        "--usage",
        "--prices",
        str(prices),
        "--table",
        "usage_per_run",
    )
    # the bill says the share sent at peak: the evaluated model's calls in r1 (before any price file), peak1, off
    # and peak2, two of four; the judge's none
    spent = json_table(capsys, "--output-root", str(harness.root), "--usage", "--table", "usage_grid_total")
    sent_at_peak = {row[0]: row[4] for row in spent}  # the column after the batch share
    assert sent_at_peak["eval"] == 50.0 and sent_at_peak["judge"] == 0.0, spent
    judge = {run: role_usage(harness, run, "judge") for run in used}
    bill = {row[1]: row[-1] for row in rows}  # run -> its cost, every role's
    for run, window in (("peak1", "peak"), ("off", "off"), ("peak2", "peak")):
        judged = (
            judge[run].get("prompt_tokens", 0) * 2000 + judge[run].get("completion_tokens", 0) * 8000
        ) / 1e6
        # the table shows money at 2 decimals
        assert float(bill[run]) == pytest.approx(by_hand[window] + judged, abs=0.005), (run, bill, by_hand)


def test_off_peak_judge_sends_no_judge_call_before_its_window_closes_and_the_rest_goes_on(
    harness, provider, tmp_path, capsys
):
    """--off-peak judge, the judge's window open now and closing in a few seconds: the evaluated model's and the User
    Model's calls are made at once; no judge call reaches the provider before the window closes; then every judge call
    is made, billed off-peak, and the stage completes."""
    took = timed(harness, "DCG", "--limit", "2")  # a clean run, under run r1
    judge = {
        "prompt": 2000,
        "completion": 8000,
        **windows_from_now((-60, 2 * took + 2)),
        "peak_multiplier": 2,
    }
    prices = price_file(
        tmp_path,
        {
            "eval-model": {"prompt": 1, "completion": 4},
            "DeepSeek-V4.1-Flash": FLAT["DeepSeek-V4.1-Flash"],
            "DeepSeek-R1": judge,
        },
    )
    closes = datetime.now(timezone.utc).timestamp() + seconds_until_change(windows_of(prices, "DeepSeek-R1"))
    log = tmp_path / "requests.jsonl"
    provider.log = log.open("w", encoding="utf-8")
    harness.run_id = "held"
    capsys.readouterr()
    assert harness.run("DCG", "--limit", "2", "--prices", str(prices), "--off-peak", "judge") == 0
    provider.log.close()
    arrivals = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    judged = [a["at"] for a in arrivals if a["kind"] in judge_kinds()]
    others = [a["at"] for a in arrivals if a["kind"] not in judge_kinds()]
    assert judged and others
    assert min(judged) >= closes - 0.01, (min(judged), closes)  # the log rounds to the millisecond
    assert min(others) < closes  # the other roles did not wait
    assert "DeepSeek-R1: held for off-peak until" in capsys.readouterr().err
    used = role_usage(harness, "held", "judge")
    assert used["calls"] == len(judged) and "peak:calls" not in used


def test_max_cost_counts_a_call_at_the_window_it_will_be_sent_in(harness, tmp_path, capsys):
    """The evaluated model's completion costs 1,000 per million, ten times that at peak, and a call's worst case is
    its output limit (100 tokens; prompts are free here): 0.1 off-peak, 1.0 at peak. --max-cost 0.3 stops the call
    sent now, in the peak window, before it is made; held for off-peak, the same call waits for the window to close,
    is counted at 0.1 and made."""
    took = timed(harness, "gold", "--limit", "1")  # how long a run takes here (run r1)
    evaluated = {
        "prompt": 0,
        "completion": 1000,
        **windows_from_now((-60, 2 * took + 2)),
        "peak_multiplier": 10,
    }
    free = {"prompt": 0, "completion": 0}
    prices = price_file(tmp_path, {"eval-model": evaluated, "DeepSeek-V4.1-Flash": free, "DeepSeek-R1": free})
    budget = ("--limit", "1", "--prices", str(prices), "--max-cost", "0.3", "--max-tokens", "100")
    harness.run_id = "now"
    assert harness.run("gold", *budget) == 2
    assert "--max-cost 0.3: the next call could cost up to 1.0000" in capsys.readouterr().err
    harness.run_id = "held"
    assert harness.run("gold", *budget, "--off-peak", "eval") == 0
    assert role_usage(harness, "held", "eval")["calls"] == 1


def test_a_call_sent_before_a_window_opens_is_billed_off_peak_and_never_abandoned(
    harness, provider, tmp_path
):
    """DeepSeek's rule: a call sent at 08:59:59 that ends at 09:00:30 is off-peak. The evaluated model's call is sent
    before its peak window opens and answered after (the provider takes until then): it completes, held for
    off-peak or not (a call already sent is never abandoned), and is billed off-peak."""
    took = timed(harness, "gold", "--limit", "1")  # how long a run takes here (run r1)
    evaluated = {"prompt": 1, "completion": 4, **windows_from_now((2 * took + 1, 600)), "peak_multiplier": 3}
    prices = price_file(tmp_path, {"eval-model": evaluated, **FLAT})
    windows = windows_of(prices, "eval-model")
    opens = time.monotonic() + seconds_until_change(windows)

    def slow(kind, prompt, body):  # the evaluated model answers once the window has opened
        if body["model"] == "eval-model":
            time.sleep(max(0.0, opens + 0.3 - time.monotonic()))
        return None

    provider.script, provider.arrivals = slow, []
    harness.run_id = "across"
    assert harness.run("gold", "--limit", "1", "--prices", str(prices), "--off-peak", "eval") == 0
    assert time.monotonic() > opens and provider.arrivals[0] < opens  # sent off-peak, answered at peak
    used = role_usage(harness, "across", "eval")
    assert used["calls"] == 1 and "peak:calls" not in used


def test_a_stop_while_a_call_is_held_ends_the_stage_at_once(harness, provider, tmp_path, capsys):
    """--off-peak judge, its window open for another two minutes: one case's judge call is held when the other case's
    User Model call is refused (HTTP 401, which stops the stage): the held call wakes on the stop, and the stage ends
    within seconds, not when the window closes; no judge call was sent."""
    user_calls = []

    def refuse_the_second_user_call(kind, prompt, body):
        if body["model"] == "DeepSeek-V4.1-Flash":
            user_calls.append(body)
            if len(user_calls) == 2:
                time.sleep(1.0)  # the first case reaches its judge call and is held meanwhile
                return {"status": 401, "error": "invalid key"}
        return None

    judge = {"prompt": 2, "completion": 8, **windows_from_now((-60, 120)), "peak_multiplier": 2}
    prices = price_file(tmp_path, {"eval-model": FLAT["DeepSeek-V4.1-Flash"], **FLAT, "DeepSeek-R1": judge})
    provider.script = refuse_the_second_user_call
    start = time.monotonic()
    status = harness.run(
        "DCG", "--limit", "2", "--prices", str(prices), "--off-peak", "judge", "--concurrency", "2"
    )
    assert status == 2 and time.monotonic() - start < 60, time.monotonic() - start  # the window: 120 s
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "DeepSeek-R1: held for off-peak until" in err, err
    assert not [body for body in provider.requests if body["model"] == "DeepSeek-R1"]


def test_a_report_says_which_runs_called_a_model_priced_by_the_clock_without_its_windows(
    harness, tmp_path, capsys
):
    """A run made without --prices cannot know the hour's window: its calls are recorded off-peak. The report priced
    by the clock says how many runs did so, and says nothing of a run made with the windows."""
    judge = {"prompt": 2, "completion": 8, **windows_from_now((3600, 7200)), "peak_multiplier": 2}
    prices = price_file(tmp_path, {**FLAT, "DeepSeek-R1": judge})
    harness.run_id = "blind"
    assert harness.run("gold", "--limit", "1") == 0
    harness.run_id = "seen"
    assert harness.run("gold", "--limit", "1", "--prices", str(prices)) == 0
    capsys.readouterr()
    note = "called a model priced by the clock without its windows"

    def said(*runs: str) -> str:
        args = ["--output-root", str(harness.root), "--usage", "--prices", str(prices), "--run-id", *runs]
        assert show_results.main([*args, "--format", "csv"]) == 0
        return capsys.readouterr().out  # the table's title is each of its CSV rows' first cell

    assert f"1 run {note}" in said("blind", "seen")
    assert note not in said("seen")


def test_a_window_covering_the_whole_day_quotes_every_bound_at_peak(harness, tmp_path, capsys):
    """Windows that cover the day leave no off-peak moment: the low bound too is the peak price's (twice the flat
    one here), as each call will be billed."""
    judge = {"prompt": 2, "completion": 8}
    flat = price_file(tmp_path, {**FLAT, "DeepSeek-R1": judge})
    assert harness.run("gold", "--limit", "1", "--dry-run", "--prices", str(flat)) == 0
    low_flat = float(
        re.search(r"judge \([^)]*\): between ([\d.,]+)", capsys.readouterr().out)[1].replace(",", "")
    )
    (tmp_path / "day").mkdir()  # a file of its own: the flat one is quoted again below
    whole_day = {"tz": "UTC", "peak": ["00:00-24:00"], "peak_multiplier": 2}
    day = price_file(tmp_path / "day", {**FLAT, "DeepSeek-R1": judge | whole_day})
    assert harness.run("gold", "--limit", "1", "--dry-run", "--prices", str(day)) == 0
    low_day = float(
        re.search(r"judge \([^)]*\): between ([\d.,]+)", capsys.readouterr().out)[1].replace(",", "")
    )
    assert low_flat > 0 and low_day == pytest.approx(2 * low_flat, abs=2e-4)
    # and quote_grid.py's, from its CSV's judge row (the synchronous low bound)
    lows = []
    for prices in (flat, day):
        argv = ["--models", "eval-model", "--run-ids", "q", "--stages", "eval_LJP_gold", "--limit", "1"]
        files = [
            "--dataset",
            str(harness.dataset),
            "--output-root",
            str(harness.root),
            "--prices",
            str(prices),
        ]
        assert quote_grid.main([*argv, *files, "--format", "csv"]) == 0
        rows = csv.reader(io.StringIO(capsys.readouterr().out))
        lows += [float(r[5]) for r in rows if r and r[0].startswith("Calls at most") and r[2] == "judge"]
    assert lows[0] > 0 and lows[1] == pytest.approx(2 * lows[0])
