// The studio's charts, drawn by uPlot (vendor/uplot/, shipped in the wheel: no CDN). uPlot gives
// the axes, the legend and the zoom (drag across the plot to zoom x; double-click resets); what
// it has no series type for (the eval intervals' error bars, checkpoint and epoch markers) is
// drawn in its `draw` hook on its own canvas, in its own value→pixel mapping.
"use strict";
// one y scale per unit, so loss, throughput, memory and utilisation each read on their own axis
// (a legend-only channel would have no numbers to read); % is pinned to 0–100
const UNITS = { loss: { label: "loss" }, "tokens/s": { label: "tokens/s" },
  MB: { label: "memory MB" }, "%": { label: "utilisation %", range: [0, 100] } };
const INK = "#1b1f24", MUTE = "#5b6570", GRID = "#eceef0";
// tick labels as uPlot writes them by default, kept on the plot (`plot.tickLabels[axis]`):
// they are drawn on the canvas, and this is how a reader (the browser test) can see them
const ticks = fmt => (u, splits, ai) => ((u.tickLabels ||= [])[ai] = splits.map(fmt));
const number = v => v == null ? "" : v.toLocaleString();
const axisStyle = { values: ticks(number), stroke: MUTE, grid: { stroke: GRID, width: 1 },
  ticks: { stroke: GRID, width: 1 }, font: "11px system-ui", labelFont: "12px system-ui" };

// the legend: the value under the cursor, else the channel's latest one (as the run goes)
const latest = (u, v, si, idx) => {
  if (idx == null) v = u.data[si].findLast(y => y != null);
  return v == null ? "–" : String(+v.toPrecision(4));
};

const Chart = {
  colours: { loss: "#2553b8", tokens_per_sec: "#1b8a3a", memory: "#b5421b", cpu_util_pct: "#7a3cb0",
    rss_mb: "#0f7c86", gpu_util_pct: "#a3176b" },
  plot: null, shape: null, zoomed: false, markers: [],
  // series: [{name, unit (a UNITS key), colour, points: [[x, y]…], ceiling?}];
  // opts: {xlabel: "step" | "s", markers: [{x, checkpoint}]}. Same channels and x-axis as the
  // last call: the data is replaced in place, and a zoom the user made is kept.
  draw(box, series, opts) {
    this.markers = opts.markers;
    const shown = series.filter(s => s.points.length);
    if (!shown.length) {
      this.destroy();
      box.replaceChildren(el("p", { class: "hint chart-empty" }, "waiting for TRAIN_STEP rows…"));
      return;
    }
    const data = uPlot.join(shown.map(s => [s.points.map(p => p[0]), s.points.map(p => p[1])]));
    const lines = shown.map(s => ({ label: s.name, scale: s.unit, stroke: s.colour, width: 1.5,
      spanGaps: true, points: { show: false }, value: latest }));
    for (const s of shown.filter(s => s.ceiling)) {   // the planned peak: a dashed line on its scale
      data.push(data[0].map(() => s.ceiling));
      lines.push({ label: "planned peak", scale: s.unit, stroke: s.colour, width: 1, dash: [6, 4],
        points: { show: false }, value: latest });
    }
    const shape = JSON.stringify([opts.xlabel, lines.map(l => [l.label, l.scale])]);
    if (this.plot && shape === this.shape && box.contains(this.plot.root)) {
      this.plot.setData(data, !this.zoomed);
      return;
    }
    this.destroy();
    box.replaceChildren();
    this.shape = shape;
    this.plot = new uPlot(this.options(box, lines, opts.xlabel), data, box);
  },
  destroy() {
    if (this.plot) this.plot.destroy();
    this.plot = null; this.shape = null; this.zoomed = false;
  },
  options(box, lines, xlabel) {
    const units = [...new Set(lines.map(l => l.scale))];
    const scales = { x: { time: false } };
    for (const u of units) scales[u] = UNITS[u].range ? { range: UNITS[u].range } : {};
    const axes = [{ ...axisStyle, label: xlabel === "s" ? "wall time (s)" : "step", labelSize: 20 },
      ...units.map((u, i) => ({ ...axisStyle, scale: u, label: UNITS[u].label, labelSize: 20,
        side: i % 2 ? 1 : 3, grid: { show: i === 0, ...axisStyle.grid, stroke: GRID },
        stroke: lines.find(l => l.scale === u).stroke, size: 56 }))];
    return {
      class: "telemetry-chart", height: 300,
      // the box's width (less its padding); a hidden panel has none yet: 900 then
      width: Math.max(320, Math.min((box.clientWidth || 912) - 12, 1100)),
      scales, axes, series: [{ label: xlabel === "s" ? "s" : "step", value: latest }, ...lines],
      cursor: { drag: { x: true, y: false } },
      hooks: {
        // a zoom is a scale that no longer spans the data; the next rows keep it
        setScale: [(u, key) => { if (key !== "x") return;
          const xs = u.data[0], x = u.scales.x;
          this.zoomed = xs.length > 1 && (x.min > xs[0] || x.max < xs[xs.length - 1]); }],
        draw: [u => this.drawMarkers(u)],
      },
    };
  },
  // checkpoints (grey) and epochs (amber) as dashed verticals across the plot area
  drawMarkers(u) {
    const { ctx, bbox } = u, px = uPlot.pxRatio;
    ctx.save(); ctx.lineWidth = px; ctx.setLineDash([2 * px, 3 * px]);
    for (const m of this.markers) {
      if (m.x < u.scales.x.min || m.x > u.scales.x.max) continue;
      const x = Math.round(u.valToPos(m.x, "x", true));
      ctx.strokeStyle = m.checkpoint ? "#999" : "#c9a400";
      ctx.beginPath(); ctx.moveTo(x, bbox.top); ctx.lineTo(x, bbox.top + bbox.height); ctx.stroke();
    }
    ctx.restore();
  },
};

