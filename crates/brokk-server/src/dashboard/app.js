// Brokk's dashboard: the client API read with the user's token (kept in this
// tab's sessionStorage), live through the /v1/events stream. No framework:
// the page is small, and nothing here needs a build step.
"use strict";

const STATES = ["accepted", "held", "planned", "reserving", "moving", "dispatched", "running", "finished", "failed", "cancelled"];
const state = { token: sessionStorage.getItem("brokk-token"), jobs: new Map(), sites: [], reservations: [], workflows: [] };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + state.token }, options.headers || {});
  const r = await fetch(path, Object.assign({}, options, { headers }));
  if (r.status === 401) { logout("That token is not known here."); throw new Error("unauthorized"); }
  if (!r.ok) {
    let msg = r.status + "";
    try { msg = (await r.json()).error; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return r;
}

const secs = (t) => (t ? Date.parse(t) / 1000 : null);
function human(s) {
  if (s == null) return "-";
  const sign = s < 0 ? "-" : ""; s = Math.abs(Math.round(s));
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60), x = s % 60;
  if (d) return `${sign}${d}d${String(h).padStart(2, "0")}h`;
  if (h) return `${sign}${h}h${String(m).padStart(2, "0")}m`;
  if (m) return x ? `${sign}${m}m${String(x).padStart(2, "0")}s` : `${sign}${m}m`;
  return `${sign}${x}s`;
}
// Times on a 24-hour clock, in the browser's zone or in UTC as its user
// chose (kept in this browser).
const utc = () => localStorage.getItem("brokk-zone") === "UTC";
const inZone = (more) => ({ hourCycle: "h23", ...(utc() ? { timeZone: "UTC" } : {}), ...more });
// A time that stands alone says it is UTC.
const named = () => inZone(utc() ? { timeZoneName: "short" } : {});
const clock = (t) => (t ? new Date(t).toLocaleTimeString([], named()) : "-");
const stamp = (t) => new Date(t).toLocaleString([], named());
const terminal = (s) => s === "finished" || s === "failed" || s === "cancelled";

// ---- login ----------------------------------------------------------------

async function login(token) {
  state.token = token;
  const me = await (await api("/v1/me")).json(); // 401 if the token is unknown
  sessionStorage.setItem("brokk-token", token);
  $("who").textContent = me.identity;
  $("login-view").hidden = true;
  $("app-view").hidden = false;
  $("logout").hidden = false;
  await Promise.all([loadJobs(), loadSites(), loadReservations(), loadWorkflows()]);
  listen();
  setInterval(loadSites, 5000);
  setInterval(loadReservations, 10000);
  setInterval(loadWorkflows, 10000);
  setInterval(render, 1000); // elapsed times and "now" move
}

function logout(message) {
  sessionStorage.removeItem("brokk-token");
  state.token = null;
  $("app-view").hidden = true;
  $("logout").hidden = true;
  $("login-view").hidden = false;
  $("who").textContent = "";
  $("login-error").textContent = message || "";
}

// ---- data -----------------------------------------------------------------

// The jobs list is paged and sorted by the service (newest first unless a
// time's heading is clicked, PAGE at a time, the state filter applied
// there), so it stays quick however many jobs are stored; `pages` holds
// the cursor of each page before this one.
const PAGE = 100;
state.pages = [];
state.more = false;
state.sort = "-submitted";

async function loadJobs() {
  const q = new URLSearchParams({ limit: PAGE, sort: state.sort });
  if ($("f-state").value) q.set("state", $("f-state").value);
  const before = state.pages[state.pages.length - 1];
  if (before) q.set("before", before);
  const r = await api("/v1/jobs?" + q);
  const jobs = await r.json();
  state.more = (r.headers.get("Link") || "").includes('rel="next"');
  state.jobs = new Map(jobs.map((j) => [j.id, j]));
  render();
}

function pageTo(delta) {
  if (delta > 0) {
    const shown = visibleOrder();
    if (!state.more || !shown.length) return;
    state.pages.push(shown[shown.length - 1].id);
  } else if (state.pages.length) {
    state.pages.pop();
  }
  loadJobs();
}

async function loadSites() {
  try { state.sites = await (await api("/v1/resources")).json(); } catch (_) { return; }
  renderSites();
  renderGantt();
}

