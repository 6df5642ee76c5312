"""The transcript viewer: a self-contained static site written from saved runs (`show_results.py --html DIR`).

index.html   the report's tables, each model's cells linking to the cases behind them
cases.html   every selected case per model and run with its outcome on each task; filters, sorting, free text
case/N.html  one case: histories, focal points, key details, claims with gold verdicts, then per model and run
             each task's transcript in protocol order; a side-by-side mode for two models or runs
Everything is escaped (model outputs and dataset text are untrusted); the pages use no network, no server and
no file outside the folder, so the folder can be zipped and sent.

Key details in a User Model reply are highlighted by a simple rule: a key detail counts as present where a run
of at least HIGHLIGHT_RUN consecutive characters of it appears verbatim in the reply.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from categories import FOCAL_TYPES, cause_class
from lexpilot.benchmark.dataset import Case, load_dataset
from lexpilot.benchmark.prompts import render_fault
from lexpilot.benchmark.records import (
    A1,
    AUDIT,
    DCG,
    DIRECT_PREDICTION,
    FOCAL_TYPE_RECORDS,
    FORCE_ASK,
    GOLD_PREDICTION,
    INTERACTION,
    INTERACTION_LABELS,
    LCA,
    LJP_BEHAVIOUR,
    LJP_DIRECT,
    LJP_GOLD,
    LJP_INTERACTION,
    LJP_ORDER,
    PLAIN_TYPES,
)
from lexpilot.benchmark.vocabulary import ASKS, PREDICTS
from lexpilot.errors import HarnessError
from lexpilot.reporting.analyses import ORDER_CHANGED
from lexpilot.reporting.calls_view import (
    CALL_SCRIPT,
    call_button,
    call_data,
    raw_slot,
    run_settings,
)
from lexpilot.reporting.case_sections import KINDS as LATER_KINDS
from lexpilot.reporting.case_sections import (
    audit_call,
    audit_note,
    esc,
    later_sections,
    lca_label,
    msg,
    rejudged,
)
from lexpilot.reporting.comparisons import (
    TASK_NAMES,
    TASKS,
    compare_page,
    disagreements,
)
from lexpilot.reporting.formats import PLAIN_TYPE_NAMES
from lexpilot.reporting.groups import Group, group_label
from lexpilot.reporting.judges import source_of
from lexpilot.reporting.parallel import fork_map, workers
from lexpilot.reporting.runs import Run, read_saved
from lexpilot.reporting.table import Table

HIGHLIGHT_RUN = 6
SETUPS = (("direct", "Direct", DIRECT_PREDICTION, LJP_DIRECT, "response"),
          ("gold", "Gold-Standard", GOLD_PREDICTION, LJP_GOLD, "response"),
          ("interaction", "Interaction-Based", INTERACTION, LJP_INTERACTION, "final_response"))
KINDS = (A1, LCA, INTERACTION, FORCE_ASK, DCG, DIRECT_PREDICTION, LJP_DIRECT, GOLD_PREDICTION, LJP_GOLD, LJP_INTERACTION,
         *LATER_KINDS)


def script_json(data) -> str:
    """JSON that can sit inside a <script> element: no '<', '>' or '&' can end it or open a tag."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def highlighted(text: str, details: list[str]) -> tuple[str, list[str]]:
    """Escaped text with the runs of key details it contains marked, and the details found."""
    marks = [False] * len(text)
    found = []
    for detail in details:
        hit = False
        for start in range(0, max(len(detail) - HIGHLIGHT_RUN + 1, 0)):
            piece = detail[start:start + HIGHLIGHT_RUN]
            at = text.find(piece)
            while at >= 0:
                hit = True
                for i in range(at, at + HIGHLIGHT_RUN):
                    marks[i] = True
                at = text.find(piece, at + 1)
        if hit:
            found.append(detail)
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and marks[j] == marks[i]:
            j += 1
        out.append(f"<mark>{esc(text[i:j])}</mark>" if marks[i] else esc(text[i:j]))
        i = j
    return "".join(out), found


@dataclass
class RunRecords:
    run: Run
    label: str  # the group label and run id, as shown
    records: dict = field(default_factory=dict)  # kind name -> case_number -> record
    group: str = ""  # the group's label: what an overview row names
    settings: dict = field(default_factory=dict)  # its exact calls' roles and changed prompt files (run_settings)


def load_records(root: Path, groups: list[Group]) -> list[RunRecords]:
    loaded = []
    for g in groups:
        for run in g.runs:
            records = run.saved if run.saved is not None else {kind.name: read_saved(run, root, kind)[0]
                                                               for kind in KINDS}
            loaded.append(RunRecords(run, f"{group_label(g, groups)} · {run.run_id}", records, group_label(g, groups),
                                     run_settings(run.manifest)))
    return loaded


