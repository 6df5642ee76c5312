const callData = JSON.parse(document.getElementById("calls").textContent);
function textOf(e) {
  return e.querySelector(".text").textContent;
}
function rendered(messages) {
  return messages.map((m) => (m.role === "user" ? "User" : "Assistant") + ": " + m.content).join("\n");
}
function thread(button, name) {
  const me = button.closest(".msg"),
    section = button.closest("section.run");
  const out = [];
  for (const e of section.querySelectorAll('.msg[data-th="' + name + '"]')) {
    if (e === me) break;
    out.push({ role: e.classList.contains("user") ? "user" : "assistant", content: textOf(e) });
  }
  return out;
}
function numbered(history, turns) {
  let n = 0;
  const line = (m) =>
    m.role === "user" ? "User（第" + ++n + "次发言）: " + m.content : "Assistant: " + m.content;
  const h = history.map(line);
  return h.concat(["【以下为新增的提问与回答】"], turns.map(line)).join("\n");
}
function slot(button, spec) {
  const [kind, a, b] = spec.split(":");
  if (kind === "h") return rendered(callData.case[a]);
  if (kind === "d") return rendered(callData.case[a].concat(thread(button, b)));
  if (kind === "b") return rendered(callData.case[a].concat(thread(button, b).slice(0, -1)));
  if (kind === "l") {
    const t = thread(button, a);
    return t.length ? t[t.length - 1].content : "";
  }
  if (kind === "s") return textOf(button.closest(".msg"));
  if (kind === "v") return numbered(callData.case[a], thread(button, b));
  if (kind === "m") return textOf(document.getElementById(a));
  if (kind === "co") {
    const claims = callData.case.cl.split("\n");
    return a
      .split(",")
      .map((i) => claims[+i])
      .join("\n");
  }
  if (kind === "raw") return decodeURIComponent(a);
  return callData.case[kind];
}
function prompt(button) {
  if (button.dataset.t === "(messages)")
    return JSON.stringify(callData.case[button.dataset.s.split(":")[1]], null, 1);
  const slots = {};
  for (const part of button.dataset.s.split(";")) {
    const i = part.indexOf("=");
    slots[part.slice(0, i)] = slot(button, part.slice(i + 1));
  }
  return callData.templates[button.dataset.t].replace(
    /\{(history|key_facts|ai_response|focus_text|claims|fault|reply)\}/g,
    (m, k) => slots[k],
  );
}
document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button.call");
  if (!b) return;
  let box = b.nextElementSibling;
  if (box && box.classList.contains("callbox")) {
    box.hidden = !box.hidden;
    return;
  }
  box = document.createElement("div");
  box.className = "callbox";
  b.after(box);
  const run = callData.runs[b.closest("section.run").dataset.run],
    role = b.dataset.r,
    who = run.roles[role],
    t = b.dataset.t;
  const used = (run.usage[b.dataset.k] || {})[role];
  const head = document.createElement("p");
  head.textContent =
    role +
    ": " +
    who.model +
    " · " +
    who.settings +
    " · " +
    t +
    " (" +
    callData.files[t] +
    ")" +
    (used
      ? " · this record's " +
        role +
        " calls: " +
        used[0] +
        " calls, " +
        used[1] +
        " prompt / " +
        used[2] +
        " completion tokens" +
        (used[3] ? ", " + used[3] : "")
      : "") +
    (b.dataset.a ? " · attempts: " + b.dataset.a : "") +
    " · time: not recorded";
  box.appendChild(head);
  if (run.changed.includes(t)) {
    const w = document.createElement("p");
    w.className = "bad";
    w.textContent =
      "prompts/" +
      callData.files[t] +
      " differs from the file this run recorded: the text below is today's file, not what was sent";
    box.appendChild(w);
  }
  const pre = document.createElement("pre");
  pre.className = "prompt";
  pre.textContent = prompt(b);
  box.appendChild(pre);
});
