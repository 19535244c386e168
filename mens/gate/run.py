"""`mens gate run=DIR`: measure a trained run before/after on its spoke and for collateral damage
on every other spoke, judge it against the `gate.*` thresholds, write `gate.json` (atomic).

Per set (the run's own held-out split; each other spoke's `eval.jsonl`), at most
`gate.max_prompts` held-out records:
  - eval loss of the base and of the tuned model (mens.train.evaluate.eval_loss, the function
    training and mens.compare use), token-weighted over the answers;
  - greedy pass rate: each model's greedy answer (`gate.max_new_tokens`, mens.serve.generate)
    to the record's prompt, judged by the spoke's admission oracle (mens.synth.oracle,
    `spoke.admission.check`) over passed / verified (an oracle whose tool is absent gives
    unverified answers, which count for neither side; a rate with none verified is null).
Verdict (`gate.*`): the spoke's loss falls by ≥ min_improvement_pct %, its pass rate moves by
≥ min_pass_delta; no other spoke's loss rises by more than max_collateral_pct %, nor its pass rate
falls by more than max_collateral_pass_drop. Exit 0 on pass, 3 on fail (the gate refuses).
"""
from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mens.errors import EXIT_OK, EXIT_REFUSED, ConfigError
from mens.data.corpus import corpus_lock
from mens.run.receipt import RECEIPT, artifact_sha256, write_receipt
from mens.resources import CORPORA
from mens.run.rundir import RunDir


def task(cfg: DictConfig, out_dir: Path) -> int:
    if not cfg.run:
        raise ConfigError("mens gate needs a finished run: `mens gate run=outputs/<date>/"
                          "<time>_train`.", key="run")
    receipt = gate_run(Path(cfg.run), cfg.gate)
    print(render(receipt))
    print(f"mens: wrote {Path(cfg.run) / RECEIPT} (verdict {receipt['verdict']})")
    return EXIT_OK if receipt["verdict"] == "pass" else EXIT_REFUSED


def _sets(spec, max_prompts: int) -> list[tuple[str, str, str | None, list[dict]]]:
    """[(role, name, admission check, records)]: the run's own held-out split first, then every
    other spoke's (chats only: preference pairs have no single answer to judge)."""
    from mens.config.options import load_option, spokes
    from mens.data.corpus import load_eval
    from mens.data.formats import kind
    from mens.data.select import eval_records, user_data

    own_name, own = eval_records(spec)["eval"]
    own_check = None if user_data(spec) else spec.spoke.admission.check
    out = [("spoke", own_name, own_check, [r for r in own if kind(r) == "chat"][:max_prompts])]
    for name in spokes():
        if name == own_name:
            continue
        sp = load_option("spoke", name)
        recs = [r for r in load_eval(sp) if kind(r) == "chat"][:max_prompts]
        out.append(("collateral", name, sp.admission.check, recs))
    return out


def _greedy(slots, slot, recs: list[dict], max_new: int) -> list[dict]:
    """Oracle records: each prompt with the model's greedy answer as the assistant turn."""
    from mens.serve.generate import GenRequest, generate

    out = []
    for r in recs:
        msgs = r["messages"]
        last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        prompt = slots.encode_chat(msgs[:last_user + 1])
        room = min(max_new, slots.context - len(prompt))
        text = generate(slots, slot, GenRequest(tuple(prompt), room, temperature=0)).text \
            if room > 0 else ""
        out.append({**{k: v for k, v in r.items() if k != "messages"},
                    "messages": msgs[:last_user + 1] + [{"role": "assistant", "content": text}]})
    return out


def _pass_rates(check: str | None, base: list[dict], tuned: list[dict]) -> tuple[dict, dict]:
    """Both models' answers judged in one oracle batch (one child process per spoke)."""
    from mens.synth.oracle import judge_batch

    verdicts = judge_batch(check, base + tuned) if check and base + tuned else []
    return (_rate(verdicts[:len(base)], len(base)), _rate(verdicts[len(base):], len(tuned)))


def _rate(verdicts: list, n: int) -> dict:
    if not verdicts:
        return {"rate": None, "passed": 0, "verified": 0, "unverified": n}
    verified = [v for v in verdicts if v.passed is not None]
    passed = sum(bool(v.passed) for v in verified)
    return {"rate": passed / len(verified) if verified else None, "passed": passed,
            "verified": len(verified), "unverified": len(verdicts) - len(verified)}


def measure(run: Path, spec, max_prompts: int, max_new: int) -> list[dict]:
    """Every set measured both ways: [{role, spoke, check, records, loss_base, loss_tuned, …}]."""
    from mens.compare.core import eval_sets_loss, load_models
    from mens.data.examples import examples_for

    (b_slots, b), (a_slots, a) = load_models(run, spec)
    phases = list(spec.curriculum.phases)
    out = []
    try:
        for role, name, check, recs in _sets(spec, max_prompts):
            recs = [dict(r, phase=r["phase"] if r.get("phase") in phases else phases[0])
                    for r in recs]
            exs, _ = examples_for(recs, b_slots.tokenizer, spec, phases, pairs=False,
                                  max_len=min(spec.rung.max_position_embeddings, 4096))
            row = {"role": role, "spoke": name, "check": check, "records": len(recs)}
            if exs:
                sets = {role: (name, list(exs.values()))}
                lb, la = eval_sets_loss(b_slots, b, sets)[role], eval_sets_loss(a_slots, a, sets)[role]
                row.update(loss_base=lb["loss"], loss_tuned=la["loss"], tokens=lb["tokens"],
                           loss_change_pct=100 * (la["loss"] / lb["loss"] - 1))
            pb, pa = _pass_rates(check, _greedy(b_slots, b, recs, max_new),
                                 _greedy(a_slots, a, recs, max_new))
            row.update(pass_base=pb, pass_tuned=pa,
                       pass_delta=None if pb["rate"] is None or pa["rate"] is None
                       else pa["rate"] - pb["rate"])
            out.append(row)
    finally:
        for s in {id(b_slots): b_slots, id(a_slots): a_slots}.values():
            s.close()
    return out


