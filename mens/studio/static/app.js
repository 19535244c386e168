// mens studio: one page over the studio's API. No framework: each panel is a load function.
"use strict";
const $ = s => document.querySelector(s);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) k.startsWith("on") ? e.addEventListener(k.slice(2), v) : e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
};
const GiB = b => b == null ? "–" : (b / 2 ** 30).toFixed(3) + " GiB";
async function api(path, body) {
  const r = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) { const e = new Error(data.error || r.statusText); e.status = r.status; throw e; }
  return data;
}
const say = t => { $("#status").textContent = t; };

// --- tabs (arrow keys move between them) ---------------------------------------------------
const tabs = [...document.querySelectorAll("[role=tab]")];
function show(tab) {
  for (const t of tabs) {
    const on = t === tab;
    t.setAttribute("aria-selected", on); t.tabIndex = on ? 0 : -1;
    $("#" + t.dataset.panel).hidden = !on;
  }
  tab.focus();
  loaders[tab.dataset.panel]();
}
tabs.forEach((t, i) => {
  t.addEventListener("click", () => show(t));
  t.addEventListener("keydown", e => {
    if (e.key === "ArrowRight") show(tabs[(i + 1) % tabs.length]);
    if (e.key === "ArrowLeft") show(tabs[(i + tabs.length - 1) % tabs.length]);
  });
});

// --- topology --------------------------------------------------------------------------------
async function loadLadder() {
  say("planning the ladder…");
  const L = await api("/api/ladder");
  $("#ladder-meta").textContent = `lane ${L.lane} · hw ${L.hw} · runs under ${L.runs_root}`;
  $("#hub-compute").textContent = `local (${L.hw})`;
  const by = Object.fromEntries(L.cells.map(c => [c.rung + "/" + c.spoke, c]));
  const t = $("#ladder"); t.replaceChildren();
  t.append(el("tr", {}, el("th", {}, "rung \\ spoke"), ...L.spokes.map(s => el("th", {}, s))));
  for (const r of L.rungs) {
    t.append(el("tr", {}, el("th", {}, r), ...L.spokes.map(s => {
      const c = by[r + "/" + s], id = r + "/" + s;
      return el("td", { "data-cell": id, title: c.why || "", onclick: e => { if (e.target.tagName !== "INPUT") loadCompute(id); } },
        el("label", {}, el("input", { type: "checkbox", class: "cell-pick", value: id, "aria-label": "select " + id }),
          el("span", { class: "badge s-" + c.state }, c.state)),
        c.plan_peak_bytes ? el("small", {}, " " + GiB(c.plan_peak_bytes)) : "",
        c.gate && c.gate.badge ? el("div", { class: "gate-badge" }, el("small", {}, c.gate.badge)) : "",
        el("button", { class: "link compute", "aria-label": "compute for " + id, onclick: () => loadCompute(id) }, "$"));
    })));
  }
  say("ladder: " + L.cells.length + " cells");
}
$("#afk-queue").addEventListener("click", async () => {
  const cells = [...document.querySelectorAll(".cell-pick:checked")].map(c => c.value);
  try {
    const r = await api("/api/afk", { cells, overrides: $("#afk-over").value.split(/\s+/).filter(Boolean) });
    $("#afk-state").textContent = "queued: " + r.queued.join(", ");
  } catch (e) { $("#afk-state").textContent = e.message; }
});

