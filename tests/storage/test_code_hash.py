"""The code hash covers all the code a stage runs: the stage script and every module of the package it
can run, reporting aside; a change to any of them stops a rerun on a run started before, until
--allow-code-change. A fix to a table never does."""

import ast
import importlib
import inspect
import json
import shutil
import subprocess
import sys

import pytest

from lexpilot.protocols.catalog import ENTRY_POINTS
from lexpilot.storage import code
from tests.helpers.paths import ROOT
from tests.helpers.stages import Harness

STAGE_SCRIPTS = [f"{name}.py" for name in ENTRY_POINTS]  # the stage catalog is the one list


def stages_of(script: str) -> list:
    return list(ENTRY_POINTS[script[:-3]])  # eval_LJP.py runs three


def test_every_stage_script_is_in_the_catalog_with_the_stages_it_runs():
    """A stage script the catalog does not list would be outside the code-hash and prompt guards: every script at
    the top that hands a stage to stage_main is there, declaring what it runs."""
    scripts = sorted(
        p.name
        for p in ROOT.glob("*.py")
        if "stage_main(" in p.read_text(encoding="utf-8") and p.name != "common.py"
    )
    assert scripts == sorted(STAGE_SCRIPTS)
    for script in scripts:
        module = importlib.import_module(script[:-3])
        assert list(getattr(module, "STAGES", None) or [module.STAGE]) == stages_of(script), script


# What every stage runs whatever its steps: the runner, batch mode, model calls, storage, the benchmark's data
RUN_BY_EVERY_STAGE = {
    "common.py",
    "lexpilot/running/stage.py",
    "lexpilot/running/state.py",
    "lexpilot/running/batch/cycles.py",
    "lexpilot/running/quote.py",
    "lexpilot/models/calls.py",
    "lexpilot/models/replies.py",
    "lexpilot/storage/checkpoints.py",
    "lexpilot/storage/manifest.py",
    "lexpilot/benchmark/prompts.py",
    "lexpilot/benchmark/records.py",
    "lexpilot/benchmark/dataset.py",
    "lexpilot/settings.py",
    "lexpilot/protocols/steps.py",
}


def source_file(function) -> str:
    return code.relative(__import__("pathlib").Path(inspect.getsourcefile(function)).resolve(), ROOT)


@pytest.mark.parametrize("script", STAGE_SCRIPTS)
def test_a_stage_s_code_is_its_script_its_protocols_and_the_runner_and_never_reporting(script):
    for stage in stages_of(script):
        assert stage.script == script  # the script that runs it, whose code the run is compared on
        files = set(code.code_files([script]))
        protocol = {
            source_file(f)
            for step in stage.steps
            for f in (step.run, step.max_calls, step.when)
            if callable(f)
        }
        protocol |= {source_file(stage.prepare)} if stage.prepare else set()
        assert {script} | protocol | RUN_BY_EVERY_STAGE <= files
        assert not [f for f in files if f.startswith("lexpilot/reporting/")]


def import_nodes(tree) -> list[tuple[int, str]]:
    """Each import statement of a parsed file, at its line, as the parser gives it."""
    return sorted(
        (n.lineno, ast.dump(n)) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
    )


