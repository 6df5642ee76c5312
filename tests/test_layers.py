"""The package's layers, as docs/architecture.md draws them, checked on the import statements (stdlib ast, every
import anywhere in a file, lazy ones inside functions included):

- reporting never imports model calls, the protocols or the runner: printing a table never loads the HTTP client;
- storage never imports model calls;
- protocol modules never import reporting or the runner;
- in the runner, batch mode (running/batch) never imports the grid (running/grid), nor does the stage at its root;
- no module of the package imports a module at the top of the checkout: an entry point, common.py or categories.py,
  which only hand the package on (the package stands alone); no entry point imports another.
"""

import ast
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from lexpilot.storage.code import imported_modules
from tests.helpers.paths import ROOT

# Each part of the package and the parts it may import (its own included). The foundation is the package's root
# modules and the benchmark's vocabulary and data; everything may import it.
FOUNDATION = {
    "errors",
    "paths",
    "files",
    "pricing",
    "spending",
    "windows",
    "settings",
    "options",
    "text",
    "benchmark",
}
MAY_IMPORT = {
    "foundation": {"foundation"},
    "models": {"foundation", "models"},
    "storage": {"foundation", "storage"},
    "protocols": {"foundation", "models", "storage", "protocols"},
    # running/ in rooms: the stage and its state at its root, batch mode in running/batch, the grid in running/grid;
    # the grid runs stages and batches, never the other way round
    "running": {"foundation", "models", "storage", "protocols", "running", "running/batch"},
    "running/batch": {"foundation", "models", "storage", "protocols", "running", "running/batch"},
    "running/grid": {
        "foundation",
        "models",
        "storage",
        "protocols",
        "running",
        "running/batch",
        "running/grid",
    },
    "reporting": {"foundation", "storage", "reporting"},
    "scripted": {"foundation", "scripted"},  # the scripted provider: no other part imports it
}
TOP_LEVEL_MODULES = {"categories"}  # the 36 causes of action's face at the top, as the design card names it


