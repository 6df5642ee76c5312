"""Where the suite's temporary files go: a file system in memory, where the machine has one (tests/conftest.py)."""

import os

MEMORY = "/dev/shm"  # Linux's file system in memory


def in_memory_temporary_files(environ) -> None:
    """The tests' folders (tmp_path) and every temporary file of the workers and the processes they start go to a
    file system in memory, where one is and no TMPDIR was chosen. The harness syncs each record it writes to disk
    (a machine's crash loses none): a test's thousands of records waited on the disk, and its journal took a share of
    the system's CPU. In memory a sync returns at once; what the tests check is unchanged."""
    if "TMPDIR" in environ or not (os.path.isdir(MEMORY) and os.access(MEMORY, os.W_OK)):
        return
    environ["TMPDIR"] = MEMORY  # the workers and the processes they start
    environ.setdefault("PYTEST_DEBUG_TEMPROOT", MEMORY)  # where pytest numbers its runs' folders
