"""Off-peak holds in the grid and across processes: the grid file's `off_peak = true` holds an endpoint, the grid's
display says per endpoint how many calls wait and when its window closes; a kill -9 during a hold and a rerun of the
same command pay for nothing twice; a grid file's off_peak that cannot hold is one line. Windows are written
relative to now (tests/helpers/clock.py), sized from the time a clean run takes here."""

import re
import signal
import sys
import time
from collections import Counter
from datetime import datetime, timezone

import pytest

import run_grid
from tests.helpers.clock import price_file, windows_from_now, windows_of
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import Terminal, records, small_grid
from tests.helpers.paths import ROOT
from tests.helpers.processes import process_environment, stage_command
from tests.helpers.stages import judge_kinds
from tests.helpers.warm import run

FLAT = {"prompt": 1, "completion": 4}


def judge_held(spans, **others) -> dict:
    """Prices with the judge's (DeepSeek-R1's) peak windows at `spans` from now, every other model flat."""
    judge = {"prompt": 2, "completion": 8, **windows_from_now(*spans), "peak_multiplier": 2}
    return {"DeepSeek-R1": judge, "DeepSeek-V4.1-Flash": FLAT, **others}


@pytest.fixture
def two_cases(tmp_path):
    return write_dataset(tmp_path / "two.json", sample_cases()[:2])


@pytest.mark.slow
def test_the_grid_display_says_each_held_endpoint_and_its_judge_waits_for_the_window(
    tmp_path, http, two_cases, monkeypatch
):
    """`off_peak = true` in the judge's [limits] table: while its window is open the display's line for the judge's
    endpoint says "held for off-peak, N calls waiting, opens in S s"; no judge call is made before the window closes,
    and the grid completes."""
    stages = ("--stages", "eval_DCG", "--limit", "2")
    start = time.monotonic()
    assert run_grid.main(small_grid(tmp_path / "clean", two_cases, *stages)) == 0
    took = time.monotonic() - start
    http.processed.clear()
    http.arrivals.clear()
    http.requests.clear()
    prices = price_file(
        tmp_path, judge_held([(-60, 2 * took + 3)], **{m: FLAT for m in ("model-a", "model-b")})
    )
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text('[limits."DeepSeek-R1"]\noff_peak = true\n', encoding="utf-8")
    closes = (
        time.monotonic()
        + (
            windows_of(prices, "DeepSeek-R1").next_change(datetime.now(timezone.utc))
            - datetime.now(timezone.utc)
        ).total_seconds()
    )
    terminal = Terminal(True)
    monkeypatch.setattr(sys, "stderr", terminal)
    argv = small_grid(
        tmp_path / "held", two_cases, *stages, "--grid", str(grid_file), "--prices", str(prices)
    )
    assert run_grid.main(argv) == 0
    held = re.findall(
        r"DeepSeek-R1 at 127\.0\.0\.1:\d+: [^\n]*held for off-peak, (\d+) calls? waiting, opens in \d+ s",
        terminal.text,
    )
    assert held and max(map(int, held)) >= 1, terminal.text[-2000:]
    judged = [t for t, body in zip(http.arrivals, http.requests) if body["model"] == "DeepSeek-R1"]
    assert judged and min(judged) >= closes - 0.05


