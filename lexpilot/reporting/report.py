"""A report of saved runs, assembled: the runs read, checked and scored, grouped, every table built once (the paper's,
the judges', the statistics and usage asked for), the tables chosen and rendered, the site and the figures written.
show_results.py declares the options (the report's own from `add_report_options`) and hands them to `show`; it
never calls an API.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.vocabulary import ROLES
from lexpilot.errors import HarnessError, UsageError
from lexpilot.options import number
from lexpilot.pricing import read_prices
from lexpilot.reporting import catalog
from lexpilot.reporting.scoring.groups import Group, group_runs
from lexpilot.reporting.scoring.results import load_runs, score_runs
from lexpilot.reporting.scoring.runs import named_dataset
from lexpilot.reporting.site.viewer import case_renderer, site_cases, write_site
from lexpilot.reporting.statistics.bootstrap import MAX_RESAMPLES, Bootstrap
from lexpilot.reporting.statistics.randomization import MAX_PERMUTATIONS
from lexpilot.reporting.statistics.rankings import MIN_POWER_RESAMPLES
from lexpilot.reporting.tables.complexity import read_complexity
from lexpilot.reporting.tables.figures import write_plots
from lexpilot.reporting.tables.rank_figures import TaskFigure, rank_figures
from lexpilot.reporting.tables.renderings import (
    RENDERINGS,
    TEXT_WIDTH,
    add_format_option,
    render_json,
    render_text,
)
from lexpilot.reporting.validation.expert_labels import read_expert_labels


def add_report_options(parser) -> None:
    """show_results.py's options past the runs to read (add_run_options), in the order --help lists them."""
    _add_table_options(parser)
    _add_statistics_options(parser)
    _add_output_options(parser)


def _add_table_options(parser) -> None:
    """How the tables are printed: format, intervals in the cells, width, decimals, which tables."""
    add_format_option(parser, json=True)
    parser.add_argument(
        "--ci",
        action="store_true",
        help="add 95%% bootstrap intervals over cases, and "
        "paired Interaction − Direct and Gold − Interaction differences",
    )
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument(
        "--seed",
        type=number(int, 0, 10**9),
        default=0,
        help="bootstrap seed, 0 or more (default 0: the same numbers every time)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("MODEL_A", "MODEL_B"),
        help="paired bootstrap difference A − B on every metric (implies --ci)",
    )
    parser.add_argument(
        "--width",
        type=number(int, 0, 10**6),
        default=TEXT_WIDTH,
        help="text tables wider than this many terminal cells are printed in blocks of "
        f"columns (default {TEXT_WIDTH}; 0: never)",
    )
    parser.add_argument(
        "--decimals",
        type=number(int, 0, 12),
        metavar="N",
        help="metrics at N decimals in the text, Markdown and LaTeX tables (default: each "
        "table at its paper table's precision, docs/results.md; CSV and JSON keep every "
        "digit)",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="ID",
        help="print only these tables, by identity (main, lca_by_class, table_4, ...: "
        "docs/results.md lists them; an unknown one is refused with the report's names); "
        "with --format json, those tables ride along with the metrics",
    )
    parser.add_argument(
        "--include-rejudged",
        action="store_true",
        help="the paper's tables show re-judged copies of runs too (by default only the "
        "judge tables do, unless --run-id names one)",
    )


def _add_statistics_options(parser) -> None:
    """--rank and its test, --power and --consistency: statistics over the runs, each a table of its own."""
    parser.add_argument(
        "--rank",
        action="store_true",
        help="every comparable pair of models on each headline metric (paired bootstrap "
        "interval, randomization-test p, Holm-adjusted) and a ranking with letter groups",
    )
    parser.add_argument(
        "--permutations",
        type=number(int, 1, MAX_PERMUTATIONS),
        default=None,
        help="permutations of --rank's randomization test (default: as many as the pairs "
        "need at --alpha, (B + 1) ≥ 20 · pairs / alpha; fewer is refused)",
    )
    parser.add_argument("--by-class", action="store_true", help="with --rank: per cause-of-action class too")
    parser.add_argument(
        "--alpha",
        type=number(float, 0.0001, 0.5),
        default=0.05,
        help="significance level of --rank and --power, from 0.0001 to 0.5 (default 0.05)",
    )
    parser.add_argument(
        "--power",
        action="store_true",
        help="the smallest difference detectable at --alpha with power 0.8, for the design "
        "in hand and others (docs/statistics.md)",
    )
    parser.add_argument(
        "--corrected",
        type=Path,
        metavar="LABELS",
        help="every headline metric (LCA Macro-F1, Acc_C, Acc_U, DCG accuracy, the LJP QWKs) raw and corrected "
        "for the judge's errors by the experts' labels in LABELS, the scored annotation file of judge_agreement.py "
        "(with its .key.csv), and with --rank / --power the rankings and power too: prediction-powered "
        "inference, 2,000 resamples at --seed, docs/statistics.md",
    )
    parser.add_argument(
        "--consistency",
        action="store_true",
        help="consistency over runs per model, and the judge's share of the run-to-run "
        "variance where runs were re-judged with the same judge",
    )


