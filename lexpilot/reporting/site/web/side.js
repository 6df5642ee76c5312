const blocks = [...document.querySelectorAll("section.run")];
const a = document.getElementById("left"),
  b = document.getElementById("right");
for (const s of [a, b])
  for (const x of blocks) {
    const o = document.createElement("option");
    o.value = x.id;
    o.textContent = x.dataset.label;
    s.appendChild(o);
  }
if (blocks.length > 1) b.selectedIndex = 1;
function show() {
  const side = document.getElementById("side").checked;
  document.getElementById("runs").className = side ? "grid" : "";
  for (const x of blocks) {
    x.hidden = side && x.id !== a.value && x.id !== b.value;
    x.style.order = side && x.id === b.value ? 2 : 1;
    if (side && !x.hidden) x.querySelector("details").open = true;
  }
}
for (const e of [a, b, document.getElementById("side")]) e.addEventListener("change", show);
show();
const part = document.getElementById("part");
function only() {
  for (const x of document.querySelectorAll("div.part"))
    x.hidden = !!part.value && x.dataset.part !== part.value;
  if (part.value) for (const x of blocks) x.querySelector("details").open = true;
} // one task, of every run: all unfolded
part.addEventListener("change", only);
// from the case list: #run=<its label> opens that run's transcript and brings it into view
const wanted = new URLSearchParams(location.hash.slice(1)).get("run");
for (const x of blocks)
  if (wanted && x.dataset.label === wanted) {
    x.querySelector("details").open = true;
    x.scrollIntoView();
  }