// --- recipe ------------------------------------------------------------------------------------
let options = null;
function overrides() {
  const o = [];
  const pick = (id, key, plus) => { const v = $("#r-" + id).value; if (v) o.push((plus ? "+" : "") + key + "=" + v); };
  pick("hw", "hw", true); pick("rung", "rung", true);
  pick("spoke", "spoke"); o.push(...laneOverrides()); pick("curriculum", "curriculum"); pick("logger", "logger");
  pick("rank", "lane.lora.r"); pick("alpha", "lane.lora.alpha"); pick("lr", "lane.optimizer.lr");
  pick("seq_len", "train.seq_len"); pick("micro_batch", "train.micro_batch");
  pick("grad_accum", "train.grad_accum"); pick("max_steps", "train.max_steps");
  const caps = $("#r-caps").value.split(/[\s,]+/).filter(Boolean);   // "4, 7, 10": one per epoch
  if (caps.length) o.push("curriculum.caps=[" + caps.join(",") + "]");
  return o.concat($("#r-extra").value.split(/\s+/).filter(Boolean));
}
// the lane is two selects, method × objective, both from the server (mens.config.objectives):
// SFT on a method is `lane=<its file>`; another objective is `lane=<its file>` (each file builds
// on a method: o.method) plus `lane.method=M` for another method
const byName = (list, name) => list.find(x => x.name === name);
function laneOverrides() {
  const m = byName(options.methods, $("#r-method").value), o = byName(options.objectives, $("#r-objective").value);
  if (!m || !o) return [];
  if (!o.option) return m.option ? ["lane=" + m.option] : ["lane.method=" + m.name];
  return ["lane=" + o.option, ...(m.name !== o.method ? ["lane.method=" + m.name] : [])];
}
function laneHint() {
  const o = byName(options.objectives, $("#r-objective").value);
  $("#r-objective-hint").textContent = o ? o.hint : "";
}
// a lane written as overrides (a recipe's `lane=qlora`, `lane=dpo lane.method=full`,
// `lane.objective=kto`) → the two selects; the overrides they replace are returned without them
function absorbLane(words) {
  const lane = {}, rest = [];
  for (const w of words) {
    const [k, v] = w.split(/=(.*)/s);
    const m = k === "lane" && options.methods.find(x => x.option === v), o = k === "lane" && options.objectives.find(x => x.option === v);
    if (m) { lane.method = lane.method || m.name; lane.objective = "sft"; }
    else if (o) { lane.objective = o.name; lane.base = o.method; }
    else if (k === "lane.method" && byName(options.methods, v)) lane.method = v;
    else if (k === "lane.objective" && byName(options.objectives, v)) lane.objective = v;
    else rest.push(w);
  }
  if (lane.objective) $("#r-objective").value = lane.objective;
  if (lane.method || lane.base) $("#r-method").value = lane.method || lane.base;
  laneHint();
  return rest;
}
async function loadRecipe() {
  if (!options) {
    options = await api("/api/options");
    const defaults = { hw: "cpu", rung: "tiny", spoke: "vox_lang", method: options.method[0], objective: options.objective[0], curriculum: "flat", logger: "csv" };
    for (const g of ["hw", "rung", "spoke", "method", "objective", "curriculum", "logger"]) {
      const s = $("#r-" + g); s.replaceChildren(...options[g].map(v => el("option", { value: v }, v)));
      s.value = defaults[g];
    }
    laneHint();
    $("#r-objective").addEventListener("input", laneHint);
    $("#r-extra").addEventListener("change", () => {   // a lane typed here moves into the selects
      const words = $("#r-extra").value.split(/\s+/).filter(Boolean), rest = absorbLane(words);
      if (rest.length !== words.length) { $("#r-extra").value = rest.join(" "); schedulePlan(); }
    });
    document.querySelectorAll("#recipe-form select, #recipe-form input").forEach(i =>
      i.addEventListener("input", schedulePlan));
  }
  await replan();
}
let planTimer = null, planSeq = 0;
function schedulePlan() { clearTimeout(planTimer); planTimer = setTimeout(replan, 250); }
async function replan() {
  const seq = ++planSeq, o = overrides();
  $("#plan-command").textContent = "python -m mens " + o.join(" ");
  try {
    const p = await api("/api/plan", { overrides: o });
    if (seq !== planSeq) return;   // a newer edit is being planned
    $("#recipe-msg").textContent = "";
    $("#plan-verdict").textContent = p.verdict; $("#plan-verdict").className = "badge b-" + p.verdict;
    $("#plan-peak").textContent = GiB(p.peak_bytes); $("#plan-budget").textContent = GiB(p.budget_bytes);
    $("#plan-shape").textContent = `seq ${p.seq_len} × micro ${p.micro_batch} × accum ${p.grad_accum} (global ${p.global_batch}) · ${p.hw} · ${p.rung} · lane ${p.lane} (${p.method} × ${p.objective}) · cell ${p.cell}`;
    $("#plan-components").replaceChildren(el("tr", {}, el("th", {}, "component"), el("th", {}, "bytes")),
      ...Object.entries(p.components).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, typeof v === "number" ? GiB(v) : JSON.stringify(v)))));
    $("#plan-ways").replaceChildren(...p.ways_out.map(w => el("li", {}, w)));
  } catch (e) {
    if (seq !== planSeq) return;
    $("#plan-verdict").textContent = "error"; $("#plan-verdict").className = "badge b-fail";
    $("#recipe-msg").textContent = e.message;   // the planner's paragraph: why, and what to pick
    for (const id of ["#plan-peak", "#plan-budget", "#plan-shape"]) $(id).textContent = "–";
    $("#plan-components").replaceChildren(); $("#plan-ways").replaceChildren();
  }
}
$("#launch").addEventListener("click", async () => {
  try {
    const r = await api("/api/jobs", { overrides: overrides() });
    $("#recipe-msg").textContent = ""; say("launched " + r.id);
    watch(r.id); show($("#tab-jobs"));
  } catch (e) { $("#recipe-msg").textContent = e.message; }
});
$("#save-recipe").addEventListener("click", async () => {
  try {
    const r = await api("/api/recipes", { name: $("#recipe-name").value, overrides: overrides() });
    say("saved " + r.path + " — " + r.use);
  } catch (e) { $("#recipe-msg").textContent = e.message; }
});

