"""The case list (cases.html): one row per case and run with its outcome on every task and the tasks it gets wrong,
its filters, sorting and text search written to the address; "Wrong first" puts a task's wrong cases first.
"""

from __future__ import annotations

from lexpilot.benchmark.categories import FOCAL_TYPES
from lexpilot.benchmark.records import (
    AUDIT,
    DCG,
    FOCAL_TYPE_RECORDS,
    INTERACTION,
    LCA,
    LJP_BEHAVIOUR,
    LJP_ORDER,
    PLAIN_TYPES,
    SETUP,
)
from lexpilot.benchmark.vocabulary import ASKS, PREDICTS
from lexpilot.reporting.scoring.metrics import audit_counts, protocol_turn
from lexpilot.reporting.scoring.scoring import STOP_TAGS, stop_category
from lexpilot.reporting.site.case_sections import (
    esc,
)
from lexpilot.reporting.site.comparisons import (
    OUTCOME_NAMES,
)
from lexpilot.reporting.site.transcripts import SETUPS, RunRecords
from lexpilot.reporting.site.web_files import web_file
from lexpilot.reporting.tables.audit import AUDIT_FLAG_TAGS, AUDIT_FLAGS, AUDIT_TAGS
from lexpilot.reporting.tables.claim_order import ORDER_CHANGED, ORDER_TAGS
from lexpilot.reporting.tables.focal_types import TYPED
from lexpilot.reporting.tables.formats import PLAIN_TYPE_NAMES, plain_tag


def outcomes(rr: RunRecords, number: str) -> dict:
    """One row of the case list: the outcome of every task of one case in one run."""
    r = rr.records
    row: dict = {
        "model": rr.run.model,
        "run": rr.run.run_id,
        "label": rr.label,
        "group": rr.group,
        "tags": [],
    }
    _protocol_outcomes(row, r, number)
    _later_outcomes(row, rr, number)
    _audit_outcomes(row, r, number)
    row["fails"] = failing_tasks(row)
    expected = (
        [LCA.name, DCG.name, *(s.task for s in SETUPS)]
        if rr.run.condition == "standard"
        else [SETUP["interaction"].task]  # a non-ideal user's run has the interaction only
    )
    # a task whose stage was not run for the run is no failure of the case: its cell says "not run" instead
    if any(k in rr.run.ran and number not in r[k] for k in expected):
        row["tags"].append(UNRESOLVED)
    # the outcomes are shown in the row; the finer tags (a stop round, a setup, a response type, an audit) only
    # select rows, so that a row stays one or two lines high
    tags = sorted(set(row["tags"]))
    row["tags"], row["marks"] = [t for t in tags if not is_mark(t)], [t for t in tags if is_mark(t)]
    return row


def _protocol_outcomes(row: dict, r: dict, number: str) -> None:
    """The row's LCA labels, DCG success, verdicts right per setup, the interaction's stop and questions."""
    lca = r[LCA.name].get(number)
    if lca:
        row["lca_c"], row["lca_u"] = (lca["judgments"][t]["label"] for t in ("complete", "underspecified"))
        if row["lca_c"] == ASKS:
            row["tags"].append("over-asking")
    dcg = r[DCG.name].get(number)
    if dcg:
        row["dcg"] = bool(dcg["success"])
        if not dcg["success"]:
            row["tags"].append("DCG miss")
    for setup in SETUPS:
        v = r[setup.task].get(number)
        if v:
            right = sum(g == p for g, p in zip(v["gold"], v["predicted"]))
            row[setup.name] = f"{right}/{len(v['gold'])}"
            if right < len(v["gold"]):
                row["tags"].append("wrong verdict")
    inter = r[INTERACTION.name].get(number)
    if inter:
        row["stop"] = inter["stop_reason"]
        row["questions"] = sum(x.get("label") == ASKS for x in inter["rounds"])
        row["tags"].append(STOP_TAGS[stop_category(inter)])  # premature, judged in round 2 or 3, budget


