"""The project's modules compiled once, before the suite starts any process, instead of in every process.

PYTHONDONTWRITEBYTECODE is set on this machine and in CI, so no Python process writes the bytecode of what it
imports, and every process the suite starts (its workers, the warm interpreters, the stage scripts, grids, reports
and benchmarks run fresh: over a hundred) compiled each module of the project it imports again: about 0.45 s of a
fresh start's 1.2 s here. The controller compiles them once, with the standard library's compileall, into their
`__pycache__` folders (ignored by git), as a Python that may write bytecode does on a first import. A process reads
them while their source is unchanged (Python compares each file's time and size), so a changed file is compiled
again as before."""

import compileall
import sys
from pathlib import Path

FOLDERS = (
    "lexpilot",
    "bench",
)  # with the top folder's modules: what the suite's processes import of the project


def compile_ahead(root: Path) -> None:
    """The project's modules compiled where Python looks for their bytecode, where this Python writes none itself
    (otherwise each process writes its own as it imports); quietly: a file that does not compile is left to the
    process that imports it, which says why."""
    if not sys.dont_write_bytecode:
        return
    for folder in FOLDERS:
        compileall.compile_dir(root / folder, quiet=2)
    for module in sorted(root.glob("*.py")):
        compileall.compile_file(module, quiet=2)