// --- jobs ------------------------------------------------------------------------------------
let watching = null, source = null, rows = [], markers = [], ceiling = null, t0 = null;
const fmtEta = s => s == null ? "–" : s < 90 ? Math.round(s) + " s" : (s / 60).toFixed(1) + " min";
// the progress bar: one segment per curriculum epoch (its planned steps), each filled as far as
// the run has gone; a plain bar when the run logged no CURRICULUM rows
function progressBar(r) {
  const total = r.total || 1, step = r.step || 0;
  if (!r.epochs || !r.epochs.length) return el("progress", { max: total, value: step });
  const bar = el("span", { class: "segbar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": total, "aria-valuenow": step });
  for (const s of r.epochs) {
    const done = Math.max(0, Math.min(s.steps, step - s.start));
    bar.append(el("span", { class: "seg", "data-epoch": s.epoch, title: `epoch ${s.epoch}: steps ${s.start}–${s.start + s.steps}` + (s.cap != null ? ` (cap ${s.cap})` : ""),
      style: `flex-grow:${Math.max(s.steps, 0.0001)}` }, el("span", { class: "fill", style: `width:${s.steps ? 100 * done / s.steps : 0}%` })));
  }
  return bar;
}
async function loadJobs() {
  const { runs } = await api("/api/jobs");
  const t = $("#jobs-table");
  t.replaceChildren(el("tr", {}, ...["run", "cell", "state", "progress (by epoch)", "epoch", "ETA", "loss", "gate", "controls"].map(h => el("th", {}, h))));
  for (const r of runs) {
    const ctl = (a, label, title) => el("button", { onclick: () => control(r.id, a), "data-action": a, title }, label);
    t.append(el("tr", { "data-run": r.id },
      el("td", {}, el("button", { class: "link", onclick: () => watch(r.id) }, r.id)),
      el("td", {}, `${r.rung || "?"}/${r.spoke || "?"} ${r.lane || ""}`),
      el("td", {}, el("span", { class: "badge b-" + r.state }, r.state)),
      el("td", {}, progressBar(r), ` ${r.step ?? 0}/${r.total ?? "?"}`),
      el("td", {}, r.epoch ?? "–"), el("td", {}, fmtEta(r.eta_s)),
      el("td", {}, r.loss != null ? r.loss.toFixed(4) : "–"),
      el("td", {}, el("span", { class: "badge b-" + (r.gate || "none") }, r.gate || "none")),
      el("td", {}, ...(r.state === "running" ? [
        ctl("checkpoint", "checkpoint now", "SIGUSR1: save last.ckpt at the next step and keep training"),
        ctl("pause", "checkpoint + pause", "SIGINT: save last.ckpt, then stop (resume later)"),
        ctl("abort", "abort", "SIGTERM: stop now")] :
        [r.state === "interrupted" ? ctl("resume", "resume") : "", r.has_adapter ? ctl("gate", "gate") : ""]))));
  }
  if (!watching && runs.length) watch(runs[0].id);
}
async function control(id, action) {
  try { const r = await api("/api/jobs/control", { id, action }); say(action + " → " + id + (r.pid ? " (pid " + r.pid + ")" : "")); }
  catch (e) { say(e.message); }
  setTimeout(loadJobs, 800);
}
// the telemetry event names come from the server (mens.run.telemetry): the page spells none
let vocabulary = null;
async function watch(id) {
  if (source && watching === id && source.readyState !== 2) return;
  if (source) source.close();
  watching = id; rows = []; markers = []; ceiling = null; t0 = null;
  $("#chart-run").textContent = id;
  vocabulary = vocabulary || api("/api/telemetry").catch(e => { vocabulary = null; throw e; });
  const { events: E, terminal } = await vocabulary;
  if (watching !== id) return;   // another run was picked meanwhile
  if (source) source.close();
  source = new EventSource("/api/jobs/events?id=" + encodeURIComponent(id));
  source.onmessage = ev => {
    const r = JSON.parse(ev.data);
    if (t0 == null && r.time != null) t0 = r.time;
    if (r.event === E.TRAIN_STEP) { rows.push(r); if (r.planned_peak_mb) ceiling = r.planned_peak_mb; }
    else if (r.event === E.CHECKPOINT || r.event === E.CURRICULUM)
      markers.push({ step: r.step ?? (rows.at(-1)?.step || 0), time: r.time,
                     checkpoint: r.event === E.CHECKPOINT, reason: r.reason });
    else if (terminal.includes(r.event)) loadJobs();
    draw();
  };
  source.addEventListener("end", () => { source.close(); loadJobs(); });
}
function ema(points) {
  if (!$("#ema").checked) return points;
  let m = null; return points.map(([x, y]) => [x, m = m == null ? y : 0.8 * m + 0.2 * y]);
}
// the memory channel compares like with like: the training window's reading (what the planner
// predicts) when the rows carry one, else the accelerator's reserved memory, else the process's
// peak (RSS high-water, loading included) — and the legend says which
const MEMORY_KEYS = [["window_peak_mb", "window peak MB"],
  ["gpu_vram_used_mb", "accelerator reserved MB"], ["peak_mem_mb", "process peak MB (incl. loading)"]];
