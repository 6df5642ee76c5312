"""Where the suite's temporary files go: a file system in memory, where the machine has one (tests/conftest.py)."""

import os

MEMORY = "/dev/shm"  # Linux's file system in memory
# the bytes free it needs: a full run's folders and the browsers' (a container's 64 MB is too small)
ROOM = 1 << 30


def in_memory_temporary_files(environ) -> None:
    """The tests' folders (tmp_path) and every temporary file of the workers and the processes they start go to a
    file system in memory, where one is and no TMPDIR was chosen. The harness syncs each record it writes to disk
    (a machine's crash loses none): a test's thousands of records waited on the disk, and its journal took a share of
    the system's CPU. In memory a sync returns at once; what the tests check is unchanged."""
    if "TMPDIR" in environ or not roomy(MEMORY):
        return
    environ["TMPDIR"] = MEMORY  # the workers and the processes they start
    environ.setdefault("PYTEST_DEBUG_TEMPROOT", MEMORY)  # where pytest numbers its runs' folders


def roomy(folder: str) -> bool:
    """A folder the suite may write its temporary files to, with room for them."""
    if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        return False
    free = os.statvfs(folder)
    return free.f_bavail * free.f_frsize >= ROOM
