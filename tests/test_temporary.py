"""The suite's temporary files in memory (tests/helpers/temporary.py): there where the machine has a file system in
memory, unless a TMPDIR was chosen."""

import os

import pytest

from tests.helpers.temporary import MEMORY, in_memory_temporary_files


@pytest.mark.skipif(not os.path.isdir(MEMORY), reason="no file system in memory here")
def test_the_workers_and_pytests_folders_go_to_memory():
    environ: dict = {}
    in_memory_temporary_files(environ)
    assert environ == {"TMPDIR": MEMORY, "PYTEST_DEBUG_TEMPROOT": MEMORY}


def test_a_chosen_tmpdir_is_kept():
    environ = {"TMPDIR": "/somewhere"}
    in_memory_temporary_files(environ)
    assert environ == {"TMPDIR": "/somewhere"}