def outcomes(rr: RunRecords, number: str) -> dict:
    """One row of the case list: the outcome of every task of one case in one run."""
    r = rr.records
    row: dict = {"model": rr.run.model, "run": rr.run.run_id, "label": rr.label, "group": rr.group, "tags": []}
    lca = r["LCA"].get(number)
    if lca:
        row["lca_c"], row["lca_u"] = (lca["judgments"][t]["label"] for t in ("complete", "underspecified"))
        if row["lca_c"] == ASKS:
            row["tags"].append("over-asking")
    dcg = r["DCG"].get(number)
    if dcg:
        row["dcg"] = bool(dcg["success"])
        if not dcg["success"]:
            row["tags"].append("DCG miss")
    for setup, _, _, verdicts, _ in SETUPS:
        v = r[verdicts.name].get(number)
        if v:
            right = sum(g == p for g, p in zip(v["gold"], v["predicted"]))
            row[setup] = f"{right}/{len(v['gold'])}"
            if right < len(v["gold"]):
                row["tags"].append("wrong verdict")
    inter = r["interaction"].get(number)
    if inter:
        row["stop"] = inter["stop_reason"]
        row["questions"] = sum(x.get("label") == ASKS for x in inter["rounds"])
        if inter["stop_reason"] == "judged" and len(inter["rounds"]) == 1:
            row["tags"].append("premature judgment")
        if inter["stop_reason"] == "budget":
            row["tags"].append("budget reached")
    for condition, kind in LJP_BEHAVIOUR.items():
        v = r.get(kind.name, {}).get(number)
        if v:
            right = sum(g == p for g, p in zip(v["gold"], v["predicted"]))
            row[condition] = f"{right}/{len(v['gold'])}"
    if any((r.get(kind.name, {}).get(number) or {}).get("predicted") != (r.get(kind.name, {}).get(number) or {}).get(
            "original") for kind in LJP_ORDER.values() if number in r.get(kind.name, {})):
        row["tags"].append(ORDER_CHANGED)  # the claim-order diagnostic: a verdict changed with the claims shuffled
    typed = r.get(FOCAL_TYPE_RECORDS.name, {}).get(number)
    if typed:  # Figure 4: the types of the case's focal points
        row["focal"] = sorted({FOCAL_TYPES.get(t.get("type"), str(t.get("type"))) for t in typed.get("types", [])})
    plain = r.get(PLAIN_TYPES["underspecified"].name, {}).get(number)
    if plain:
        row["plain"] = PLAIN_TYPE_NAMES.get(plain.get("type"), plain.get("type"))
    audited = [reply for kind in AUDIT.values() for reply in (r.get(kind.name, {}).get(number) or {}).get("replies", [])
               if not reply.get("injected")]
    if audited:
        flagged = sum(bool(x.get("over_disclosed") or x.get("error") or not x.get("answered", True)) for x in audited)
        row["audit"] = f"{flagged} flagged" if flagged else "clean"
    row["fails"] = failing_tasks(row)
    expected = ["LCA", "DCG", "LJP_direct", "LJP_gold", "LJP_interaction"] if rr.run.condition == "standard" \
        else ["LJP_interaction"]
    if any(number not in r[k] for k in expected):
        row["tags"].append("unresolved or failed")
    row["tags"] = sorted(set(row["tags"]))
    return row


