"""The exact call behind a reply on a case page: the prompt re-rendered from `prompts/` and the case (in the page,
from the templates and the texts already on it, so that a case of 10 models × 5 runs does not carry every prompt
twice), the role's model and generation settings, the tokens its record reports, the judge's attempts, and a
warning where the prompt file differs from the one the run recorded (the text shown is then today's file, not what
was sent).

A reply carries a descriptor: the prompt's name, the role, and for each slot where its text comes from: a history
of the case ("h"), a history followed by messages of the page ("d"), one message of the page ("m"), a text of the
case (key details "kf", focal points "fp", claims "cl", key details by focal point "dbf") or a literal ("raw").
"""
from __future__ import annotations

import html
import json

from lexpilot.benchmark.dataset import Case
from lexpilot.benchmark.prompts import (
    PROMPT_FILES,
    load_prompts,
    render_claims,
    render_details_by_focal_point,
    render_focal_points,
    render_key_facts,
)
from lexpilot.storage.manifest import prompt_hashes

CALL_SCRIPT = """
const callData=JSON.parse(document.getElementById('calls').textContent);
function textOf(id){const e=document.getElementById(id);return e.querySelector('.text').textContent;}
function roleOf(id){return document.getElementById(id).dataset.role;}
function rendered(messages){return messages.map(m=>(m.role==='user'?'User':'Assistant')+': '+m.content).join('\\n');}
function slot(spec){const [kind,a,b]=spec;
 if(kind==='h')return rendered(callData.case[a]);
 if(kind==='d')return rendered(callData.case[a].concat(b.map(id=>({role:roleOf(id),content:textOf(id)}))));
 if(kind==='m')return textOf(a);
 if(kind==='raw')return a;
 return callData.case[kind];}
function prompt(call){const slots={};for(const [k,spec] of Object.entries(call.s))slots[k]=slot(spec);
 return callData.templates[call.t].replace(/\\{(history|key_facts|ai_response|focus_text|claims|fault|reply)\\}/g,(m,k)=>slots[k]);}
for(const b of document.querySelectorAll('button.call'))b.addEventListener('click',()=>{
 const box=b.nextElementSibling;if(!box.hidden){box.hidden=true;return;}
 const call=JSON.parse(b.dataset.call),run=callData.runs[call.run],who=run.roles[call.role];
 box.replaceChildren();const head=document.createElement('p');
 head.textContent=call.role+': '+who.model+' · '+who.settings+' · '+call.t+' ('+callData.files[call.t]+')'+(call.usage?' · this record\\'s '+call.role+' calls: '+call.usage:'')+(call.attempts?' · attempts: '+call.attempts:'')+' · time: not recorded';
 box.appendChild(head);
 if(run.changed.includes(call.t)){const w=document.createElement('p');w.className='bad';w.textContent='prompts/'+callData.files[call.t]+' differs from the file this run recorded: the text below is today\\'s file, not what was sent';box.appendChild(w);}
 const pre=document.createElement('pre');pre.className='prompt';pre.textContent=prompt(call);box.appendChild(pre);box.hidden=false;});
"""


def case_texts(case: Case | None) -> dict:
    """The case's texts a prompt slot can hold, rendered as the protocols render them."""
    if case is None:
        return {}
    return {"underspecified": case.underspecified, "complete": case.complete, "kf": render_key_facts(case),
            "fp": render_focal_points(case), "cl": render_claims(case), "dbf": render_details_by_focal_point(case)}


def run_info(manifest: dict) -> dict:
    """Per role the model and its generation settings, and the prompts whose file changed since the run."""
    generation = manifest.get("generation") if isinstance(manifest.get("generation"), dict) else {}
    models = manifest.get("models") if isinstance(manifest.get("models"), dict) else {}
    roles = {}
    for role, prefix in (("eval", ""), ("user", "user_"), ("judge", "judge_")):
        limit = generation.get(f"{prefix}max_tokens", generation.get("max_tokens"))
        roles[role] = {"model": str((models.get(role) or {}).get("model", "?")),
                       "settings": f"temperature {generation.get(f'{prefix}temperature', '?')}, max_tokens {limit}"}
    recorded = manifest.get("prompt_files") if isinstance(manifest.get("prompt_files"), dict) else {}
    current = prompt_hashes(str(manifest.get("user_condition", "standard")))[1]
    changed = [name for name, file in PROMPT_FILES.items()
               if file in recorded and file in current and recorded[file] != current[file]]
    return {"roles": roles, "changed": changed}


def call_data(case: Case | None, manifests: list[dict]) -> str:
    """The page's JSON for the exact calls: templates, the case's texts, and each run's roles and changed files."""
    data = {"templates": load_prompts(), "files": PROMPT_FILES, "case": case_texts(case),
            "runs": [run_info(m) for m in manifests]}
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def usage_text(record: dict | None, role: str) -> str:
    used = ((record or {}).get("usage") or {}).get(role)
    if not isinstance(used, dict):
        return ""
    return f"{used.get('calls', '?')} calls, {used.get('prompt_tokens', '?')} prompt / " \
           f"{used.get('completion_tokens', '?')} completion tokens"


def call_button(template: str, role: str, slots: dict, run: int, record: dict | None = None,
                attempts: int | None = None) -> str:
    """The button that shows the exact call of a reply, and the box it opens (empty until asked)."""
    call = {"t": template, "role": role, "s": slots, "run": run, "usage": usage_text(record, role)}
    if attempts:
        call["attempts"] = attempts
    return (f'<button class="call" data-call="{html.escape(json.dumps(call, ensure_ascii=False), quote=True)}">'
            "exact call</button><div class=\"callbox\" hidden></div>")
