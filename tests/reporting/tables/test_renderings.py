"""The terminal and CSV renderings: text aligned by display width (a Chinese character
takes two cells), wide tables cut into column blocks, tables chosen by identity, numbers as numbers in CSV; on
runs the stage scripts wrote."""

import csv
import io
import json
import re
import statistics
import unicodedata
from collections import Counter

import pytest

import eval_LJP_behaviour
import show_results
from lexpilot.reporting.tables.renderings import render_text
from lexpilot.reporting.tables.table import Table
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT
from tests.helpers.stages import Harness


def cells(line: str) -> str:
    """The line as the terminal shows it: a wide character as two cells."""
    return "".join(c * (2 if unicodedata.east_asian_width(c) in "WF" else 1) for c in line)


def aligned(block: list[str]) -> bool:
    """Every column of every row starts where the separator's dashes start."""
    starts = [m.start() for m in re.finditer(r"-+", block[1])]
    for line in [block[0]] + block[2:]:
        shown = cells(line)
        # rstripped: empty last cells
        if any(0 < s < len(shown) and shown[s - 2 : s] != "  " for s in starts):
            return False
    return True


@pytest.fixture
def dcg_root(tmp_path, provider, monkeypatch):
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "six.json", sample_cases()[:6]))
    assert h.run("LexAwN") == 0 and h.run("DCG") == 0  # Figure 3 is per cause of action: LCA and DCG
    return h.root