async function loadReservations() {
  try { state.reservations = await (await api("/v1/reservations")).json(); } catch (_) { return; }
  renderGantt();
  renderReservations();
}

async function loadWorkflows() {
  try { state.workflows = await (await api("/v1/workflows")).json(); } catch (_) { return; }
  renderWorkflows();
  if (!$("wf-detail").hidden) showWorkflow($("w-id").textContent);
}

// Server-sent events over fetch, so the token travels in a header, not a URL.
async function listen() {
  for (let delay = 500; state.token; delay = Math.min(delay * 2, 10000)) {
    try {
      const r = await api("/v1/events", { headers: { Accept: "text/event-stream" } });
      $("live").classList.add("on");
      delay = 500;
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, cut); buf = buf.slice(cut + 2);
          const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
          if (data) onEvent(JSON.parse(data));
        }
      }
    } catch (_) { /* reconnect below */ }
    $("live").classList.remove("on");
    if (!state.token) return;
    await new Promise((ok) => setTimeout(ok, delay));
    await loadJobs().catch(() => {});
  }
}

function onEvent(job) {
  const old = state.jobs.get(job.id);
  if (old && old.history && job.history.length === 0) job.history = old.history;
  // A job not on this page comes in only on the first page of the newest
  // first, and only if the service's filter would list it.
  const wanted = !$("f-state").value || job.state === $("f-state").value;
  if (!old && (state.pages.length || !wanted || state.sort !== "-submitted")) return;
  state.jobs.set(job.id, job);
  // The first page keeps its length: what a new job pushes off is on the next.
  if (!old && state.jobs.size > PAGE) {
    for (const j of visibleOrder().slice(PAGE)) state.jobs.delete(j.id);
    state.more = true;
  }
  soon(render);
  if (!$("detail").hidden && $("d-id").textContent === job.id) showJob(job.id);
  if (job.state === "dispatched" || terminal(job.state)) soon(loadReservations);
}

// ---- views ----------------------------------------------------------------

// Runs `f` once at the next frame however often it is asked for before:
// a burst of events (an array of thousands) redraws once, not per event.
const asked = new Set();
function soon(f) {
  if (asked.has(f)) return;
  asked.add(f);
  requestAnimationFrame(() => { asked.delete(f); f(); });
}

// This page's jobs in the service's order: by the sort's time (a time not
// reached yet before every other), ties by id, ascending.
function visibleOrder() {
  const desc = state.sort.startsWith("-"), key = state.sort.replace(/^-/, "");
  const at = (j) => secs(j[key]) ?? -1;
  return [...state.jobs.values()].sort((a, b) => (desc ? at(b) - at(a) : at(a) - at(b)) || (a.id < b.id ? -1 : 1));
}

// A time's heading sorts by it, newest first; clicked again, oldest first.
function sortBy(key) {
  state.sort = state.sort === "-" + key ? key : "-" + key;
  state.pages = [];
  for (const th of document.querySelectorAll("#jobs th[data-sort]")) {
    const on = state.sort.replace(/^-/, "") === th.dataset.sort;
    th.classList.toggle("sorted", on);
    th.textContent = th.dataset.sort + (on ? (state.sort.startsWith("-") ? " ▼" : " ▲") : "");
  }
  loadJobs();
}