def part(module: str) -> str:
    """'lexpilot.models.calls' -> 'models'; a module at the package's root, or in benchmark/, -> 'foundation';
    'lexpilot.running.grid.cells' -> 'running/grid' (running's rooms are parts of their own)."""
    names = module.split(".")
    name = names[1] if len(names) >= 2 else ""
    if name == "running" and len(names) >= 3 and names[2] in ("batch", "grid"):
        return f"running/{names[2]}"
    return "foundation" if name in FOUNDATION or name in ("", "__init__") else name


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) of every import, relative ones made absolute (the code hash reads imports the same way)."""
    return imported_modules(path, root)


def module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


PACKAGE = sorted((ROOT / "lexpilot").rglob("*.py"))
ENTRY_POINTS = sorted(p.stem for p in ROOT.glob("*.py"))


def layer_violations(files: list[Path], root: Path = ROOT) -> list[str]:
    """One line per forbidden import: file:line, what it imports, which rule it breaks."""
    problems = {}
    for path in files:
        here = part(module_name(path, root))
        for line, target in imports(path, root):
            where = f"{path.relative_to(root)}:{line} imports {target.split('.')[0]}"
            top = target.split(".")[0]
            if top in ENTRY_POINTS:
                problems.setdefault((where, top), f"{where}: an entry point (or common.py, categories.py)")
            elif top == "lexpilot" and target.count(".") >= 1 and part(target) not in MAY_IMPORT[here]:
                problems.setdefault(
                    (where, part(target)),
                    f"{where}.{target.split('.', 1)[1]}: {here} may not import {part(target)}",
                )
    return list(problems.values())


def test_every_file_of_the_package_has_a_part():
    assert {part(module_name(p)) for p in PACKAGE} == set(MAY_IMPORT)


def test_the_package_keeps_its_layers():
    assert layer_violations(PACKAGE) == []


def test_an_entry_point_never_imports_another():
    problems = [
        f"{p.name}:{line} imports {target}"
        for p in ROOT.glob("*.py")
        for line, target in imports(p)
        if target.split(".")[0] in ENTRY_POINTS and target.split(".")[0] not in TOP_LEVEL_MODULES | {"common"}
    ]
    assert problems == []


@pytest.mark.parametrize(
    "module, line, expected",
    [
        (
            "lexpilot/reporting/tables/paper.py",
            "from lexpilot.models.calls import ModelCaller",
            "reporting may not import models",
        ),
        (
            "lexpilot/reporting/tables/paper.py",
            "from lexpilot.protocols import rejudging",
            "reporting may not import protocols",
        ),
        ("lexpilot/storage/checkpoints.py", "import lexpilot.models.calls", "storage may not import models"),
        (
            "lexpilot/protocols/dcg.py",
            "from lexpilot.reporting.scoring.results import load_runs",
            "protocols may not import reporting",
        ),
        ("lexpilot/benchmark/records.py", "from common import stage_main", "an entry point (or common.py"),
        (
            "lexpilot/protocols/ljp.py",
            "    import show_results  # lazily, inside a function",
            "an entry point",
        ),
        (
            "lexpilot/reporting/scoring/groups.py",
            "from categories import CLASS_LABELS",
            "an entry point (or common.py, categories",
        ),
        (
            "lexpilot/reporting/tables/paper.py",
            "from ...models import calls",
            "reporting may not import models",
        ),
        (
            "lexpilot/reporting/tables/paper.py",
            "from lexpilot import protocols",
            "reporting may not import protocols",
        ),
        (
            "lexpilot/storage/code.py",
            "    from ..models.calls import ModelCaller",
            "storage may not import models",
        ),
        (
            "lexpilot/running/batch/cycles.py",
            "from lexpilot.running.grid.pool import BatchPool",
            "running/batch may not import running/grid",
        ),
        (
            "lexpilot/running/stage.py",
            "    from lexpilot.running.grid.cells import Cell",
            "running may not import running/grid",
        ),
        (
            "lexpilot/running/batch/replay.py",
            "from ..grid import chain",
            "running/batch may not import running/grid",
        ),
    ],
)
def test_a_forbidden_import_is_found(tmp_path, module, line, expected):
    """Each rule, broken once on a copy of the module, is reported with the file and line."""
    copy = ROOT / module
    broken = tmp_path / "lexpilot" / Path(module).relative_to("lexpilot")
    broken.parent.mkdir(parents=True)
    body = "def later():\n" + line + "\n" if line.startswith(" ") else line + "\n"
    broken.write_text(copy.read_text(encoding="utf-8") + "\n" + body, encoding="utf-8")
    problems = layer_violations([broken], tmp_path)
    assert len(problems) == 1 and expected in problems[0] and module in problems[0]


def test_the_root_holds_the_entry_points_common_categories_folders_and_project_files():
    """The listing says what can be run; the shared code is in lexpilot/."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {path.split("/")[0] + ("/" if "/" in path else "") for path in tracked}
    files = {t for t in top if not t.endswith("/") and not t.startswith(".")}
    scripts = {f for f in files if f.endswith(".py")} - {"common.py", "categories.py"}
    assert scripts and all(importlib.util.find_spec(s[:-3]) for s in scripts)
    assert all(
        "def main" in (ROOT / s).read_text(encoding="utf-8")
        or "stage_main" in (ROOT / s).read_text(encoding="utf-8")
        for s in scripts  # every other .py at the top is an entry point
    )
    assert files - scripts == {
        "common.py",
        "categories.py",
        "README.md",
        "pytest.ini",
        "requirements.txt",
        "requirements-dev.txt",
        "requirements-optional.txt",
        "pyproject.toml",
    }
    assert {t for t in top if t.endswith("/") and not t.startswith(".")} == {
        "bench/",
        "data/",
        "docs/",
        "lexpilot/",
        "prompts/",
        "tests/",
    }