def test_text_columns_align_by_display_width_after_chinese_cells(dcg_root, capsys):
    capsys.readouterr()
    assert (
        show_results.main(
            ["--output-root", str(dcg_root), "--table", "figure_3", "--complexity", str(complexity(dcg_root))]
        )
        == 0
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("Case complexity (Figure 3)")
    table = lines[1 : lines.index("")]
    # causes are in Chinese
    assert any(unicodedata.east_asian_width(c) == "W" for line in table for c in line)
    assert aligned(table)
    assert "Main results" not in out  # only the tables asked for


def complexity(root):
    """Figure 3's complexity file for the six cases' causes of action."""
    causes = sorted({c["cause_of_action"] for c in sample_cases()[:6]})
    path = root.parent / "complexity.csv"
    path.write_text(
        "cause_of_action,complexity\n" + "".join(f"{c},{i + 1}\n" for i, c in enumerate(causes)),
        encoding="utf-8",
    )
    return path


def test_a_wide_table_is_cut_into_column_blocks_that_repeat_the_row_labels():
    table = Table(
        "wide", "Wide", ["Model"] + [f"指标{i}" for i in range(10)], [["模型甲"] + ["0.1234 ± 0.0100"] * 10]
    )
    lines = render_text([table], limit=80).splitlines()
    blocks = [i for i, line in enumerate(lines) if re.fullmatch(r"\(\d/\d\)", line)]
    assert len(blocks) == 3 and all(len(cells(line)) <= 80 for line in lines[1:])
    assert all(lines[i + 3].startswith("模型甲") for i in blocks)  # each block with the row labels again
    assert sum(line.count("0.1234") for line in lines) == 10
    assert render_text([table], limit=10**9).count("(1/") == 0


def test_an_unknown_table_name_is_one_line(dcg_root, capsys):
    assert show_results.main(["--output-root", str(dcg_root), "--table", "nope"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the runs' own notes (tasks not run)
    assert last.startswith("show_results: --table nope: no such table") and "main" in last
    # a table an option makes says which ("--table pairs without --rank" said only "no such")
    assert show_results.main(["--output-root", str(dcg_root), "--table", "pairs", "power", "nope"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith("; pairs comes with --rank; power comes with --power")
    assert show_results.main(["--output-root", str(dcg_root), "--table", "pairs", "--rank"]) == 0


def test_two_names_sharing_a_json_key_are_one_line_not_a_merged_number():
    from lexpilot.errors import HarnessError
    from lexpilot.reporting.tables.renderings import json_keyed

    assert json_keyed([("T4 targeted", 1), ("T4 cases", 2)]) == {"table_4_targeted": 1, "table_4_cases": 2}
    with pytest.raises(HarnessError, match="two metric names would share the key 'table_4_targeted'"):
        json_keyed([("T4 targeted", 1), ("T4_targeted", 2)])


def test_a_run_with_no_complete_task_is_one_line_and_its_spending_still_counts(
    tmp_path, provider, monkeypatch, capsys
):
    """A smoke run that failed is one line in the runs table with why, not a row of n/a in every
    table and a stderr line per missing file; what it spent is in the usage."""
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    assert h.run("gold") == 0
    h.run_id = "smoke"
    provider.script = lambda kind, prompt, body: {"status": 400} if kind == "ljp_judge" else None
    assert h.run("gold", "--limit", "1") == 2  # its extraction refused: no task complete
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--usage", "--width", "0"]) == 0
    captured = capsys.readouterr()
    smoke = [line for line in captured.err.splitlines() if "run smoke" in line]
    assert len(smoke) == 1 and "not reported, no task complete" in smoke[0]
    runs_table = captured.out[captured.out.index("Runs\n") :].split("\n\n")[0]
    assert any(
        line.startswith("eval-model") and "not reported" in line and "smoke" in line
        for line in runs_table.splitlines()
    )
    main = captured.out[captured.out.index("Main results") :].split("\n\n")[0].splitlines()
    assert len(main) == 4  # title, header, rule and r1's row: no row of n/a for the smoke run
    usage = captured.out[captured.out.index("Token usage per run") :].split("\n\n")[0]
    assert "smoke" in usage  # its calls were paid for


def test_a_text_cell_in_a_column_of_numbers_keeps_its_text_in_csv():
    from lexpilot.reporting.tables.renderings import render_csv
    from lexpilot.reporting.tables.table import Figure

    table = Table(
        "t", "T", ["Model", "QWK"], [["m", Figure("0.5", {"mean": 0.5, "n": 2})], ["Average", "0.500 (2)"]]
    )
    rows = [line.split(",") for line in render_csv([table]).splitlines()]
    assert rows[1][2:4] == ["QWK mean", "QWK n"]
    assert rows[2][2:4] == ["0.5", "2"] and rows[3][2:4] == ["0.500 (2)", ""]


def test_a_long_title_is_wrapped_within_the_width():
    title = "Every comparable pair: difference of means, 95% paired bootstrap interval over cases, " * 3
    lines = render_text([Table("t", title, ["Model", "QWK"], [["m", "0.5"]])], limit=80).splitlines()
    title_lines = lines[: lines.index("Model  QWK")]
    assert len(title_lines) > 1 and all(len(line) <= 80 for line in title_lines)
    assert " ".join(title_lines) == title.strip()


def lca_macro_f1(path) -> tuple[float, float]:
    """By hand from a run's LCA records: (Macro-F1, Acc_C), the underspecified history the positive class."""
    tp = fp = fn = tn = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        for judged in json.loads(line)["judgments"].values():
            truth, said = (
                judged["true_type"] == "underspecified",
                judged["predicted_type"] == "underspecified",
            )
            tp, fp, fn, tn = (
                tp + (truth and said),
                fp + (said and not truth),
                fn + (truth and not said),
                tn + (not truth and not said),
            )
    f1_u = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    f1_c = 2 * tn / (2 * tn + fp + fn) if tn + fp + fn else 0.0
    return (f1_u + f1_c) / 2, tn / (tn + fp)


@pytest.mark.slow
def test_each_table_prints_at_its_paper_tables_precision_on_runs_the_stages_wrote(
    tmp_path, provider, monkeypatch, capsys
):
    """ "A table's precision is its paper table's". The paper prints Table 11 at 3 decimals
    (`$0.640\\pm 0.011$`) and Tables 2, 14, 16 and 17 at 4 (Table 14: "LawLLM-7B 0.4186 0.5278 0.3218"); the
    Overall column of a by-class table is the main table's mean at 4 decimals; --decimals N redraws every metric
    at N in the text formats, and the CSV keeps every digit."""
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "six.json", sample_cases()[:6]))
    for run_id in ("r1", "r2"):
        h.run_id = run_id  # in r2 the judge finds no DCG question on target and labels every reply 策略二
        provider.script = (
            (lambda kind, prompt, body: {"dcg_judge": "否", "lca_judge": "策略二"}.get(kind))
            if run_id == "r2"
            else None
        )
        for stage in ("LexAwN", "DCG", "direct", "gold"):
            assert h.run(stage) == 0
    success = [
        [bool(json.loads(line)["success"]) for line in path.read_text(encoding="utf-8").splitlines()]
        for path in sorted(h.root.glob("eval_results/r*/*/DCG_results.jsonl"))
    ]
    accuracy = [sum(s) / len(s) for s in success]  # by hand: each run's share of cases with a successful DCG
    lca = [lca_macro_f1(path) for path in sorted(h.root.glob("eval_results/r*/*/LCA_results.jsonl"))]
    f1, acc_c = [x[0] for x in lca], [x[1] for x in lca]
    assert statistics.stdev(accuracy) > 0 and statistics.stdev(f1) > 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--format", "markdown"]) == 0
    tables = markdown_tables(capsys.readouterr().out)
    main = dict(zip(*next(t for name, t in tables.items() if name.startswith("Main results"))))
    at = lambda values, d: f"{statistics.mean(values):.{d}f} ± {statistics.stdev(values):.{d}f}"  # noqa: E731
    assert main["DCG Acc."] == at(accuracy, 3) and main["LCA Macro-F1"] == at(f1, 3)  # Table 11
    detail = dict(zip(*next(t for name, t in tables.items() if name.startswith("LCA detail (Table 14)"))))
    assert detail["Macro-F1"] == at(f1, 4) and detail["Acc_C"] == at(acc_c, 4)  # Table 14
    for title, values in (("LCA Macro-F1 by class", f1), ("DCG accuracy by class", accuracy)):  # Table 2
        header, row = next(t for name, t in tables.items() if name.startswith(title))
        assert row[header.index("Overall")] == at(values, 4), title
    for title in ("LJP Direct QWK by class", "LJP Gold-Standard QWK"):  # Tables 16-17 and Direct beside them
        header, row = next(t for name, t in tables.items() if name.startswith(title))
        assert re.fullmatch(r"-?\d\.\d{4} ± \d\.\d{4}|undefined|n/a", row[header.index("Overall")]), title
    for decimals in ("3", "5"):
        assert (
            show_results.main(["--output-root", str(h.root), "--format", "markdown", "--decimals", decimals])
            == 0
        )
        tables = markdown_tables(capsys.readouterr().out)
        header, row = next(t for name, t in tables.items() if name.startswith("DCG accuracy by class"))
        main = dict(zip(*next(t for name, t in tables.items() if name.startswith("Main results"))))
        assert row[header.index("Overall")] == main["DCG Acc."] == at(accuracy, int(decimals))
    assert show_results.main(["--output-root", str(h.root), "--format", "csv", "--table", "main"]) == 0
    # every digit
    header, row = [r for r in csv.reader(io.StringIO(capsys.readouterr().out)) if len(r) > 2][1:3]
    main = dict(zip(header[2:], row[2:]))
    assert float(main["DCG Acc. mean"]) == pytest.approx(statistics.mean(accuracy), abs=1e-6)
    assert float(main["DCG Acc. SD"]) == pytest.approx(statistics.stdev(accuracy), abs=1e-6)
    # runs with a value; no interval without --ci
    assert main["DCG Acc. n"] == "2" and main["DCG Acc. low"] == ""


def test_every_table_of_a_report_is_declared_with_its_paper_table():
    """ "Keep one declared rule ... with the paper's table named beside each identity": every identity the code
    builds is declared by its builder and in the catalog (reporting/catalog.py), with a paper table (or "the
    harness's") and decimals of 2 to 4, or 1 for a table of rates in percent (Tables 6 and 13, as the paper prints
    them)."""
    from lexpilot.reporting.catalog import KINDS

    PAPER_TABLES = {kind.id: (kind.paper, kind.decimals) for kind in KINDS.values()}

    source = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "lexpilot" / "reporting").rglob("*.py"))
    built = set(re.findall(r'Table\(\s*"([a-z0-9_]+)"', source)) | set(
        re.findall(r'"(table_4[a-z_]*)"', source)
    )
    built |= {
        f"{kind}_{h}" for kind in ("plain_types", "plain_by_class") for h in ("underspecified", "complete")
    }
    built |= {
        "figure_4a",
        "figure_4b",
        "ljp_direct_by_class",
        "ljp_interaction_by_class",
        "ljp_gold_by_class",
    }
    assert not built - set(PAPER_TABLES), built - set(PAPER_TABLES)
    assert all(
        name.startswith(("Table", "nearest", "Figure", "the harness")) and 1 <= d <= 4
        for name, d in PAPER_TABLES.values()
    )
    assert {t for t, (_, d) in PAPER_TABLES.items() if d == 1} == {
        "plain_types_underspecified",
        "plain_types_complete",
        "audit_rates",
    }
    docs = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for table_id, (name, decimals) in PAPER_TABLES.items():  # the docs list the rule as declared
        assert f"| `{table_id}` | {name} | {decimals} |" in docs, table_id


def test_a_table_its_builder_does_not_declare_is_refused_and_a_declared_one_carries_its_decimals():
    """ "A new table is registered in one place": its builder declares its kind (`declares`), and
    the catalog lists the builder; a table the builder makes without declaring it cannot reach a report."""
    from lexpilot.reporting import catalog
    from lexpilot.reporting.tables.table import Kind, Table, declares

    @declares(Kind("declared", "Table 2", 4))
    def tables(table_id: str) -> list[Table]:
        return [Table(table_id, "A table", ["Model"], [["m"]])]

    assert tables("declared")[0].decimals == 4
    with pytest.raises(TypeError, match="made table 'undeclared', which it does not declare"):
        tables("undeclared")
    listed = [k.id for entry in catalog.REPORT for k in entry.kinds]
    assert len(listed) == len(set(listed)) and set(listed) <= set(catalog.KINDS)  # each identity once
    assert catalog.KINDS["lca_detail"].decimals == 4 and catalog.TABLE_OPTIONS["power"] == "--power"


def markdown_tables(out: str) -> dict[str, tuple[list[str], list[str]]]:
    """title -> (header, first row) of every table of a --format markdown report."""
    tables, title = {}, None
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("### ") or line.startswith("## "):
            title = line.lstrip("# ").strip()
        elif line.startswith("|") and title and title not in tables and i + 2 < len(lines):
            split = lambda text: [c.strip() for c in text.strip().strip("|").split("|")]  # noqa: E731
            tables[title] = (split(line), split(lines[i + 2]))
    return tables


def test_csv_gives_each_part_of_a_whole_its_own_number_on_runs_the_stages_wrote(
    tmp_path, provider, monkeypatch, capsys
):
    """ "Numbers as numbers". The stop-reason shares ("0.500 / 0.000 / …"), Table 4's cases
    accepted at each attempt ("5 / 0 / 0 / 0 / 0") and its count of unresolved cases are one number per CSV
    column, each checked against the records by hand."""
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "six.json", sample_cases()[:6]))
    for stage in ("LexAwN", "direct", "interaction"):
        assert h.run(stage) == 0
    assert h.run_stage(eval_LJP_behaviour.STAGE) == 0
    capsys.readouterr()
    assert (
        show_results.main(
            [
                "--output-root",
                str(h.root),
                "--format",
                "csv",
                "--table",
                "stop_by_class",
                "table_4_attempts",
                "table_4",
            ]
        )
        == 0
    )
    sheet = csv_sheet(capsys.readouterr().out)
    interactions = h.records("AwN_gen", "interaction.jsonl")
    stops = Counter(
        "budget" if r["stop_reason"] != "judged" else f"round {len(r['rounds'])}" for r in interactions
    )
    (stop,) = sheet["Stop reasons by class"]
    for category in ("round 1", "round 2", "round 3", "budget"):
        assert float(stop[f"Overall {category}"]) == pytest.approx(
            stops[category] / len(interactions),
            abs=1e-6,  # CSV: 6 decimals
        )
    for condition, name in (("targeted", "Targeted"), ("off_target", "Off-target")):
        dialogues = h.records("Behaviour_gen", f"dialogues_{condition}.jsonl")
        at = Counter(len(d["attempts"]) for d in dialogues if d["status"] == "accepted")
        row = next(r for r in sheet["Table 4 dialogues"] if r["Condition"] == name)
        assert [float(row[f"Accepted at attempt {k}"]) for k in range(1, 6)] == [at[k] for k in range(1, 6)]
        unresolved = sum(d["status"] == "unresolved" for d in dialogues)
        assert float(row["Unresolved"]) == unresolved
        (qwk,) = sheet["Interaction behaviour and LJP"]
        assert float(qwk[f"Cases (unresolved T / O) unresolved {name.lower()}"]) == unresolved
    assert float(qwk["Cases (unresolved T / O) all"]) == len(interactions) == 6
    check_the_interaction_gain_is_the_difference_of_the_means(h.root, capsys)