@pytest.mark.slow
def test_a_kill_during_a_hold_then_a_rerun_pays_for_nothing_twice(tmp_path, warm, two_cases):
    """eval_DCG.py --off-peak judge, killed (-9) while its judge calls are held, then the same command again: it
    holds until the window closes and completes; the provider processed exactly what a clean run processes, each
    request once, and the records are a clean run's."""
    from lexpilot.scripted.provider import ScriptedProvider

    with ScriptedProvider() as provider:
        env = process_environment(provider)

        def command(root, *extra):
            return stage_command("eval_DCG.py", root, two_cases, *extra)

        start = time.monotonic()
        clean = run(warm, command(tmp_path / "clean"), ROOT, env)
        took = time.monotonic() - start
        assert clean.returncode == 0, clean.stderr
        clean_processed = Counter(provider.processed)
        provider.processed.clear()
        others = sum(n for (kind, _), n in clean_processed.items() if kind not in judge_kinds())
        prices = price_file(tmp_path, judge_held([(-60, 3 * took + 4)], **{"eval-model": FLAT}))
        killed = command(tmp_path / "killed", "--prices", str(prices), "--off-peak", "judge")
        process = warm.start(killed, ROOT, env)
        deadline = time.monotonic() + 60
        while sum(provider.processed.values()) < others and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert (
            process.poll() is None
            and windows_of(prices, "DeepSeek-R1").at(datetime.now(timezone.utc)) == "peak"
        )
        assert sum(provider.processed.values()) == others  # every other call made, no judge call
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        rerun = run(warm, killed, ROOT, env)
        assert rerun.returncode == 0, rerun.stderr
        assert Counter(provider.processed) == clean_processed
    assert records(tmp_path / "killed") == records(tmp_path / "clean")


@pytest.mark.parametrize(
    "text, prices, said",
    [
        ('[limits."DeepSeek-R1"]\noff_peak = "yes"\n', {}, ":2: limits.DeepSeek-R1.off_peak: true or false"),
        ('[limits."DeepSeek-R1"]\noff_peak = true\n', None, "off-peak needs --prices FILE"),
        (
            '[limits."DeepSeek-V4.1-Flash"]\noff_peak = true\n',
            {},
            "gives no peak windows for 'DeepSeek-V4.1-Flash'",
        ),
        ('[limits."nosuch"]\noff_peak = true\n', {}, "no role of this grid uses that model id"),
    ],
)
def test_an_off_peak_the_grid_cannot_hold_is_one_line(tmp_path, http, two_cases, capsys, text, prices, said):
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(text, encoding="utf-8")
    argv = small_grid(tmp_path / "out", two_cases, "--grid", str(grid_file), "--dry-run")
    if prices is not None:
        argv += [
            "--prices",
            str(price_file(tmp_path, judge_held([(-60, 60)], **{m: FLAT for m in ("model-a", "model-b")}))),
        ]
    assert run_grid.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err, err


@pytest.mark.slow
def test_a_ctrl_c_during_a_hold_stops_the_grid_at_once_and_a_rerun_completes(tmp_path, warm, two_cases):
    """run_grid.py --off-peak judge, its window open for minutes: once every other call is made, a first Ctrl-C
    stops the grid within seconds (the held calls wake on it: none is sent), and the same command, with the window
    closed, completes having asked each request once."""
    from lexpilot.errors import INTERRUPTED
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.processes import at_a_terminal

    with ScriptedProvider() as provider:
        env = process_environment(provider)

        def grid(root, *extra):
            return [
                sys.executable,
                "run_grid.py",
                *small_grid(root, two_cases, "--stages", "eval_DCG", *extra),
            ]

        clean = run(warm, grid(tmp_path / "clean"), ROOT, env)
        assert clean.returncode == 0, clean.stderr
        clean_processed = Counter(provider.processed)
        provider.processed.clear()
        others = sum(n for (kind, _), n in clean_processed.items() if kind not in judge_kinds())
        models = {m: FLAT for m in ("model-a", "model-b")}
        prices = price_file(tmp_path, judge_held([(-60, 600)], **models))
        process = at_a_terminal(
            warm, grid(tmp_path / "out", "--prices", str(prices), "--off-peak", "judge"), env
        )
        deadline = time.monotonic() + 60
        while sum(provider.processed.values()) < others and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert process.poll() is None and sum(provider.processed.values()) == others  # held
        process.send_signal(signal.SIGINT)
        stopped_at = time.monotonic()
        process.communicate(timeout=30)
        assert process.wait(timeout=1) == INTERRUPTED and time.monotonic() - stopped_at < 10  # not 10 min
        assert sum(provider.processed.values()) == others  # no held call was sent
        prices = price_file(tmp_path, judge_held([(-60, -30)], **models))  # the window has closed
        rerun = run(warm, grid(tmp_path / "out", "--prices", str(prices), "--off-peak", "judge"), ROOT, env)
        assert rerun.returncode == 0, rerun.stderr
        assert Counter(provider.processed) == clean_processed


