"""The tests' folders follow the package: lexpilot/<part>/ is tested in tests/<part>/ (lexpilot/running/batch in
tests/running/batch, the package's root modules at tests/), each such folder holding at least one test file, and
every test folder but tests/helpers (what test files share) and tests/data (frozen inputs) has its package folder.
A test file never imports another test file: what two test files share lives in tests/helpers/ or, for fixtures,
in a conftest.py. A library that takes a second to import is imported by the tests that use it, not at a file's top:
every worker of the suite collects every file."""

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.helpers.paths import ROOT

NOT_MIRRORED = {"helpers", "data"}  # tests/helpers: shared helpers; tests/data: frozen inputs


def package_folders(package: Path) -> list[Path]:
    """Each folder of the package that holds Python code, relative to the package ('.' for its root); a folder of
    web assets or caches holds none."""
    return sorted(
        folder.relative_to(package)
        for folder in [package, *package.rglob("*")]
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py"))
    )


def missing_test_folders(package: Path, tests: Path) -> list[str]:
    """The package folders without a test folder at the same relative path holding a test file."""
    return [
        f"{package.name}/{folder} has no tests/{folder}/test_*.py".replace("/.", "")
        for folder in package_folders(package)
        if not any((tests / folder).glob("test_*.py"))
    ]


def unmirrored_test_folders(package: Path, tests: Path) -> list[str]:
    """The test folders holding test files that mirror no package folder."""
    mirrored = set(package_folders(package))
    return [
        f"tests/{folder.relative_to(tests)}: no {package.name}/{folder.relative_to(tests)}"
        for folder in sorted({p.parent for p in tests.rglob("test_*.py")})
        if folder.relative_to(tests).parts[:1] not in [(name,) for name in NOT_MIRRORED]
        and folder.relative_to(tests) not in mirrored
    ]


def imports_of_test_files(tests: Path, root: Path) -> list[str]:
    """file:line of every import of a test file (a `test_*` module under tests/) from any Python file under tests/,
    function-level imports included."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        package = path.relative_to(root).parent.parts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = list(package[: len(package) - node.level + 1]) if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                modules = [module] + [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            for module in modules:
                parts = module.split(".")
                if parts[0] == tests.name and parts[-1].startswith("test_"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {module}")
    return found


# scikit-learn with SciPy took 1.1 s of each worker's 4 s collection when three test files imported it at their top
HEAVY = {"sklearn", "scipy", "matplotlib", "playwright", "inspect_ai", "every_eval_ever"}


def heavy_imports_at_the_top(tests: Path, root: Path) -> list[str]:
    """file:line of every import of a HEAVY library that runs when a file under tests/ is imported: at its top
    level, or inside an `if` or a `try` there."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        top = list(ast.parse(path.read_text(encoding="utf-8")).body)
        while top:
            node = top.pop(0)
            if isinstance(node, (ast.If, ast.Try)):
                top += node.body + node.orelse + getattr(node, "finalbody", [])
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [
                f"{path.relative_to(root)}:{node.lineno} imports {n}"
                for n in names
                if n.split(".")[0] in HEAVY
            ]
    return found


def test_every_package_folder_has_its_test_folder_with_a_test_file():
    assert {str(folder) for folder in package_folders(ROOT / "lexpilot")} >= {
        "running/batch",
        "reporting/site",
    }
    assert missing_test_folders(ROOT / "lexpilot", ROOT / "tests") == []


def test_every_test_folder_follows_a_package_folder():
    assert unmirrored_test_folders(ROOT / "lexpilot", ROOT / "tests") == []


def test_no_test_file_imports_another_test_file():
    assert imports_of_test_files(ROOT / "tests", ROOT) == []


def test_no_test_file_imports_a_heavy_library_at_its_top():
    assert heavy_imports_at_the_top(ROOT / "tests", ROOT) == []


def test_each_rule_is_broken_once_and_found(tmp_path):
    """On a copy of the layout: a package folder without tests, a test folder without a package folder, and test
    files importing another (absolute, from a package, relative, inside a function) are each found; a package
    folder of assets only, a test folder of helpers and imports of helpers are not. A heavy library imported at a
    file's top, or in a `try` there, is found; one imported inside a test, or a light one at the top, is not."""
    package, tests = tmp_path / "lexpilot", tmp_path / "tests"
    for folder in ("", "models", "running/batch", "site/web"):
        (package / folder).mkdir(parents=True, exist_ok=True)
    for module in ("__init__.py", "models/calls.py", "running/batch/api.py"):
        (package / module).write_text("", encoding="utf-8")
    (package / "site" / "web" / "page.js").write_text("", encoding="utf-8")
    for folder in ("", "models", "running/batch", "helpers", "stray"):
        (tests / folder).mkdir(parents=True, exist_ok=True)
    (tests / "helpers" / "runs.py").write_text("", encoding="utf-8")
    (tests / "test_root.py").write_text("from tests.helpers.runs import x\n", encoding="utf-8")
    (tests / "models" / "test_calls.py").write_text(
        "import tests.test_root\nfrom tests.running.batch import test_api\n", encoding="utf-8"
    )
    (tests / "stray" / "test_stray.py").write_text(
        "def test_x():\n    from ..models.test_calls import y\n", encoding="utf-8"
    )
    (tests / "test_heavy.py").write_text(
        "import numpy\nfrom sklearn.metrics import f1_score\ntry:\n    import scipy.stats\nexcept ImportError:\n"
        "    pass\n\n\ndef test_y():\n    import matplotlib\n",
        encoding="utf-8",
    )
    assert missing_test_folders(package, tests) == [
        "lexpilot/running/batch has no tests/running/batch/test_*.py"
    ]
    assert unmirrored_test_folders(package, tests) == ["tests/stray: no lexpilot/stray"]
    assert imports_of_test_files(tests, tmp_path) == [
        "tests/models/test_calls.py:1 imports tests.test_root",
        "tests/models/test_calls.py:2 imports tests.running.batch.test_api",
        "tests/stray/test_stray.py:2 imports tests.models.test_calls",
    ]
    assert heavy_imports_at_the_top(tests, tmp_path) == [
        "tests/test_heavy.py:2 imports sklearn.metrics",
        "tests/test_heavy.py:4 imports scipy.stats",
    ]


TRACKER = re.compile(r"\bissues? ?#?\d+|\bitems? \d+\b|\breview (of|helper)|\bround ?\d+ of the review", re.I)


def tracker_references(path: Path) -> list[str]:
    """Docstrings and comments of a test file that name the tracker (an issue, an item, a review) instead of the
    claim; string literals a test compares with the harness's output are not prose and are left alone."""
    text = path.read_text(encoding="utf-8")
    prose = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                prose.append((node.body[0].lineno, doc))
    return [f"{path.name}:{line}" for line, said in prose if TRACKER.search(said)]


def test_tests_state_their_claim_not_a_tracker_reference(tmp_path):
    """A test's docstring and comments say what it checks, never which issue or review asked for it. Broken once: a
    docstring naming an issue is found."""
    found = [line for path in sorted((ROOT / "tests").rglob("*.py")) for line in tracker_references(path)]
    assert found == []
    broken = tmp_path / "test_broken.py"
    broken.write_text(
        'def test_x():\n    """Issue 12 item 3: it works."""\n    assert len("item 7: no") == 10\n'
    )
    assert tracker_references(broken) == ["test_broken.py:2"]