def csv_sheet(out: str) -> dict[str, list[dict]]:
    """show_results' CSV as table title (before any colon or parenthesis) -> its rows, each header -> value (the
    row's part under "")."""
    sheet, header = {}, []
    for row in list(csv.reader(io.StringIO(out)))[1:]:
        if len(row) < 2:
            continue
        if row[1] == "header":
            header = row[2:]
        else:
            sheet.setdefault(row[0].split(":")[0].split(" (")[0], []).append(
                dict(zip(header, row[2:])) | {"": row[1]}
            )
    return sheet


def check_the_interaction_gain_is_the_difference_of_the_means(root, capsys) -> None:
    """The Interaction gain: the difference of the two QWK means, every digit (the text rounds it)."""
    assert show_results.main(["--output-root", str(root), "--format", "json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["groups"][0]["metrics"]
    assert (
        show_results.main(["--output-root", str(root), "--format", "csv", "--table", "interaction_gain"]) == 0
    )
    header, row = [r for r in csv.reader(io.StringIO(capsys.readouterr().out)) if len(r) > 2][1:3]
    gain = (
        metrics["ljp_interaction"]["qwk"]["overall"]["mean"] - metrics["ljp_direct"]["qwk"]["overall"]["mean"]
    )
    assert float(dict(zip(header, row))["Interaction − Direct value"]) == pytest.approx(gain, abs=1e-6)


def test_decimals_are_declared_once():
    """No table states its own decimals: they come from reporting/tables/table.py (money aside, usage.py's own
    format): no format spec of fixed decimals, and no `cell(…, N)` with a number of digits (read from the syntax
    tree: a formatted call spreads its arguments over lines)."""
    import ast

    spec = re.compile(r":[+,]?\.[1-9]f\}")
    found = []
    for path in sorted((ROOT / "lexpilot" / "reporting").rglob("*.py")):
        if path.name == "usage.py":
            continue
        text = path.read_text(encoding="utf-8")
        found += [
            f"{path.name}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1)
            if spec.search(line)
        ]
        found += [
            f"{path.name}:{node.lineno}: cell(…, {node.args[1].value})"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "cell"
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, int)
        ]
    assert not found, found


def test_a_negative_width_is_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        show_results.main(["--width", "-3"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --width: -3 is outside 0 to" in err and "Traceback" not in err


def test_json_carries_the_tables_table_names(dcg_root, capsys):
    capsys.readouterr()
    assert (
        show_results.main(["--output-root", str(dcg_root), "--format", "json", "--table", "dcg_by_class"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    (table,) = out["tables"]
    assert table["id"] == "dcg_by_class" and table["headers"][-1] == "Overall" and out["groups"]


def test_a_group_shown_alone_keeps_its_name_and_its_link(tmp_path, provider, monkeypatch, capsys):
    """A table that shows a few groups (Figure 4: only the runs with focal types) names each as every table does:
    a model's second group, at another temperature, is not called by the model's name (its link opened the first
    group's cases)."""
    import eval_focal_types

    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4]))
    assert h.run("LexAwN") == 0 and h.run("DCG") == 0
    h.run_id = "r2"
    assert h.run("LexAwN", "--temperature", "0.2") == 0 and h.run("DCG", "--temperature", "0.2") == 0
    assert h.run_stage(eval_focal_types.STAGE, "--temperature", "0.2") == 0
    capsys.readouterr()
    assert (
        show_results.main(
            [
                "--output-root",
                str(h.root),
                "--format",
                "json",
                "--table",
                "runs",
                "figure_4a",
                "--html",
                str(tmp_path / "site"),
            ]
        )
        == 0
    )
    tables = {t["id"]: t for t in json.loads(capsys.readouterr().out)["tables"]}
    second = tables["runs"]["rows"][1][0]
    assert second.startswith("eval-model · temperature 0.2") and tables["figure_4a"]["rows"][0][0] == second
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "group=eval-model+%C2%B7+temperature+0.2" in index.split("Figure 4 (a)")[1].split("</table>")[0]


def test_text_tables_stay_aligned_with_fullwidth_punctuation(tmp_path, provider, monkeypatch, capsys):
    """ "Text tables stay aligned with fullwidth punctuation
    (（）：，) in a cell". A model id with them, through a run the gold stage wrote, in every table's columns."""
    import unicodedata

    from lexpilot.running.stage import stage_main
    from tests.helpers.stages import STAGES

    def display_width(
        text: str,
    ) -> int:  # a terminal's cells, counted here apart from the renderer's own count
        return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)

    assert [unicodedata.east_asian_width(c) for c in "（）：，"] == ["F"] * 4  # fullwidth, not wide
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    model = "模型（甲）：第一版，v1"
    assert (
        stage_main(
            STAGES["gold"],
            "t",
            argv=[
                "--run-id",
                "r1",
                "--model",
                model,
                "--dataset",
                str(h.dataset),
                "--output-root",
                str(h.root),
            ],
            clients=provider.in_memory_clients(),
        )
        == 0
    )
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--width", "0"]) == 0
    checked = 0
    for block in capsys.readouterr().out.split("\n\n"):
        lines = block.splitlines()
        rule = next((i for i, line in enumerate(lines) if line and set(line) <= {"-", " "}), None)
        if rule is None or not any(model in line for line in lines[rule + 1 :]):
            continue
        # each column starts where the rule's dashes start, in display cells, in the header and in every row
        starts = [m.start() for m in re.finditer(r"(?:^|  )(-)", lines[rule])]
        starts = [s + (2 if s else 0) for s in starts]
        for line in [lines[rule - 1]] + [x for x in lines[rule + 1 :] if model in x]:
            cells = [display_width(line[:i]) for i in range(len(line) + 1)]
            for start in starts[1:]:
                assert start in cells and line[cells.index(start) - 2 : cells.index(start)] == "  ", (
                    line,
                    start,
                )
        checked += 1
    assert checked >= 3  # the runs table, Table 11 and the class tables at least


def test_csv_and_json_carry_numbers_not_display_text(tmp_path, provider, monkeypatch, capsys):
    """ "Percentages, `192 / 141670 / 3262` usage cells and `12 × 2` power cells are text today,
    and `--format json --table …` rows are display strings. Give every number its own column or field". On a gold
    run of two cases the stage wrote: by hand, the evaluated model made one prediction per case (2 calls) and the
    judge one extraction per case (2 calls)."""
    import json

    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    assert h.run("gold") == 0
    records = [
        json.loads(line)
        for path in h.root.rglob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    # the predictions' records
    prompt = sum(r["usage"].get("eval", {}).get("prompt_tokens", 0) for r in records)
    assert prompt > 0
    capsys.readouterr()
    assert (
        show_results.main(
            [
                "--output-root",
                str(h.root),
                "--usage",
                "--format",
                "json",
                "--table",
                "usage_per_run",
                "main",
                "runs",
            ]
        )
        == 0
    )
    tables = {t["id"]: t for t in json.loads(capsys.readouterr().out)["tables"]}
    runs = dict(zip(tables["runs"]["headers"], tables["runs"]["rows"][0]))
    assert runs["Runs"] == {"text": "1", "value": 1}  # a count, as its number too
    usage = dict(zip(tables["usage_per_run"]["headers"], tables["usage_per_run"]["rows"][0]))
    assert usage["Evaluated model"]["calls"] == 2 and usage["Judge"]["calls"] == 2
    assert usage["Evaluated model"]["prompt_tokens"] == prompt
    assert usage["Evaluated model"]["text"].startswith(f"2 / {prompt} / ")
    main = dict(zip(tables["main"]["headers"], tables["main"]["rows"][0]))
    gold_qwk = main["LJP Gold QWK"]
    assert (
        isinstance(gold_qwk, dict)
        and isinstance(gold_qwk["mean"], float)
        and gold_qwk["text"].startswith("0.")
    )
    # the fields docs/results.md names, in the JSON's one style (the CSV's headers say "SD")
    docs = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert {"mean", "sd", "low", "high", "n"} <= set(gold_qwk) and '"mean": 0.5344, "sd": 0.0' in docs
    check_the_csv_gives_each_usage_number_a_column(h.root, prompt, capsys)


def check_the_csv_gives_each_usage_number_a_column(root, prompt: int, capsys) -> None:
    """The usage table's CSV: the evaluated model's calls and prompt tokens each in their own column."""
    import csv
    import io

    assert (
        show_results.main(
            ["--output-root", str(root), "--usage", "--format", "csv", "--table", "usage_per_run"]
        )
        == 0
    )
    rows = [
        r for r in csv.reader(io.StringIO(capsys.readouterr().out)) if len(r) > 2 and r[0].startswith("Token")
    ]
    header, data = rows[0], rows[1]  # the table's header row, then its one run
    row = dict(zip(header[2:], data[2:]))
    assert row["Evaluated model calls"] == "2" and row["Evaluated model prompt tokens"] == str(prompt)


def test_a_note_table_keeps_to_the_width(tmp_path, provider, monkeypatch, capsys):
    """The Figure 3 note (152 characters) keeps to --width 80."""
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "two.json", sample_cases()[:2]))
    for stage in ("LexAwN", "DCG"):
        assert h.run(stage) == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--width", "80", "--table", "figure_3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("no complexity data") for line in lines)
    assert all(len(line) <= 80 for line in lines)


