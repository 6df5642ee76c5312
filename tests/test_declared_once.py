"""Each fact written once: the three roles' names in one table (benchmark/vocabulary.py's ROLE_TABLE),
the viewer's record kinds named from the record catalog (reporting/site/parts.py, benchmark/records.py), and
common.py handing on only what a script imports from it."""

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from lexpilot.benchmark import records
from lexpilot.benchmark.records import A1, LCA, RECORD_KINDS, RecordKind
from lexpilot.benchmark.vocabulary import ROLE, ROLE_TABLE, ROLES
from lexpilot.reporting.site import parts
from lexpilot.reporting.site.calls_view import CALLED_KINDS
from lexpilot.reporting.site.case_list import OUTCOME_COLUMNS
from tests.helpers.paths import ROOT

PACKAGE = sorted((ROOT / "lexpilot").rglob("*.py"))
SCRIPTS = sorted(ROOT.glob("*.py"))
SITE = sorted((ROOT / "lexpilot" / "reporting" / "site").glob("*.py"))


def strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of a module but its docstrings (prose may name a flag)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


# --- the roles


def role_spellings() -> set[str]:
    """What names a role apart from its bare name: its variables, its default model, the options of the roles
    with a prefix (the evaluated model's --model, --temperature and --max-tokens are every stage's words too)."""
    words = set()
    for role in ROLE_TABLE:
        words |= {role.env, role.model_variable, *([role.default_model] if role.default_model else [])}
        if role.option:
            words |= {role.flag(setting) for setting in ("model", "temperature", "max-tokens")}
    return words


def spelled_apart(files: list[Path], root: Path = ROOT) -> list[str]:
    """file:line of every string that spells a role's name outside the table, and every tuple of the three."""
    words, found = role_spellings(), []
    for path in files:
        if path == root / "lexpilot" / "benchmark" / "vocabulary.py":
            continue
        where = path.relative_to(root).as_posix()
        found += [
            f"{where}:{line}: {text[:60]!r}" for line, text in strings(path) if any(w in text for w in words)
        ]
        found += [
            f"{where}:{node.lineno}: the three roles by hand"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Tuple)
            and [e.value for e in node.elts if isinstance(e, ast.Constant)] == list(ROLES)
        ]
    return found


def test_the_roles_are_one_table_and_every_name_of_a_role_is_read_from_it():
    assert ROLES == ("eval", "user", "judge") == tuple(ROLE)
    assert [r.flag("model") for r in ROLE_TABLE] == ["--model", "--user-model", "--judge-model"]
    assert [r.key("max-tokens") for r in ROLE_TABLE] == ["max_tokens", "user_max_tokens", "judge_max_tokens"]
    assert [r.model_variable for r in ROLE_TABLE] == [
        "LEXPILOT_MODEL",
        "LEXPILOT_USER_MODEL",
        "LEXPILOT_JUDGE_MODEL",
    ]
    assert spelled_apart(PACKAGE + SCRIPTS) == []


def test_a_role_spelled_outside_the_table_is_found(tmp_path):
    module = tmp_path / "lexpilot" / "copy.py"
    module.parent.mkdir()
    module.write_text(
        'FLAGS = {"user": "--user-model"}\nROLES = ("eval", "user", "judge")\n'
        'def f():\n    """--judge-model in prose is prose"""\n',
        encoding="utf-8",
    )
    assert spelled_apart([module], tmp_path) == [
        "lexpilot/copy.py:1: '--user-model'",
        "lexpilot/copy.py:2: the three roles by hand",
    ]


# --- the viewer's record kinds


def unaccounted(catalog: tuple[RecordKind, ...], shown=None, not_shown=None) -> list[str]:
    """What the viewer's declaration (parts.py) gets wrong against the catalog: a kind neither shown nor said why
    not, one both, a reason left empty, and a kind the viewer names that the catalog lacks."""
    shown = parts.SHOWN if shown is None else shown
    not_shown = parts.NOT_SHOWN if not_shown is None else not_shown
    names = [k.name for k in catalog]
    problems = [
        f"{n}: neither shown nor in NOT_SHOWN"
        for n in names
        if n not in {k.name for k in shown} | set(not_shown)
    ]
    problems += [f"{k.name}: shown and in NOT_SHOWN" for k in shown if k.name in not_shown]
    problems += [f"{n}: NOT_SHOWN without a reason" for n, why in not_shown.items() if not why.strip()]
    problems += [f"{k.name}: shown, not the catalog's" for k in shown if k not in catalog]
    problems += [f"{n}: in NOT_SHOWN, not in the catalog" for n in not_shown if n not in names]
    return problems


def test_every_record_kind_of_the_catalog_is_shown_by_the_viewer_or_said_why_not():
    assert unaccounted(RECORD_KINDS) == []
    assert set(CALLED_KINDS) == {k.name for k in RECORD_KINDS}  # an exact call reports any kind's usage
    assert all(k in RECORD_KINDS for _, _, kinds in OUTCOME_COLUMNS for k in kinds)  # the case list's too