def judge(rows: list[dict], g) -> tuple[str, list[str]]:
    """('pass' | 'fail', reasons): every threshold of `gate.*` a row breaks, said with numbers."""
    reasons = []
    for r in rows:
        change, delta = r.get("loss_change_pct"), r.get("pass_delta")
        if r["role"] == "spoke":
            if change is None:
                reasons.append(f"spoke {r['spoke']}: no held-out record to score")
            elif -change < g.min_improvement_pct:
                reasons.append(f"spoke {r['spoke']}: eval loss {r['loss_base']:.4f} → "
                               f"{r['loss_tuned']:.4f} ({-change:+.2f} % improvement) is below "
                               f"gate.min_improvement_pct={g.min_improvement_pct:g}")
            if delta is not None and delta < g.min_pass_delta:
                reasons.append(f"spoke {r['spoke']}: pass rate {r['pass_base']['rate']:.2f} → "
                               f"{r['pass_tuned']['rate']:.2f} moves less than "
                               f"gate.min_pass_delta={g.min_pass_delta:g}")
            continue
        if change is not None and change > g.max_collateral_pct:
            reasons.append(f"collateral {r['spoke']}: eval loss {r['loss_base']:.4f} → "
                           f"{r['loss_tuned']:.4f} (+{change:.2f} %) rises more than "
                           f"gate.max_collateral_pct={g.max_collateral_pct:g}")
        if delta is not None and -delta > g.max_collateral_pass_drop:
            reasons.append(f"collateral {r['spoke']}: pass rate {r['pass_base']['rate']:.2f} → "
                           f"{r['pass_tuned']['rate']:.2f} falls more than "
                           f"gate.max_collateral_pass_drop={g.max_collateral_pass_drop:g}")
    return ("fail" if reasons else "pass"), reasons


def gate_run(run: Path | str, g, corpora: Path | str = CORPORA) -> dict:
    """Measure, judge and write `<run>/gate.json` (atomic); returns the receipt."""
    from mens.config.options import spokes

    run = Path(run)
    rd = RunDir(run)
    if not rd.spec.is_file() or not rd.finished:
        raise ConfigError(f"run={run}: not a finished training run (spec.yaml and summary.json); "
                          f"gate a run dir that `mens train` completed.", key="run")
    sha = artifact_sha256(run)
    if sha is None:
        raise ConfigError(f"run={run}: neither adapter/ nor model/ there; nothing to gate.",
                          key="run")
    spec = OmegaConf.load(rd.spec)
    started = time.time()
    rows = measure(run, spec, int(g.max_prompts), int(g.max_new_tokens))
    verdict, reasons = judge(rows, g)
    thresholds = OmegaConf.to_container(g) if isinstance(g, DictConfig) else dict(vars(g))
    receipt = {
        "run": str(run), "rung": spec.rung.name, "rung_commit": spec.rung.commit,
        "spoke": rows[0]["spoke"], "lane": spec.lane.kind, "artifact_sha256": sha,
        "verdict": verdict, "reasons": reasons, "thresholds": thresholds,
        "spoke_result": rows[0], "collateral": {r["spoke"]: r for r in rows[1:]},
        "corpus_lock": {s: corpus_lock(s, corpora) for s in spokes()},
        "created": time.time(), "duration_s": round(time.time() - started, 2)}
    write_receipt(run, receipt)
    return receipt


def render(receipt: dict) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    def num(v, fmt):
        return "—" if v is None else format(v, fmt)

    buf = StringIO()
    con = Console(file=buf, width=110, force_terminal=False, color_system=None)
    t = Table(title=f"gate · {receipt['rung']} · {receipt['spoke']} · {receipt['lane']}",
              show_edge=False)
    for c in ("role", "spoke", "loss base", "loss tuned", "Δ %", "pass base", "pass tuned"):
        t.add_column(c, justify="left" if c in ("role", "spoke") else "right")
    for r in [receipt["spoke_result"], *receipt["collateral"].values()]:
        t.add_row(r["role"], r["spoke"], num(r.get("loss_base"), ".4f"),
                  num(r.get("loss_tuned"), ".4f"), num(r.get("loss_change_pct"), "+.2f"),
                  num(r["pass_base"]["rate"], ".2f"), num(r["pass_tuned"]["rate"], ".2f"))
    con.print(t)
    con.print(f"verdict: {receipt['verdict'].upper()}")
    for why in receipt["reasons"]:
        con.print(f"  - {why}")
    return buf.getvalue().rstrip()