function visibleJobs() {
  const st = $("f-state").value, site = $("f-site").value, name = $("f-name").value.trim();
  const re = name ? new RegExp("^" + name.split("*").map((p) => p.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*") + "$") : null;
  return visibleOrder().filter((j) => (!st || j.state === st) && (!site || j.site === site) && (!re || re.test(j.name || "")));
}

function render() {
  const now = Date.now() / 1000;
  const rows = visibleJobs().map((j) => {
    const started = secs(j.started);
    const predicted = j.predicted_tts != null ? secs(j.submitted) + j.predicted_tts : null;
    const startCell = started ? clock(j.started) : predicted && !terminal(j.state) ? (predicted > now ? "in " + human(predicted - now) : "due") : "-";
    const elapsed = started ? human((secs(j.ended) || now) - started) : "-";
    return el("tr", { "data-id": j.id, "data-state": j.state, onclick: () => showJob(j.id) },
      el("td", {}, j.id), el("td", {}, j.name || "-"),
      el("td", { class: "state state-" + j.state }, j.state), el("td", {}, j.site || "-"),
      el("td", {}, j.exit_code ?? "-"), el("td", {}, clock(j.submitted)), el("td", {}, startCell),
      el("td", {}, elapsed), el("td", {}, j.ended ? clock(j.ended) : "-"), el("td", { class: "reason" }, j.reason || ""));
  });
  $("jobs").tBodies[0].replaceChildren(...rows);
  const first = state.pages.length * PAGE + 1;
  $("page").textContent = state.jobs.size ? `jobs ${first}-${first + state.jobs.size - 1}${state.more ? "" : " (the last)"}` : "no jobs";
  $("newer").disabled = !state.pages.length;
  $("older").disabled = !state.more;
  renderGantt();
}

function renderSites() {
  const sel = $("f-site"), chosen = sel.value;
  sel.replaceChildren(el("option", { value: "" }, "any"), ...state.sites.map((s) => el("option", { value: s.name }, s.name)));
  sel.value = chosen;
  $("sites").tBodies[0].replaceChildren(...state.sites.map((s) => s.error
    ? el("tr", { "data-site": s.name }, el("td", {}, s.name), el("td", { colspan: 5 }, ""), el("td", { class: "down" }, "down: " + s.error))
    : el("tr", { "data-site": s.name },
      el("td", {}, s.name), el("td", {}, s.total_slots), el("td", {}, s.free_slots),
      el("td", {}, s.running_jobs), el("td", {}, s.waiting_jobs), el("td", {}, human(s.estimated_wait)),
      el("td", {}, "up"))));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, title) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (title) { const t = document.createElementNS(SVG, "title"); t.textContent = title; e.append(t); }
  return e;
}

// One row per site: your reservations (dashed outlines), your jobs (bars,
// coloured by state, at their start or predicted start), co-allocated
// parts joined by a line, and "now".
function renderGantt() {
  const now = Date.now() / 1000;
  const names = [...new Set([...state.sites.map((s) => s.name), ...[...state.jobs.values()].map((j) => j.site).filter(Boolean)])];
  const items = [];
  for (const j of state.jobs.values()) {
    if (!j.site) continue;
    const start = secs(j.started) ?? (j.predicted_tts != null ? secs(j.submitted) + j.predicted_tts : null);
    if (start == null) continue;
    const end = secs(j.ended) ?? Math.max(start + (j.wall_time || 3600), now);
    const group = j.member && j.member.kind === "part" ? j.member.coallocation : null;
    items.push({ kind: "job", site: j.site, start, end, id: j.id, state: j.state, label: j.name || j.id, group });
  }
  for (const r of state.reservations) {
    if (r.state !== "committed") continue;
    items.push({ kind: "reservation", site: r.site, start: secs(r.start), end: secs(r.end), id: r.id, label: `${r.amount} slots` });
  }
  let lo = now - 600, hi = now + 1800;
  for (const i of items) { lo = Math.min(lo, i.start); hi = Math.max(hi, i.end); }
  lo = Math.max(lo, now - 7200); hi = Math.min(hi, now + 86400);
  // Zoomed: the chosen span around its centre, panned by its offset.
  if (state.zoom) {
    const mid = (state.zoom.centre ?? (lo + hi) / 2) + state.zoom.pan, half = state.zoom.span / 2;
    lo = mid - half; hi = mid + half;
  }
  $("gantt").dataset.span = Math.round(hi - lo);
  $("gantt").dataset.mid = Math.round((lo + hi) / 2);
  const W = Math.max(600, $("gantt").clientWidth || 900), left = 110, rowH = 34, top = 22;
  const H = top + rowH * Math.max(1, names.length) + 8;
  const x = (t) => left + (Math.min(Math.max(t, lo), hi) - lo) / (hi - lo) * (W - left - 10);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, height: H, role: "img", "aria-label": "schedule per site" });
  const step = [60, 300, 600, 1800, 3600, 7200, 21600].find((s) => (hi - lo) / s <= 10) || 43200;
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) {
    root.append(svg("line", { x1: x(t), x2: x(t), y1: top - 4, y2: H, stroke: "#eee" }));
    const tick = svg("text", { x: x(t) + 2, y: 12, class: "tick" }); tick.textContent = new Date(t * 1000).toLocaleTimeString([], inZone({ hour: "2-digit", minute: "2-digit" }));
    root.append(tick);
  }
  const centres = new Map();
  names.forEach((name, k) => {
    const y = top + k * rowH;
    const label = svg("text", { x: 4, y: y + rowH / 2 + 4, class: "label" }); label.textContent = name;
    root.append(label, svg("line", { x1: left, x2: W, y1: y + rowH, y2: y + rowH, stroke: "#eee" }));
    for (const i of items.filter((i) => i.site === name)) {
      const w = Math.max(3, x(i.end) - x(i.start));
      if (i.kind === "reservation") {
        root.append(svg("rect", { x: x(i.start), y: y + 3, width: w, height: rowH - 6, rx: 3, class: "bar reservation", "data-id": i.id },
          `reservation ${i.id}: ${i.label}, ${stamp(i.start * 1000)} to ${stamp(i.end * 1000)}`));
      } else {
        root.append(svg("rect", { x: x(i.start), y: y + 8, width: w, height: rowH - 16, rx: 2, class: `bar job ${i.state}`, "data-id": i.id },
          `${i.label} (${i.id}): ${i.state}`));
        // A bar wide enough carries its job's name.
        if (w > 7 * i.label.length + 8) {
          const t = svg("text", { x: x(i.start) + 4, y: y + rowH / 2 + 4, class: "bar-label", "data-for": i.id });
          t.textContent = i.label;
          root.append(t);
        }
        if (i.group) centres.set(i.id, [i.group, x(i.start), y + rowH / 2]);
      }
    }
  });
  // Co-allocated parts start together: join them.
  const groups = new Map();
  for (const [g, ...c] of centres.values()) groups.set(g, [...(groups.get(g) || []), c]);
  for (const [g, cs] of groups) {
    if (cs.length < 2) continue;
    const ys = cs.map((c) => c[1]), xs = cs.map((c) => c[0]);
    root.append(svg("line", { x1: Math.min(...xs), x2: Math.min(...xs), y1: Math.min(...ys), y2: Math.max(...ys), class: "link" }, `co-allocation ${g}`));
  }
  root.append(svg("line", { x1: x(now), x2: x(now), y1: top - 6, y2: H, class: "now" }, "now"));
  $("gantt").replaceChildren(root);
}