def test_a_note_of_chinese_text_keeps_to_the_width_in_terminal_cells():
    """Notes were wrapped by characters, and a Chinese character takes two terminal cells, so a
    Chinese note ran past --width. Each line keeps to the width as a terminal shows it; nothing is lost."""
    from lexpilot.reporting.tables.renderings import display_width, render_text
    from lexpilot.reporting.tables.table import Table

    note = (
        "the cause 机动车交通事故责任纠纷 has no typed case: 原告主张被告赔偿医疗费、误工费、护理费等各项损失，"
        "被告辩称其已垫付部分费用 (see docs/analyses.md)"
    )
    lines = render_text([Table("notes", "Notes", ["note"], [[note]])], limit=40).splitlines()[3:]
    lines = [line for line in lines if line]
    assert len(lines) > 3 and all(display_width(line) <= 40 for line in lines), lines
    assert "".join(line.strip() for line in lines).replace(" ", "") == note.replace(" ", "")
    assert all(line.startswith("  ") for line in lines[1:])  # a note's later lines indented under its first


def test_json_with_compare_carries_the_comparison_as_the_statistics_ride_along(
    tmp_path, provider, monkeypatch, capsys
):
    """`--format json --compare A B` printed no comparison unless `--table comparison` was
    given, while --rank, --power and --consistency bring theirs. On DCG runs the stage wrote for two models, the
    comparison's DCG row gives A − B of the records' accuracies, by hand."""
    import json

    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4]))
    accuracy = {}
    for model in ("model-a", "model-b"):
        assert h.run("DCG", "--model", model) == 0
        path = next(h.root.glob(f"eval_results/r1/{model}-*/DCG_results.jsonl"))
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        accuracy[model] = sum(r["success"] for r in records) / len(records)
    capsys.readouterr()
    assert (
        show_results.main(
            [
                "--output-root",
                str(h.root),
                "--format",
                "json",
                "--compare",
                "model-a",
                "model-b",
                "--resamples",
                "100",
            ]
        )
        == 0
    )
    (comparison,) = [t for t in json.loads(capsys.readouterr().out)["tables"] if t["id"] == "comparison"]
    dcg = next(r for r in comparison["rows"] if r[0] == "DCG Acc.")
    difference = accuracy["model-a"] - accuracy["model-b"]
    assert any(isinstance(c, dict) and c.get("difference") == pytest.approx(difference) for c in dcg[1:]), dcg