function draw() {
  $("#chart-points").textContent = rows.length;
  const byTime = $("#xaxis").value === "time";
  const X = r => byTime ? (r.time ?? t0) - (t0 ?? 0) : r.step;
  const on = ch => document.querySelector(`[data-ch=${ch}]`).checked;
  const pts = key => ema(rows.filter(r => r[key] != null).map(r => [X(r), r[key]]));
  const series = [];
  if (on("loss")) series.push({ name: "loss", unit: "loss", colour: Chart.colours.loss, points: pts("loss") });
  if (on("tokens_per_sec")) series.push({ name: "tokens/s", unit: "tokens/s", colour: Chart.colours.tokens_per_sec, points: pts("tokens_per_sec") });
  if (on("memory")) {
    const [key, label] = MEMORY_KEYS.find(([k]) => rows.some(r => r[k] != null)) || MEMORY_KEYS[0];
    series.push({ name: label + " vs planned peak", key, unit: "MB", colour: Chart.colours.memory, ceiling, points: pts(key) });
  }
  if (on("rss_mb")) series.push({ name: "process RAM MB", unit: "MB", colour: Chart.colours.rss_mb, points: pts("rss_mb") });
  if (on("cpu_util_pct")) series.push({ name: "CPU %", unit: "%", colour: Chart.colours.cpu_util_pct, points: pts("cpu_util_pct") });
  if (on("gpu_util_pct")) {
    const has = rows.some(r => r.gpu_util_pct != null);
    series.push({ name: has ? "accelerator %" : "accelerator % (not reported by this backend)", unit: "%", colour: Chart.colours.gpu_util_pct, points: pts("gpu_util_pct") });
  }
  $("#chart-legend").textContent = series.map(s => s.name + (s.key ? ` [${s.key}]` : "")).join(" · ");
  Chart.draw($("#chart"), series, { xlabel: byTime ? "s" : "step",
    markers: markers.map(m => ({ x: byTime ? (m.time ?? t0) - (t0 ?? 0) : m.step, checkpoint: m.checkpoint })) });
}
document.querySelectorAll(".channels input, #xaxis").forEach(i => i.addEventListener("change", draw));

