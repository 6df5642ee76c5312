"""The project's modules compiled ahead of the suite's processes (tests/helpers/compile_ahead.py): a process that
writes no bytecode runs what was compiled while the source is unchanged, and compiles a changed source again."""

import os
import subprocess
import sys

import pytest

from tests.helpers.compile_ahead import compile_ahead

pytestmark = pytest.mark.slow  # processes started


def answer_in_a_process(project) -> str:
    """What `lexpilot.answer` says in a process of the project's folder that writes no bytecode."""
    return subprocess.run(
        [sys.executable, "-c", "import lexpilot.answer as a; print(a.ANSWER)"],
        cwd=project,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()


def test_a_process_that_writes_no_bytecode_runs_what_was_compiled_ahead(tmp_path, monkeypatch):
    """The package's modules and the top folder's are compiled; a process reads what was compiled while the source
    keeps its size and time, and compiles a changed source again."""
    (tmp_path / "lexpilot").mkdir()
    (tmp_path / "lexpilot" / "__init__.py").write_text("")
    module = tmp_path / "lexpilot" / "answer.py"
    module.write_text("ANSWER = 41\n")
    (tmp_path / "top.py").write_text("X = 1\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    compile_ahead(tmp_path)
    assert (tmp_path / "__pycache__").is_dir()  # the top folder's modules too
    # another text of the same size and time: only a process that reads the compiled module says 41
    stat = module.stat()
    module.write_text("ANSWER = 42\n")
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert answer_in_a_process(tmp_path) == "41"
    module.write_text("ANSWER = 43 \n")  # changed, its size too: compiled again
    assert answer_in_a_process(tmp_path) == "43"


def test_nothing_is_compiled_where_python_writes_bytecode_itself(tmp_path, monkeypatch):
    """Where Python writes bytecode as it imports, each process writes its own: nothing is compiled ahead."""
    (tmp_path / "lexpilot").mkdir()
    (tmp_path / "lexpilot" / "answer.py").write_text("ANSWER = 41\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    compile_ahead(tmp_path)
    assert not list(tmp_path.rglob("*.pyc"))
