"""How the suite's tests are spread over pytest-xdist's workers (`--dist loadscope`, pytest.ini).

Most test files keep the cores busy; a few mostly wait, on purpose: Redis kept away for 10 s, a hold until a price
window opens, a provider answering after its latency, processes sharing a rate limit over seconds. Spread over every
worker, those waits left a core idle a quarter of the time. Here the waiting files are one unit of work, run one
after another on one worker, while the other workers keep both cores busy with the rest. The export's tests are one
unit too, so that one worker imports inspect-ai for them (1.5 s of CPU each time). Every other file is a unit of its
own, so that its module fixtures are made once. Units go out in the order collected (tests/conftest.py puts
the waiting files first, then the longest files, longest first, then the other files of slow tests): a worker that
takes a long file last ends the suite alone while the other cores idle."""

from xdist.scheduler.loadscope import LoadScopeScheduling

# the files whose tests mostly wait: their CPU is a third of their time or less (a per-test CPU plugin's count)
WAITING = frozenset(
    {
        "tests/models/test_redis_faults.py",
        "tests/models/test_redis_limits.py",
        "tests/models/test_calls.py",
        "tests/models/test_provider_faults.py",
        "tests/running/test_clock.py",
        "tests/running/grid/test_grid_clock.py",
        "tests/running/batch/test_batch_clock.py",
        "tests/running/grid/test_run_grid_workers.py",
        "tests/reporting/scoring/test_parallel.py",
    }
)
WAITING_UNIT = "the tests that mostly wait"
EXPORT = "tests/reporting/export/"  # the tests that import inspect-ai, where it is installed

# the files that take longest, longest first: 7 s or more of wall each (a per-test timing plugin's count on the
# 2-core machine, 2026-12-07). Started in collection order, one of them (the benchmarks' 24 s) came last and
# ran alone at the end of the suite. A file left out is only started later.
LONGEST_FIRST = (
    "tests/running/grid/test_run_grid_batch_kills.py",
    "tests/running/grid/test_run_grid_batch.py",
    "tests/running/grid/test_run_grid.py",
    "tests/reporting/site/test_viewer_stages.py",
    "tests/test_bench.py",
    "tests/running/grid/test_run_grid_kills.py",
    "tests/storage/test_checkpoints.py",
    "tests/running/grid/test_grid_budget.py",
    "tests/reporting/statistics/test_randomization.py",
    "tests/running/grid/test_run_grid_sigterm.py",
    "tests/running/batch/test_batch_faults.py",
    "tests/reporting/export/test_inspect_view.py",
    "tests/running/test_usage_replay.py",
    "tests/reporting/statistics/test_rankings.py",
    "tests/protocols/test_user_conditions.py",
    "tests/protocols/test_rejudge.py",
    "tests/reporting/tables/test_analyses.py",
    "tests/running/batch/test_batch_invalid.py",
)


def waits(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0] in WAITING


def start_order(nodeid: str, slow: bool) -> tuple[int, int, int]:
    """Where a test's file starts: the waiting files, then the longest (longest first), then the other files of
    slow tests (`slow`: its file holds one), then the rest; Python's sort keeps the collected order within each."""
    path = nodeid.split("::", 1)[0]
    rank = LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
    return (not waits(nodeid), rank, not slow)


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: the waiting files' one, the export's folder, or its file."""
    path = nodeid.split("::", 1)[0]
    if waits(nodeid):
        return WAITING_UNIT
    return EXPORT if path.startswith(EXPORT) else path


class WaitingApart(LoadScopeScheduling):
    """`--dist loadscope` with the waiting files as one scope, and the export's folder as one."""

    def _split_scope(self, nodeid: str) -> str:
        return unit(nodeid)
