"""The transcript viewer: a self-contained static site written from saved runs (`show_results.py --html DIR`).

index.html   the report's tables, each model's cells linking to the cases behind them
cases.html   every selected case per model and run with its outcome on each task; filters, sorting, free text
case/N.html  one case: histories, focal points, key details, claims with gold verdicts, then per model and run
             each task's transcript in protocol order; a side-by-side mode for two models or runs
Everything is escaped (model outputs and dataset text are untrusted); the pages use no network, no server and
no file outside the folder, so the folder can be zipped and sent.
(transcripts.py writes each run's transcript, case_list.py the case list.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence
from urllib.parse import urlencode

from lexpilot.benchmark.categories import FOCAL_TYPES, cause_class
from lexpilot.benchmark.dataset import Case, load_dataset
from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.parallel import fork_map, workers
from lexpilot.reporting.scoring.results import Render
from lexpilot.reporting.scoring.runs import Run, named_dataset
from lexpilot.reporting.site.calls_view import (
    CALL_SCRIPT,
    call_data,
    run_info,
    run_settings,
)
from lexpilot.reporting.site.case_list import (
    OUTCOME_COLUMNS,
    WRONG_FIRST,
    case_list,
    columns_not_run,
    outcomes,
)
from lexpilot.reporting.site.case_sections import (
    esc,
)
from lexpilot.reporting.site.comparisons import (
    OUTCOME_TASKS,
    compare_page,
    disagreements,
)
from lexpilot.reporting.site.parts import PARTS
from lexpilot.reporting.site.rank_svg import rankings_html
from lexpilot.reporting.site.transcripts import (
    RunRecords,
    dialogue_html,
    transcript,
)
from lexpilot.reporting.site.web_files import web_file
from lexpilot.reporting.tables.rank_figures import TaskFigure
from lexpilot.reporting.tables.table import Table


def script_json(data) -> str:
    """JSON that can sit inside a <script> element: no '<', '>' or '&' can end it or open a tag."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@dataclass
class CasePages:
    """What the site shows of one run's records, made while they were read (`score_runs`), per selected case: its
    transcript, the usage of its exact calls (`run_info`), its case-list row (`outcomes`, without the group's
    label), its cause as the records say (for a site without the dataset), and for a re-judged run its decisions
    against its source's."""

    transcripts: dict[str, str] = field(default_factory=dict)
    infos: dict[str, dict] = field(default_factory=dict)
    rows: dict[str, dict] = field(default_factory=dict)
    causes: dict[str, str | None] = field(default_factory=dict)
    disagrees: dict[str, object] = field(default_factory=dict)


def pages_of(rr: RunRecords) -> CasePages:
    """What the site shows of a run's records, made when the run was scored for the site (score_runs)."""
    assert isinstance(rr.run.pages, CasePages), "the site's runs are scored with its case renderer"
    return rr.run.pages


def site_cases(runs: list[Run], dataset: Path | None) -> dict[str, Case]:
    """The cases the site shows with the runs: those of `dataset`, else of the dataset the runs name (none when it
    cannot be read: the pages then say so)."""
    path = named_dataset(runs, dataset)
    if path is None:
        return {}
    try:
        return {c.number: c for c in load_dataset(path)[0]}
    except HarnessError:
        return {}


def key_details(case: Case | None) -> list[str]:
    if case is None:
        return []
    kd = case.key_details
    return [d for ds in kd.values() for d in ds] if isinstance(kd, dict) else list(kd)


def case_renderer(cases: dict[str, Case]) -> Render:
    """What `score_runs` calls with each run's records for the site: its `CasePages`; `place` numbers the run's
    messages, apart from every other run's on a page."""

    def render(run: Run, place: int, records: dict, source: dict | None) -> CasePages:
        rr, pages = RunRecords(run, "", records, "", run_settings(run.manifest)), CasePages()
        for n in run.selected:
            case = cases.get(n)
            pages.transcripts[n] = transcript(rr, case, n, key_details(case), source, place)
            pages.infos[n] = run_info(rr.settings, records, n)
            pages.rows[n] = outcomes(rr, n)
            found = None if case else next((rec for kind in records.values() if (rec := kind.get(n))), None)
            if found:  # the cause as the records say, for a site without the dataset
                pages.causes[n] = found.get("cause_of_action")
            if run.manifest.rejudged_from:
                pages.disagrees[n] = disagreements(records, source, n)
        return pages

    return render


def shown_runs(groups: list[Group]) -> list[RunRecords]:
    """The runs of the site, each labelled by its group and run id, its pages made by `case_renderer`."""
    return [
        RunRecords(run, f"{g.label} · {run.run_id}", {}, g.label, run_settings(run.manifest))
        for g in groups
        for run in g.runs
    ]


PAGE = web_file("page.html")  # every page: {title}, {style}, {up} (the way to the top), {body}
STYLE = web_file("style.css")