// Newest first; a row opens the workflow's graph and tasks.
function renderWorkflows() {
  const rows = [...state.workflows].reverse().map((w) => {
    const done = w.tasks.filter((t) => t.state === "finished").length;
    return el("tr", { "data-id": w.id, "data-state": w.state, onclick: () => showWorkflow(w.id) },
      el("td", {}, w.id), el("td", {}, w.name), el("td", { class: "state state-" + w.state }, w.state),
      el("td", {}, w.scheduler), el("td", {}, `${done}/${w.tasks.length}`), el("td", {}, stamp(w.start)),
      el("td", {}, stamp(w.finish)), el("td", { class: "reason" }, w.reason || ""));
  });
  $("workflows").tBodies[0].replaceChildren(...rows);
}

// A reservation whose end has passed is hidden unless asked for.
function renderReservations() {
  const st = $("r-state").value, past = $("r-past").checked, now = Date.now() / 1000;
  const rows = state.reservations
    .filter((r) => (!st || r.state === st) && (past || secs(r.end) > now))
    .sort((a, b) => secs(a.start) - secs(b.start))
    .map((r) => el("tr", { "data-id": r.id, "data-state": r.state },
      el("td", {}, r.id), el("td", {}, r.site), el("td", {}, r.amount), el("td", {}, stamp(r.start)),
      el("td", {}, stamp(r.end)), el("td", { class: "state state-" + r.state }, r.state), el("td", {}, r.workflow || "")));
  $("reservations").tBodies[0].replaceChildren(...rows);
}

