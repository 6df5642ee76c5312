"""export_results.py's command: its options (the runs chosen as show_results.py chooses them), the runs read and
scored once, each run's instances made from its records, and each format's files written; or `--verify DIR`.
The formats' packages are optional: a format whose package is missing is refused in one line before anything is
read."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from lexpilot.benchmark.records import A1, DCG, FORCE_ASK, LCA
from lexpilot.errors import UsageError
from lexpilot.reporting.export import eee, inspect_logs
from lexpilot.reporting.export.eee import ExportedRun
from lexpilot.reporting.export.instances import STAGES, stage_instances
from lexpilot.reporting.export.provenance import provenance
from lexpilot.reporting.export.writing import Written, check_output, refuse_torn, write_if_changed
from lexpilot.reporting.scoring.groups import group_runs
from lexpilot.reporting.scoring.parallel import fork_map, workers
from lexpilot.reporting.scoring.results import add_run_options, load_runs
from lexpilot.reporting.scoring.runs import Run
from lexpilot.reporting.statistics.bootstrap import Bootstrap

# format -> (its package's check, the files of one run: repository path -> bytes)
FORMATS = {
    "eee": (eee.require_package, eee.run_files),
    "inspect": (inspect_logs.require_package, inspect_logs.run_files),
}
EXPORTED_KINDS = (A1, LCA, FORCE_ASK, DCG) + tuple(k for s in STAGES for k in (s.generation, s.verdicts))


def add_export_options(parser) -> None:
    add_run_options(parser)
    parser.add_argument(
        "--format",
        nargs="+",
        choices=tuple(FORMATS),
        help="eee: Every Eval Ever 0.3 records (needs every-eval-ever, Python 3.12+); inspect: Inspect logs "
        "(needs inspect-ai)",
    )
    parser.add_argument("--output", type=Path, metavar="DIR", help="the export's folder (made if missing)")
    parser.add_argument(
        "--verify",
        type=Path,
        metavar="DIR",
        help="recompute Tables 2 and 3 from an export alone and compare them with the values it states",
    )
    parser.add_argument(
        "--resamples", type=int, default=1000, help="bootstrap resamples per run (default 1000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def export(args) -> int:
    if args.verify:
        from lexpilot.reporting.export.verify import verify_export

        return verify_export(args.verify)
    if not args.format or not args.output:
        raise UsageError("name --format (eee, inspect) and --output DIR, or --verify DIR")
    for name in dict.fromkeys(args.format):
        FORMATS[name][0]()
    output = args.output.resolve()
    check_output(output)
    root = args.output_root.resolve()
    if not root.is_dir():
        raise UsageError(f"--output-root {root} does not exist (or is not a folder)")
    runs = chosen_runs(root, args)
    labels = {id(r): g.label for g in group_runs([r for r in runs if r.tasks]) for r in g.runs}
    work = partial(
        export_run,
        root=root,
        output=output,
        formats=tuple(dict.fromkeys(args.format)),
        boot=(args.resamples, args.seed),
    )
    written = Written()
    # each run on its own core: its records read, its files made, validated and written there
    for done in fork_map(work, [(run, labels.get(id(run), run.model)) for run in runs], workers(len(runs))):
        written.written += done.written
        written.unchanged += done.unchanged
    print(f"export_results: {len(runs)} runs; {written.line(output)}")
    return 0


def export_run(
    item: tuple[Run, str], root: Path, output: Path, formats: tuple[str, ...], boot: tuple
) -> Written:
    """One run's files in every format asked for, each written when it changed."""
    run, label = item
    exported = exported_run(run, root, label)
    written = Written()
    for name in formats:
        for path, data in FORMATS[name][1](exported, Bootstrap(*boot)).items():
            write_if_changed(output / path, data, written)
    return written


def chosen_runs(root: Path, args) -> list[Run]:
    """The runs the options choose, scored; refused in one line where one cannot be exported whole."""
    runs = load_runs(root, args.model, args.run_id, dataset=args.dataset)
    if not runs:
        raise UsageError(f"no runs under {root} match the options: nothing to export")
    for run in runs:
        paths = [kind.path(root, run.run_id, run.folder) for kind in EXPORTED_KINDS]
        refuse_torn(paths)
        if not any(s.verdicts.path(root, run.run_id, run.folder).is_file() for s in STAGES):
            raise UsageError(
                f"run {run.run_id}, model {run.model}: no records of LCA, DCG or LJP to export; run its stages, or "
                "leave it out with --run-id / --model"
            )
    return runs


def exported_run(run: Run, root: Path, label: str) -> ExportedRun:
    """A run's instances per stage, read from its records; a problem in them is one line."""
    stages = {}
    for stage in STAGES:
        instances, problem = stage_instances(run, root, stage)
        if problem:
            raise UsageError(f"run {run.run_id}, model {run.model}: {problem}")
        if instances:
            stages[stage.task] = instances
    files = [s.verdicts.path(root, run.run_id, run.folder) for s in STAGES if s.task in stages]
    return ExportedRun(run, label, provenance(run), stages, max(os.stat(f).st_mtime for f in files))
