"""Smoke test of the throughput benchmark: a handful of cases at zero latency completes and prints its table."""

import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

# kills, Ctrl-C, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow


def test_benchmark_runs_every_stage_and_prints_its_table():
    result = subprocess.run(
        [sys.executable, "-m", "bench.throughput", "--cases", "2", "--latency", "0", "--concurrency", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for stage in ("LexAwN_gen.py", "eval_DCG.py", "eval_LJP.py", "show_results.py"):
        assert any(line.startswith(stage) for line in lines), result.stdout
    assert "rerun of every stage of the finished run" in lines[-1] and lines[-1].endswith(", 0 calls")


def test_the_batch_benchmark_counts_cycles_within_the_longest_call_chain():
    result = subprocess.run(
        [sys.executable, "-m", "bench.throughput", "--batch", "--cases", "2", "--batch-delay", "0.02"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]}
    assert set(rows) == {"LexAwN_gen.py", "eval_DCG.py", "eval_LJP.py"}
    # a1 2 + LCA 2 + interaction 3 x 3 - 1 + the forced prediction
    assert 1 <= int(rows["LexAwN_gen.py"][2]) <= 12
    # question, reply, question, then the two judgments one after the other
    assert int(rows["eval_DCG.py"][2]) == 5


def test_the_statistics_benchmark_times_every_table():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.statistics",
            "--models",
            "3",
            "--runs",
            "2",
            "--cases",
            "4",
            "--resamples",
            "50",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    # 3 pairs and 3 ranks on each of 7 metrics (an assert whose second half is a bare string is always true)
    assert "all pairs and ranking (--rank):" in result.stdout and "(42 rows, 50 resamples)" in result.stdout


def test_the_reports_benchmark_times_a_report_and_its_repeat():
    result = subprocess.run(
        [sys.executable, "-m", "bench.reports", "--models", "2", "--runs", "2", "--cases", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "again, unchanged runs (cache):" in result.stdout
        and "the three reports print the same" in result.stdout
    )


def test_the_forking_benchmark_times_a_report_both_ways_at_each_size():
    """bench/forking.py prints, for each size asked, the wall and CPU of one process and of every core."""
    result = subprocess.run(
        [sys.executable, "-m", "bench.forking", "--sizes", "8,40"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["8", "40"] and all(len(row) == 9 for row in rows), result.stdout


def test_the_offpeak_benchmark_holds_without_spending_cpu():
    """`python -m bench.offpeak`: a process holding its judge calls for off-peak sleeps: under a tenth of a core over
    the hold (it reads about none; a machine's noise stays far below this bound)."""
    result = subprocess.run(
        [sys.executable, "-m", "bench.offpeak", "--seconds", "3", "--cases", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    share = float(result.stdout.rsplit("(", 1)[1].split("%")[0])
    assert result.stdout.startswith("held 2 judge calls for ") and share < 10, result.stdout


def bench_output(module: str, *args: str) -> str:
    """What a benchmark prints, run as `python -m bench.MODULE ARGS` from the checkout; it must succeed."""
    result = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_corrected_benchmark_reports_the_coverage_of_both_intervals():
    out = bench_output("corrected", "--replicates", "40", "--cases", "100", "--labels", "60")
    rows = {line.split()[1]: line.split() for line in out.splitlines()[2:]}
    assert set(rows) == {"corrected", "raw"}
    # the judge expects 0.625 against a truth of 0.7: the raw interval misses it, the corrected one holds it
    assert float(rows["raw"][2]) < -0.05 and float(rows["raw"][4].rstrip("%")) < 50
    assert float(rows["corrected"][4].rstrip("%")) >= 85
