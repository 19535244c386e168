// mens studio: the Evals panel's results (each run's eval.json metric rows, its gate verdict)
// and their chart: base vs tuned bars with 95 % interval error bars, as inline SVG built here
// from the JSON (no library). One small panel per metric, each on its own scale from 0: an
// accuracy and a loss side by side cannot share an axis.
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs = {}, text) => {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
};
// a row's numbers as text: the API sends mens.run.evalrow's one reading (row.text[side]),
// the string eval.md, the gate, the card, compare and the ladder print; none is formatted here
const statText = (row, side) => (row && row.text && row.text[side]) || "—";

const EvalChart = {
  models: ["base", "tuned"],
  colours: { base: "#9aa5b1", tuned: "#2553b8" },
  panel: { w: 175, h: 190, top: 16, bottom: 44, bar: 34, gap: 14 },
  // one <svg>; per metric a <g class="metric" data-metric> holding, per model with a value,
  // rect.bar (0 → value) and line.err (ci lo → hi, with two line.cap ends)
  svg(rows) {
    const P = this.panel, W = P.w * Math.max(rows.length, 1), H = P.h;
    const svg = svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "eval-chart",
      role: "img", "aria-label": "base vs tuned per metric, with 95 % intervals" });
    rows.forEach((row, i) => {
      const present = this.models.filter(m => row[m] && row[m].value != null);
      const vals = present.flatMap(m => [row[m].value, ...(row[m].ci || [])]);
      let lo = Math.min(0, ...vals), hi = Math.max(0, ...vals);
      if (hi - lo < 1e-12) hi = lo + 1;
      hi += 0.08 * (hi - lo);                                   // room above the highest cap
      const Y = v => P.top + (H - P.top - P.bottom) * (hi - v) / (hi - lo);
      const g = svgEl("g", { class: "metric", "data-metric": row.name, transform: `translate(${i * P.w},0)` });
      g.append(svgEl("line", { class: "axis", x1: 8, x2: P.w - 8, y1: Y(0), y2: Y(0), stroke: "#5b6570" }));
      present.forEach((m, j) => {
        const s = row[m], x = 8 + P.gap + j * (P.bar + P.gap) + (P.w - 150) / 2, cx = x + P.bar / 2;
        const top = Y(Math.max(0, s.value)), bottom = Y(Math.min(0, s.value));
        const bar = svgEl("rect", { class: "bar bar-" + m, "data-model": m, "data-value": s.value, x, y: top,
          width: P.bar, height: bottom - top, fill: this.colours[m] });
        bar.append(svgEl("title", {}, `${row.name} ${m}: ${statText(row, m)}`));
        g.append(bar);
        if (s.ci) {
          const attrs = { stroke: "#1b1f24", "stroke-width": 1.5 };
          g.append(svgEl("line", { class: "err err-" + m, "data-model": m, x1: cx, x2: cx, y1: Y(s.ci[1]), y2: Y(s.ci[0]), ...attrs }));
          for (const v of s.ci) g.append(svgEl("line", { class: "cap", x1: cx - 6, x2: cx + 6, y1: Y(v), y2: Y(v), ...attrs }));
        }
        g.append(svgEl("text", { x: cx, y: H - P.bottom + 13, "text-anchor": "middle", "font-size": 10 }, m));
      });
      const name = row.name.length > 24 ? row.name.slice(0, 23) + "…" : row.name;
      g.append(svgEl("text", { class: "metric-name", x: P.w / 2, y: H - P.bottom + 27, "text-anchor": "middle", "font-size": 11 }, name));
      g.append(svgEl("text", { x: P.w / 2, y: H - P.bottom + 40, "text-anchor": "middle", "font-size": 10,
        fill: "#5b6570" }, "gain " + statText(row, "gain")));
      svg.append(g);
    });
    return svg;
  },
};

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
      ev ? el("div", { class: "cols" }, el("div", {}, EvalChart.svg(ev.rows)), el("div", { class: "scroll" }, evalTable(ev.rows))) :
      el("p", { class: "hint" }, "gated, no eval.json beside it");
    box.append(el("article", { class: "eval-run", "data-run": r.id }, head, body));
  }
}