def _later_outcomes(row: dict, rr: RunRecords, number: str) -> None:
    """The later stages' outcomes: Table 4's verdicts, the claim order, focal types, the plain type."""
    r = rr.records
    for condition, kind in LJP_BEHAVIOUR.items():
        v = r.get(kind.name, {}).get(number)
        if v:
            right = sum(g == p for g, p in zip(v["gold"], v["predicted"]))
            row[condition] = f"{right}/{len(v['gold'])}"
    for (
        setup,
        kind,
    ) in LJP_ORDER.items():  # the claim-order diagnostic: a verdict changed with the claims shuffled
        reordered = r.get(kind.name, {}).get(number)
        if reordered and reordered.get("predicted") != reordered.get("original"):
            row["tags"] += [ORDER_CHANGED, ORDER_TAGS[setup]]  # in some setup, and in this one
    typed = r.get(FOCAL_TYPE_RECORDS.name, {}).get(number)
    if typed:  # Figure 4: the types of the case's focal points
        row["focal"] = sorted(
            {FOCAL_TYPES.get(t.get("type"), str(t.get("type"))) for t in typed.get("types", [])}
        )
        if rr.run.condition == "standard" and not rr.run.manifest.rejudged:
            row["tags"].append(TYPED)  # a run Figure 4's averages are over
    for history_type, kind in PLAIN_TYPES.items():  # Table 6: the plain consultation's response type
        plain = r.get(kind.name, {}).get(number)
        if plain:
            name = PLAIN_TYPE_NAMES.get(plain.get("type"), plain.get("type"))
            row["tags"].append(plain_tag(history_type, name))
            if history_type == "underspecified":
                row["plain"] = name


def _audit_outcomes(row: dict, r: dict, number: str) -> None:
    """The row's simulator audit: per source, its tags and how many of its replies were flagged."""
    said, flags = [], 0
    for (
        source,
        kind,
    ) in AUDIT.items():  # the simulator audit's replies (a protocol's own turns are not audited)
        record = r.get(kind.name, {}).get(number)
        counts = audit_counts(record) if record and isinstance(record.get("replies"), list) else None
        if counts is None or not counts[0]:
            continue
        row["tags"].append(AUDIT_TAGS[source])
        row["tags"] += [
            AUDIT_FLAG_TAGS[(source, metric)] for (metric, _), n in zip(AUDIT_FLAGS, counts[1:]) if n
        ]
        flagged = sum(
            1
            for x in record["replies"]
            if not protocol_turn(x)
            and (x.get("over_disclosed") or x.get("error") or not x.get("answered", True))
        )
        said.append(f"{AUDIT_NAMES[source]} {f'{flagged} flagged' if flagged else 'clean'}")
        flags += flagged
    if said:  # per source: a DCG reply's flag is not the interaction's
        row["audit"], row["audit_flagged"] = "; ".join(said), flags


AUDIT_NAMES = {"dcg": "DCG", "interaction": "interaction"}
UNRESOLVED = "unresolved or failed"  # a task whose stage ran for the run saved no record of the case
NOT_RUN = "not run"  # a cell whose task's stage was not run for the run

# the case list's columns of outcomes (key, heading, the record kinds it is read from), in their order
OUTCOME_COLUMNS = (
    ("lca_c", "LCA complete", (LCA,)),
    ("lca_u", "LCA underspecified", (LCA,)),
    ("dcg", "DCG success", (DCG,)),
    ("direct", "Direct right", (SETUP["direct"].verdicts,)),
    ("gold", "Gold right", (SETUP["gold"].verdicts,)),
    ("interaction", "Interaction right", (SETUP["interaction"].verdicts,)),
    ("stop", "Stop", (INTERACTION,)),
    ("questions", "Questions", (INTERACTION,)),
    ("targeted", "Targeted right", (LJP_BEHAVIOUR["targeted"],)),
    ("off_target", "Off-target right", (LJP_BEHAVIOUR["off_target"],)),
    ("plain", "Plain type", (PLAIN_TYPES["underspecified"],)),
    ("audit", "Audit", tuple(AUDIT.values())),
)


