"""The lock that allows one writer per run and model: an OS lock on a file in the run's folder, released when its
process dies (a kill -9 leaves nothing to clean up)."""

import os
from pathlib import Path

from lexpilot.errors import HarnessError
from lexpilot.files import storage_error


class RunLock:
    """One writer per run and model; the OS releases the lock when its process dies."""

    def __init__(self, path: Path):
        self.path = path
        self.file = None

    def __enter__(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("a+")
        except IsADirectoryError:
            raise HarnessError(
                f"{self.path}: the run's lock file is a folder; remove it, then rerun"
            ) from None
        except OSError as e:
            raise storage_error(e, self.path) from None
        try:
            if os.name == "nt":
                import msvcrt

                msvcrt.locking(self.file.fileno(), msvcrt.LK_NBLCK, 1)
            else:
                import fcntl

                fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise HarnessError(
                f"{self.path}: this run and model are being written by {holder}. "
                "Wait for it to finish; do not run two writers on one run id."
            ) from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()}")
        self.file.flush()
        return self

    def __exit__(self, *exc):
        self.file.close()