def _add_output_options(parser) -> None:
    """The usage tables and their prices, and what is written besides the tables: the figures (with the
    complexity Figure 3 reads) and the transcript viewer."""
    parser.add_argument("--usage", action="store_true", help="add token usage per run, role and stage file")
    parser.add_argument(
        "--prices",
        type=Path,
        help='JSON {"model id": {"prompt": P, "completion": C}} in money per million '
        "tokens: adds cost to the usage tables (implies --usage)",
    )
    parser.add_argument(
        "--plot", type=Path, metavar="DIR", help="also write PNG figures there (needs matplotlib)"
    )
    parser.add_argument(
        "--complexity",
        type=Path,
        metavar="FILE",
        help="Figure 3: a CSV of cause_of_action,complexity (the average number of legal "
        "provisions cited per cause); default: the cases' complexity field, where the "
        "dataset has one",
    )
    parser.add_argument(
        "--html",
        type=Path,
        metavar="DIR",
        help="also write the transcript viewer there: a static site (index.html) that opens "
        "from the file system; see docs/viewer.md",
    )


def show(args) -> int:
    prices, complexity = read_options(args)
    root = args.output_root.resolve()
    if not root.is_dir():
        raise UsageError(f"--output-root {root} does not exist (or is not a folder)")
    runs = load_runs(root, args.model, args.run_id, score=False, dataset=args.dataset)
    cases = site_cases(runs, args.dataset) if args.html else {}
    runs = score_runs(
        runs,
        root,
        keep_outcomes=args.consistency,  # consistency over runs compares per-item outcomes
        render=case_renderer(cases) if args.html else None,  # the site's pages, made as records are read
    )
    missing = not_found(root, runs, args)
    if missing:
        raise UsageError(missing)
    if not runs:
        print(
            f"No results under {root} yet: run LexAwN_gen.py, eval_DCG.py and "
            "eval_LJP.py with --run-id first (see README.md)."
        )
        return 0
    unreported = [r for r in runs if not r.tasks]  # a smoke or failed run: no task complete, one line for it
    report_problems([r for r in runs if r.tasks], unreported)
    groups = group_runs([r for r in runs if r.tasks])
    if complexity is None:
        complexity = dataset_complexity(runs, args.dataset)
    # one resample matrix for every statistic; `boot` also puts intervals in the tables' cells (--ci, --compare)
    shared = Bootstrap(args.resamples, args.seed)
    boot = shared if args.ci or args.compare else None
    compared = compared_groups(groups, args.compare) if args.compare else None  # both models must be there
    if prices:
        _warn_unpriced(runs, prices, args.prices)
    inputs = catalog.Inputs(args, groups, boot, shared, complexity, prices, compared, group_runs(runs))
    # built once: for the terminal and the site alike
    tables = with_unreported(catalog.build(inputs), unreported)
    _print_tables(args, tables, groups, boot, prices)
    # the ranking figures, one per task, from the tables just built and the one resample matrix: site and PNG alike
    ranked = rank_figures(groups, shared, tables) if args.html or args.plot else []
    if args.html:
        _write_viewer(args.html, groups, tables, cases, ranked)
    if args.plot:
        _write_figures(args.plot, groups, boot, complexity, tables, ranked)
    return 0


def _warn_unpriced(runs, prices: dict, price_file: Path) -> None:
    """The models of any role that the price file has no price for: their cost shows as n/a, said once."""
    unpriced = sorted(
        {str(r.manifest.model(role)) for r in runs for role in ROLES if r.manifest.model(role) not in prices}
    )
    if unpriced:
        print(f"no price in {price_file} for {', '.join(unpriced)}: their cost shows as n/a", file=sys.stderr)