def columns_not_run(ran: set[str]) -> list[str]:
    """The outcome columns (keys) none of whose record kinds was run for a run (`ran`: the kinds its stages ran for)."""
    return [key for key, _, kinds in OUTCOME_COLUMNS if not any(k.name in ran for k in kinds)]


def is_mark(tag: str) -> bool:
    """A tag that selects rows without being shown in them (the links of the overview's finer cells use them)."""
    return (
        tag in ORDER_TAGS.values()
        or tag in AUDIT_TAGS.values()
        or tag in AUDIT_FLAG_TAGS.values()
        or tag.startswith("plain")
        or tag == TYPED
        or tag in (STOP_TAGS["round 2"], STOP_TAGS["round 3"])
    )


def failing_tasks(row: dict) -> list[str]:
    """The tasks (as the overview's links name them) this case gets wrong in this run: an LCA label against its
    history's truth (the complete history answered, the underspecified asked), a DCG miss, a verdict wrong."""
    fails = []
    if "lca_c" in row and (row["lca_c"] != PREDICTS or row["lca_u"] != ASKS):
        fails.append("LCA")
    if row.get("dcg") is False:
        fails.append("DCG")
    if row.get("audit_flagged"):  # a reply of either source flagged ("DCG clean; interaction clean" is clean)
        fails.append("audit")
    for task in ("direct", "gold", "interaction", "targeted", "off_target"):
        right, _, total = str(row.get(task, "")).partition("/")
        if total and right != total:
            fails.append(task)
    return fails


CASES_SCRIPT = web_file("cases.js")  # the filters, sort and address of the case list


WRONG_FIRST = OUTCOME_NAMES  # the tasks whose wrong cases the case list can put first


def case_list(rows_json: str, texts_json: str, columns: list[str], not_run_json: str) -> str:
    """The case list: `rows_json` a row per case and run, `texts_json` each case's history text for the search,
    `columns` the outcome columns shown (those some run shown ran a stage for), `not_run_json` per run label the
    columns whose stage it did not run."""
    headers = [
        ("case", "Case"),
        ("cause", "Cause"),
        ("class", "Class"),
        ("label", "Model · run"),
        ("tags", "Outcome"),
        *((key, name) for key, name, _ in OUTCOME_COLUMNS if key in columns),
    ]
    selects = "".join(
        f'<label>{name} <select id="{key}"><option value="">all</option></select></label> '
        for key, name in (
            ("model", "Model"),
            ("group", "Group"),
            ("run", "Run"),
            ("class", "Class"),
            ("cause", "Cause"),
            ("focal", "Focal type"),
            ("tag", "Outcome"),
        )
    )
    # the task whose wrong cases come first (an overview cell's link sets it; "none" clears it)
    tasks = "".join(f'<option value="{t}">{esc(name)}</option>' for t, name in WRONG_FIRST.items())
    return (
        "<h1>Cases</h1><p>" + selects + '<label>Text <input id="text" type="search"></label> '
        f'<label>Wrong first <select id="task"><option value="">none</option>{tasks}</select></label></p>'
        '<p id="count"></p><table id="cases"><thead><tr>'
        + "".join(f'<th data-key="{k}">{esc(n)}</th>' for k, n in headers)
        + '</tr></thead><tbody id="rows">'
        '</tbody></table><button id="more" hidden>Show more</button>'
        f'<script type="application/json" id="data">{rows_json}</script>'
        f'<script type="application/json" id="texts">{texts_json}</script>'
        f'<script type="application/json" id="not-run">{not_run_json}</script><script>{CASES_SCRIPT}</script>'
    )
