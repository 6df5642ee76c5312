"""The annotation sheets judge_agreement.py exports and reads (CSV with a BOM, as spreadsheets save them), read and
written as an annotator's tool would: the corrected-metrics tests fill them with experts' labels."""

import csv


def read_csv(path):
    with path.open(encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path, columns, rows):
    with path.open("w", encoding="utf-8-sig", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def dataset_cases(dataset):
    import json

    return json.loads(dataset.read_text(encoding="utf-8"))


def exported_items(root, dataset, out):
    """Every judge decision of the runs under `root`, as judge_agreement.py exports them to `out` (all of them,
    not a sample): (the sheet's row, the key's row, the case's index in the dataset) each."""
    import judge_agreement
    from lexpilot.files import key_file

    argv = ["export", "--output-root", str(root), "--dataset", str(dataset), "--out", str(out)]
    assert judge_agreement.main([*argv, "--per-task", "10000"]) == 0
    keys = {k["item_id"]: k for k in read_csv(key_file(out))}
    numbers = [c["case_number"] for c in dataset_cases(dataset)]
    for row in read_csv(out):
        key = keys[row["item_id"]]
        yield row, key, numbers.index(key["case_number"])