def page(title: str, body: str, up: str = "") -> str:
    return PAGE.format(title=esc(title), style=STYLE, body=body, up=up)


NO_FIGURE = ("n/a", "-", "")  # a cell that measured nothing: a link from it would only repeat its row's


def table_html(t: Table, link) -> str:
    t = t.at()  # the paper's precision, as the terminal shows it
    head = "".join(f"<th>{esc(h)}</th>" for h in t.headers)
    rows = []
    for n, r in enumerate(t.rows):
        cells = []
        for i, value in enumerate(r):
            href = link(t, r, t.headers[i], n) if i and value not in NO_FIGURE else None
            cells.append(
                f'<td><a href="{esc(href)}">{esc(value)}</a></td>' if href else f"<td>{esc(value)}</td>"
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f'<h3>{esc(t.title)}</h3><table class="results"><tr>{head}</tr>{"".join(rows)}</table>'


def overview(tables: list[Table], groups: list[Group], figures: Sequence[TaskFigure] = ()) -> str:
    """The report's tables, each cell linked to its cases; the ranking figures right after the main table (first,
    when there is none)."""
    labels = {g.label for g in groups}
    models = {g.model for g in groups}
    classes = {k.part for g in groups for r in g.runs for k in r.metrics}
    causes = {k.part for g in groups for r in g.runs for k in r.metrics if k.family == "by cause"}

    model_of = {g.label: g.model for g in groups}

    def link(table: Table, row: list, header: str, index: int) -> str | None:
        task = table.task_of(header, row)  # declared by the table, whatever its title says
        # what this row alone selects
        own = table.row_queries[index] if index < len(table.row_queries) else {}
        own = own | (table.cell_queries[index].get(header, {}) if index < len(table.cell_queries) else {})
        # consistency: the cases a model gets wrong in every run; judges: where they disagree
        if table.compare:
            query = (
                {"mode": "never", "model": model_of.get(row[0], row[0]), "task": task}
                if table.compare == "never"
                else {"mode": "disagree", "judged": task}
            )
            return "compare.html#" + urlencode(query | own) if task else None
        # a task with a wrong outcome puts its wrong cases first; one without (the plain consultation's response
        # type) sorts the list by its column
        about = ({"task": task} if task in WRONG_FIRST else {"sort": task}) if task else {}
        cls = {"class": header} if header in classes and header != "Overall" else {}
        # Figure 4's types
        cls |= next(({"focal": x} for x in (header, row[0]) if x in FOCAL_TYPES.values()), {})
        if table.row_filter:  # rows of causes (Figure 3), of one group's cases
            if row[0] not in causes:  # a summary row (Spearman's rho) is about no case
                return None
            query = {"group": table.group or "", table.row_filter: row[0]} | about
        # a row names its group (a model, or a model's other settings): that group's runs
        elif row[0] in labels:
            query = {"group": row[0]} | about | cls
        elif row[0] in models:  # Table 15 names a model
            query = {"model": row[0]} | about | cls
        elif cls and task:  # a row of a type or a category, a column of a class (Figure 4 c): every model
            query = cls | about
        else:
            return None
        extra = table.query | table.column_query.get(header, {}) | own
        return "cases.html#" + urlencode({k: v for k, v in (query | extra).items() if v})

    shown = [table_html(t, link) for t in tables]
    main = next((i + 1 for i, t in enumerate(tables) if t.id == "main"), 0)
    shown.insert(main, rankings_html(list(figures)))
    return "<h1>LexPilot results</h1>" + "".join(shown)


SIDE_SCRIPT = web_file("side.js")  # a case page's runs side by side, and its parts


def case_page(number: str, case: Case | None, loaded: list[RunRecords]) -> str:
    details = key_details(case)
    if case is not None:
        claims = "".join(
            f"<tr><td>{esc(c)}</td><td>{esc(v)}</td></tr>" for c, v in zip(case.claims, case.verdicts)
        )
        head = (
            f"<h1>{esc(number)}</h1><p>{esc(case.cause)} · {esc(case.cause_class)} · {esc(case.plaintiff_type)}</p>"
            f"<details open><summary>Underspecified history</summary>{dialogue_html(case.underspecified)}</details>"
            f"<details><summary>Complete history</summary>{dialogue_html(case.complete)}</details>"
            "<h3>Focal points</h3><ul>" + "".join(f"<li>{esc(p)}</li>" for p in case.focal_points) + "</ul>"
            "<h3>Key details</h3><ol>" + "".join(f"<li>{esc(d)}</li>" for d in details) + "</ol>"
            f"<h3>Claims and the court's verdicts</h3><table><tr><th>Claim</th><th>Verdict</th></tr>{claims}</table>"
        )
    else:
        head = f"<h1>{esc(number)}</h1><p>The dataset was not available: pass --dataset to see the case itself.</p>"
    # each run's tasks fold away: at 10 models × 5 runs the page is a list of runs, not one long column
    sections = "".join(
        f'<section class="run" id="run{i}" data-run="{i}" data-label="{esc(rr.label)}"><details{" open" if i < 2 else ""}>'
        f"<summary><h2>{esc(rr.label)}</h2></summary>"
        f"{pages_of(rr).transcripts[number]}"
        "</details></section>"
        for i, rr in enumerate(loaded)
    )
    shown = "".join(f'<option value="{k}">{esc(part.title)}</option>' for k, part in PARTS.items())
    controls = (
        '<p><label><input type="checkbox" id="side"> side by side</label> '
        '<select id="left"></select> <select id="right"></select> '
        f'<label>Show <select id="part"><option value="">every task</option>{shown}</select></label></p>'
    )
    calls = script_json(call_data(case, [pages_of(rr).infos[number] for rr in loaded]))
    return (
        head + controls + f'<div id="runs">{sections}</div><script>{SIDE_SCRIPT}</script>'
        f'<script type="application/json" id="calls">{calls}</script><script>{CALL_SCRIPT}</script>'
    )


def _case_list_rows(
    loaded: list[RunRecords], cases: dict[str, Case], pages: dict[str, int]
) -> tuple[list, dict]:
    """The case list's rows, one per case and run in the order of `pages`, and each case's history text."""
    rows, texts = [], {}
    for n in pages:
        case = cases.get(n)
        cause = (
            case.cause
            if case
            else next((pages_of(rr).causes[n] for rr in loaded if n in pages_of(rr).causes), "")
        )
        try:
            cls = cause_class(cause) if cause is not None else "?"  # None: the records name no cause
        except KeyError:
            cls = "?"
        for rr in loaded:
            if n in pages_of(rr).rows:
                row = pages_of(rr).rows[n] | {"label": rr.label, "group": rr.group}
                row |= {
                    "case": n,
                    "cause": cause,
                    "class": cls,
                    "page": pages[n],
                    "search": f"{n} {cause} {rr.label}".lower(),
                }
                # a re-judged run's decisions against its source's, on this case
                if n in pages_of(rr).disagrees:
                    row |= {"rejudged": True, "disagrees": pages_of(rr).disagrees[n]}
                rows.append(row)
        # the history's text once per case, not once per run: the case list at 50 runs carries it 50 times less
        texts[n] = " ".join(m["content"] for m in (case.underspecified if case else ())).lower()
    return rows, texts


def not_run(loaded: list[RunRecords]) -> tuple[list[str], str]:
    """The case list's outcome columns some run shown ran a stage for (an empty column says nothing), and per run
    label, as JSON, the columns shown whose stage that run did not run (their cells say "not run")."""
    unrun = {rr.label: columns_not_run(rr.run.ran) for rr in loaded}
    shown = [key for key, _, _ in OUTCOME_COLUMNS if any(key not in keys for keys in unrun.values())]
    return shown, script_json({label: [k for k in keys if k in shown] for label, keys in unrun.items()})


def write_site(
    folder: Path,
    groups: list[Group],
    tables: list[Table],
    cases: dict[str, Case],
    processes: int | None = None,
    figures: Sequence[TaskFigure] = (),
) -> int:
    """Writes the site of runs scored with `case_renderer(cases)`, the case pages in `processes` processes (default:
    one per core), the ranking `figures` in the overview; returns the number of case pages."""
    loaded = shown_runs(groups)
    numbers = list(dict.fromkeys(n for rr in loaded for n in rr.run.selected))
    pages = {n: i for i, n in enumerate(numbers)}
    rows, texts = _case_list_rows(loaded, cases, pages)
    try:
        (folder / "case").mkdir(parents=True, exist_ok=True)
        (folder / "index.html").write_text(
            page("LexPilot results", overview(tables, groups, figures)), encoding="utf-8"
        )
        rows_json = script_json(rows)  # one encoding for both pages
        (folder / "cases.html").write_text(
            page("Cases", case_list(rows_json, script_json(texts), *not_run(loaded))), encoding="utf-8"
        )
        (folder / "compare.html").write_text(
            page("Compare", compare_page(rows_json, script_json(OUTCOME_TASKS))), encoding="utf-8"
        )

        def write_case(n: str) -> None:
            body = case_page(n, cases.get(n), [rr for rr in loaded if n in pages_of(rr).rows])
            (folder / "case" / f"{pages[n]}.html").write_text(page(n, body, up="../"), encoding="utf-8")

        # a case page holds a fragment of each run that has the case: as many as the scoring made
        fragments = sum(len(pages_of(rr).rows) for rr in loaded)
        fork_map(write_case, list(pages), processes or workers(len(pages), fragments))
    except OSError as e:
        raise HarnessError(f"--html {folder}: cannot write the site there ({e.strerror or e})") from None
    return len(pages)
