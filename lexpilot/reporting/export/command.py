"""export_results.py's command: its options (the runs chosen as show_results.py chooses them), the runs read and
scored once, each run's instances made from its records, and each format's files written; or `--verify DIR`.
The formats' packages are optional: a format whose package is missing is refused in one line before anything is
read."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from lexpilot.benchmark.records import model_folder
from lexpilot.errors import UsageError
from lexpilot.reporting.export import eee, inspect_logs, ledger
from lexpilot.reporting.export.eee import ExportedRun
from lexpilot.reporting.export.instances import served_in, stage_instances
from lexpilot.reporting.export.provenance import provenance, run_label
from lexpilot.reporting.export.stages import STAGES
from lexpilot.reporting.export.writing import Written, check_output, refuse_torn, write_run
from lexpilot.reporting.scoring.parallel import fork_map, one_blas_thread, workers
from lexpilot.reporting.scoring.results import add_run_options, load_runs
from lexpilot.reporting.scoring.runs import Run
from lexpilot.reporting.scoring.scoring import TASK_NAMES
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.text import counted


@dataclass(frozen=True)
class Format:
    """An export format: its package's check, the files of one run (path under the export -> bytes, in the order
    they are written), the package's name on PyPI (its version is part of a run's sources), and whether a run's
    last file vouches for the others (writing.write_run)."""

    require: Callable[[], object]
    run_files: Callable[[ExportedRun, Bootstrap], dict[str, bytes]]
    package: str
    vouched: bool


FORMATS = {
    "eee": Format(eee.require_package, eee.run_files, "every-eval-ever", vouched=True),
    "inspect": Format(inspect_logs.require_package, inspect_logs.run_files, "inspect-ai", vouched=False),
}
EXPORTED_KINDS = tuple(dict.fromkeys(k for s in STAGES for k in (s.verdicts, *s.sources)))


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

        if given := export_options_given(args):
            raise UsageError(
                f"--verify reads the export alone and takes no other option ({', '.join(given)}): "
                "verify with --verify DIR only, or export without --verify"
            )
        return verify_export(args.verify)
    if not args.format or not args.output:
        raise UsageError("name --format (eee, inspect) and --output DIR, or --verify DIR")
    require_packages(tuple(dict.fromkeys(args.format)))
    output = args.output.resolve()
    check_output(output)
    root = args.output_root.resolve()
    if not root.is_dir():
        raise UsageError(f"--output-root {root} does not exist (or is not a folder)")
    runs = chosen_runs(root, args)
    work = partial(
        export_run,
        root=root,
        output=output,
        formats=tuple(dict.fromkeys(args.format)),
        boot=Bootstrap(args.resamples, args.seed),
    )
    written = Written()
    items = [(run, run_label(run)) for run in runs]
    # each run on its own core: its records read, its files made, validated and written there. BLAS held to one
    # thread: two per core made each bootstrap product 30 times slower (docs/performance.md)
    with one_blas_thread():
        for done in fork_map(work, items, workers(len(runs))):
            written.written += done.written
            written.unchanged += done.unchanged
    drop_runs(output, tuple(dict.fromkeys(args.format)), runs, args)
    print(f"export_results: {counted(len(runs), 'run')}; {written.line(output)}")
    return 0


def drop_runs(output: Path, formats: tuple[str, ...], runs: list[Run], args) -> None:
    """The files of runs the options choose that this export no longer has (a run deleted, or left with nothing to
    export), each named on stderr as it is removed: only the files the ledger says an export wrote for them."""
    folders = {model_folder(m) for m in args.model} if args.model else None

    def chosen(run_id: str, folder: str) -> bool:
        return (not args.run_id or run_id in args.run_id) and (folders is None or folder in folders)

    for name in formats:
        exported = {ledger.entry_path(output, name, run) for run in runs}
        for entry in ledger.dropped_entries(output, name, exported, chosen):
            for removed in ledger.remove_run(entry, output):
                print(
                    f"export_results: removed {removed} (run {entry.parent.name} is no longer exported)",
                    file=sys.stderr,
                )


def export_options_given(args) -> list[str]:
    """The options given beside --verify, which it would ignore (each one whose value is not its default)."""
    parser = argparse.ArgumentParser()
    add_export_options(parser)
    defaults = vars(parser.parse_args([]))
    return [
        f"--{name.replace('_', '-')}"
        for name, value in vars(args).items()
        if name != "verify" and value != defaults.get(name)
    ]


def require_packages(formats: tuple[str, ...]) -> None:
    """Each format's package there, else one line naming every one missing."""
    missing = []
    for name in formats:
        try:
            FORMATS[name].require()
        except UsageError as e:
            missing.append(str(e))
    if missing:
        raise UsageError("; ".join(missing))


