"""The code a run was made with: which files decide what a stage produces, and their digests.

A stage's code is its entry point and every module of the project it imports, directly or through others,
lazy imports inside functions included (found from the import statements, so no list is kept by hand), with
the reporting package left out: fixing a table never blocks resuming a run. A run's manifest keeps the digest
of every such file of every entry point when the run starts (`code_files`); each stage compares the files it
runs now with those, so a change to any of them stops it until `--allow-code-change`.
"""

from __future__ import annotations

import ast
import bisect
import functools
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lexpilot.paths import PROJECT_ROOT

PACKAGE = "lexpilot"  # the project's package: every file under it, and the top folder's scripts, are its code
NOT_CODE_OF_A_STAGE = ("lexpilot/reporting/",)  # reporting reads runs; it never decides what a stage records


def _module_files(dotted: str) -> list[str]:
    """The files (relative, with /) an import of `dotted` runs: the module (or package) and the packages above it."""
    parts = dotted.split(".")
    base = "/".join(parts)
    return ["/".join(parts[:i]) + "/__init__.py" for i in range(1, len(parts))] + [
        f"{base}.py",
        f"{base}/__init__.py",
    ]


@functools.lru_cache(maxsize=512)  # keyed by the file's time and size: a changed file is parsed again
def _imports_of(name: str, root: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    found = []
    ours = _project_names(root)
    for _, module in imported_modules(root / name, root):
        # the standard library and installed packages are not the project's code
        if module.split(".")[0] in ours:
            found += _module_files(module)
    return tuple(found)


@functools.lru_cache(maxsize=8)
def _project_names(root: Path) -> frozenset[str]:
    """The project's top-level modules and packages: the imports that can be the project's code."""
    return frozenset(
        {p.stem for p in root.glob("*.py")}
        | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    )


# An import statement begins a line (ruff format gives each statement its own), so only the lines that begin one
# are parsed, each kept at its line: every file of the project read in 0.3 s against 1.8 s parsed whole, which was
# most of a stage's start (the graph is read in every process that opens a stage). The file is parsed whole where
# its import lines alone could read otherwise: the word `import` stands anywhere else (a one-line `if x: import y`,
# a comment, a docstring), an import line holds a quote or a backslash (a string it opens, or a continuation, would
# take in the next line kept and leave out what the file has between), or the lines do not parse alone. A string's
# line that looks like an import counts as one: a file is guarded more, never less.
_IMPORT_LINE = re.compile(
    rb"^[ \t]*(?:import[ \t][^\n]*|from[ \t]+[\w.]+[ \t]+import\b(?:[ \t]*\([^)]*\)|[^\n]*))", re.M
)
_IMPORT_WORD = re.compile(rb"\bimport\b")
_STRING_OR_CONTINUATION = re.compile(rb"['\"\\]")


def import_statements(source: bytes) -> ast.Module:
    """The file's import statements at their lines (the file parsed whole where a line alone cannot be sure)."""
    spans = [m.span() for m in _IMPORT_LINE.finditer(source)]
    starts = [a for a, _ in spans]

    def in_a_statement(at: int) -> bool:
        i = bisect.bisect_right(starts, at) - 1
        return i >= 0 and at < spans[i][1]

    if all(in_a_statement(m.start()) for m in _IMPORT_WORD.finditer(source)) and not any(
        _STRING_OR_CONTINUATION.search(source, a, b) for a, b in spans
    ):
        lines, line = [], 1
        for a, b in spans:
            lines.append(b"\n" * (source.count(b"\n", 0, a) + 1 - line) + source[a:b].lstrip())
            line += lines[-1].count(b"\n")
        try:
            return ast.parse(b"".join(lines))
        except (SyntaxError, ValueError):
            pass
    return ast.parse(source)


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import of a file, anywhere in it (inside functions too), relative imports made
    absolute; `from package import name` gives both the package and package.name (which may be a module). The
    layering test reads imports with it too."""
    package = path.relative_to(root).parent.parts
    names = []
    for node in ast.walk(import_statements(path.read_bytes())):
        if isinstance(node, ast.Import):
            names += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module:
                names += [(node.lineno, module)] + [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return names


def relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def code_files(scripts: list[str], root: Path | None = None) -> list[str]:
    """The project files (relative, with /) that the entry points `scripts` run, reporting aside."""
    root = root or PROJECT_ROOT
    return list(_code_files(tuple(scripts), root, _signature(root)))


def _signature(root: Path) -> tuple:
    """Every project file's path (relative, with /), time and size, in order: a change to any of them is always
    seen. Read at every check, so made with os.scandir and strings: through pathlib's glob, its paths hashed and
    sorted, it was most of a grid's start-up (30 cells' quotes and manifest checks, each reading it again)."""
    files = [(e.name, e) for e in os.scandir(root) if e.name.endswith(".py") and e.is_file()]
    folders = [(PACKAGE, os.path.join(root, PACKAGE))]
    while folders:
        relative_folder, folder = folders.pop()
        for e in os.scandir(folder):
            if e.is_dir(follow_symlinks=False):
                folders.append((f"{relative_folder}/{e.name}", e.path))
            elif e.name.endswith(".py"):
                files.append((f"{relative_folder}/{e.name}", e))
    return tuple(sorted((name, s.st_mtime_ns, s.st_size) for name, e in files for s in [e.stat()]))


@functools.lru_cache(maxsize=64)  # the grid's cells each ask for their stage's files: walked once per process
def _code_files(scripts: tuple[str, ...], root: Path, signature: tuple) -> tuple[str, ...]:
    # the signature lists every project file with its time and size: the walk asks the disk nothing (a test that
    # changes each file in turn walks a thousand times), and goes by relative names (through pathlib, its paths
    # made and hashed were most of a stage's start once the imports were read fast)
    known = {name: (mtime_ns, size) for name, mtime_ns, size in signature}
    seen: set[str] = set()
    todo = list(scripts)
    while todo:
        name = todo.pop()
        if name in seen or name not in known or name.startswith(NOT_CODE_OF_A_STAGE):
            continue
        seen.add(name)
        todo += _imports_of(name, root, *known[name])
    return tuple(sorted(seen))


STAGE_RUNNER = "lexpilot/running/stage.py"


def stage_scripts(root: Path, signature: tuple) -> tuple[str, ...]:
    """The entry points that run a stage (their code reaches the stage runner); show_results.py and the
    other reporting tools are not among them. `signature`: the project's, as `_signature` gives it."""
    return tuple(
        sorted(p.name for p in root.glob("*.py") if STAGE_RUNNER in _code_files((p.name,), root, signature))
    )


