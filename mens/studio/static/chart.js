// A small multi-channel line chart on a canvas (no library): x = step or seconds; each channel on its own
// scale, drawn in its own colour, with its last value labelled; dashed ceilings (the planned
// peak) and vertical markers (checkpoints, epochs).
"use strict";
const Chart = {
  colours: { loss: "#2553b8", tokens_per_sec: "#1b8a3a", memory: "#b5421b", cpu_util_pct: "#7a3cb0",
    rss_mb: "#0f7c86", gpu_util_pct: "#a3176b" },
  draw(canvas, series, opts) {
    const ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height, pad = 36;
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px system-ui"; ctx.lineWidth = 1.5;
    const xs = series.flatMap(s => s.points.map(p => p[0])).concat(opts.markers.map(m => m.x));
    if (!xs.length) { ctx.fillStyle = "#5b6570"; ctx.fillText("waiting for TRAIN_STEP rows…", pad, H / 2); return; }
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
    const X = x => pad + (W - 2 * pad) * (x - x0) / (x1 - x0);
    ctx.strokeStyle = "#d6d9dc"; ctx.strokeRect(pad, 8, W - 2 * pad, H - pad - 8);
    const xl = opts.xlabel || "step", fmt = v => xl === "step" ? xl + " " + v : (+v.toFixed(1)) + " " + xl;
    ctx.fillStyle = "#5b6570"; ctx.fillText(fmt(x0), pad, H - pad + 14);
    ctx.fillText(fmt(x1), W - pad - 50, H - pad + 14);
    for (const m of opts.markers) {
      ctx.strokeStyle = m.checkpoint ? "#999" : "#c9a400"; ctx.setLineDash([2, 3]);
      ctx.beginPath(); ctx.moveTo(X(m.x), 8); ctx.lineTo(X(m.x), H - pad); ctx.stroke();
      ctx.setLineDash([]);
    }
    let legend = pad;
    for (const s of series) {
      const ys = s.points.map(p => p[1]).concat(s.ceiling ? [s.ceiling] : []);
      if (!ys.length) continue;
      let y0 = Math.min(...ys), y1 = Math.max(...ys);
      if (y1 - y0 < 1e-9) { y0 -= 1; y1 += 1; }
      const Y = y => H - pad - (H - pad - 12) * (y - y0) / (y1 - y0);
      ctx.strokeStyle = ctx.fillStyle = s.colour;
      ctx.beginPath();
      s.points.forEach((p, i) => i ? ctx.lineTo(X(p[0]), Y(p[1])) : ctx.moveTo(X(p[0]), Y(p[1])));
      ctx.stroke();
      if (s.ceiling) {
        ctx.setLineDash([6, 4]); ctx.beginPath();
        ctx.moveTo(pad, Y(s.ceiling)); ctx.lineTo(W - pad, Y(s.ceiling)); ctx.stroke();
        ctx.setLineDash([]); ctx.fillText("planned peak " + s.ceiling.toFixed(0), W - pad - 120, Y(s.ceiling) - 3);
      }
      const last = s.points[s.points.length - 1];
      const label = s.name + (last ? " " + (+last[1].toPrecision(4)) : "");
      ctx.fillText(label, legend, H - 6); legend += ctx.measureText(label).width + 18;
    }
  },
};
