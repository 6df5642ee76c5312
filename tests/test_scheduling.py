"""The suite's spread over its workers (tests/helpers/scheduling.py, pytest.ini): the files named as mostly waiting
are test files of the suite, they make one unit of work, and every other file is a unit of its own; the longest
files start first."""

import configparser

from xdist.scheduler.loadscope import LoadScopeScheduling

from tests.helpers.paths import ROOT
from tests.helpers.scheduling import (
    EXPORT,
    LONGEST_FIRST,
    WAITING,
    WAITING_UNIT,
    WaitingApart,
    start_order,
    unit,
)


def test_every_file_named_as_waiting_or_long_is_a_test_file_of_the_suite():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST) and not WAITING & set(LONGEST_FIRST)
    for path in WAITING | set(LONGEST_FIRST):
        assert (ROOT / path).is_file() and "\ndef test_" in (ROOT / path).read_text(encoding="utf-8"), path


def test_the_waiting_files_are_one_unit_and_every_other_file_its_own():
    waiting = sorted(WAITING)
    assert {unit(f"{path}::test_x[a-b]") for path in waiting} == {WAITING_UNIT}
    assert unit("tests/test_layout.py::test_x") == "tests/test_layout.py"
    assert unit("tests/test_layout.py::test_y[1]") == unit("tests/test_layout.py::test_x")


def test_the_exports_tests_are_one_unit_and_import_inspect_in_one_worker():
    exported = sorted((ROOT / EXPORT).glob("test_*.py"))
    assert len(exported) > 1 and any("inspect" in path.read_text(encoding="utf-8") for path in exported)
    assert {unit(f"{path.relative_to(ROOT).as_posix()}::test_x") for path in exported} == {EXPORT}
    assert unit("tests/reporting/site/test_viewer.py::test_x") == "tests/reporting/site/test_viewer.py"


def test_the_suite_runs_by_unit():
    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini")
    options = ini["pytest"]["addopts"].split()
    assert "--dist" in options and options[options.index("--dist") + 1] == "loadscope"
    assert "--no-loadscope-reorder" in options  # xdist would otherwise send the units out largest first


def test_the_scheduler_gives_xdist_the_units():
    """pytest-xdist asks `_split_scope` for a test's unit: the scheduler answers with `unit` (were xdist to ask
    otherwise, the waiting files would spread over every worker again)."""
    assert "_split_scope" in vars(LoadScopeScheduling)
    waiting = sorted(WAITING)[0]
    assert WaitingApart._split_scope(None, f"{waiting}::test_x") == WAITING_UNIT
    assert WaitingApart._split_scope(None, "tests/test_layout.py::test_x") == "tests/test_layout.py"


def test_the_waiting_files_start_first_then_the_longest_longest_first_then_the_slow_ones():
    """Python's sort by `start_order` (tests/conftest.py) keeps the collected order where it does not decide."""
    waiting = sorted(WAITING)[0]
    collected = [
        ("tests/test_layout.py::test_a", False),
        (f"{LONGEST_FIRST[1]}::test_b", True),
        ("tests/test_warm.py::test_c", True),
        (f"{waiting}::test_d", False),
        (f"{LONGEST_FIRST[0]}::test_e", False),
        ("tests/test_layout.py::test_f", False),
    ]
    ordered = [nodeid.rsplit("_", 1)[1] for nodeid, _ in sorted(collected, key=lambda c: start_order(*c))]
    assert ordered == ["d", "e", "b", "c", "a", "f"]


class Collected:
    """What the collection hook reads of a collected test."""

    def __init__(self, nodeid: str, slow: bool):
        self.nodeid, self.path, self.slow = nodeid, nodeid.split("::")[0], slow

    def get_closest_marker(self, name: str):
        return name == "slow" and self.slow or None


def test_the_suite_puts_its_tests_in_start_order():
    """tests/conftest.py's collection hook sorts the collected tests by `start_order`: the order xdist sends the
    units out in (pytest.ini keeps it)."""
    from tests import conftest

    waiting = sorted(WAITING)[0]
    items = [
        Collected("tests/test_layout.py::test_a", False),
        Collected(f"{LONGEST_FIRST[2]}::test_b", False),
        Collected("tests/test_warm.py::test_c", True),
        Collected(f"{waiting}::test_d", True),
        Collected(f"{LONGEST_FIRST[0]}::test_e", True),
    ]
    conftest.pytest_collection_modifyitems(items)
    assert [item.nodeid.rsplit("_", 1)[1] for item in items] == ["d", "e", "b", "c", "a"]