def _print_tables(
    args, tables: list, groups: list[Group], boot: Bootstrap | None, prices: dict | None
) -> None:
    """The report on stdout: JSON of the groups' metrics, or the tables chosen, in the format asked for."""
    if args.format == "json":  # the statistics asked for ride along as tables, or the tables --table names
        extra = (
            chosen(tables, args.table)
            if args.table
            else [t for t in tables if t.id in catalog.RIDES_ALONG or (t.id == "comparison" and args.compare)]
        )
        print(render_json(groups, boot, args.usage or bool(prices), extra or None))
    else:
        shown = chosen(tables, args.table)
        print(
            render_text(shown, args.width or 10**9, args.decimals)
            if args.format == "text"
            else RENDERINGS[args.format](shown, args.decimals)
        )


def _write_viewer(
    folder: Path, groups: list[Group], tables: list, cases: dict, ranked: list[TaskFigure]
) -> None:
    """--html: the transcript viewer, with the report's tables but the usage ones, and the ranking figures."""
    # the site shows what the terminal shows but the money (Figure 3 with --complexity, the judges, --rank)
    try:
        shown = [t for t in tables if not t.id.startswith("usage_")]
        count = write_site(folder, groups, shown, cases, figures=ranked)
    except HarnessError as e:
        raise UsageError(str(e)) from None
    print(f"wrote {folder / 'index.html'} ({count} case pages)", file=sys.stderr)


def _write_figures(
    folder: Path,
    groups: list[Group],
    boot: Bootstrap | None,
    complexity: dict,
    tables: list,
    ranked: list[TaskFigure],
) -> None:
    """--plot: the PNG figures, each file written said on stderr."""
    try:
        # Figure 4 drawn from its tables, the rankings from theirs
        written = write_plots(groups, folder, boot, complexity, tables, ranked)
    except OSError as e:
        raise UsageError(f"--plot {folder}: cannot write the figures there ({e.strerror or e})") from None
    for path in written:
        print(f"wrote {path}", file=sys.stderr)


def not_found(root: Path, runs, args) -> str | None:
    """What was asked for (a run id, a model) and is not there, or records whose run has no manifest."""
    there = sorted({p.parent.parent.name for p in root.glob("runs/*/*/manifest.json")})
    for flag, asked, found in (
        ("--run-id", args.run_id, {r.run_id for r in runs}),
        ("--model", args.model, {r.model for r in runs}),
    ):
        absent = [x for x in asked or () if x not in found]
        if absent:
            return f"{flag} {', '.join(absent)}: no such run under {root}" + (
                f" (runs there: {', '.join(there[:20])})" if there else ""
            )
    orphans = sorted(
        {
            p.parent.name
            for top in ("AwN_gen", "Force_ask_gen", "Force_judge_gen", "eval_results")
            for p in root.glob(f"{top}/*/*")
            if p.parent.name not in there
        }
    )
    if not runs and orphans:
        return (
            f"records of run(s) {', '.join(orphans[:10])} under {root} but no manifest "
            "(runs/<run>/<model>/manifest.json): restore it, or rerun a stage of the run to rebuild it"
        )
    return None


def writable_folder(folder: Path) -> bool:
    """Whether a folder is there to write in, or can be made (nothing is made here: a report refused later for
    another reason leaves no folder behind)."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    return existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)


def read_options(args) -> tuple[dict | None, dict | None]:
    """The options' own files, checked before any run is read: the price file and the complexity CSV."""
    if not 1 <= args.resamples <= MAX_RESAMPLES:
        raise UsageError(
            f"--resamples must be from 1 to {MAX_RESAMPLES:,} (the intervals are stable long before), "
            f"got {args.resamples}"
        )
    if args.by_class and not args.rank:
        raise UsageError("--by-class adds the per-class rankings to --rank: pass --rank too")
    # a variance from fewer resamples is off by over 14%
    if args.power and args.resamples < MIN_POWER_RESAMPLES:
        raise UsageError(
            f"--power estimates variances from the resamples: it needs --resamples "
            f"{MIN_POWER_RESAMPLES} or more, got {args.resamples}"
        )
    try:
        prices = read_prices(args.prices) if args.prices else None
    except HarnessError as e:
        raise UsageError(str(e)) from None
    complexity = read_complexity(args.complexity) if args.complexity else None
    if args.corrected is not None:  # a file that cannot be read is said before any run is scored
        try:
            read_expert_labels(args.corrected)
        except (
            HarnessError
        ) as e:  # one line: the first row refused, `judge_agreement.py score` lists them all
            raise UsageError(
                f"--corrected: {' '.join(line.strip() for line in str(e).splitlines()[:2])}"
            ) from None
    if args.dataset is not None:  # given, it must be one: records are checked against it
        if not args.dataset.is_file():
            raise UsageError(
                f"--dataset {args.dataset}: no such file (pass the JSON file the runs were made from)"
            )
        try:
            load_dataset(args.dataset)
        except HarnessError as e:
            raise UsageError(
                f"--dataset: {str(e).splitlines()[0]} (pass the JSON file the runs were made from)"
            ) from None
    for flag, folder in (("--html", args.html), ("--plot", args.plot)):
        if folder is not None and not writable_folder(folder):  # found out now, not after the whole report
            raise UsageError(f"{flag} {folder}: cannot write there (not a folder, or no permission)")
    if args.plot:
        try:
            importlib.import_module("matplotlib")  # only whether it is there: figures.py imports it
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install matplotlib") from None
    return prices, complexity


