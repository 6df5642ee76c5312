"""The viewer's comparison page (compare.html): for any task, a matrix of cases × models and runs with the outcome
in each cell (filterable to failures), the cases right under A and wrong under B, the cases a model gets wrong in
every run, and the cases where a re-judged run's judge disagrees with the original judge on what it judged. It reads the case list's
rows (one per case and run, with the tasks each gets wrong); every choice is written to the address.
"""

from __future__ import annotations

from lexpilot.benchmark.records import (
    DCG,
    INTERACTION,
    INTERACTION_LABELS,
    LCA,
    LJP_SETUPS,
)
from lexpilot.reporting.site.web_files import web_file
from lexpilot.reporting.tables.rejudged import JUDGED_TASKS

# the tasks with a wrong outcome: their names, as the case list and this page show them
OUTCOME_NAMES = {
    "LCA": "LCA",
    "DCG": "DCG",
    **{s.name: s.short for s in LJP_SETUPS},
    "targeted": "Targeted",
    "off_target": "Off-target",
    "audit": "audit flagged",
}
# the tasks a case has an outcome in (task, the case list row's field it is read from, its name): not scoring.TASKS,
# the metrics' tasks
OUTCOME_TASKS = tuple(
    (task, field, OUTCOME_NAMES[task])
    for task, field in (
        ("LCA", "lca_c"),
        ("DCG", "dcg"),
        ("direct", "direct"),
        ("gold", "gold"),
        ("interaction", "interaction"),
        ("targeted", "targeted"),
        ("off_target", "off_target"),
        ("audit", "audit"),
    )
)

COMPARE_SCRIPT = web_file("compare.js")  # the matrix of cases by models and runs


def compare_page(rows_json: str, tasks_json: str) -> str:
    """The page's controls and table; `rows_json`: the case list's rows, safe inside a script element."""
    return (
        '<h1>Compare</h1><p><label>View <select id="mode">'
        '<option value="matrix">cases × models and runs</option>'
        '<option value="ab">right under A, wrong under B</option>'
        '<option value="never">wrong in every run of a model</option>'
        '<option value="disagree">the two judges disagree</option></select></label> '
        '<label>Task <select id="task"></select></label> <label>Judged <select id="judged">'
        + "".join(f'<option value="{t}">{t}</option>' for t in JUDGED_TASKS)
        + "</select></label> "
        '<label>Re-judged run <select id="rejudged"><option value="">every one</option></select></label> '
        '<label>A <select id="a"></select></label> '
        '<label>B <select id="b"></select></label> <label>Model <select id="model"></select></label> '
        '<label><input type="checkbox" id="failures"> failures only</label></p><p id="count"></p>'
        '<table><thead id="head"></thead><tbody id="body"></tbody></table><button id="more" hidden>Show more</button>'
        f'<script type="application/json" id="data">{rows_json}</script>'
        f'<script type="application/json" id="tasks">{tasks_json}</script><script>{COMPARE_SCRIPT}</script>'
    )


def judge_decisions(records: dict, number: str, rejudged: bool) -> dict[str, list]:
    """Per task, the judge's decisions on one case: LCA labels per history, DCG labels per question, the extracted
    verdicts per LJP setup, the interaction's round labels (a re-judged run keeps them in interaction_labels)."""
    get = lambda kind: (records.get(kind.name) or {}).get(number) or {}  # noqa: E731
    rounds = get(INTERACTION_LABELS if rejudged else INTERACTION).get("rounds", [])
    return {
        "LCA": [j.get("label") for _, j in sorted(get(LCA).get("judgments", {}).items())],
        "DCG": [x.get("label") for x in get(DCG).get("rounds", [])],
        **{s.name: list(get(s.verdicts).get("predicted", [])) for s in LJP_SETUPS},
        "interaction rounds": [x.get("label") for x in rounds if x.get("label") is not None],
    }


def disagreements(records: dict, source: dict | None, number: str) -> list[str]:
    """The tasks on which a re-judged run's judge decided otherwise than its source run's, on the same case (label
    by label, not only the outcome)."""
    if source is None:
        return []
    mine, theirs = judge_decisions(records, number, True), judge_decisions(source, number, False)
    return [task for task, labels in mine.items() if labels and theirs.get(task) and labels != theirs[task]]