// The workflow's graph, its tasks in layers by dependency (a task one layer
// below its deepest parent), each box its task, site and state; and its
// tasks' table. A task's row opens its job.
async function showWorkflow(id) {
  const w = await (await api("/v1/workflows/" + encodeURIComponent(id))).json();
  $("wf-detail").hidden = false;
  $("w-id").textContent = w.id;
  $("w-summary").textContent = `${w.name}: ${w.state} (${w.scheduler}), planned ${stamp(w.start)} to ${stamp(w.finish)}` +
    (w.deadline ? `, due ${stamp(w.deadline)}` : "") + (w.reason ? ` — ${w.reason}` : "");
  const edges = w.edges || [];
  const layer = new Map(w.tasks.map((t) => [t.task, 0]));
  for (let pass = 0; pass < w.tasks.length; pass++) {
    for (const e of edges) layer.set(e.child, Math.max(layer.get(e.child), layer.get(e.parent) + 1));
  }
  const layers = [];
  for (const t of w.tasks) (layers[layer.get(t.task)] ||= []).push(t);
  const bw = 150, bh = 44, gx = 24, gy = 36;
  const width = Math.max(...layers.map((l) => l.length)) * (bw + gx) + gx, height = layers.length * (bh + gy) + gy;
  const root = svg("svg", { width, height, class: "dag" });
  const at = new Map();
  layers.forEach((l, k) => l.forEach((t, i) => at.set(t.task, { x: gx + i * (bw + gx), y: gy / 2 + k * (bh + gy) })));
  for (const e of edges) {
    const a = at.get(e.parent), b = at.get(e.child);
    root.append(svg("line", { x1: a.x + bw / 2, y1: a.y + bh, x2: b.x + bw / 2, y2: b.y, class: "edge" }, `${e.parent} before ${e.child}`));
  }
  for (const t of w.tasks) {
    const p = at.get(t.task);
    const g = svg("g", { class: "task state-" + t.state, "data-task": t.task }, `${t.task}: ${t.state} at ${t.site}, reservation ${t.reservation}`);
    g.append(svg("rect", { x: p.x, y: p.y, width: bw, height: bh, rx: 5 }));
    const label = svg("text", { x: p.x + 8, y: p.y + 18 });
    label.textContent = t.task;
    const sub = svg("text", { x: p.x + 8, y: p.y + 36, class: "sub" });
    sub.textContent = `${t.site} · ${t.state}`;
    g.append(label, sub);
    root.append(g);
  }
  $("w-graph").replaceChildren(root);
  $("w-tasks").tBodies[0].replaceChildren(...w.tasks.map((t) => el("tr", { "data-task": t.task, onclick: () => showJob(t.job) },
    el("td", {}, t.task), el("td", {}, t.job), el("td", { class: "state state-" + t.state }, t.state), el("td", {}, t.site),
    el("td", {}, t.reservation), el("td", {}, stamp(t.start)), el("td", {}, stamp(t.end)), el("td", {}, t.exit_code ?? "-"))));
}

async function showJob(id) {
  const j = await (await api("/v1/jobs/" + encodeURIComponent(id))).json();
  state.jobs.set(j.id, j);
  $("detail").hidden = false;
  $("d-id").textContent = j.id;
  const act = (label, path, method) => el("button", { type: "button", onclick: async () => {
    try { await api(path, { method }); } catch (e) { alert(e.message); }
    showJob(id);
  } }, label);
  const actions = [];
  if (!terminal(j.state)) actions.push(act("cancel", "/v1/jobs/" + id, "DELETE"));
  // Held at the broker before it reaches a site, at its site while it waits there.
  if (j.state === "accepted" || (j.state === "dispatched" && !j.member)) actions.push(act("hold", `/v1/jobs/${id}/hold`, "POST"));
  if (j.state === "held") actions.push(act("release", `/v1/jobs/${id}/release`, "POST"));
  // An ended job of its own runs again under its id (a workflow's task or
  // a co-allocation's part only with its whole).
  if (terminal(j.state) && !j.member) actions.push(act("requeue", `/v1/jobs/${id}/requeue`, "POST"));
  $("d-actions").replaceChildren(...actions);
  // A job a neighbouring broker delegated here: the brokers it came through.
  $("d-path").hidden = !j.delegated;
  $("d-path").textContent = j.delegated ? `delegated here along ${j.delegated.path.join(" → ")} (${j.delegated.ttl} more hops allowed)` : "";
  $("d-history").replaceChildren(...j.history.map((h) => el("li", {}, `${stamp(h.at)} ${h.state}${h.detail ? ": " + h.detail : ""}`)));
  const files = [...new Set([j.stdout, j.stderr, ...(j.outputs || [])].filter(Boolean))];
  // Beside each file, whether the broker keeps it (then it is there while the site is down).
  const kept = new Map((j.kept || []).map((k) => [k.name, k]));
  const keptText = (k) => !k ? "" : k.bytes != null ? ` kept by the broker (${size(k.bytes)})` : ` ${k.note || "not kept"}`;
  $("d-files").replaceChildren(...files.map((f) => el("li", {},
    el("a", { href: "#", onclick: (e) => { e.preventDefault(); showFile(id, f); } }, f),
    el("span", { class: "kept" }, keptText(kept.get(f))))));
  $("d-output").textContent = "";
  if (j.stdout && terminal(j.state)) showFile(id, j.stdout);
}

