"""Declare it, or don't need it: every module the package, the entry points, the benchmark
scripts and the tests import is the standard library's, the project's own, or given by a distribution the
requirements files name. A module that only an older install left on the machine (certifi, on machines where the
suite once passed) fails here with the file and line, not on a fresh machine with ModuleNotFoundError."""

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

REQUIREMENTS = ("requirements.txt", "requirements-optional.txt", "requirements-dev.txt")
OWN = {"lexpilot", "tests", "bench"} | {p.stem for p in ROOT.glob("*.py")}


def declared(root: Path = ROOT) -> set[str]:
    """The distributions the requirements files name (normalised as PyPI names them), following `-r`."""
    names, seen, todo = set(), set(), list(REQUIREMENTS)
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        for line in (root / file).read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("-r"):
                todo.append(line[2:].strip())
            elif line:
                names.add(normalised(re.match(r"[A-Za-z0-9_.\-]+", line)[0]))
    return names


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def required_imports(path: Path):
    """(line, top-level module) of every import in the file, inside functions and try blocks too: a module is
    declared where it is imported, whatever brings it today."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def undeclared(files, declared_names: set[str]) -> list[str]:
    """'file:line: module' for every import no declared distribution gives."""
    given = metadata.packages_distributions()
    problems = []
    for path in files:
        for line, module in required_imports(path):
            if module in OWN or module in sys.stdlib_module_names or module == "__future__":
                continue
            if normalised(module) in declared_names:  # named as imported (tomli, only on Python 3.10)
                continue
            if not {normalised(d) for d in given.get(module, [])} & declared_names:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    return problems


def project_files() -> list[Path]:
    return sorted(
        [*ROOT.glob("*.py"), *(ROOT / "lexpilot").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
        + [*(ROOT / "bench").rglob("*.py")]
    )


@pytest.mark.slow
def test_every_import_is_given_by_a_declared_requirement():
    problems = undeclared(project_files(), declared())
    assert not problems, (
        "imported but not in any requirements file (declare it, or don't need it):\n" + "\n".join(problems)
    )


def test_an_undeclared_import_is_found_with_its_file_and_line(tmp_path, monkeypatch):
    """The check itself fails on the defect it is for: a test importing a package no requirements file names."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "tests").mkdir()
    probe = tmp_path / "tests" / "test_probe.py"
    probe.write_text(
        "import json\nimport numpy\ntry:\n    import nothere\nexcept ImportError:\n    import alsonot\nimport pytest\n",
        encoding="utf-8",
    )
    assert undeclared([probe], {"numpy", "nothere", "alsonot"}) == ["tests/test_probe.py:7: pytest"]
    assert undeclared([probe], {"numpy", "pytest"}) == [
        "tests/test_probe.py:4: nothere",
        "tests/test_probe.py:6: alsonot",
    ]
