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
