"""The grid's inputs that once hung, crashed or were quoted absurdly, each refused in one line: a --grid that is not a
regular file (a FIFO blocked forever, /dev/zero ended in a MemoryError), a grid file too large to be one, and limits
outside their range (rpm = 1e-300 was quoted as a 300-digit number of hours)."""

import os
import threading

import pytest

import run_grid
from lexpilot.errors import HarnessError
from lexpilot.models.limits import LIMIT_RANGES, parse_limits
from lexpilot.running.grid.file import MAX_GRID_BYTES, read_grid_file


def grid_says(capsys, grid: str, *options: str) -> str:
    """run_grid.py's one line for `--grid grid` (a dry run: no call either way), its exit status checked."""
    assert run_grid.main(["--models", "m", "--runs", "1", "--grid", grid, "--dry-run", *options]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_a_grid_that_is_a_device_or_too_large_is_one_line(tmp_path, capsys):
    assert "/dev/zero: not a regular file" in grid_says(capsys, "/dev/zero")
    big = tmp_path / "grid.toml"
    big.write_text(
        "# a comment\n" * (MAX_GRID_BYTES // 12 + 1), encoding="utf-8"
    )  # valid TOML, just too long
    assert f"too large for a grid file (over {MAX_GRID_BYTES:,} bytes)" in grid_says(capsys, str(big))
    big.write_text("# a comment\n" * (MAX_GRID_BYTES // 12 - 1), encoding="utf-8")
    assert read_grid_file(big, {}).endpoints == {}  # a long file within the bound is read


def test_a_grid_that_is_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "grid.toml"
    os.mkfifo(fifo)
    said: list[str] = []

    def read() -> None:
        try:
            read_grid_file(fifo, {})
        except HarnessError as e:
            said.append(str(e))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # blocked opening the FIFO: a writer lets it go before the test fails
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert said == [
        f"--grid {fifo}: not a regular file (a device, a FIFO or a socket); pass the grid's TOML file"
    ]


@pytest.mark.parametrize(
    "limit, bound",
    [("rpm:1e-300", "rpm = 1e-300 is out of range; give 0.001 to 1e+09"), ("tpm:0.5", "give 1 to 1e+12")]
    + [("concurrency:2000000", "give 1 to 1e+06"), ("rpm:2e9", "give 0.001 to 1e+09")],
)
def test_a_limit_outside_its_range_is_refused_with_the_range(tmp_path, capsys, limit, bound):
    with pytest.raises(HarnessError) as refused:
        parse_limits(limit, "--limit m")
    assert str(refused.value).startswith(f"--limit m: {limit.split(':')[0]} = ") and bound in str(
        refused.value
    )
    grid = tmp_path / "grid.toml"
    name, value = limit.split(":")
    grid.write_text(f'[limits."judge"]\n{name} = {value}\n', encoding="utf-8")
    assert grid_says(capsys, str(grid)).endswith(
        f"grid.toml:2: limits.judge.{name}: {name} = {float(value):g} is out of range; {bound.split('; ')[-1]}"
    )


def test_the_bounds_themselves_are_accepted():
    for name, (low, high) in LIMIT_RANGES.items():
        for value in (low, high):
            limits = parse_limits(f"{name}:{value}", "--limit m")
            assert getattr(limits, name) == value
    assert LIMIT_RANGES["rpm"][0] == 1e-3 and LIMIT_RANGES["tpm"][0] == 1  # docs/grid.md says these