@pytest.mark.slow  # a whole grid's quote
def test_the_grid_quote_gives_each_endpoint_priced_by_the_clock_off_peak_at_peak_and_as_scheduled(
    tmp_path, two_cases, capsys
):
    """The User Model at twice its price all day, the judge at three times in a window open now for ten minutes and
    held for off-peak: the User Model's figures at peak are twice its off-peak ones and its schedule falls wholly in
    peak; the judge's at peak are three times, and held, its schedule is wholly off-peak."""
    import quote_grid

    user = {"prompt": 500, "completion": 2000, "tz": "UTC", "peak": ["00:00-24:00"], "peak_multiplier": 2}
    judge = {"prompt": 2000, "completion": 8000, **windows_from_now((-60, 600)), "peak_multiplier": 3}
    prices = price_file(tmp_path, {"DeepSeek-R1": judge, "DeepSeek-V4.1-Flash": user, "eval-model": FLAT})
    argv = ["--models", "eval-model", "--runs", "1", "--stages", "eval_DCG", "--dataset", str(two_cases)]
    argv += [
        "--output-root",
        str(tmp_path / "out"),
        "--prices",
        str(prices),
        "--off-peak",
        "judge",
        "--width",
        "0",
    ]
    assert quote_grid.main(argv) == 0
    out = capsys.readouterr().out

    def figures(model: str) -> dict[str, tuple[float, float]]:
        block = out.split(f"{model} (", 1)[1]
        found = re.findall(
            r"^\s*(off-peak|at peak|as scheduled)[^\n]*?: between ([\d.,]+) and ([\d.,]+)", block, re.M
        )
        return {
            name: (float(low.replace(",", "")), float(high.replace(",", ""))) for name, low, high in found[:3]
        }

    user_said, judge_said = figures("DeepSeek-V4.1-Flash"), figures("DeepSeek-R1")
    assert user_said["at peak"] == pytest.approx(tuple(2 * x for x in user_said["off-peak"]), rel=1e-3)
    assert user_said["as scheduled"] == user_said["at peak"]
    assert judge_said["at peak"] == pytest.approx(tuple(3 * x for x in judge_said["off-peak"]), rel=1e-3)
    assert judge_said["as scheduled"] == judge_said["off-peak"]
    # held, the judge's calls wait out the ten minutes of its window: its calls end at least that far from now
    held = re.search(
        r"held for off-peak: every call off-peak; [^\n]*, end in (\d+) min", out.split("DeepSeek-R1 (", 1)[1]
    )
    assert held and int(held[1]) >= 9, out


def test_off_peak_naming_one_evaluated_model_holds_it_in_its_cells_and_a_typo_is_still_refused(
    tmp_path, http, two_cases, capsys
):
    """`--off-peak MODEL` on a grid of several evaluated models: that model's cells hold it, the others' cells run as
    they are (each cell knows only its own roles' models); a name that is no role nor model of the grid is one line."""
    held = {"prompt": 1, "completion": 4, **windows_from_now((3600, 7200)), "peak_multiplier": 2}
    prices = price_file(
        tmp_path, {"model-a": held, "model-b": FLAT, "DeepSeek-R1": FLAT, "DeepSeek-V4.1-Flash": FLAT}
    )
    argv = small_grid(tmp_path / "out", two_cases, "--prices", str(prices), "--dry-run")
    assert run_grid.main([*argv, "--off-peak", "model-a"]) == 0
    assert run_grid.main([*argv, "--off-peak", "model-z"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--off-peak 'model-z': not a role" in err[-1] and len([x for x in err if "model-z" in x]) == 1
