"""The suite's temporary files in memory (tests/helpers/temporary.py): there where the machine has a file system in
memory, unless a TMPDIR was chosen."""

import pytest

from tests.helpers.temporary import MEMORY, in_memory_temporary_files, roomy


@pytest.mark.skipif(not roomy(MEMORY), reason="no file system in memory with room here")
def test_the_workers_and_pytests_folders_go_to_memory():
    environ: dict = {}
    in_memory_temporary_files(environ)
    assert environ == {"TMPDIR": MEMORY, "PYTEST_DEBUG_TEMPROOT": MEMORY}


def test_a_file_system_without_room_is_not_taken(monkeypatch):
    monkeypatch.setattr("tests.helpers.temporary.ROOM", 1 << 62)
    environ: dict = {}
    in_memory_temporary_files(environ)
    assert environ == {}


def test_a_chosen_tmpdir_is_kept():
    environ = {"TMPDIR": "/somewhere"}
    in_memory_temporary_files(environ)
    assert environ == {"TMPDIR": "/somewhere"}