// A size in bytes as people read it, as the CLI writes it.
function size(n) {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024, u = 0;
  while (v >= 1024 && u + 1 < units.length) { v /= 1024; u++; }
  return `${v.toFixed(1)} ${units[u]}`;
}

// The first 64 KiB of a file, shown in the page.
async function showFile(id, name) {
  try {
    const r = await api(`/v1/jobs/${encodeURIComponent(id)}/files/${name.split("/").map(encodeURIComponent).join("/")}`, { headers: { Range: "bytes=0-65535" } });
    $("d-output").textContent = await r.text();
  } catch (e) {
    $("d-output").textContent = `${name}: ${e.message}`;
  }
}

// ---- wiring -----------------------------------------------------------------

$("f-state").append(...STATES.map((s) => el("option", { value: s }, s)));
for (const id of ["f-name", "f-site"]) $(id).addEventListener("input", render);
// The state filter is the service's: back to the first page.
$("f-state").addEventListener("change", () => { state.pages = []; loadJobs(); });
for (const th of document.querySelectorAll("#jobs th[data-sort]")) th.addEventListener("click", () => sortBy(th.dataset.sort));
$("older").addEventListener("click", () => pageTo(1));
$("newer").addEventListener("click", () => pageTo(-1));
$("d-close").addEventListener("click", () => { $("detail").hidden = true; });
$("w-close").addEventListener("click", () => { $("wf-detail").hidden = true; });
for (const id of ["r-state", "r-past"]) $(id).addEventListener("change", renderReservations);
$("zone").value = utc() ? "UTC" : "local";
$("zone").addEventListener("change", () => {
  localStorage.setItem("brokk-zone", $("zone").value);
  render();
  renderWorkflows();
  renderReservations();
  if (!$("detail").hidden) showJob($("d-id").textContent);
  if (!$("wf-detail").hidden) showWorkflow($("w-id").textContent);
});
$("logout").addEventListener("click", () => logout());
// Zoom the schedule in and out around its centre, pan it by half a span.
function zoomBy(factor, pan = 0) {
  const z = state.zoom || { span: Number($("gantt").dataset.span) || 2400, pan: 0, centre: null };
  if (z.centre == null) z.centre = Number($("gantt").dataset.mid) || Date.now() / 1000;
  z.span = Math.max(60, Math.min(7 * 86400, z.span * factor));
  z.pan += pan * z.span / 2;
  state.zoom = z;
  renderGantt();
}
$("zoom-in").addEventListener("click", () => zoomBy(0.5));
$("zoom-out").addEventListener("click", () => zoomBy(2));
$("pan-left").addEventListener("click", () => zoomBy(1, -1));
$("pan-right").addEventListener("click", () => zoomBy(1, 1));
$("zoom-reset").addEventListener("click", () => { state.zoom = null; renderGantt(); });
$("gantt").addEventListener("wheel", (e) => { if (!e.ctrlKey) return; e.preventDefault(); zoomBy(e.deltaY < 0 ? 0.8 : 1.25); }, { passive: false });
$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  login($("token").value.trim()).catch((err) => { $("login-error").textContent = err.message === "unauthorized" ? "That token is not known here." : err.message; });
});
if (state.token) login(state.token).catch(() => logout());
