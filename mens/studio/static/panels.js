// mens studio: the Data and Evals panels and Topology's compute hub (app.js holds the helpers
// and the other panels); loaded last, so it also starts the page.
"use strict";
// --- data ------------------------------------------------------------------------------------
async function loadData() {
  const d = await api("/api/data");
  $("#data-dir").textContent = d.dir;
  const s = $("#data-name");
  if (!s.options.length) {
    s.replaceChildren(...d.datasets.map(n => el("option", { value: n }, n)));
    s.addEventListener("change", loadRecords);
  }
  if (d.datasets.length) await loadRecords();
}
// the topic tree as a nested list: each node with its id, verified/target, and prune /
// expand buttons (expand without a teacher here: the page shows the command to run)
function treeList(n, name) {
  const act = (action, label) => el("button", { class: "tree-" + action, "data-node": n.id, "aria-label": `${action} ${n.id}`,
    onclick: () => treeAction(name, action, n.id) }, label);
  const li = el("li", { "data-node": n.id }, el("b", {}, n.label || n.id), ` (${n.id}; ${n.verified ?? 0}/${n.target ?? "?"}) `,
    act("expand", "expand"), n.id === "root" ? "" : act("prune", "prune"));
  if ((n.children || []).length) li.append(el("ul", {}, ...n.children.map(k => treeList(k, name))));
  return li;
}
async function treeAction(name, action, node) {
  if (action === "prune" && !confirm(`prune ${node} and everything below it?`)) return;
  try {
    const r = await api("/api/data/tree", { name, action, node });
    $("#tree-msg").textContent = r.ran ? r.said : `${r.why}:\n${r.command}`;
    if (r.ran) await loadRecords();
  } catch (e) { $("#tree-msg").textContent = e.message; }
}
async function curateRecord(name, id, action, extra) {
  try { await api("/api/data/curate", { name, id, action, ...extra }); say(action + " " + id); await loadRecords(); }
  catch (e) { say(e.message); }
}
async function loadRecords() {
  const name = $("#data-name").value, d = await api("/api/data/records?name=" + encodeURIComponent(name));
  const box = $("#data-tree");
  box.replaceChildren(d.tree ? el("ul", {}, treeList(d.tree.root || d.tree, name)) : "(no tree.yaml)");
  const t = $("#data-records");
  t.replaceChildren(el("tr", {}, ...["id", "topic", "oracle", "rating", "tags", "provenance", "prompt", "answer"].map(h => el("th", {}, h))));
  for (const r of d.records) {
    const rate = el("input", { type: "number", min: 1, max: 5, value: r.rating ?? "", "aria-label": "rating of " + r.id, size: 2 });
    rate.addEventListener("change", () => curateRecord(name, r.id, "rate", { rating: +rate.value }));
    const tag = el("input", { size: 8, placeholder: "tag", "aria-label": "tag for " + r.id, class: "tag-input" });
    tag.addEventListener("keydown", e => { if (e.key === "Enter" && tag.value.trim()) curateRecord(name, r.id, "tag", { tags: [tag.value.trim()] }); });
    const tags = el("td", {}, ...(r.tags || []).map(g => el("span", { class: "badge tag" }, g,
      el("button", { class: "untag", "aria-label": `untag ${g} from ${r.id}`, onclick: () => curateRecord(name, r.id, "untag", { tags: [g] }) }, "×"))), tag);
    const answer = el("textarea", { rows: 2, cols: 40, "aria-label": "answer of " + r.id, class: "answer-edit" });
    answer.value = r.answer || "";
    const save = el("button", { class: "save-answer", onclick: () => curateRecord(name, r.id, "edit", { response: answer.value }) }, "save");
    t.append(el("tr", { "data-record": r.id }, el("td", {}, r.id || ""), el("td", {}, (r.topic || []).join("/")),
      el("td", {}, el("span", { class: "badge b-" + (r.verdict === "passed" ? "pass" : r.verdict === "unverified" ? "none" : "void") }, r.verdict || "–")),
      el("td", {}, rate), tags,
      el("td", {}, typeof r.provenance === "object" ? JSON.stringify(r.provenance) : (r.provenance || "")),
      el("td", {}, (r.prompt || "").slice(0, 120)), el("td", {}, answer, save)));
  }
}

// --- evals -----------------------------------------------------------------------------------
async function loadEvals() {
  loadCompareRuns();
  await loadEvalResults();   // evals.js: each run's eval rows, chart and gate verdict
}

