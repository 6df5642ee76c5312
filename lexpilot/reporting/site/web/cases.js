const rows = JSON.parse(document.getElementById("data").textContent);
const texts = JSON.parse(document.getElementById("texts").textContent); // case -> its history, for the text search
// run label -> the outcome columns whose stage that run did not run: "not run", not a case's failure
const notRun = JSON.parse(document.getElementById("not-run").textContent);
// the outcome columns shown, after the case, cause, class, run and outcome: those some run shown ran a stage for
const columns = [...document.querySelectorAll("th[data-key]")].map((th) => th.dataset.key).slice(5);
const names = Object.fromEntries(
  [...document.getElementById("task").options].map((o) => [o.value, o.textContent]),
); // task -> its name
const f = (id) => document.getElementById(id);
let sortKey = "case",
  sortDir = 1,
  limit = 200; // the first screen draws 200 rows; 'Show more' adds 500
function fill(id, values) {
  const s = f(id);
  for (const v of [...new Set(values)].sort()) {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = v;
    s.appendChild(o);
  }
}
fill(
  "model",
  rows.map((r) => r.model),
);
fill(
  "group",
  rows.map((r) => r.group),
);
fill(
  "run",
  rows.map((r) => r.run),
);
fill(
  "class",
  rows.map((r) => r.class),
);
fill(
  "cause",
  rows.map((r) => r.cause),
);
fill(
  "focal",
  rows.flatMap((r) => r.focal || []),
);
fill(
  "tag",
  rows.flatMap((r) => r.tags.concat(r.marks || [])),
);
const keys = ["model", "group", "run", "class", "cause", "focal", "tag", "task", "text"];
function keep(id, v) {
  const s = f(id);
  if (v && s.tagName === "SELECT" && ![...s.options].some((o) => o.value === v)) {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = v + " (not in this site)";
    s.appendChild(o);
  }
  s.value = v;
}
function fromHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  for (const k of keys) keep(k, p.get(k) || "");
  if (p.get("sort")) {
    sortKey = p.get("sort");
    sortDir = p.get("dir") === "-1" ? -1 : 1;
  }
}
function toHash() {
  const p = new URLSearchParams();
  for (const k of keys) if (f(k).value) p.set(k, f(k).value);
  if (sortKey !== "case" || sortDir !== 1) {
    p.set("sort", sortKey);
    p.set("dir", String(sortDir));
  }
  history.replaceState(null, "", "#" + p.toString());
}
function key(v) {
  if (v === undefined || v === null) return "";
  const m = /^(\d+)\/(\d+)$/.exec(String(v));
  return m ? Number(m[1]) / Math.max(Number(m[2]), 1) : v;
}
const collator = new Intl.Collator("zh", { numeric: true });
function compareKeys(x, y) {
  if (typeof x === "number" && typeof y === "number") return x - y;
  return collator.compare(String(x), String(y));
}
function cell(v) {
  const td = document.createElement("td");
  td.textContent = v === undefined ? "–" : String(v);
  return td;
}
function render() {
  const task = f("task").value,
    m = f("model").value,
    gr = f("group").value,
    ru = f("run").value,
    c = f("class").value,
    ca = f("cause").value,
    fo = f("focal").value,
    t = f("tag").value,
    q = f("text").value.toLowerCase();
  const kept = rows.filter(
    (r) =>
      (!m || r.model === m) &&
      (!gr || r.group === gr) &&
      (!ru || r.run === ru) &&
      (!c || r.class === c) &&
      (!ca || r.cause === ca) &&
      (!fo || (r.focal || []).includes(fo)) &&
      (!t || r.tags.includes(t) || (r.marks || []).includes(t)) &&
      (!q || r.search.includes(q) || (texts[r.case] || "").includes(q)),
  );
  // sort keys computed once per row, not at every comparison: 21,600 rows stay quick
  const decorated = kept.map((r) => [task && r.fails.includes(task) ? 0 : 1, key(r[sortKey]), r]);
  decorated.sort((a, b) => a[0] - b[0] || compareKeys(a[1], b[1]) * sortDir);
  const shown = decorated.map((d) => d[2]);
  f("count").textContent = shown.length + " of " + rows.length + " shown";
  const body = f("rows");
  body.replaceChildren();
  for (const r of shown.slice(0, limit)) {
    const tr = document.createElement("tr");
    const a = document.createElement("a");
    a.href = "case/" + r.page + ".html#run=" + encodeURIComponent(r.label);
    a.textContent = r.case;
    const td = document.createElement("td");
    td.appendChild(a);
    tr.appendChild(td);
    for (const k of ["cause", "class", "label"]) tr.appendChild(cell(r[k]));
    // the outcome right after the run: on a narrow screen it is seen without scrolling the table
    const tags = document.createElement("td");
    for (const g of r.tags) {
      const s = document.createElement("span");
      s.className = "tag";
      s.textContent = g;
      tags.appendChild(s);
    }
    if (r.fails.length) {
      const s = document.createElement("span");
      s.className = "tag bad";
      s.textContent = "wrong: " + r.fails.map((t) => names[t] || t).join(", ");
      tags.appendChild(s);
    } // which tasks, beside the run
    tr.appendChild(tags);
    const unrun = notRun[r.label] || [];
    for (const k of columns) {
      if (unrun.includes(k)) {
        const td = cell("not run");
        td.className = "unrun";
        td.title = "this stage was not run for this run";
        tr.appendChild(td);
        continue;
      }
      tr.appendChild(
        cell(
          k === "dcg" && r[k] !== undefined
            ? r[k]
              ? "success"
              : "miss"
            : (k === "lca_c" || k === "lca_u") && r[k]
              ? r[k] + (r[k] === "策略一" ? " · answered" : " · asked")
              : r[k],
        ),
      );
    }
    if (task && r.fails.includes(task)) tr.className = "failing";
    body.appendChild(tr);
  }
  f("more").hidden = shown.length <= limit;
}
for (const id of ["model", "group", "run", "class", "cause", "focal", "tag", "task"])
  f(id).addEventListener("change", () => {
    toHash();
    render();
  });
f("text").addEventListener("input", () => {
  toHash();
  render();
});
f("more").addEventListener("click", () => {
  limit += 500;
  render();
});
for (const th of document.querySelectorAll("th[data-key]"))
  th.addEventListener("click", () => {
    sortDir = sortKey === th.dataset.key ? -sortDir : 1;
    sortKey = th.dataset.key;
    toHash();
    render();
  });
window.addEventListener("hashchange", () => {
  fromHash();
  render();
});
fromHash();
render();