def file_digests(root: Path, names, signature: tuple) -> dict[str, str]:
    """Each named project file -> its digest, by the time and size the signature read (no file asked twice)."""
    stats = {name: (mtime_ns, size) for name, mtime_ns, size in signature}
    return {name: _file_digest(root, name, *stats[name]) for name in names}


# keyed by the file's time and size: the grid's cells compare the same files
@functools.lru_cache(maxsize=1024)
def _file_digest(root: Path, name: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256((root / name).read_bytes().replace(b"\r\n", b"\n")).hexdigest()[:16]


@dataclass(frozen=True)
class CodeNow:
    """The project's code as read at one moment (every file's path, time and size): what a stage records in a new
    manifest and compares with the saved one, read once for both, and once for all the parts of a grid's quote."""

    root: Path
    signature: tuple

    @classmethod
    def read(cls, root: Path | None = None) -> CodeNow:
        """The project's files (under `root`, the project's folder by default) as they are now."""
        root = root or PROJECT_ROOT  # read at each call (the tests point it at a copy of the project)
        return cls(root, _signature(root))

    def digests(self) -> dict[str, str]:
        """Every file any stage script runs -> its digest: what a new manifest records."""
        return dict(_digests(self.root, self.signature))

    def changes(self, saved: dict, script: str) -> list[str]:
        """The files the stage of `script` runs that are not as they were when the run started, as
        'code: FILE changed' lines; a manifest from before per-file digests is compared on its one code hash."""
        saved_files = saved.get("code_files")
        if not isinstance(saved_files, dict):
            now = code_hash(self.digests())
            return (
                []
                if saved.get("code_hash") == now
                else [f"code_hash: run {saved.get('code_hash')}, now {now}"]
            )
        changes = []
        files = _code_files((script,), self.root, self.signature)
        for name, now in file_digests(self.root, files, self.signature).items():
            before = saved_files.get(name)
            if before != now:
                changes.append(
                    f"code: {name} {'added' if before is None else 'changed'} since the run started"
                )
        return changes


def code_digests(root: Path | None = None) -> dict[str, str]:
    """Every file any stage script runs -> its digest, as the project is now."""
    return CodeNow.read(root).digests()


@functools.lru_cache(maxsize=8)  # keyed by every file's time and size, so a change is always seen
def _digests(root: Path, signature: tuple) -> tuple:
    return tuple(
        file_digests(root, _code_files(stage_scripts(root, signature), root, signature), signature).items()
    )


def code_hash(digests: dict[str, str]) -> str:
    """One digest for a set of files: the harness version a run was started with, as show_results groups it."""
    return hashlib.sha256(
        "".join(f"{name}\0{d}\0" for name, d in sorted(digests.items())).encode()
    ).hexdigest()[:16]