def export_run(
    item: tuple[Run, str], root: Path, output: Path, formats: tuple[str, ...], boot: Bootstrap
) -> Written:
    """One run's files in every format asked for: skipped where the ledger says nothing they are made from changed,
    else made, each written where it changed, and the ledger's entry last (`boot`: one per process, whose drawn
    cases every run on the same cases shares)."""
    run, label = item
    exported = None
    written = Written()
    for name in formats:
        form = FORMATS[name]
        entry = ledger.sources(run, root, output, label, name, form.package, boot)
        before = ledger.kept(entry)
        unchanged = ledger.current_files(entry, before, output)
        if unchanged is not None:
            written.unchanged += unchanged
            continue
        exported = exported or exported_run(run, root, label)
        files = form.run_files(exported, boot)
        write_run(output, files, written, form.vouched)
        ledger.remove_stale(before, output, list(files))
        ledger.keep(entry, output, list(files))
    return written


def chosen_runs(root: Path, args) -> list[Run]:
    """The runs the options choose, scored, each with a task show_results.py reports; refused in one line where one
    cannot be exported whole. A task it does not report (a case missing, a record it refuses) is left out, said on
    stderr, and so is a run left with none."""
    runs = load_runs(root, args.model, args.run_id, dataset=args.dataset)
    if not runs:
        raise UsageError(f"no runs under {root} match the options: nothing to export")
    for run in runs:
        paths = [kind.path(root, run.run_id, run.folder) for kind in EXPORTED_KINDS]
        refuse_torn(paths)
        if not any(path.is_file() for path in paths):  # records without labels are left out below, named
            raise UsageError(
                f"run {run.run_id}, model {run.model}: no records of any stage to export; run its stages, or "
                "leave it out with --run-id / --model"
            )
        for note in unreported_stages(run, root):
            print(f"export_results: {note}", file=sys.stderr)
    kept = [run for run in runs if has_labels(run, root)]
    if not kept:
        raise UsageError(
            f"no run under {root} that the options choose has a complete task with labels (a stage whose judge "
            "wrote none: finish it): nothing to export"
        )
    for run in (r for r in runs if r not in kept):
        print(
            f"export_results: run {run.run_id}, model {run.model}: no stage with labels to export (a stage whose "
            "judge wrote none: finish it); left out",
            file=sys.stderr,
        )
    return kept


def has_labels(run: Run, root: Path) -> bool:
    """Whether a stage show_results.py reports for the run has an instance to export: a scored task has its cases; a
    diagnostic's records may label none (the probes' records of cases outside the probe file, its judge down for the
    others), so those are read, only where no scored task decides it."""
    reported = [s for s in STAGES if s.reported(run, root)]
    if any(s.scored for s in reported):
        return True
    return any(made or problem for made, problem in (stage_instances(run, root, s) for s in reported))


def unreported_stages(run: Run, root: Path) -> list[str]:
    """A line per stage whose records are there but which show_results.py does not report for the run (scoring left
    its task out: a case missing, a record refused), naming the run, the model, the task and why."""
    lines = []
    for stage in (s for s in STAGES if s.scored and s.task in TASK_NAMES):
        if stage.task in run.tasks or not stage.verdicts.path(root, run.run_id, run.folder).exists():
            continue
        name = TASK_NAMES[stage.task]
        why = next((p for p in run.problems if p.startswith(f"{name}: ")), f"{name}: not scored")
        lines.append(
            f"run {run.run_id}, model {run.model}: {why} (left out of the export, as show_results.py leaves it out)"
        )
    return lines


def exported_run(run: Run, root: Path, label: str) -> ExportedRun:
    """A run's instances and numbers per stage, read from its records; a problem in them is one line."""
    stages, values, times = {}, {}, {}
    for stage in (s for s in STAGES if s.reported(run, root)):  # what show_results.py reports (chosen_runs)
        instances, problem = stage_instances(run, root, stage)
        if problem:
            raise UsageError(f"run {run.run_id}, model {run.model}: {problem}")
        if instances:
            stages[stage.task] = instances
            values[stage.task] = stage.measure(run, root)
            times[stage.task] = os.stat(stage.verdicts.path(root, run.run_id, run.folder)).st_mtime
    if not stages:  # has_labels kept none such: a record changed since
        raise UsageError(f"run {run.run_id}, model {run.model}: no stage with labels to export")
    return ExportedRun(run, label, provenance(run, served_in(stages)), stages, values, times)