def test_every_output_folder_and_file_is_ignored_by_git_and_listed_in_the_readme():
    """`.gitignore` and the README's output tree list every stage's output folder."""
    from lexpilot.benchmark.records import RECORD_KINDS

    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tree = readme[readme.index("## Outputs and resuming") : readme.index("Each record is one JSON line")]
    for kind in RECORD_KINDS:
        assert f"/{kind.top}/" in ignored, kind.top
        assert f"{kind.top}/<run-id>/<model>/" in tree and kind.file in tree, (kind.top, kind.file)
    assert "/runs/" in ignored


def help_texts(path: Path) -> list[str]:
    """What --help prints from a file: its module docstring (an entry point's description) and every `help=`,
    `description=` and `epilog=` text given to argparse."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    texts = [ast.get_docstring(tree) or ""] if path.parent == ROOT else []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("help", "description", "epilog"):
            texts += [
                part.value
                for part in ast.walk(node.value)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            ]
    return texts


def test_no_help_text_names_an_issue():
    """ "`--help` texts name no issue" (a reader of --help has never seen the tracker)."""
    import re

    files = [*ROOT.glob("*.py"), *(ROOT / "lexpilot").rglob("*.py")]
    found = [(p.name, t) for p in files for t in help_texts(p) if re.search(r"\bissues? \d|#\d|\(issue\b", t)]
    assert not found


def test_the_entry_points_that_take_a_user_condition_are_declared_as_the_stages_say():
    """vocabulary.CONDITION_SCRIPTS names them for the runner's messages (without importing every protocol into each
    stage's code hash); it must be what the catalog's stages declare."""
    from lexpilot.benchmark.vocabulary import CONDITION_SCRIPTS
    from lexpilot.protocols.catalog import GRID_STAGES

    declared = {s.script for stages in GRID_STAGES.values() for s in stages if s.user_condition}
    assert set(CONDITION_SCRIPTS) == declared and len(CONDITION_SCRIPTS) == len(declared)


def test_the_readme_is_a_short_front_page():
    """ "The README is at most 220 lines; the rest goes in docs/" — and every docs/ page it links
    is there."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 220
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    assert "docs/troubleshooting.md" in linked and all((ROOT / link).is_file() for link in linked), linked


def test_the_tree_passes_the_linter():
    """`ruff check` (pyflakes, isort, bugbear; pyproject.toml) over the whole tree, in CI too."""
    import shutil
    import subprocess
    import sys

    if (
        shutil.which("ruff") is None
        and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode
    ):
        pytest.skip("ruff is not installed (requirements-dev.txt pins it)")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_tree_is_formatted():
    """ "Use `ruff` ... `ruff format` at a line length of 100 or 110" (110: pyproject.toml), checked
    in CI before the tests (`ruff format --check`)."""
    import subprocess
    import sys

    if subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode:
        pytest.skip("ruff is not installed (requirements-dev.txt pins it)")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]


def functions_over(limit: int, root: Path) -> list[str]:
    """Each function (or method) of the Python files under `root` (hidden folders aside) longer than `limit`
    lines, its decorators aside."""
    import ast

    found = []
    for path in (
        p for p in root.rglob("*.py") if not any(x.startswith(".") for x in p.relative_to(root).parts)
    ):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            length = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and length > limit:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return found


@pytest.mark.slow
def test_no_function_is_over_60_lines(tmp_path):
    """The guide's habit: "plain functions, small dataclasses; no function over ~60 lines", as formatted."""
    assert functions_over(60, ROOT) == []
    (tmp_path / "sixty.py").write_text("def f():\n" + "    x = 1\n" * 59, encoding="utf-8")
    assert functions_over(60, tmp_path) == []
    (tmp_path / "sixty_one.py").write_text(
        "class C:\n    def g(self):\n" + "        x = 1\n" * 60, encoding="utf-8"
    )
    assert functions_over(60, tmp_path) == ["sixty_one.py:2 g: 61 lines"]


