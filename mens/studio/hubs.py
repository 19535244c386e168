"""The Evals panel's API (each run's eval.json results and gate verdict, read through
mens.compare.evals; run comparison through mens.compare's across-runs
mode, the function `python -m mens.compare A B …` calls) and Topology's compute hub (for one
ladder cell: the local plan and the cheapest cloud offers of mens.cloud.estimate, the function
`mens cloud estimate` calls)."""
from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from fastapi import Request

from mens.errors import MensError
from mens.run.rundir import RunDir
from mens.studio.common import body, compose_lock, compose_plan
from mens.studio.procs import LISTED, Refused, rel, run_dir

CELL = re.compile(r"^[a-z0-9_.]+/[a-z0-9_]+$")


def add_hubs(app, cfg, root: Path) -> None:
    @app.get("/api/evals")
    def evals():
        """Each run's eval.json rows (with their intervals, and their reading as `text`:
        mens.run.evalrow) and its gate verdict, newest first; a base evaluated alone
        (`*_eval/` with eval.json, no training) too."""
        from mens.compare.evals import EVAL, gate_summary, read_eval
        from mens.run.evalrow import MetricRow
        from mens.run.receipt import RECEIPT
        dirs = RunDir.find(root, **LISTED) + RunDir.find(   # and the bases evaluated alone
            root, marker=EVAL, depths=LISTED["depths"], calibration=True, newest=True)
        out, seen = [], set()
        for r in dirs:
            if r in seen or not ((r / EVAL).is_file() or (r / RECEIPT).is_file()):
                continue
            seen.add(r)
            try:
                ev = read_eval(r)
            except MensError as e:   # one broken file: said in its row, the others still shown
                ev, error = None, e.message
            else:
                error = None
            out.append({"id": rel(root, r), "gate": gate_summary(r), "error": error,
                        "eval": ev and {**{k: ev.get(k) for k in (
                            "run", "rung", "spoke", "lane", "models", "created", "duration_s")},
                            # the numbers for the chart, their one reading for the table
                            "rows": [{**row, "text": MetricRow.of(row).display()}
                                     for row in ev.get("rows") or []]}})
        return {"runs": out}

    @app.post("/api/evals/compare")
    async def compare(request: Request):
        from mens.compare.core import across, across_md, is_run
        from mens.run.rundir import atomic_write
        ids = (await body(request)).get("runs")
        if not isinstance(ids, list) or not 2 <= len(ids) <= 8:
            raise Refused(400, "runs: two to eight run ids")
        runs = [run_dir(root, i) for i in ids]
        if len(set(runs)) < len(runs):
            raise Refused(400, "runs: each run once")
        unfinished = [rel(root, r) for r in runs if not is_run(r)]
        if unfinished:
            raise Refused(409, "not finished runs (no summary.json): " + ", ".join(unfinished))
        out = root / "studio-compare" / time.strftime("%Y%m%d-%H%M%S")
        result = await asyncio.to_thread(across, runs, out)
        md = across_md(result)
        atomic_write(out / "compare.md", md)   # what `mens compare` writes, kept beside the PNG
        for r, i in zip(result["runs"], ids):
            r["id"] = i
            r.pop("curve", None)   # the page has the live chart; the PNG has the curves
        return {**result, "markdown": md, "out": rel(root, out)}

    @app.get("/api/compute")
    def compute(cell: str, top: int = 5):
        from mens.cloud.estimate import estimate
        if not CELL.match(cell):
            raise Refused(400, "cell: `rung/spoke`")
        rung, spoke = cell.split("/")
        over = [f"+rung={rung}", f"spoke={spoke}"]
        from mens.resources import CONF_DIR
        # the studio's own hw when it is a named option (else detected again, as hw=auto is)
        hw = [f"+hw={cfg.hw.name}"] if (CONF_DIR / "hw" / f"{cfg.hw.name}.yaml").is_file() else []
        _, spec, p = compose_plan([*hw, *over])
        local = {"hw": spec.hw.name, "verdict": p.verdict, "fits": p.fits,
                 "peak_bytes": p.peak_bytes, "budget_bytes": p.budget_bytes,
                 "shape": {"seq_len": spec.train.seq_len, "micro_batch": p.shape.micro_batch,
                           "grad_accum": p.grad_accum}, "ways_out": list(p.ways_out)}
        from mens.config.compose import compose
        with compose_lock:
            c = compose(over)
            est = estimate(c)
        offers = est["offers"][:max(1, min(top, 20))]
        return {"cell": cell, "local": local, "offers": offers,
                "assumptions": est["assumptions"], "catalogue": est["catalogue"],
                "catalogue_stale": est["catalogue_stale"],
                "command": f"mens cloud estimate {' '.join(over)}"}