@pytest.mark.slow
def test_the_imports_read_from_the_import_lines_are_the_whole_files_imports():
    """Only the lines that begin an import are parsed: for every file whose imports the harness reads (the scripts
    and the package, for the code a stage runs and the layering test; the benchmarks, which import both) they give
    the imports, at their lines, that parsing the whole file gives."""
    files = [*ROOT.glob("*.py"), *(ROOT / "lexpilot").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    for path in files:
        source = path.read_bytes()
        assert import_nodes(code.import_statements(source)) == import_nodes(ast.parse(source)), path


# Each import begins its line, as ruff format writes them: read from those lines alone
IMPORTS_ON_THEIR_LINES = b"""\
\"\"\"A module.\"\"\"

import os, sys as system
from . import sibling
from ..parent import (first,  # a comment
    second)
import re; import ast
def late():
    from lexpilot.paths import (
        PROJECT_ROOT,
    )
\"\"\"
from a_string import looks_like_one
\"\"\"
"""
# What a line alone cannot be sure of: the file is parsed whole
IMPORTS_A_LINE_CANNOT_TELL = [
    b"if os: import json\n",
    b"try: import csv\nexcept ImportError: pass\n",
    b"from math import \\\n    floor\nimport lexpilot.after\n",
    b"import os \\\n    , lexpilot.second\nimport re\n",  # a continuation that hides a module
    b"import lexpilot \\\n    .protocols\n\nimport os\n",
    b'import a; s = """\n"""\nimport lexpilot.y\nimport b; t = """\n"""\n',  # strings the import lines open
    b's = """\nfrom x import (a,\nb #"""; import lexpilot.y; f(\n)\n',
    b"from ..parent import (first,  # a comment with ) in it\n    second)\n",
    b"from .. parent import first\n",  # dots apart from the name
    b'"""A docstring that says import."""\nimport os\n',
]


def test_an_import_in_any_shape_is_read_at_its_line():
    """Imports on their own lines are read at their lines from those lines, a string that looks like an import
    counting as one; an import after `if x:`, a continuation by backslash, a comment with a parenthesis or the word
    in a docstring make the whole file parsed."""
    found = import_nodes(code.import_statements(IMPORTS_ON_THEIR_LINES))
    assert found[:-1] == import_nodes(ast.parse(IMPORTS_ON_THEIR_LINES))
    assert [line for line, _ in found] == [3, 4, 5, 7, 7, 9, 13]
    assert "looks_like_one" in found[-1][1]
    for source in IMPORTS_A_LINE_CANNOT_TELL:
        whole = import_nodes(ast.parse(source))
        assert import_nodes(code.import_statements(source)) == whole
        assert whole, source


@pytest.mark.slow
def test_every_module_a_stage_loads_is_in_its_code():
    """Each script imported in a clean interpreter state: every project module it loads is in its code."""
    probe = (
        "import json, sys\nresult = {}\nkeep = set(sys.modules)\n"
        f"for script in {STAGE_SCRIPTS!r}:\n"
        "    for name in [m for m in sys.modules if m not in keep]:\n"
        "        del sys.modules[name]\n"
        "    __import__(script[:-3])\n"
        "    result[script] = sorted(getattr(m, '__file__', None) or '' for n, m in sys.modules.items()\n"
        "                            if n not in keep)\n"
        "print(json.dumps(result))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    )
    for script, files in loaded.items():
        ours = {
            code.relative(__import__("pathlib").Path(f).resolve(), ROOT)
            for f in files
            if f.startswith(str(ROOT) + "/") and "/tests/" not in f  # a path under the root, not a sibling
        }
        assert ours - {f for f in ours if f.startswith("lexpilot/reporting/")} <= set(
            code.code_files([script])
        ), script


@pytest.fixture
def project_copy(tmp_path):
    """The project's code (scripts and package, not tests or data) copied, to be changed without harm."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "lexpilot", copy / "lexpilot", ignore=shutil.ignore_patterns("__pycache__"))
    for script in ROOT.glob("*.py"):
        shutil.copy(script, copy / script.name)
    return copy


@pytest.mark.slow
def test_a_change_to_any_file_a_stage_runs_is_named_and_none_elsewhere(project_copy):
    saved = {"code_files": code.code_digests(project_copy)}
    stages = {script: code.code_files([script], project_copy) for script in STAGE_SCRIPTS}
    for path in sorted({f for files in stages.values() for f in files}):
        original = (project_copy / path).read_bytes()
        (project_copy / path).write_bytes(original + b"\n# one added line\n")
        running = [s for s, files in stages.items() if path in files]
        others = [s for s in stages if s not in running][:2]  # a stage that does not run it goes on
        for script in running + others:
            expected = [f"code: {path} changed since the run started"] if script in running else []
            assert code.CodeNow.read(project_copy).changes(saved, script) == expected, (path, script)
        (project_copy / path).write_bytes(original)
    for path in (project_copy / "lexpilot" / "reporting").rglob("*.py"):  # fixing a table blocks nothing
        path.write_bytes(path.read_bytes() + b"\n# a fix\n")
    assert all(code.CodeNow.read(project_copy).changes(saved, script) == [] for script in STAGE_SCRIPTS)


@pytest.mark.slow
def test_a_changed_protocol_module_stops_a_stage_run_on_a_run_started_before(
    tmp_path, monkeypatch, provider, capsys, project_copy
):
    """The issue's reproduction: a run started (LexAwN_gen.py, eval_DCG.py), then behaviour.py (or the simulator
    audit, or the stage script) changed by one line: the later stage is refused before any call."""
    import audit_simulator
    import eval_LJP_behaviour

    monkeypatch.setattr(code, "PROJECT_ROOT", project_copy)
    h = Harness(tmp_path, provider, monkeypatch)
    assert h.run("LexAwN", "--limit", "2") == 0 and h.run("DCG", "--limit", "2") == 0
    requests = len(provider.requests)
    capsys.readouterr()
    for changed, stage in (
        ("lexpilot/protocols/behaviour.py", eval_LJP_behaviour.STAGE),
        ("eval_LJP_behaviour.py", eval_LJP_behaviour.STAGE),
        ("lexpilot/protocols/audit.py", audit_simulator.STAGE),
    ):
        path = project_copy / changed
        original = path.read_bytes()
        path.write_bytes(original + b"\n# one added line\n")
        assert h.run_stage(stage, "--limit", "2") == 2
        err = capsys.readouterr().err
        assert f"code: {changed} changed since the run started" in err and "--allow-code-change" in err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert len(provider.requests) == requests  # nothing was asked
        path.write_bytes(original)
    (project_copy / "lexpilot/protocols/behaviour.py").write_bytes(
        (project_copy / "lexpilot/protocols/behaviour.py").read_bytes() + b"\n# one added line\n"
    )
    assert h.run_stage(eval_LJP_behaviour.STAGE, "--limit", "2", "--allow-code-change") == 0
    tables = project_copy / "lexpilot/reporting/tables/paper.py"
    tables.write_bytes(tables.read_bytes() + b"\n# a fix to a table\n")
    assert h.run("DCG", "--limit", "2") == 0  # reporting is not a stage's code: the run resumes
    helper = project_copy / "lexpilot/protocols/helper_for_dcg.py"  # a module reached by a relative import
    helper.write_text("X = 1\n", encoding="utf-8")
    dcg = project_copy / "lexpilot/protocols/dcg.py"
    dcg.write_bytes(dcg.read_bytes() + b"\n\ndef later():\n    from .helper_for_dcg import X\n    return X\n")
    assert "lexpilot/protocols/helper_for_dcg.py" in code.code_files(["eval_DCG.py"], project_copy)