// --- serve -----------------------------------------------------------------------------------
let serveTimer = null;
async function loadServe() {
  const { runs } = await api("/api/jobs");
  const box = $("#serve-runs");
  const picked = new Set([...box.querySelectorAll("input:checked")].map(i => i.value));
  box.replaceChildren(...runs.filter(r => r.has_adapter).map(r => el("label", {},
    el("input", { type: "checkbox", value: r.id, ...(picked.has(r.id) ? { checked: "" } : {}) }),
    `${r.id} (${r.spoke}, gate ${r.gate || "none"})`)));
  await serveStatus();
}
async function serveStatus() {
  const s = await api("/api/serve");
  $("#serve-state").textContent = s.state; $("#serve-state").className = "badge b-" + s.state;
  $("#hub-serve").textContent = s.state;
  $("#serve-log").textContent = s.log || "";
  clearTimeout(serveTimer);
  if (s.state === "starting") serveTimer = setTimeout(serveStatus, 1000);
  const t = $("#slots"); t.replaceChildren();
  if (s.state !== "up") return;
  const role = {};
  for (const [spoke, r] of Object.entries(s.aliases)) for (const [k, v] of Object.entries(r)) if (v) role[v] = `${spoke}:${k}`;
  t.append(el("tr", {}, ...["slot", "role", "actions"].map(h => el("th", {}, h))));
  for (const m of s.models.filter(m => !m.includes(":"))) {
    const spoke = Object.keys(s.aliases).find(k => (role[m] || "").startsWith(k + ":"));
    t.append(el("tr", { "data-slot": m }, el("td", {}, m), el("td", {}, role[m] || (m === "base" ? "base" : "")),
      el("td", {}, m === "base" ? "" : el("button", { class: "promote", onclick: () => admin("promote", spoke, m) }, "promote to champion"),
        m === "base" ? "" : el("button", { onclick: () => admin("rollback", spoke) }, "rollback"))));
  }
  for (const id of ["#chat-a", "#chat-b"]) {
    const sel = $(id), keep = sel.value;
    sel.replaceChildren(...s.models.map(m => el("option", { value: m }, m)));
    sel.value = keep && s.models.includes(keep) ? keep : (id === "#chat-a" ? "base" : s.models.find(m => m !== "base" && !m.includes(":")));
  }
  const spoke = Object.keys(s.aliases)[0];
  if (spoke && !$("#chat-prompts").options.length) {
    const { prompts } = await api("/api/serve/prompts?spoke=" + spoke);
    $("#chat-prompts").replaceChildren(...prompts.map(p => el("option", { value: p }, p.slice(0, 80))));
    $("#chat-prompt").value = prompts[0] || "";
  }
}
async function admin(action, spoke, slot) {
  try {
    const r = await api("/api/serve/" + action, { spoke, slot });
    $("#serve-msg").textContent = ""; say(`${action}: ${spoke}:champion = ${r.champion}`);
  } catch (e) { $("#serve-msg").textContent = `${action} refused (${e.status}): ${e.message}`; }
  await serveStatus();
}
$("#chat-prompts").addEventListener("change", e => { $("#chat-prompt").value = e.target.value; });
$("#serve-start").addEventListener("click", async () => {
  const runs = [...document.querySelectorAll("#serve-runs input:checked")].map(i => i.value);
  try { await api("/api/serve/start", { runs }); $("#serve-msg").textContent = ""; }
  catch (e) { $("#serve-msg").textContent = e.message; }
  await serveStatus();
});
$("#serve-stop").addEventListener("click", async () => { await api("/api/serve/stop", {}); await serveStatus(); });
