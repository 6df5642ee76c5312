"""Smoke test of the throughput benchmark: a handful of cases at zero latency completes and prints its table."""
import subprocess
import sys

from tests.conftest import ROOT


def test_benchmark_runs_every_stage_and_prints_its_table():
    result = subprocess.run([sys.executable, "-m", "bench.throughput", "--cases", "6", "--latency", "0",
                             "--concurrency", "4"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for stage in ("LexAwN_gen.py", "eval_DCG.py", "eval_LJP.py", "show_results.py"):
        assert any(line.startswith(stage) for line in lines), result.stdout
    assert "rerun of every stage of the finished run" in lines[-1] and lines[-1].endswith(", 0 calls")
