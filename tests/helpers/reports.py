"""The tables a report prints, read back."""

import json


def json_table(capsys, *argv: str) -> list[list]:
    """The rows of the one table `show_results.py ARGV --format json --table ID` prints, each count as its number."""
    import show_results

    capsys.readouterr()
    assert show_results.main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tables"][0]["rows"]
    return [[c["value"] if isinstance(c, dict) and "value" in c else c for c in row] for row in rows]


def rows_of(out: str, table_start: str) -> list[list[str]]:
    """The data rows of the CSV tables whose title starts with `table_start`, the title column left out."""
    import csv
    import io

    return [
        r[1:] for r in csv.reader(io.StringIO(out)) if r and r[0].startswith(table_start) and r[1] != "header"
    ]


def refused_by(reader: str, harness, prices, capsys) -> str:
    """A price file read by one of its readers ("--dry-run": a stage's, "quote_grid.py", "--usage": show_results.py's
    on a run of the harness's), which refuses it: its one line."""
    status = read_by(reader, harness, prices, capsys)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    return err[0]


def read_by(reader: str, harness, prices, capsys) -> int:
    import quote_grid
    import show_results

    if reader == "--dry-run":
        return harness.run("gold", "--limit", "1", "--dry-run", "--prices", str(prices))
    if reader == "quote_grid.py":
        grid = ["--models", "eval-model", "--runs", "1", "--stages", "eval_LJP_gold", "--limit", "1"]
        where = ["--dataset", str(harness.dataset), "--output-root", str(harness.root)]
        return quote_grid.main([*grid, *where, "--prices", str(prices)])
    assert harness.run("gold", "--limit", "1") == 0
    capsys.readouterr()
    return show_results.main(["--output-root", str(harness.root), "--usage", "--prices", str(prices)])
