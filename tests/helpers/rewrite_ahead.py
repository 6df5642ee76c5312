"""The test files' asserts rewritten once, before the workers start, instead of once per worker.

Each worker collects every test file, and pytest's rewriting of their asserts (for its failure messages) is two
thirds of a collection: 7 s of CPU per worker on this machine. pytest keeps what it rewrote beside each file
(`__pycache__`) unless bytecode is not to be written: this machine's environment and CI's set
PYTHONDONTWRITEBYTECODE, so every worker rewrote every file. Here the controller rewrites them first, a process per
core, and writes them where pytest looks (with the source's time and size, as pytest checks them); the workers
read them. They are written into the source tree's `__pycache__` folders, as pytest writes them where bytecode may
be written, and read by later runs too while their source is unchanged. The rewriting is pytest's own (private
functions): if they are not as expected (another pytest), or a file cannot be rewritten, nothing is written for it
and each worker rewrites it as before."""

import os
import sys
from pathlib import Path
from types import CodeType, ModuleType

NEEDED = ("PYC_TAIL", "_read_pyc", "_rewrite_test", "_write_pyc", "get_cache_dir")


def pytests_rewriting() -> ModuleType | None:
    """The module of the import hook that rewrites asserts, as the running pytest (declared in requirements-dev.txt)
    installed it; None where there is none (`--assert=plain`) or it has not the functions used here."""
    hook = next(
        (finder for finder in sys.meta_path if type(finder).__name__ == "AssertionRewritingHook"), None
    )
    rewriting = sys.modules.get(type(hook).__module__) if hook is not None else None
    return rewriting if rewriting and all(hasattr(rewriting, name) for name in NEEDED) else None


def pyc_of(rewriting: ModuleType, path: Path) -> Path:
    """Where pytest keeps the rewritten code of the test file `path`."""
    return rewriting.get_cache_dir(path) / (path.name[:-3] + rewriting.PYC_TAIL)


def read_back(path: Path) -> CodeType | None:
    """The rewritten code pytest reads for `path`: None where none was written or its source changed since."""
    rewriting = pytests_rewriting()
    return rewriting._read_pyc(path, pyc_of(rewriting, path)) if rewriting else None


def rewrite_ahead(config, folder: Path) -> None:
    """Every test file and conftest under `folder`, rewritten and written for the workers to read."""
    rewriting = pytests_rewriting()
    if rewriting is None:
        return
    files = sorted(folder.rglob("test_*.py")) + sorted(folder.rglob("conftest.py"))

    def rewrite(share: list[Path]) -> None:
        for path in share:
            pyc = pyc_of(rewriting, path)
            try:
                if rewriting._read_pyc(path, pyc) is not None:
                    continue  # written by an earlier run, and its source unchanged since
                source_stat, code = rewriting._rewrite_test(path, config)
                pyc.parent.mkdir(parents=True, exist_ok=True)
                rewriting._write_pyc(Quiet(), code, source_stat, pyc)
            except Exception:  # noqa: BLE001 - the worker rewrites it, and reports what it finds wrong
                continue

    if not hasattr(os, "fork"):
        return  # Windows: each worker rewrites as before
    # the cores this process may use (macOS has no affinity call: its cores)
    processes = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    children = []
    for n in range(processes):
        pid = os.fork()
        if pid == 0:  # a child: its share, then out at once (no atexit, no pytest teardown of the parent's)
            try:
                rewrite(files[n::processes])
            finally:
                os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


class Quiet:
    """The state `_write_pyc` reports a failure to write to: a file not written is rewritten by the worker."""

    def trace(self, message: str) -> None:
        pass
