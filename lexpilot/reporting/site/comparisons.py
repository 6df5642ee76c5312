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
from lexpilot.reporting.tables.analyses import JUDGED_TASKS

# the tasks with a wrong outcome: their names, as the case list and this page show them
TASK_NAMES = {"LCA": "LCA", "DCG": "DCG", **{s.name: s.short for s in LJP_SETUPS},
              "targeted": "Targeted", "off_target": "Off-target", "audit": "audit flagged"}
# the tasks a case has an outcome in (task, the case list row's field it is read from, its name): not scoring.TASKS,
# the metrics' tasks
OUTCOME_TASKS = tuple((task, field, TASK_NAMES[task]) for task, field in (
    ("LCA", "lca_c"), ("DCG", "dcg"), ("direct", "direct"), ("gold", "gold"), ("interaction", "interaction"),
    ("targeted", "targeted"), ("off_target", "off_target"), ("audit", "audit")))

COMPARE_SCRIPT = """
const rows=JSON.parse(document.getElementById('data').textContent);const f=id=>document.getElementById(id);
const tasks=JSON.parse(document.getElementById('tasks').textContent);
const labels=[...new Set(rows.map(r=>r.label))];const models=[...new Set(rows.map(r=>r.model))];
function fill(id,values,names){for(const v of values){const o=document.createElement('option');o.value=v;o.textContent=names?names[v]:v;f(id).appendChild(o);}}
fill('task',tasks.map(t=>t[0]),Object.fromEntries(tasks.map(t=>[t[0],t[2]])));fill('a',labels);fill('b',labels);fill('model',models);if(labels.length>1)f('b').value=labels[1];
fill('rejudged',[...new Set(rows.filter(r=>r.rejudged).map(r=>r.label))]);
const keys=['mode','task','judged','rejudged','a','b','model','failures'];let limit=200;  // the first screen draws 200 cases
function fromHash(){const p=new URLSearchParams(location.hash.slice(1));for(const k of keys){if(!p.has(k))continue;if(k==='failures')f(k).checked=p.get(k)==='1';else f(k).value=p.get(k);}}
function toHash(){const p=new URLSearchParams();for(const k of keys){const v=k==='failures'?(f(k).checked?'1':''):f(k).value;if(v)p.set(k,v);}history.replaceState(null,'','#'+p.toString());}
function outcome(r,task){const field=tasks.find(t=>t[0]===task)[1];if(r[field]===undefined)return '';return r.fails.includes(task)?'wrong':'right';}
const byCase={};for(const r of rows){(byCase[r.case]=byCase[r.case]||{page:r.page,cause:r.cause,runs:{}}).runs[r.label]=r;}
const collator=new Intl.Collator('zh',{numeric:true});const cases=Object.keys(byCase).sort(collator.compare);
function link(c){const a=document.createElement('a');a.href='case/'+byCase[c].page+'.html';a.textContent=c;return a;}
function td(x){const e=document.createElement('td');if(x instanceof Node)e.appendChild(x);else e.textContent=x;return e;}
function render(){const mode=f('mode').value,task=f('task').value;const head=f('head'),body=f('body');head.replaceChildren();body.replaceChildren();
 for(const id of ['a','b'])f(id).parentElement.hidden=mode!=='ab';f('model').parentElement.hidden=mode!=='never';f('failures').parentElement.hidden=mode!=='matrix';
 f('task').parentElement.hidden=mode==='disagree';f('judged').parentElement.hidden=mode!=='disagree';f('rejudged').parentElement.hidden=mode!=='disagree';
 let cols=['Case','Cause'],list=[];
 if(mode==='matrix'){cols=cols.concat(labels);list=cases.filter(c=>!f('failures').checked||labels.some(l=>byCase[c].runs[l]&&outcome(byCase[c].runs[l],task)==='wrong'));}
 if(mode==='ab'){cols=cols.concat([f('a').value,f('b').value]);list=cases.filter(c=>{const x=byCase[c].runs[f('a').value],y=byCase[c].runs[f('b').value];return x&&y&&outcome(x,task)==='right'&&outcome(y,task)==='wrong';});}
 if(mode==='never'){const mine=labels.filter(l=>rows.some(r=>r.label===l&&r.model===f('model').value&&!r.rejudged));cols=cols.concat(mine);list=cases.filter(c=>{const rs=mine.map(l=>byCase[c].runs[l]).filter(r=>r&&outcome(r,task)!=='');return rs.length&&rs.every(r=>outcome(r,task)==='wrong');});}
 // what the judges decide: LCA labels, DCG labels, the verdicts of every LJP setup, the interaction's round labels
 if(mode==='disagree'){cols=cols.concat(['Re-judged run','Tasks the judges disagree on']);const judged=f('judged').value;
  const on=t=>judged==='LJP'?['direct','interaction','gold'].includes(t):t===judged;
  const which=f('rejudged').value;  // one re-judged run, or every one
  for(const c of cases)for(const r of Object.values(byCase[c].runs))if((!which||r.label===which)&&(r.disagrees||[]).some(on))list.push([c,r]);}
 const tr=document.createElement('tr');for(const c of cols){const th=document.createElement('th');th.textContent=c;tr.appendChild(th);}head.appendChild(tr);
 for(const item of list.slice(0,limit)){const row=document.createElement('tr');const c=mode==='disagree'?item[0]:item;row.appendChild(td(link(c)));row.appendChild(td(byCase[c].cause));
  if(mode==='disagree'){row.appendChild(td(item[1].label));row.appendChild(td(item[1].disagrees.join(', ')));}
  else for(const l of cols.slice(2)){const r=byCase[c].runs[l];const o=r?outcome(r,task):'';const cell=td(o||'–');cell.className=o==='wrong'?'bad':o==='right'?'ok':'';row.appendChild(cell);}
  body.appendChild(row);}
 f('count').textContent=list.length+' cases'+(list.length>limit?', the first '+limit+' shown':'');f('more').hidden=list.length<=limit;}
for(const id of keys)f(id).addEventListener('change',()=>{limit=200;toHash();render();});
f('more').addEventListener('click',()=>{limit+=500;render();});
window.addEventListener('hashchange',()=>{fromHash();render();});fromHash();render();
"""