def report_problems(runs, unreported) -> None:
    for run in unreported:  # files not there are a smoke run's nature; anything else is a fault, said in full
        faults = [p for p in run.problems if not p.endswith(": not found")]
        print(
            f"run {run.run_id}, model {run.model}: not reported, no task complete"
            + (
                f" ({len(run.problems) - len(faults)} record files not found)"
                if len(faults) < len(run.problems)
                else ""
            ),
            file=sys.stderr,
        )
        for line in run.notes + faults:
            print(f"run {run.run_id}, model {run.model}: {line}", file=sys.stderr)
    for run in runs:
        for note in run.notes:
            print(f"run {run.run_id}, model {run.model}: {note}", file=sys.stderr)
        for problem in run.problems:
            print(
                f"run {run.run_id}, model {run.model}: {problem} (metric not reported for this run)",
                file=sys.stderr,
            )


def with_unreported(tables: list, unreported: list) -> list:
    """The runs table with a line for each run that has no complete task, saying why (and no row elsewhere)."""
    for table in tables:
        if table.id == "runs":
            table.rows += [
                [
                    run.model,
                    "not reported",
                    run.run_id,
                    "no task complete: "
                    + next(
                        (p for p in run.problems if not p.endswith(": not found")), "no record file of a task"
                    ),
                ]
                for run in unreported
            ]
    return tables


def chosen(tables: list, ids: list[str] | None) -> list:
    """The tables named by --table, in the order named; an unknown name is refused with the names there are."""
    if not ids:
        return tables
    by_id: dict[str, list] = {}
    for t in tables:
        by_id.setdefault(t.id, []).append(t)
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        options = "; ".join(
            f"{i} comes with {catalog.TABLE_OPTIONS[i]}" for i in unknown if i in catalog.TABLE_OPTIONS
        )
        raise UsageError(
            f"--table {', '.join(unknown)}: no such table in this report (tables: "
            f"{', '.join(by_id)})" + (f"; {options}" if options else "")
        )
    return [t for i in ids for t in by_id[i]]


def dataset_complexity(runs, dataset: Path | None) -> dict[str, float]:
    """Figure 3 from the dataset: the mean of the cases' complexity field per cause, where cases have it."""
    path = named_dataset(runs, dataset)
    if path is None:
        return {}
    try:
        cases, _ = load_dataset(path)
    except HarnessError:
        return {}
    by_cause: dict[str, list[float]] = {}
    for case in cases:
        if case.complexity is not None:
            by_cause.setdefault(case.cause, []).append(case.complexity)
    return {cause: sum(v) / len(v) for cause, v in by_cause.items()}


def compared_groups(groups: list[Group], models: list[str]) -> tuple[Group, Group]:
    """The one standard group of each model, on the same cases (the comparison is paired)."""
    chosen = []
    for model in models:
        found = [g for g in groups if g.model == model and g.condition == "standard"]
        if len(found) != 1:
            raise UsageError(
                f"--compare {model}: {'no runs' if not found else f'{len(found)} groups of runs with different settings'}"
                " of this model; select the runs with --run-id"
            )
        chosen.append(found[0])
    cases = [g.runs[0].selected for g in chosen]
    if cases[0] != cases[1]:
        raise UsageError(
            f"--compare: {models[0]} and {models[1]} were run on different cases; a paired "
            "comparison needs the same dataset and --limit"
        )
    return chosen[0], chosen[1]
