"""How the suite's tests are spread over pytest-xdist's workers (`--dist loadscope`, pytest.ini).

Most test files keep the cores busy; a few mostly wait, on purpose: Redis kept away for 10 s, a hold until a price
window opens, a provider answering after its latency, processes sharing a rate limit over seconds. Spread over every
worker, those waits left a core idle a quarter of the time. Here the waiting files are one unit of work, run one
after another on one worker, while the other workers keep both cores busy with the rest; every other file is a unit
of its own, so that its module fixtures are made once. Units go out in the order collected (tests/conftest.py puts
the waiting files first, then the files of slow tests)."""

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
    }
)
WAITING_UNIT = "the tests that mostly wait"


def waits(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0] in WAITING


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: the waiting files' one, or its file's."""
    return WAITING_UNIT if waits(nodeid) else nodeid.split("::", 1)[0]


class WaitingApart(LoadScopeScheduling):
    """`--dist loadscope` with the waiting files as one scope."""

    def _split_scope(self, nodeid: str) -> str:
        return unit(nodeid)