def compare_page(rows_json: str, tasks_json: str) -> str:
    """The page's controls and table; `rows_json`: the case list's rows, safe inside a script element."""
    return ("<h1>Compare</h1><p><label>View <select id=\"mode\">"
            "<option value=\"matrix\">cases × models and runs</option>"
            "<option value=\"ab\">right under A, wrong under B</option>"
            "<option value=\"never\">wrong in every run of a model</option>"
            "<option value=\"disagree\">the two judges disagree</option></select></label> "
            "<label>Task <select id=\"task\"></select></label> <label>Judged <select id=\"judged\">"
            + "".join(f'<option value="{t}">{t}</option>' for t in JUDGED_TASKS) + "</select></label> "
            "<label>Re-judged run <select id=\"rejudged\"><option value=\"\">every one</option></select></label> "
            "<label>A <select id=\"a\"></select></label> "
            "<label>B <select id=\"b\"></select></label> <label>Model <select id=\"model\"></select></label> "
            "<label><input type=\"checkbox\" id=\"failures\"> failures only</label></p><p id=\"count\"></p>"
            "<table><thead id=\"head\"></thead><tbody id=\"body\"></tbody></table><button id=\"more\" hidden>Show more</button>"
            f'<script type="application/json" id="data">{rows_json}</script>'
            f'<script type="application/json" id="tasks">{tasks_json}</script><script>{COMPARE_SCRIPT}</script>')


def judge_decisions(records: dict, number: str, rejudged: bool) -> dict[str, list]:
    """Per task, the judge's decisions on one case: LCA labels per history, DCG labels per question, the extracted
    verdicts per LJP setup, the interaction's round labels (a re-judged run keeps them in interaction_labels)."""
    get = lambda kind: (records.get(kind.name) or {}).get(number) or {}  # noqa: E731
    rounds = get(INTERACTION_LABELS if rejudged else INTERACTION).get("rounds", [])
    return {"LCA": [j.get("label") for _, j in sorted(get(LCA).get("judgments", {}).items())],
            "DCG": [x.get("label") for x in get(DCG).get("rounds", [])],
            **{s.name: list(get(s.verdicts).get("predicted", [])) for s in LJP_SETUPS},
            "interaction rounds": [x.get("label") for x in rounds if x.get("label") is not None]}


def disagreements(records: dict, source: dict | None, number: str) -> list[str]:
    """The tasks on which a re-judged run's judge decided otherwise than its source run's, on the same case (label
    by label, not only the outcome)."""
    if source is None:
        return []
    mine, theirs = judge_decisions(records, number, True), judge_decisions(source, number, False)
    return [task for task, labels in mine.items() if labels and theirs.get(task) and labels != theirs[task]]