async function loadCompareRuns() {
  const { runs } = await api("/api/jobs");
  const box = $("#compare-runs");
  const picked = new Set([...box.querySelectorAll("input:checked")].map(i => i.value));
  box.replaceChildren(...runs.filter(r => r.state === "finished").map(r => el("label", {},
    el("input", { type: "checkbox", value: r.id, ...(picked.has(r.id) ? { checked: "" } : {}) }), `${r.id} (${r.spoke}, ${r.lane})`)));
}
$("#compare").addEventListener("click", async () => {
  const runs = [...document.querySelectorAll("#compare-runs input:checked")].map(i => i.value);
  $("#compare-msg").textContent = "comparing…";
  try {
    const r = await api("/api/evals/compare", { runs });
    const f = v => v == null ? "–" : typeof v === "number" ? (+v.toPrecision(5)).toString() : String(v);
    const mib = b => b == null ? "–" : (b / 2 ** 20).toFixed(0) + " MiB";
    const rowsOf = [["lane", x => x.lane], ["spoke", x => x.spoke], ["steps", x => x.steps], ["final train loss", x => f(x.final_loss)],
      ["eval loss base → tuned", x => `${f(x.eval_loss_base)} → ${f(x.eval_loss_adapter)}`], ["tokens/s (mean)", x => f(x.tokens_per_sec)],
      ["predicted peak", x => mib(x.predicted_peak_bytes)], ["measured peak", x => mib(x.measured_peak_bytes)], ["duration s", x => f(x.duration_s)]];
    const t = $("#compare-table");
    t.replaceChildren(el("tr", {}, el("th", {}, ""), ...r.runs.map(x => el("th", {}, x.id))),
      ...rowsOf.map(([k, fn]) => el("tr", {}, el("th", {}, k), ...r.runs.map(x => el("td", {}, String(fn(x)))))),
      el("tr", {}, el("th", { colspan: r.runs.length + 1 }, "spec differences")),
      ...Object.entries(r.spec_differences).map(([k, vs]) => el("tr", {}, el("th", {}, k), ...vs.map(v => el("td", {}, JSON.stringify(v))))));
    const ev = r.evals;   // mens.compare.evals' table: tuned [ci] and gain [ci] per run, the verdicts
    if (ev) t.append(el("tr", {}, el("th", { colspan: r.runs.length + 1 }, "eval results: tuned [95 % ci] · gain [paired ci]")),
      ...ev.metrics.map(m => el("tr", { "data-metric": m.name }, el("th", {}, m.name),
        ...m.cells.map(c => el("td", {}, c ? `${statText(c, "tuned")} · gain ${statText(c, "gain")}` : "—")))),
      el("tr", {}, el("th", {}, "gate"), ...ev.gates.map(g => el("td", {}, g ? `${g.status}: ${g.badge}` : "not gated"))));
    $("#compare-msg").textContent = `written to ${r.out} (compare.md, loss_curves.png)`;
  } catch (e) { $("#compare-msg").textContent = e.message; }
});

// --- compute hub (topology) ------------------------------------------------------------------
async function loadCompute(cell) {
  $("#compute-cell").textContent = cell; $("#compute-msg").textContent = "planning…";
  try {
    const d = await api("/api/compute?top=5&cell=" + encodeURIComponent(cell));
    const L = d.local;
    $("#compute-local").textContent = `local (${L.hw}): ${L.verdict} — peak ${GiB(L.peak_bytes)} of ${GiB(L.budget_bytes)} · seq ${L.shape.seq_len} × micro ${L.shape.micro_batch} × accum ${L.shape.grad_accum}`;
    $("#compute-offers").replaceChildren(el("tr", {}, ...["offer", "GPU × n", "fits", "per-device peak GB", "$/h", "est. hours", "est. cost $"].map(h => el("th", {}, h))),
      ...d.offers.map(o => el("tr", {}, el("td", {}, o.id), el("td", {}, `${o.gpu} × ${o.count}`), el("td", {}, o.fits ? "fits" : "refuses"),
        el("td", {}, String(o.per_device_peak_gb ?? "–")), el("td", {}, String(o.price_hour)), el("td", {}, String(o.est_hours ?? "–")), el("td", {}, String(o.est_cost_usd ?? "–")))));
    $("#compute-msg").textContent = d.command + (d.catalogue_stale ? " · the catalogue is stale" : "") + " · " + d.assumptions.join("; ");
  } catch (e) { $("#compute-msg").textContent = e.message; }
}

const loaders = { topology: loadLadder, recipe: loadRecipe, jobs: loadJobs, data: loadData, evals: loadEvals, serve: loadServe };
setInterval(() => { if (!$("#jobs").hidden) loadJobs(); }, 3000);
const first = tabs.find(t => t.dataset.panel === location.hash.slice(1)) || tabs[0];
show(first);