// The eval view: one small uPlot per metric (each on its own scale from 0: an accuracy and a loss
// side by side cannot share an axis), base and tuned as bars, and each value's 95 % interval
// [lo, hi] as an error bar drawn in the draw hook. Each drawn whisker is recorded on the chart
// (`plot.errorBars`: model, value, lo, hi and their pixel rows) so the page can be checked
// against the numbers it was given.
const EvalChart = {
  models: ["base", "tuned"],
  colours: { base: "#9aa5b1", tuned: "#2553b8" },
  size: { w: 210, h: 200 },
  plots: [],
  // rows: eval.json's metric rows ({name, base: {value, ci}, tuned: {…}, gain: {…}});
  // text(row, side): how a row's side (base/tuned/gain) reads (the caller's formatter: the
  // API's one reading, shown in the legend)
  mount(box, rows, text) {
    this.plots = this.plots.filter(p => document.contains(p.root));
    box.classList.add("eval-charts");
    for (const row of rows) {
      const panel = el("div", { class: "eval-panel", "data-metric": row.name });
      box.append(panel);
      const plot = this.plot(panel, row, text);
      if (plot) this.plots.push(plot);
      panel.append(el("small", { class: "eval-gain" }, "gain " + text(row, "gain")));
    }
    return box;
  },
  plot(panel, row, text) {
    const models = this.models.filter(m => row[m] && row[m].value != null);
    if (!models.length) return null;
    const xs = models.map((_, i) => i);
    const vals = models.flatMap(m => [row[m].value, ...(row[m].ci || [])]);
    let lo = Math.min(0, ...vals), hi = Math.max(0, ...vals);
    if (hi - lo < 1e-12) hi = lo + 1;
    hi += 0.08 * (hi - lo);                                   // room above the highest cap
    const name = row.name.length > 26 ? row.name.slice(0, 25) + "…" : row.name;
    const bars = uPlot.paths.bars({ size: [0.55, 48], align: 0 });
    const opts = {
      class: "eval-chart", width: this.size.w, height: this.size.h,
      // ranges as functions, not arrays: a scale with an array range never auto-ranges, so a
      // double-click (uPlot re-ranges x, then every auto scale) would not undo a zoom in y
      scales: { x: { time: false, range: () => [-0.6, models.length - 0.4] }, y: { range: () => [lo, hi] } },
      axes: [{ ...axisStyle, grid: { show: false }, splits: () => xs, values: ticks(i => models[i] ?? "") },
        { ...axisStyle, label: name + (row.higher_is_better === false ? " ↓" : ""), labelSize: 18, size: 46 }],
      series: [{ label: "model", value: (u, i) => i == null ? "" : models[i] ?? "" },
        ...models.map(m => ({ label: m, stroke: this.colours[m], fill: this.colours[m], width: 0,
          paths: bars, points: { show: false }, value: () => text(row, m) }))],
      // zoom in y (drag up or down the plot: the intervals up close); a double-click resets
      cursor: { drag: { x: false, y: true }, points: { show: false } },
      hooks: { draw: [u => this.whiskers(u, row, models)] },
    };
    // one x per model, each series a value at its own x only (a bar per model, in its colour)
    const data = [xs, ...models.map((m, j) => xs.map(i => i === j ? row[m].value : null))];
    return new uPlot(opts, data, panel);
  },
  whiskers(u, row, models) {
    const { ctx } = u, px = uPlot.pxRatio, cap = 6 * px;
    ctx.save(); ctx.strokeStyle = INK; ctx.lineWidth = 1.5 * px;
    u.errorBars = [];
    models.forEach((m, i) => {
      const s = row[m];
      if (!s.ci || i < u.scales.x.min || i > u.scales.x.max) return;
      const x = u.valToPos(i, "x", true), [yLo, yHi] = s.ci.map(v => u.valToPos(v, "y", true));
      ctx.beginPath(); ctx.moveTo(x, yLo); ctx.lineTo(x, yHi);
      for (const y of [yLo, yHi]) { ctx.moveTo(x - cap, y); ctx.lineTo(x + cap, y); }
      ctx.stroke();
      // canvas pixels as drawn, and CSS pixels within the plot area (what a reader compares)
      u.errorBars.push({ model: m, value: s.value, lo: s.ci[0], hi: s.ci[1], canvas: { x, yLo, yHi },
        x: u.valToPos(i, "x"), y0: u.valToPos(0, "y"), yValue: u.valToPos(s.value, "y"),
        yLo: u.valToPos(s.ci[0], "y"), yHi: u.valToPos(s.ci[1], "y") });
    });
    ctx.restore();
    u.root.dataset.errorBars = u.errorBars.length;
  },
};
