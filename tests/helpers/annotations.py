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