def test_a_kind_the_catalog_gains_or_the_viewer_invents_is_found(monkeypatch):
    """Broken on purpose: a kind added to the catalog alone, and one the viewer shows that the catalog lacks."""
    new = RecordKind("new_stage", "eval_results", "new_stage.jsonl", ("labels",), "eval_new.py")
    monkeypatch.setattr(records, "RECORD_KINDS", (*RECORD_KINDS, new))
    assert unaccounted(records.RECORD_KINDS) == ["new_stage: neither shown nor in NOT_SHOWN"]
    assert unaccounted(RECORD_KINDS, not_shown={"new_stage": "no page yet"}) == [
        "new_stage: in NOT_SHOWN, not in the catalog"
    ]
    renamed = replace(LCA, file="LCA_v2.jsonl")  # equal to no kind of the catalog
    assert unaccounted(RECORD_KINDS, shown=(*parts.SHOWN, renamed)) == ["LCA: shown, not the catalog's"]
    assert unaccounted(RECORD_KINDS, not_shown={"a1": " "}) == [
        "a1: shown and in NOT_SHOWN",
        "a1: NOT_SHOWN without a reason",
    ]


def kinds_named_by_hand(path: Path) -> list[str]:
    """Where a site module names a record kind or file itself instead of reading the catalog: a string used as a
    key of a run's records (r["LCA"], records.get("a1")), a RecordKind made there, a record file's name."""
    holders = {"r", "records", "source", "saved"}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in holders:
            key = node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in holders
            and node.args
        ):
            key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append(f"{path.name}:{node.lineno}: records[{key.value!r}]")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "RecordKind":
            found.append(f"{path.name}:{node.lineno}: a RecordKind of its own")
    found += [f"{path.name}:{line}: {text!r}" for line, text in strings(path) if text.endswith(".jsonl")]
    return sorted(found, key=lambda problem: int(problem.split(":")[1]))


def test_the_viewer_names_no_record_kind_by_hand():
    assert [problem for path in SITE for problem in kinds_named_by_hand(path)] == []


def test_kinds_named_by_hand_are_found(tmp_path):
    module = tmp_path / "copy.py"
    module.write_text(
        'a = r["LCA"].get(number)\nb = records.get("a1", {})\nc = RecordKind("x", "t", "x.jsonl", (), "s")\n',
        encoding="utf-8",
    )
    assert kinds_named_by_hand(module) == [
        "copy.py:1: records['LCA']",
        "copy.py:2: records['a1']",
        "copy.py:3: a RecordKind of its own",
        "copy.py:3: 'x.jsonl'",
    ]


def test_a_part_reads_only_the_kinds_it_declares():
    run = {k.name: {} for k in RECORD_KINDS} | {A1.name: {"1": {"responses": {}}}}
    lexawn = parts.part_records(run, "lexawn")
    assert lexawn == {A1.name: {"1": {"responses": {}}}, LCA.name: {}}
    assert parts.part_records({}, "lexawn") == {A1.name: {}, LCA.name: {}}  # a run without the stage
    for read in (lambda: lexawn["DCG"], lambda: lexawn.get("DCG", {})):
        with pytest.raises(KeyError, match="'DCG': a record kind this part does not declare"):
            read()
    assert [p.title for p in parts.PARTS.values()][:2] == ["LexAwN and LCA", "DCG"]


# --- common.py


def imported_from_common(files: list[Path]) -> set[str]:
    return {
        alias.name
        for path in files
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == "common"
        for alias in node.names
    }


def test_common_hands_on_only_what_a_script_imports_from_it():
    """common.py is the stage scripts' face of the package: a name it hands on that no script imports is a second
    way in to keep (tests and the package import the package itself)."""
    import common

    scripts = [p for p in SCRIPTS if p.name != "common.py"]
    assert set(common.__all__) == imported_from_common(scripts) == {"stage_main", "STOPPED"}
    assert imported_from_common(
        PACKAGE + sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))
    ) <= set(common.__all__)


def test_the_grid_quote_is_printed_by_one_package_function():
    """quote_grid.py and run_grid.py --dry-run print the quote through reporting/tables/quote_tables.py's
    `print_quote` (of running/grid/quote.py's `grid_quote`), and start from one parser (`grid_parser`): neither
    renders or parses it its own way."""
    for script in ("quote_grid.py", "run_grid.py"):
        tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
        called = [
            n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        ]
        assert called.count("print_quote") == 1 and called.count("grid_quote") == 1, script
        assert called.count("grid_parser") == 1 and "OneLineParser" not in called, script
        assert not {"quote_text", "quote_tables", "quote_notes"} & set(called), script