PAGE = """<!DOCTYPE html>
<html lang="zh"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{title}</title><style>{style}</style></head><body>
<nav><a href="{up}index.html">Overview</a> · <a href="{up}cases.html">Cases</a> · <a href="{up}compare.html">Compare</a></nav>
{body}
</body></html>
"""
STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;
vertical-align:top}th{background:#f3f3f3;cursor:pointer}a{color:#1558b0}nav{margin-bottom:1em}
.msg{white-space:pre-wrap;border-left:3px solid #bbb;padding:.2em .6em;margin:.3em 0}.user{border-color:#2a7}
.assistant{border-color:#36c}.judge{border-color:#c63;font-size:.9em;color:#555}mark{background:#fe8}
.tag{display:inline-block;background:#eee;border-radius:3px;padding:0 .3em;margin:0 .2em;font-size:.85em}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:1em}.ok{color:#282}.bad{color:#b22}
details{margin:.4em 0}summary{cursor:pointer;font-weight:600}summary h2{display:inline}tr.failing td{background:#fdecec}
button.call{margin-left:.5em;font-size:.75em}pre.prompt{white-space:pre-wrap;background:#f7f7f7;padding:.5em;font-size:.85em}
@media (max-width:900px){body{margin:.6em}.grid{grid-template-columns:1fr}table{display:block;overflow-x:auto}
select,input{max-width:100%}}"""


def failing_tasks(row: dict) -> list[str]:
    """The tasks (as the overview's links name them) this case gets wrong in this run: an LCA label against its
    history's truth (the complete history answered, the underspecified asked), a DCG miss, a verdict wrong."""
    fails = []
    if "lca_c" in row and (row["lca_c"] != PREDICTS or row["lca_u"] != ASKS):
        fails.append("LCA")
    if row.get("dcg") is False:
        fails.append("DCG")
    if str(row.get("audit", "clean")) != "clean":
        fails.append("audit")
    for task in ("direct", "gold", "interaction", "targeted", "off_target"):
        right, _, total = str(row.get(task, "")).partition("/")
        if total and right != total:
            fails.append(task)
    return fails


def page(title: str, body: str, up: str = "") -> str:
    return PAGE.format(title=esc(title), style=STYLE, body=body, up=up)


def table_html(t: Table, link) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in t.headers)
    rows = []
    for r in t.rows:
        cells = []
        for i, value in enumerate(r):
            href = link(t, r, t.headers[i]) if i else None
            cells.append(f'<td><a href="{esc(href)}">{esc(value)}</a></td>' if href else f"<td>{esc(value)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<h3>{esc(t.title)}</h3><table><tr>{head}</tr>{''.join(rows)}</table>"


def overview(tables: list[Table], groups: list[Group]) -> str:
    labels = {group_label(g, groups) for g in groups}
    models = {g.model for g in groups}
    classes = {c for g in groups for r in g.runs for k in r.metrics for c in [k[2]]}
    causes = {k[2] for g in groups for r in g.runs for k in r.metrics if k[0] == "by cause"}

    model_of = {group_label(g, groups): g.model for g in groups}

    def link(table: Table, row: list, header: str) -> str | None:
        task = table.task_of(header, row)  # declared by the table, whatever its title says
        if table.compare:  # consistency: the cases a model gets wrong in every run; judges: where they disagree
            query = {"mode": "never", "model": model_of.get(row[0], row[0]), "task": task} \
                if table.compare == "never" else {"mode": "disagree", "judged": task}
            return "compare.html#" + urlencode(query) if task else None
        # a task with a wrong outcome puts its wrong cases first; one without (the plain consultation's response
        # type) sorts the list by its column
        about = ({"task": task} if task in WRONG_FIRST else {"sort": task}) if task else {}
        cls = {"class": header} if header in classes and header != "Overall" else {}
        cls |= next(({"focal": x} for x in (header, row[0]) if x in FOCAL_TYPES.values()), {})  # Figure 4's types
        if table.row_filter:  # rows of causes (Figure 3), of one group's cases
            if row[0] not in causes:  # a summary row (Spearman's rho) is about no case
                return None
            query = {"group": table.group or "", table.row_filter: row[0]} | about
        elif row[0] in labels:  # a row names its group (a model, or a model's other settings): that group's runs
            query = {"group": row[0]} | about | cls
        elif row[0] in models:  # Table 15 names a model
            query = {"model": row[0]} | about | cls
        elif cls and task:  # a row of a type or a category, a column of a class (Figure 4 c): every model
            query = cls | about
        else:
            return None
        return "cases.html#" + urlencode({k: v for k, v in (query | table.query).items() if v})
    return "<h1>LexPilot results</h1>" + "".join(table_html(t, link) for t in tables)


CASES_SCRIPT = """
const rows = JSON.parse(document.getElementById('data').textContent);
const texts = JSON.parse(document.getElementById('texts').textContent);  // case -> its history, for the text search
const names = Object.fromEntries([...document.getElementById('task').options].map(o=>[o.value,o.textContent]));  // task -> its name
const f = id => document.getElementById(id);
let sortKey = 'case', sortDir = 1, limit = 200;  // the first screen draws 200 rows; 'Show more' adds 500
function fill(id, values){const s=f(id);for(const v of [...new Set(values)].sort()){const o=document.createElement('option');o.value=v;o.textContent=v;s.appendChild(o);}}
fill('model', rows.map(r=>r.model)); fill('group', rows.map(r=>r.group)); fill('run', rows.map(r=>r.run)); fill('class', rows.map(r=>r.class));
fill('cause', rows.map(r=>r.cause)); fill('focal', rows.flatMap(r=>r.focal||[])); fill('tag', rows.flatMap(r=>r.tags));
const keys=['model','group','run','class','cause','focal','tag','task','text'];
function keep(id,v){const s=f(id);if(v&&s.tagName==='SELECT'&&![...s.options].some(o=>o.value===v)){const o=document.createElement('option');o.value=v;o.textContent=v+' (not in this site)';s.appendChild(o);}s.value=v;}
function fromHash(){const p=new URLSearchParams(location.hash.slice(1));for(const k of keys)keep(k,p.get(k)||'');if(p.get('sort')){sortKey=p.get('sort');sortDir=p.get('dir')==='-1'?-1:1;}}
function toHash(){const p=new URLSearchParams();for(const k of keys)if(f(k).value)p.set(k,f(k).value);if(sortKey!=='case'||sortDir!==1){p.set('sort',sortKey);p.set('dir',String(sortDir));}history.replaceState(null,'','#'+p.toString());}
function key(v){if(v===undefined||v===null)return '';const m=/^(\\d+)\\/(\\d+)$/.exec(String(v));return m?Number(m[1])/Math.max(Number(m[2]),1):v;}
const collator=new Intl.Collator('zh',{numeric:true});
function compareKeys(x,y){if(typeof x==='number'&&typeof y==='number')return x-y;return collator.compare(String(x),String(y));}
function cell(v){const td=document.createElement('td');td.textContent=v===undefined?'–':String(v);return td;}
function render(){const task=f('task').value,m=f('model').value,gr=f('group').value,ru=f('run').value,c=f('class').value,ca=f('cause').value,fo=f('focal').value,t=f('tag').value,q=f('text').value.toLowerCase();
 const kept=rows.filter(r=>(!m||r.model===m)&&(!gr||r.group===gr)&&(!ru||r.run===ru)&&(!c||r.class===c)&&(!ca||r.cause===ca)&&(!fo||(r.focal||[]).includes(fo))&&(!t||r.tags.includes(t))&&(!q||r.search.includes(q)||(texts[r.case]||'').includes(q)));
 // sort keys computed once per row, not at every comparison: 21,600 rows stay quick
 const decorated=kept.map(r=>[task&&r.fails.includes(task)?0:1,key(r[sortKey]),r]);
 decorated.sort((a,b)=>(a[0]-b[0])||compareKeys(a[1],b[1])*sortDir);
 const shown=decorated.map(d=>d[2]);
 f('count').textContent=shown.length+' of '+rows.length+' shown';
 const body=f('rows');body.replaceChildren();
 for(const r of shown.slice(0,limit)){const tr=document.createElement('tr');const a=document.createElement('a');a.href='case/'+r.page+'.html#run='+encodeURIComponent(r.label);a.textContent=r.case;const td=document.createElement('td');td.appendChild(a);tr.appendChild(td);
  for(const k of ['cause','class','label'])tr.appendChild(cell(r[k]));
  // the outcome right after the run: on a narrow screen it is seen without scrolling the table
  const tags=document.createElement('td');for(const g of r.tags){const s=document.createElement('span');s.className='tag';s.textContent=g;tags.appendChild(s);}
  if(r.fails.length){const s=document.createElement('span');s.className='tag bad';s.textContent='wrong: '+r.fails.map(t=>names[t]||t).join(', ');tags.appendChild(s);}  // which tasks, beside the run
  tr.appendChild(tags);
  for(const k of ['lca_c','lca_u','dcg','direct','gold','interaction','stop','questions','targeted','off_target','plain','audit'])tr.appendChild(cell(k==='dcg'&&r[k]!==undefined?(r[k]?'success':'miss'):(k==='lca_c'||k==='lca_u')&&r[k]?r[k]+(r[k]==='策略一'?' · answered':' · asked'):r[k]));
  if(task&&r.fails.includes(task))tr.className='failing';
  body.appendChild(tr);}
 f('more').hidden=shown.length<=limit;}
for(const id of ['model','group','run','class','cause','focal','tag','task'])f(id).addEventListener('change',()=>{toHash();render();});
f('text').addEventListener('input',()=>{toHash();render();});f('more').addEventListener('click',()=>{limit+=500;render();});
for(const th of document.querySelectorAll('th[data-key]'))th.addEventListener('click',()=>{sortDir=sortKey===th.dataset.key?-sortDir:1;sortKey=th.dataset.key;toHash();render();});
window.addEventListener('hashchange',()=>{fromHash();render();});fromHash();render();
"""


WRONG_FIRST = TASK_NAMES  # the tasks whose wrong cases the case list can put first


def case_list(rows_json: str, texts_json: str) -> str:
    """The case list: `rows_json` a row per case and run, `texts_json` each case's history text for the search."""
    headers = [("case", "Case"), ("cause", "Cause"), ("class", "Class"), ("label", "Model · run"), ("tags", "Outcome"),
               ("lca_c", "LCA complete"), ("lca_u", "LCA underspecified"), ("dcg", "DCG success"),
               ("direct", "Direct right"), ("gold", "Gold right"), ("interaction", "Interaction right"),
               ("stop", "Stop"), ("questions", "Questions"), ("targeted", "Targeted right"),
               ("off_target", "Off-target right"), ("plain", "Plain type"), ("audit", "Audit")]
    selects = "".join(f'<label>{name} <select id="{key}"><option value="">all</option></select></label> '
                      for key, name in (("model", "Model"), ("group", "Group"), ("run", "Run"), ("class", "Class"),
                                        ("cause", "Cause"), ("focal", "Focal type"),
                                        ("tag", "Outcome")))
    # the task whose wrong cases come first (an overview cell's link sets it; "none" clears it)
    tasks = "".join(f'<option value="{t}">{esc(name)}</option>' for t, name in WRONG_FIRST.items())
    return ("<h1>Cases</h1><p>" + selects + '<label>Text <input id="text" type="search"></label> '
            f'<label>Wrong first <select id="task"><option value="">none</option>{tasks}</select></label></p>'
            '<p id="count"></p><table><thead><tr>'
            + "".join(f'<th data-key="{k}">{esc(n)}</th>' for k, n in headers) + '</tr></thead><tbody id="rows">'
            '</tbody></table><button id="more" hidden>Show more</button>'
            f'<script type="application/json" id="data">{rows_json}</script>'
            f'<script type="application/json" id="texts">{texts_json}</script><script>{CASES_SCRIPT}</script>')


def dialogue_html(messages: list[dict]) -> str:
    return "".join(msg(m["role"], m["content"]) for m in messages)


@dataclass
class Ids:
    """Message ids of one run's transcript on a case page (r<run>m<n>), and the run's index for its settings."""
    run: int
    n: int = 0
    replies: dict = field(default_factory=dict)  # LJP setup -> the id of its prediction's message

    def next(self) -> str:
        self.n += 1
        return f"r{self.run}m{self.n}"


def lexawn_part(r: dict, number: str, ids: Ids, source: dict | None) -> str:
    a1, lca = r["a1"].get(number), r["LCA"].get(number)
    original = ((source or {}).get("LCA") or {}).get(number) if source else None
    parts = []
    for t in ("complete", "underspecified") if a1 else ():
        judged = (lca or {}).get("judgments", {}).get(t, {})
        label = rejudged(judged.get("label"), (original or {}).get("judgments", {}).get(t, {}).get("label")) \
            if source else lca_label(judged.get("label"))
        mid = ids.next()
        parts.append(f"<h4>LexAwN after the {t} history (LCA: {esc(label)})</h4>"
                     + msg("assistant", a1["responses"][t]["response"], mid=mid,
                           call=call_button("lexawn", "eval", {"history": f"h:{t}"}, "a1"))
                     + msg("judge", "\n".join(judged.get("judge_raw") or []), "LCA judge, raw",
                           call=call_button("judge_lca", "judge", {"history": f"m:{mid}"}, "LCA",
                                            len(judged.get("judge_raw") or []))))
    return "".join(parts)


def dcg_part(r: dict, number: str, ids: Ids, details: list[str], source: dict | None = None) -> str:
    asked, dcg = r["force_ask"].get(number), r["DCG"].get(number)
    if not asked:
        return ""
    labels = {x["round"]: x for x in (dcg or {}).get("rounds", [])}
    originals = {x["round"]: x.get("label") for x in (((source or {}).get("DCG") or {}).get(number) or {}).get("rounds", [])}
    success = {True: "success", False: "miss"}.get((dcg or {}).get("success"), "–")
    parts = [f"<h4>DCG: {esc(success)}</h4>"]
    for q in asked["rounds"]:
        judged, mid = labels.get(q["round"], {}), ids.next()
        parts.append(msg("assistant", q["question"], f"forced question {q['round']}", mid=mid, thread="dcg",
                         call=call_button("force_ask", "eval", {"history": "d:underspecified:dcg"}, "force_ask")))
        label = str(judged.get("label", "–"))
        if source is not None and q["round"] in originals:  # a re-judged run: the original judge's label beside
            label += f" (original judge: {originals[q['round']]}" + (", disagree)" if originals[q["round"]] != judged.get(
                "label") else ")")
        parts.append(msg("judge", label, f"DCG judge on question {q['round']}",
                         call=call_button("judge_dcg", "judge", {"ai_response": f"m:{mid}", "focus_text": "fp",
                                                                 "key_facts": "dbf"}, "DCG",
                                          len(judged.get("judge_raw") or []))))
        if q.get("user_reply"):
            marked, _ = highlighted(q["user_reply"], details)
            source_name = f"DCG round {q['round']}"
            parts.append(msg("user", q["user_reply"], "User Model" + audit_note(r, number, source_name),
                             marked, thread="dcg", call=call_button(
                                 "user_standard", "user", {"history": "d:underspecified:dcg", "key_facts": "kf"},
                                 "force_ask") + audit_call(r, number, source_name, "dcg")))
    return "".join(parts)


def interaction_part(r: dict, number: str, ids: Ids, details: list[str]) -> str:
    inter = r["interaction"].get(number)
    if not inter:
        return ""
    parts = [f"<h4>Interaction ({esc(inter.get('user_condition', 'standard'))} user; stop: "
             f"{esc(inter['stop_reason'])})</h4>"]
    # a re-judged run: the new judge's round labels (interaction_labels), each beside the original judge's
    relabelled = {e.get("round"): e for e in (r.get(INTERACTION_LABELS.name, {}).get(number) or {}).get("rounds", [])}
    for x in inter["rounds"]:
        call = (call_button("lexawn", "eval", {"history": "h:underspecified"}, "a1") if x["round"] == 1
                else call_button(x["prompt"], "eval", {"history": "d:underspecified:int"}, "interaction"))
        mid, again = ids.next(), relabelled.get(x["round"])
        label = rejudged(again.get("label"), x.get("label")) if again else lca_label(x.get("label"))
        judged = x | {"label": again.get("label"), "judge_raw": again.get("judge_raw")} if again else x
        parts.append(msg("assistant", x["assistant"], f"round {x['round']}, {x['prompt']}, LCA label: {label}",
                         call=call, thread="int", mid=mid)
                     + round_judges(judged, mid, INTERACTION_LABELS.name if again else "interaction"))
        if x.get("user_reply"):
            marked, _ = highlighted(x["user_reply"], details)
            prompt = x.get("user_prompt", "user_standard")
            note = f"User Model ({prompt})" + audit_note(r, number, f"interaction round {x['round']}")
            if x.get("fault"):
                note += f"; fault: {x['fault']['kind']} about “{x['fault']['detail']}”"
            slots = {"history": "d:underspecified:int", "key_facts": "kf"}
            if prompt == "user_correction":  # the fault the earlier reply recorded, as the prompt renders it
                slots["fault"] = raw_slot(render_fault(inter["fault"]) if inter.get("fault") else "")
            parts.append(msg("user", x["user_reply"], note, marked, thread="int",
                             call=call_button(prompt, "user", slots, "interaction")
                             + audit_call(r, number, f"interaction round {x['round']}", "int")))
    return "".join(parts)


def round_judges(entry: dict, mid: str, kind: str = "interaction") -> str:
    """An interaction round's judges after round 1 (whose label is LCA's, shown above): the LCA judge's label of the
    response and, for a non-ideal user, the DCG judge's check that it asks a relevant question."""
    parts = []
    if entry["round"] > 1 and entry.get("label") is not None:
        raw = entry.get("judge_raw") or []
        parts.append(msg("judge", "\n".join(raw), f"LCA judge on round {entry['round']}, raw", call=call_button(
            "judge_lca", "judge", {"history": f"m:{mid}"}, kind, len(raw))))
    if isinstance(entry.get("relevance"), dict):
        raw = entry["relevance"].get("judge_raw") or []
        parts.append(msg("judge", str(entry["relevance"].get("label", "–")), "DCG judge: a relevant question?",
                         call=call_button("judge_dcg", "judge", {"ai_response": f"m:{mid}", "focus_text": "fp",
                                                                 "key_facts": "dbf"}, "interaction", len(raw))))
    return "".join(parts)


def ljp_part(r: dict, number: str, ids: Ids, source: dict | None = None) -> str:
    parts, inter = [], r["interaction"].get(number)
    for setup, name, generation, verdicts, reply_field in SETUPS:
        v, g = r[verdicts.name].get(number), r[generation.name].get(number)
        if not v:
            continue
        before = ((((source or {}).get(verdicts.name) or {}).get(number) or {}).get("predicted")
                  if source is not None else None)
        rows = "".join(f"<tr><td>{esc(c)}</td><td>{esc(gold)}</td><td class=\"{'ok' if gold == p else 'bad'}\">"
                       f"{esc(p)}</td>" + (f"<td>{esc(before[i])}{' ≠' if before[i] != p else ''}</td>"
                                           if before and i < len(before) else "") + "</tr>"
                       for i, (c, gold, p) in enumerate(zip(v["claims"], v["gold"], v["predicted"])))
        reply = (g or {}).get(reply_field, "") if setup != "interaction" else (inter or {}).get("final_response", "")
        mid = ids.replies[setup] = ids.next()
        predicted = "" if setup == "interaction" else call_button(
            "force_judge", "eval", {"history": "h:underspecified" if setup == "direct" else "h:complete"},
            generation.name)
        parts.append(f"<h4>LJP {name}</h4>" + msg("assistant", reply, "prediction", mid=mid, call=predicted)
                     + msg("judge", "\n".join(v.get("judge_raw") or []), "extraction judge, raw",
                           call=call_button("judge_ljp", "judge", {"history": f"m:{mid}", "claims": "cl"}, verdicts.name,
                                            len(v.get("judge_raw") or [])))
                     + "<table><tr><th>Claim</th><th>Gold</th><th>Extracted</th>"
                     + ("<th>Original judge</th>" if before else "") + f"</tr>{rows}</table>")
    return "".join(parts)


def transcript(rr: RunRecords, case: Case | None, number: str, details: list[str], source: dict | None = None,
               run: int = 0) -> str:
    """Every task of one case in one run, in protocol order, each reply with its exact call; `source`: the records
    of the run it re-judged."""
    r, ids = rr.records, Ids(run)
    parts = [("lexawn", lexawn_part(r, number, ids, source)), ("dcg", dcg_part(r, number, ids, details, source)),
             ("interaction", interaction_part(r, number, ids, details)), ("ljp", ljp_part(r, number, ids, source)),
             *later_sections(r, number, details, ids)]
    # each task apart, so that the page's "Show" choice keeps one task of every run in view
    text = "".join(f'<div class="part" data-part="{name}">{html}</div>' for name, html in parts if html)
    return text or "<p>No saved record of this case in this run.</p>"


PARTS = {"lexawn": "LexAwN and LCA", "dcg": "DCG", "interaction": "Interaction", "ljp": "LJP", "plain": "Plain consultation",
         "table4": "Table 4 dialogues", "focal": "Focal-point types", "probes": "Probe study", "order": "Claim order"}


SIDE_SCRIPT = """
const blocks=[...document.querySelectorAll('section.run')];const a=document.getElementById('left'),b=document.getElementById('right');
for(const s of [a,b])for(const x of blocks){const o=document.createElement('option');o.value=x.id;o.textContent=x.dataset.label;s.appendChild(o);}
if(blocks.length>1)b.selectedIndex=1;
function show(){const side=document.getElementById('side').checked;document.getElementById('runs').className=side?'grid':'';
 for(const x of blocks){x.hidden=side&&x.id!==a.value&&x.id!==b.value;x.style.order=side&&x.id===b.value?2:1;if(side&&!x.hidden)x.querySelector('details').open=true;}}
for(const e of [a,b,document.getElementById('side')])e.addEventListener('change',show);show();
const part=document.getElementById('part');
function only(){for(const x of document.querySelectorAll('div.part'))x.hidden=!!part.value&&x.dataset.part!==part.value;
 if(part.value)for(const x of blocks)x.querySelector('details').open=true;}  // one task, of every run: all unfolded
part.addEventListener('change',only);
// from the case list: #run=<its label> opens that run's transcript and brings it into view
const wanted=new URLSearchParams(location.hash.slice(1)).get('run');
for(const x of blocks)if(wanted&&x.dataset.label===wanted){x.querySelector('details').open=true;x.scrollIntoView();}
"""


def case_page(number: str, case: Case | None, loaded: list[RunRecords]) -> str:
    details = []
    if case is not None:
        kd = case.key_details
        details = [d for ds in kd.values() for d in ds] if isinstance(kd, dict) else list(kd)
        claims = "".join(f"<tr><td>{esc(c)}</td><td>{esc(v)}</td></tr>" for c, v in zip(case.claims, case.verdicts))
        head = (f"<h1>{esc(number)}</h1><p>{esc(case.cause)} · {esc(case.cause_class)} · {esc(case.plaintiff_type)}</p>"
                f"<details open><summary>Underspecified history</summary>{dialogue_html(case.underspecified)}</details>"
                f"<details><summary>Complete history</summary>{dialogue_html(case.complete)}</details>"
                "<h3>Focal points</h3><ul>" + "".join(f"<li>{esc(p)}</li>" for p in case.focal_points) + "</ul>"
                "<h3>Key details</h3><ol>" + "".join(f"<li>{esc(d)}</li>" for d in details) + "</ol>"
                f"<h3>Claims and the court's verdicts</h3><table><tr><th>Claim</th><th>Verdict</th></tr>{claims}</table>")
    else:
        head = f"<h1>{esc(number)}</h1><p>The dataset was not available: pass --dataset to see the case itself.</p>"
    by_run = {(rr.run.model, rr.run.run_id): rr.records for rr in loaded}
    # each run's tasks fold away: at 10 models × 5 runs the page is a list of runs, not one long column
    sections = "".join(f'<section class="run" id="run{i}" data-run="{i}" data-label="{esc(rr.label)}"><details{" open" if i < 2 else ""}>'
                       f"<summary><h2>{esc(rr.label)}</h2></summary>"
                       f"{transcript(rr, case, number, details, by_run.get((rr.run.model, source_of(rr.run.manifest))), i)}"
                       "</details></section>" for i, rr in enumerate(loaded))
    shown = "".join(f'<option value="{k}">{esc(v)}</option>' for k, v in PARTS.items())
    controls = ('<p><label><input type="checkbox" id="side"> side by side</label> '
                '<select id="left"></select> <select id="right"></select> '
                f'<label>Show <select id="part"><option value="">every task</option>{shown}</select></label></p>')
    calls = script_json(call_data(case, [(rr.settings, rr.records) for rr in loaded], number))
    return (head + controls + f'<div id="runs">{sections}</div><script>{SIDE_SCRIPT}</script>'
            f'<script type="application/json" id="calls">{calls}</script><script>{CALL_SCRIPT}</script>')


def write_site(folder: Path, root: Path, groups: list[Group], tables: list[Table], dataset: Path | None,
               processes: int | None = None) -> int:
    """Writes the site, the case pages in `processes` processes (default: one per core); returns the number of
    case pages."""
    runs = [r for g in groups for r in g.runs]
    cases: dict[str, Case] = {}
    path = dataset or next((Path(r.manifest["dataset_path"]) for r in runs
                            if Path(str(r.manifest.get("dataset_path"))).is_file()), None)
    if path is not None:
        try:
            cases = {c.number: c for c in load_dataset(path)[0]}
        except HarnessError:
            cases = {}
    loaded = load_records(root, groups)
    by_run = {(rr.run.model, rr.run.run_id): rr.records for rr in loaded}
    selected = {id(rr): set(rr.run.selected) for rr in loaded}
    numbers = list(dict.fromkeys(n for r in runs for n in r.selected))
    pages = {n: i for i, n in enumerate(numbers)}
    rows, texts = [], {}
    for n in numbers:
        case = cases.get(n)
        cause = case.cause if case else next((rec.get("cause_of_action") for rr in loaded
                                              for kind in rr.records.values() for k, rec in kind.items() if k == n), "")
        for rr in loaded:
            if n in selected[id(rr)]:
                row = outcomes(rr, n)
                try:
                    cls = cause_class(cause)
                except KeyError:
                    cls = "?"
                rows.append(row | {"case": n, "cause": cause, "class": cls, "page": pages[n],
                                   "search": f"{n} {cause} {rr.label}".lower()})
        # the history's text once per case, not once per run: the case list at 50 runs carries it 50 times less
        texts[n] = " ".join(m["content"] for m in (case.underspecified if case else ())).lower()
        mine = {(r["model"], r["run"]): r for r in rows[len(rows) - sum(n in selected[id(rr)] for rr in loaded):]}
        for rr in loaded:  # a re-judged run's decisions against its source's, on this case
            row = mine.get((rr.run.model, rr.run.run_id))
            if row is not None and source_of(rr.run.manifest):
                row["rejudged"] = True
                row["disagrees"] = disagreements(rr.records, by_run.get((rr.run.model, source_of(rr.run.manifest))), n)
    try:
        (folder / "case").mkdir(parents=True, exist_ok=True)
        (folder / "index.html").write_text(page("LexPilot results", overview(tables, groups)), encoding="utf-8")
        rows_json = script_json(rows)  # one encoding for both pages
        (folder / "cases.html").write_text(page("Cases", case_list(rows_json, script_json(texts))), encoding="utf-8")
        (folder / "compare.html").write_text(page("Compare", compare_page(rows_json, script_json(TASKS))),
                                             encoding="utf-8")

        def write_case(n: str) -> None:
            body = case_page(n, cases.get(n), [rr for rr in loaded if n in selected[id(rr)]])
            (folder / "case" / f"{pages[n]}.html").write_text(page(n, body, up="../"), encoding="utf-8")

        fork_map(write_case, list(pages), processes or workers(len(pages)))
    except OSError as e:
        raise HarnessError(f"--html {folder}: cannot write the site there ({e.strerror or e})") from None
    return len(pages)