def always_true_asserts(root: Path) -> list[str]:
    """Asserts that cannot fail, or whose part cannot: a non-empty tuple (`assert (x, "why")`), or an `or` or an `and`
    with a non-empty string among its operands (`assert x == y or "why"`, `assert x and "why"`, meant as
    `assert x == y, "why"`: the `and` checks only x, the string is always true)."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Assert):
                continue
            operands = [v for op in ast.walk(node.test) if isinstance(op, ast.BoolOp) for v in op.values]
            if (isinstance(node.test, ast.Tuple) and node.test.elts) or any(
                isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value for v in operands
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_assert_of_the_tests_is_always_true(tmp_path):
    """No assert of the tests is always true, as one whose second half is a bare string is; the check itself finds
    each such form."""
    assert always_true_asserts(ROOT / "tests") == []
    (tmp_path / "t.py").write_text(
        'assert x or "why"\nassert (x, "why")\nassert x, "why"\nassert x and "why"\n', encoding="utf-8"
    )
    assert always_true_asserts(tmp_path) == ["t.py:1", "t.py:2", "t.py:4"]


def test_the_report_scripts_declare_their_run_options_once_and_show_results_is_short():
    """ "show_results.py ... becomes a short entry point, like the stage scripts; the report's
    assembly lives in the package. The report scripts' shared flags (--output-root, --dataset, --model, --run-id,
    hand-declared in three scripts) get one declaration" (reporting/scoring/results.py's add_run_options)."""
    scripts = ("show_results.py", "judge_agreement.py", "user_probes.py")
    declared = [
        f"{s}: {flag}"
        for s in scripts
        for flag in ("--output-root", "--dataset", "--model", "--run-id")
        # formatted, a call's arguments may start on the next line
        if re.search(rf'add_argument\(\s*"{flag}"', (ROOT / s).read_text(encoding="utf-8"))
        and not (s == "user_probes.py" and flag == "--dataset")  # its template's own dataset to sample
    ]
    assert declared == [] and all(
        "add_run_options(" in (ROOT / s).read_text(encoding="utf-8") for s in scripts
    )
    assert len((ROOT / "show_results.py").read_text(encoding="utf-8").splitlines()) <= 100


# the steps of a batch cycle (running/batch/cycles.py): a loop that takes a stage through them, waiting between its
# looks at the batches in flight (`poll_wait`), is a cycle loop
CYCLE_STEPS = {"collect_own", "collect", "gather", "cycle_requests"}


def cycle_loops(files: list[Path], root: Path = ROOT) -> list[str]:
    """The functions with a `while` loop that takes a stage through a batch cycle's steps (called, or handed to a
    turn) and waits for its batches."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                loops = [w for w in ast.walk(node) if isinstance(w, ast.While)]
                names = {n.id for w in loops for n in ast.walk(w) if isinstance(n, ast.Name)}
                if names & CYCLE_STEPS and "poll_wait" in names:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return found


def test_one_batch_cycle_loop_runs_a_stage_script_and_the_grid_alike():
    """A stage script's --batch is a chain of one stage, run by the loop the grid's chains use: one def of a cycle
    loop in lexpilot/running."""
    loops = cycle_loops(sorted((ROOT / "lexpilot" / "running").rglob("*.py")))
    assert [f"{where.split(':')[0]} {name}" for where, name in (f.split(" ") for f in loops)] == [
        "lexpilot/running/batch/chain.py _cycles"
    ]


def test_a_second_cycle_loop_is_found(tmp_path):
    """The rule, broken once: a stage's own loop over the steps beside the chain's."""
    broken = tmp_path / "cycles.py"
    broken.write_text(
        (ROOT / "lexpilot/running/batch/cycles.py").read_text(encoding="utf-8")
        + "\n\ndef own_loop(run):\n    while collect_own(run):\n        time.sleep(poll_wait(1, 0))\n",
        encoding="utf-8",
    )
    assert [f.split(" ")[1] for f in cycle_loops([broken], tmp_path)] == ["own_loop"]
