"""The probe study of the User Model (Appendix E.3.2, E.3.3, Table 13),
step by step for two legal experts:

  template  a seeded sample of cases (--per-cause per cause of action) as a CSV for the experts to fill: per case
            the underspecified history and the numbered key details, and for them to write the A (direct),
            B (indirect) and C (broad) questions, the minimum sufficient answer, the permitted disclosures per
            condition and, for D, the numbers of the key details to remove (empty: no D for that case)
  generate  a stage of a run (its User Model, prompt and settings; resumable, concurrent, --dry-run): one reply
            per condition from a fresh copy of the underspecified history, then the DCG judge on A-C with the
            reply withheld; takes every stage option plus --probes FILE
  export    one blind sheet per expert (OUT-expert1.csv, OUT-expert2.csv: each in its own seeded order, no
            condition, no DCG label, every item laid out alike) and the key file (OUT.key.csv)
  score     the two filled sheets: where the experts disagree, an adjudication sheet to fill first; then Table 13,
            the B - A and D - A answer differences with paired case-bootstrap intervals, agreement before
            adjudication per criterion, and the factual-recovery failures among DCG-accepted A/B requests
"""

import argparse
import os
import sys
from pathlib import Path

from lexpilot.errors import OneLineParser, leave_quietly_on_interrupt, run_tool

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from common import stage_main
from lexpilot.benchmark import probe_file
from lexpilot.benchmark.dataset import DEFAULT_DATASET, load_dataset
from lexpilot.benchmark.records import (
    PROBE_DCG,
    PROBE_REPLIES,
    model_folder,
    read_records,
)
from lexpilot.errors import HarnessError, first_of
from lexpilot.files import key_file, read_sheet, write_sheet
from lexpilot.options import number
from lexpilot.protocols.probes import PROBE_STAGE as STAGE
from lexpilot.reporting.scoring.results import add_run_options
from lexpilot.reporting.tables.renderings import render_text
from lexpilot.reporting.validation import probe_study
from lexpilot.storage.checkpoints import manifest_path
from lexpilot.storage.manifest import run_dataset


def template(args) -> int:
    cases, _ = load_dataset(args.dataset)
    rows = probe_file.template(cases, args.per_cause, args.seed)
    write_sheet(args.out, probe_file.PROBE_COLUMNS, rows)
    print(
        f"wrote {args.out}: {len(rows)} cases (up to {args.per_cause} per cause of action, seed {args.seed}; a "
        "cause with fewer gives all it has)"
    )
    return 0


def export(args) -> int:
    dataset = args.dataset or run_dataset(
        manifest_path(args.output_root, args.run_id, args.model), DEFAULT_DATASET
    )
    cases = {c.number: c for c in load_dataset(dataset)[0]}
    table, _ = probe_file.load_probes(args.probes, cases)
    folder = model_folder(args.model)
    replies = read_records(
        PROBE_REPLIES.path(args.output_root, args.run_id, folder),
        PROBE_REPLIES,
        {n: c.input_hash for n, c in cases.items()},
        "use the run's --dataset",
    )
    labels = read_records(
        PROBE_DCG.path(args.output_root, args.run_id, folder),
        PROBE_DCG,
        {n: c.input_hash for n, c in cases.items()},
        "use the run's --dataset",
    )
    probed = [n for n, (_, r) in replies.items() if r.get("probed")]
    if not probed or len(probed) < len(table) or any(n not in labels for n in probed):
        raise HarnessError(
            f"run {args.run_id}: the probe replies or their DCG labels are incomplete; run "
            "user_probes.py generate for this run first"
        )
    one, two, keys = probe_study.sheets(
        table,
        {n: r for n, (_, r) in replies.items()},
        {n: r for n, (_, r) in labels.items()},
        cases,
        args.seed,
    )
    for sheet, rows in ((1, one), (2, two)):
        write_sheet(expert_sheet(args.out, sheet), probe_study.EXPERT_SHEET_COLUMNS, rows)
    write_sheet(key_file(args.out), probe_study.PROBE_KEY_COLUMNS, keys)
    print(
        f"wrote {expert_sheet(args.out, 1)} and {expert_sheet(args.out, 2)} ({len(one)} replies, one sheet per expert, "
        f"seed {args.seed}) and {key_file(args.out)} (conditions and DCG labels: keep it from the experts)"
    )
    return 0


def expert_sheet(out: Path, number: int) -> Path:
    return out.with_name(f"{out.stem}-expert{number}{out.suffix}")


def score(args) -> int:
    one, two = (read_sheet(path, probe_study.EXPERT_SHEET_COLUMNS) for path in args.sheets)
    key_path = args.key or key_file(
        args.sheets[0].with_name(args.sheets[0].stem.removesuffix("-expert1") + ".csv")
    )
    key = {row["item_id"]: row for _, row in read_sheet(key_path, probe_study.PROBE_KEY_COLUMNS)}
    adjudication = read_sheet(args.adjudicated, probe_study.ADJUDICATION_COLUMNS) if args.adjudicated else []
    rows, problems = probe_study.joined(one, two, adjudication)
    open_items = probe_study.disagreements(rows, key, {row["item_id"]: row for _, row in one})
    if open_items:
        path = args.adjudicated or args.sheets[0].with_name(
            args.sheets[0].stem.removesuffix("-expert1") + "-adjudicate.csv"
        )
        write_sheet(path, probe_study.ADJUDICATION_COLUMNS, open_items)
        raise HarnessError(
            f"{len(open_items)} item(s) where the experts disagree: fill the adjudicated_ columns of "
            f"{path}, then rerun score with --adjudicated {path}"
        )
    items, more, agree = probe_study.adjudicated(args.sheets[0], rows, key)
    problems += more
    if problems:
        shown = first_of(problems)
        raise HarnessError(f"{len(problems)} row(s) cannot be scored:\n  " + "\n  ".join(shown))
    print(render_text(probe_study.table_13(items, agree)))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["generate"]:
        return stage_main(STAGE, __doc__, argv[1:])
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("template", help="the probe file for the experts to fill")
    t.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    t.add_argument(
        "--per-cause", type=number(int, 1, 10**6), default=2, help="cases per cause of action (default 2)"
    )
    t.add_argument("--seed", type=number(int, 0, 10**9), default=0)
    t.add_argument("--out", type=Path, default=Path("probes.csv"))
    commands.add_parser("generate", help="the replies and DCG labels (stage options; see generate --help)")
    e = commands.add_parser("export", help="the blind annotation sheet")
    add_run_options(e, one_run=True)
    e.add_argument("--probes", type=Path, required=True)
    e.add_argument("--seed", type=number(int, 0, 10**9), default=0)
    e.add_argument("--out", type=Path, default=Path("probe_annotation.csv"))
    s = commands.add_parser("score", help="Table 13 from the two experts' filled sheets")
    s.add_argument(
        "sheets", type=Path, nargs=2, metavar="EXPERT_SHEET", help="OUT-expert1.csv OUT-expert2.csv"
    )
    s.add_argument(
        "--adjudicated",
        type=Path,
        help="the adjudication sheet score wrote for the items the experts disagree on, filled",
    )
    s.add_argument("--key", type=Path, help="default: OUT.key.csv next to the sheets")
    args = parser.parse_args(argv)
    try:
        return {"template": template, "export": export, "score": score}[args.command](args)
    except HarnessError as e:
        print(f"[user_probes] error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run_tool(main, "user_probes"))
