// mens studio: the Evals panel's results (each run's eval.json metric rows, its gate verdict)
// and their chart: base vs tuned bars with 95 % interval error bars (chart.js: EvalChart, one
// small uPlot per metric, each on its own scale from 0).
"use strict";
// a row's numbers as text: the API sends mens.run.evalrow's one reading (row.text[side]),
// the string eval.md, the gate, the card, compare and the ladder print; none is formatted here
const statText = (row, side) => (row && row.text && row.text[side]) || "—";
function evalTable(rows) {
  const head = ["metric", "group", "n", "base [95 % ci]", "tuned [95 % ci]", "gain [paired ci]", "version"];
  return el("table", { class: "grid eval-rows" }, el("tr", {}, ...head.map(h => el("th", {}, h))),
    ...rows.map(r => el("tr", { "data-metric": r.name }, el("td", {}, r.name + (r.higher_is_better === false ? " ↓" : "")),
      el("td", {}, r.group || ""), el("td", {}, String(r.n ?? "–")), el("td", {}, statText(r, "base")),
      el("td", {}, statText(r, "tuned")), el("td", { class: "gain" }, statText(r, "gain")), el("td", {}, r.version ?? "–"))));
}

async function loadEvalResults() {
  const { runs } = await api("/api/evals");
  const box = $("#evals-runs");
  box.replaceChildren(...(runs.length ? [] : [el("p", { class: "hint" },
    "no eval.json or gate.json under the runs folder yet: `mens eval run=<run dir>`, then `mens gate run=<run dir>`")]));
  for (const r of runs) {
    const g = r.gate, ev = r.eval;
    const head = el("h3", {}, r.id + " ",
      g ? el("span", { class: "badge gate b-" + g.status, title: g.why || "" }, g.status) : el("span", { class: "badge b-none" }, "not gated"),
      g && g.badge ? el("small", { class: "gate-badge" }, " " + g.badge) : "",
      ev ? el("small", {}, ` · ${ev.lane || "base"} on ${ev.rung}, spoke ${ev.spoke ?? "–"}`) : "");
    const body = r.error ? el("p", { class: "error" }, r.error) :
      ev ? el("div", { class: "cols" }, EvalChart.mount(el("div"), ev.rows, statText), el("div", { class: "scroll" }, evalTable(ev.rows))) :
      el("p", { class: "hint" }, "gated, no eval.json beside it");
    box.append(el("article", { class: "eval-run", "data-run": r.id }, head, body));
  }
}
