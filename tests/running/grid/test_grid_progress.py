"""Progress figures that mean what they say: a batch grid's time left from the cycles left at the
length a cycle has taken, a shard's dry run with the shard's own quote, and batch polls that come soon after a
submission."""

import re
import time
from types import SimpleNamespace

import pytest

import run_grid
from lexpilot.running.batch.run import FIRST_POLL, poll_wait
from lexpilot.running.grid.display import Display, Quote, batch_time_left
from tests.helpers.paths import SAMPLE


def display_with_cycles(cycles: int) -> Display:
    sharing = SimpleNamespace(batches=SimpleNamespace(made_at=[]), endpoints=SimpleNamespace(all=lambda: []))
    return Display(
        SimpleNamespace(sharing=sharing, finished_lines=[]),
        Quote(calls=100, cycles=cycles),
        None,
        stream=SimpleNamespace(),
    )


def test_a_batch_grids_time_left_comes_from_the_cycles_left_and_their_length():
    """ "A batch grid's 'remaining ~' grew from 272 s to 426 s as work finished. Estimate from the cycles left and their
    observed duration." Cycles made 10 s apart, 13 at most: looked at every 2 s, the time left only falls, and by the
    time that passed, whatever the calls answered say (a cycle's replies arrive at once)."""
    assert batch_time_left([], 13, 0.0) == batch_time_left([1.0], 13, 5.0) == "?"  # no cycle answered yet
    shown = []
    for now in range(11, 125, 2):
        made = [1.0 + 10 * k for k in range(13) if 1.0 + 10 * k <= now]
        shown.append(int(batch_time_left(made, 13, float(now)).strip("~s")))
    assert shown == sorted(shown, reverse=True) and shown[0] == 120 and shown[-1] == 131 - 123, shown
    # each of the 12 cycles after the first takes 10 s, the last one's answer too: at 11 s, 1 + 10 × 13 - 11 = 120
    assert int(batch_time_left([1.0, 11.0], 13, 11.0).strip("~s")) == 1 + 10 * 13 - 11
    # a cycle slower than the others: never below the cycles not yet made
    assert batch_time_left([1.0, 11.0], 13, 100.0) == f"~{10 * 11}s"
    # the display reads it from the grid's pool in batch mode
    display = display_with_cycles(13)
    display.grid.sharing.batches.made_at = [time.monotonic() - 20, time.monotonic() - 10]
    assert display.time_left(20.0, calls=5, left=95) in ("~109s", "~110s", "~111s")  # made 10 s ago: 12 left


def test_without_batches_the_time_left_is_the_calls_left_at_the_pace_so_far():
    display = display_with_cycles(0)
    display.grid.sharing.batches = None
    assert display.time_left(30.0, calls=10, left=20) == "~60s"


def quoted_calls(argv: list[str], capsys) -> int:
    assert run_grid.main([*argv, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    return int(re.search(r'^"Calls at most[^\n]*",total,,,(\d+),', out, re.M)[1])


def test_a_shards_dry_run_lists_its_cells_and_quotes_them(tmp_path, capsys):
    """ "--shard --dry-run lists cells but gives no quote: give the shard's quote." Three models, one run: the shards'
    quotes add up to the grid's, and each lists its own cells."""
    argv = ["--models", "a", "b", "c", "--runs", "1", "--dataset", str(SAMPLE), "--limit", "2"]
    argv += ["--output-root", str(tmp_path), "--dry-run"]
    whole = quoted_calls(argv, capsys)
    shards = []
    for k in (1, 2):
        assert run_grid.main([*argv, "--shard", f"{k}/2", "--format", "csv"]) == 0
        out = capsys.readouterr().out
        cells = out.split("\n\n", 1)[0].splitlines()
        assert cells and all(re.fullmatch(r"[abc] run1 \S.*", c) for c in cells), out
        calls = int(re.search(r'^"Calls at most[^\n]*",total,,,(\d+),', out, re.M)[1])
        per_model = dict(re.findall(r"^Per evaluated model[^,]*,([abc]),(\d+),", out, re.M))
        assert set(per_model) == {c.split()[0] for c in cells}  # the quote is of the shard's cells only
        shards.append(calls)
    assert sum(shards) == whole and all(0 < s < whole for s in shards)


@pytest.mark.parametrize("poll", [30.0, 2.0, 0.02])
def test_batch_polls_come_soon_after_a_submission_then_every_batch_poll_seconds(poll):
    """ "A 30 s default batch poll made a 3 × 2 batch grid on the scripted provider take 8 minutes": the first looks
    come 0.25 s, 0.5 s, 1 s … after a submission, never further apart than --batch-poll."""
    waits = [poll_wait(poll, n) for n in range(12)]
    assert waits[0] == min(poll, FIRST_POLL) and all(w <= poll for w in waits)
    assert waits == sorted(waits) and waits[-1] == poll
    assert sum(waits[:5]) <= min(5 * poll, 8)  # five looks within 8 s of a submission
