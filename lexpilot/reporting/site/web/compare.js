const rows = JSON.parse(document.getElementById("data").textContent);
const f = (id) => document.getElementById(id);
const tasks = JSON.parse(document.getElementById("tasks").textContent);
const labels = [...new Set(rows.map((r) => r.label))];
const models = [...new Set(rows.map((r) => r.model))];
function fill(id, values, names) {
  for (const v of values) {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = names ? names[v] : v;
    f(id).appendChild(o);
  }
}
fill(
  "task",
  tasks.map((t) => t[0]),
  Object.fromEntries(tasks.map((t) => [t[0], t[2]])),
);
fill("a", labels);
fill("b", labels);
fill("model", models);
if (labels.length > 1) f("b").value = labels[1];
fill("rejudged", [...new Set(rows.filter((r) => r.rejudged).map((r) => r.label))]);
const keys = ["mode", "task", "judged", "rejudged", "a", "b", "model", "failures"];
let limit = 200; // the first screen draws 200 cases
function fromHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  for (const k of keys) {
    if (!p.has(k)) continue;
    if (k === "failures") f(k).checked = p.get(k) === "1";
    else f(k).value = p.get(k);
  }
}
function toHash() {
  const p = new URLSearchParams();
  for (const k of keys) {
    const v = k === "failures" ? (f(k).checked ? "1" : "") : f(k).value;
    if (v) p.set(k, v);
  }
  history.replaceState(null, "", "#" + p.toString());
}
function outcome(r, task) {
  const field = tasks.find((t) => t[0] === task)[1];
  if (r[field] === undefined) return "";
  return r.fails.includes(task) ? "wrong" : "right";
}
const byCase = {};
for (const r of rows) {
  (byCase[r.case] = byCase[r.case] || { page: r.page, cause: r.cause, runs: {} }).runs[r.label] = r;
}
const collator = new Intl.Collator("zh", { numeric: true });
const cases = Object.keys(byCase).sort(collator.compare);
function link(c) {
  const a = document.createElement("a");
  a.href = "case/" + byCase[c].page + ".html";
  a.textContent = c;
  return a;
}
function td(x) {
  const e = document.createElement("td");
  if (x instanceof Node) e.appendChild(x);
  else e.textContent = x;
  return e;
}
function render() {
  const mode = f("mode").value,
    task = f("task").value;
  const head = f("head"),
    body = f("body");
  head.replaceChildren();
  body.replaceChildren();
  for (const id of ["a", "b"]) f(id).parentElement.hidden = mode !== "ab";
  f("model").parentElement.hidden = mode !== "never";
  f("failures").parentElement.hidden = mode !== "matrix";
  f("task").parentElement.hidden = mode === "disagree";
  f("judged").parentElement.hidden = mode !== "disagree";
  f("rejudged").parentElement.hidden = mode !== "disagree";
  let cols = ["Case", "Cause"],
    list = [];
  if (mode === "matrix") {
    cols = cols.concat(labels);
    list = cases.filter(
      (c) =>
        !f("failures").checked ||
        labels.some((l) => byCase[c].runs[l] && outcome(byCase[c].runs[l], task) === "wrong"),
    );
  }
  if (mode === "ab") {
    cols = cols.concat([f("a").value, f("b").value]);
    list = cases.filter((c) => {
      const x = byCase[c].runs[f("a").value],
        y = byCase[c].runs[f("b").value];
      return x && y && outcome(x, task) === "right" && outcome(y, task) === "wrong";
    });
  }
  if (mode === "never") {
    const mine = labels.filter((l) =>
      rows.some((r) => r.label === l && r.model === f("model").value && !r.rejudged),
    );
    cols = cols.concat(mine);
    list = cases.filter((c) => {
      const rs = mine.map((l) => byCase[c].runs[l]).filter((r) => r && outcome(r, task) !== "");
      return rs.length && rs.every((r) => outcome(r, task) === "wrong");
    });
  }
  // what the judges decide: LCA labels, DCG labels, the verdicts of every LJP setup, the interaction's round labels
  if (mode === "disagree") {
    cols = cols.concat(["Re-judged run", "Tasks the judges disagree on"]);
    const judged = f("judged").value;
    const on = (t) => (judged === "LJP" ? ["direct", "interaction", "gold"].includes(t) : t === judged);
    const which = f("rejudged").value; // one re-judged run, or every one
    for (const c of cases)
      for (const r of Object.values(byCase[c].runs))
        if ((!which || r.label === which) && (r.disagrees || []).some(on)) list.push([c, r]);
  }
  const tr = document.createElement("tr");
  for (const c of cols) {
    const th = document.createElement("th");
    th.textContent = c;
    tr.appendChild(th);
  }
  head.appendChild(tr);
  for (const item of list.slice(0, limit)) {
    const row = document.createElement("tr");
    const c = mode === "disagree" ? item[0] : item;
    row.appendChild(td(link(c)));
    row.appendChild(td(byCase[c].cause));
    if (mode === "disagree") {
      row.appendChild(td(item[1].label));
      row.appendChild(td(item[1].disagrees.join(", ")));
    } else
      for (const l of cols.slice(2)) {
        const r = byCase[c].runs[l];
        const o = r ? outcome(r, task) : "";
        const cell = td(o || "–");
        cell.className = o === "wrong" ? "bad" : o === "right" ? "ok" : "";
        row.appendChild(cell);
      }
    body.appendChild(row);
  }
  f("count").textContent =
    list.length + " cases" + (list.length > limit ? ", the first " + limit + " shown" : "");
  f("more").hidden = list.length <= limit;
}
for (const id of keys)
  f(id).addEventListener("change", () => {
    limit = 200;
    toHash();
    render();
  });
f("more").addEventListener("click", () => {
  limit += 500;
  render();
});
window.addEventListener("hashchange", () => {
  fromHash();
  render();
});
fromHash();
render();