# ----------------------------------------------------------------------------- model ids in Markdown


def test_markdown_escapes_html_in_a_model_id(harness, capsys):
    """A model id that is HTML is escaped in a Markdown report, never written as a tag."""
    import show_results

    assert harness.run("gold", "--limit", "1", "--model", "<img src=x onerror=alert(1)>") == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "<img" not in out and "&lt;img src=x onerror=alert(1)&gt;" in out


def markdown_cells(row: str) -> list[str]:
    """A GitHub-flavoured Markdown table row split as cmark-gfm splits it: a backslash escapes the next character,
    and every other `|` ends a cell."""
    out, cell, i = [], "", 0
    row = row.strip()[1:-1] if row.strip().startswith("|") else row
    while i < len(row):
        if row[i] == "\\" and i + 1 < len(row):
            cell, i = cell + row[i : i + 2], i + 2
            continue
        if row[i] == "|":
            out.append(cell)
            cell = ""
        else:
            cell += row[i]
        i += 1
    return out + [cell]


def test_a_model_id_with_a_backslash_and_a_bar_stays_in_its_markdown_cell(harness, capsys):
    """`a\\|b` was written `a\\\\|b`, which ends the cell after the escaped backslash."""
    model = "vendor\\|model"
    assert harness.run("gold", "--limit", "1", "--model", model) == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(harness.root), "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| vendor")]
    assert rows
    for i in rows:
        header = next(
            lines[j] for j in range(i, -1, -1) if lines[j].startswith("|") and lines[j + 1].startswith("|---")
        )
        assert len(markdown_cells(lines[i])) == len(markdown_cells(header)), lines[i]
        assert markdown_cells(lines[i])[0].strip() == "vendor\\\\\\|model"  # renders as vendor\|model
