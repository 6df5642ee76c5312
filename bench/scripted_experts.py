"""Expert labels from the scripted truth: fills an annotation file that `judge_agreement.py export` wrote, from runs
made against the scripted provider playing an abilities file (`python -m lexpilot.scripted --abilities`), with the
true label of every item as both annotators and the adjudication, so that `judge_agreement.py score` and
`show_results.py --corrected` read it as the experts' file.

    python judge_agreement.py export --output-root try-out --per-task 600 --out labels.csv
    python -m bench.scripted_experts labels.csv
    python show_results.py --output-root try-out --corrected labels.csv

The truth is read from each item's reply, as the scripted judge reads it before it errs (lexpilot/scripted/playing.py):
LCA, whether the reply predicts (策略一) or asks (策略二); DCG, whether the question quotes a key detail of the case
(是); LJP, the verdict the reply states for the item's claim. TYPE and FOCAL items, which no ability decides, keep the
judge's label. The sample is the export's: --per-task there says how many decisions the experts label.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lexpilot.benchmark.vocabulary import ASKS, NO, PREDICTS, YES
from lexpilot.errors import HarnessError
from lexpilot.files import key_file, read_sheet, write_sheet
from lexpilot.reporting.validation.agreement import ANNOTATION_COLUMNS, ANNOTATION_KEY_COLUMNS, SCORED_COLUMNS
from lexpilot.scripted.playing import PREDICT, hits, stated

FILLED = ("annotator_1", "annotator_2", "adjudicated")  # the columns the experts fill


def true_label(item: dict, key: dict) -> str:
    """The item's true label, from its reply (the key's, whole) and what the sheet shows beside it."""
    reply, task = key.get("reply") or item["reply"], item["task"]
    if task == "LCA":
        return PREDICTS if PREDICT in reply else ASKS
    if task == "DCG":
        return YES if hits(reply, item["key_details"]) else NO
    if task == "LJP":
        verdicts = stated(reply, [item["claim"]])
        if verdicts:
            return verdicts[0]
    return key["llm_label"]  # no ability decides it: the judge is taken at its word


def fill(annotations: Path) -> dict[str, int]:
    """Fills the file's annotator and adjudicated columns in place; the items filled, per task."""
    rows = [row for _, row in read_sheet(annotations, SCORED_COLUMNS)]
    needed = [c for c in ANNOTATION_KEY_COLUMNS if c != "reply"]
    keys = {row["item_id"]: row for _, row in read_sheet(key_file(annotations), needed)}
    counts: dict[str, int] = {}
    for row in rows:
        if row["item_id"] not in keys:
            raise HarnessError(f"{annotations}: item {row['item_id']} is not in {key_file(annotations).name}")
        truth = true_label(row, keys[row["item_id"]])
        row.update(dict.fromkeys(FILLED, truth))
        counts[row["task"]] = counts.get(row["task"], 0) + 1
    columns = [c for c in ANNOTATION_COLUMNS if c in rows[0]] if rows else ANNOTATION_COLUMNS
    write_sheet(annotations, columns, [{c: row.get(c, "") for c in columns} for row in rows])
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "annotations", type=Path, help="the file judge_agreement.py export wrote (its key beside it)"
    )
    args = parser.parse_args(argv)
    try:
        counts = fill(args.annotations)
    except HarnessError as e:
        print(f"scripted experts: {e}", file=sys.stderr)
        return 2
    print(
        f"filled {args.annotations} with the scripted truth ({', '.join(f'{t} {n}' for t, n in counts.items())})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
