"""Evaluation: token-weighted held-out loss on the data's eval split and on one other spoke's
(collateral effect), before and after training. Used by the run and by mens.compare.

Held-out preference pairs (dpo on user data) are scored as DPO is trained: the held-out DPO
loss against the policy before training (the reference; its own loss is ln 2) and the reward
accuracy (the share of pairs whose chosen answer gains more than the rejected one)."""
from __future__ import annotations

import math

from mens.data.pack_order import EVAL_MICRO, eval_chunks
from mens.run.telemetry import Event


def eval_loss(model, examples, micro: int, seq_len: int, desc: str | None = None) -> dict:
    """Token-weighted mean NLL over supervised tokens (one record per row, no packing).
    desc: a progress bar's label (none without one)."""
    total, count = 0.0, 0
    for _, nll, tokens in _scored_chunks(model, examples, micro, seq_len, desc):
        total += float(nll.sum())
        count += int(tokens.sum())
    return {"loss": total / max(count, 1), "tokens": count, "records": len(examples)}


def eval_item_losses(model, examples, micro: int, seq_len: int,
                     desc: str | None = None) -> tuple[list[float], list[int]]:
    """Per example, in the order given: (summed NLL over its supervised tokens, their count) —
    the items a bootstrap resamples (sum(nll) / sum(tokens) is eval_loss's number)."""
    nlls, counts = {}, {}
    for chunk, nll, tokens in _scored_chunks(model, examples, micro, seq_len, desc):
        for ex, x, t in zip(chunk, nll.cpu().tolist(), tokens.cpu().tolist()):
            nlls[id(ex)], counts[id(ex)] = x, int(t)
    return [nlls[id(e)] for e in examples], [counts[id(e)] for e in examples]


def _scored_chunks(model, examples, micro: int, seq_len: int, desc: str | None):
    """Yields (chunk, summed NLL per row (B,), supervised tokens per row (B,)); the model is in
    eval mode meanwhile and back in train mode after (the training loop calls this)."""
    import torch
    from tqdm.auto import tqdm

    from mens.data.pack import IGNORE, pad_batch
    from mens.model.load import eval_mode
    from mens.train.module import sequence_logps

    device = next(model.parameters()).device
    chunks = eval_chunks(examples, micro)
    eval_mode(model)
    try:
        with torch.no_grad():
            for chunk in tqdm(chunks, desc=desc, disable=desc is None, leave=False, unit="batch"):
                batch = pad_batch(chunk, min(seq_len, max(len(e) for e in chunk)))
                batch = {k: v.to(device) for k, v in batch.items()}
                # summed NLL over supervised tokens; the head runs chunk by chunk (no (B, S, V))
                nll = -sequence_logps(model, batch)                          # (B,) fp32
                tokens = (batch["labels"][:, 1:] != IGNORE).sum(-1)          # (B,)
                yield chunk, nll, tokens
    finally:
        model.train()


def loop_sets(sets: dict) -> dict:
    """The sets the validation loop scores during training (token losses; not pairs)."""
    return {role: s for role, s in sets.items() if s[1] and not isinstance(s[1][0], tuple)}


def evaluate(model, sets: dict, tel, which: str, spec=None, refs: dict | None = None) -> dict:
    """Score every set; one EVAL telemetry row each. which: base | adapter. Pair sets need
    `refs` ({role: reference log-probs}); a missing one is computed now (the policy before
    training is the reference)."""
    res = {}
    for role, (name, exs) in sets.items():
        if exs and isinstance(exs[0], tuple):
            if refs is None:
                refs = {}
            if role not in refs:
                refs[role] = pair_references(model, exs, spec)
            r = pair_eval(model, exs, refs[role], spec)
        else:
            r = eval_loss(model, exs, EVAL_MICRO, max(len(e) for e in exs),
                          desc=f"eval {which} · {role} ({name})")
        tel.emit(Event.EVAL, model=which, split=role, spoke=name, **r)
        res[role] = {"spoke": name, **r}
    return res


def pair_eval(model, pairs: list, ref, spec) -> dict:
    """Held-out DPO loss (lane.dpo's loss and beta) and reward accuracy / margin."""
    import torch

    from mens.model.load import eval_mode
    from mens.objective.dpo import dpo_losses, pair_batch
    from mens.train.module import sequence_logps

    eval_mode(model)
    losses, correct, margins = [], 0, []
    beta, loss_type = spec.lane.dpo.beta, spec.lane.dpo.loss
    with torch.no_grad():
        for i in range(0, len(pairs), EVAL_MICRO):
            chunk = pairs[i:i + EVAL_MICRO]
            batch = pair_batch(chunk, max(len(e) for p in chunk for e in p[:2]))
            idx = batch.pop("pair_index")
            lp = sequence_logps(model, batch).float()
            n = len(chunk)
            chosen, rejected = lp[:n] - ref[idx, 0], lp[n:] - ref[idx, 1]
            losses += dpo_losses(chosen, rejected, beta, loss_type).tolist()
            m = beta * (chosen - rejected)
            correct += int((m > 0).sum())
            margins += m.tolist()
    model.train()
    n = max(len(pairs), 1)
    return {"loss": sum(losses) / n, "reward_accuracy": correct / n,
            "reward_margin": sum(margins) / n, "records": len(pairs), "tokens": 0,
            "loss_at_reference": math.log(2) if loss_type == "sigmoid" else None}


def pair_references(model, pairs: list, spec):
    """Held-out pairs' reference log-probs: the policy as it is now (before training), every
    pair (n, 2)."""
    from mens.objective.dpo import reference_logps
    from mens.train.module import reference_scorer

    score = reference_scorer(model, spec)
    try:
        return reference_logps(score, pairs, spec.train.micro_batch, spec.train.seq_len)
    finally:
        score.done()


def evaluate_base(model, sets: dict, spec, tel, refs: dict | None = None) -> dict:
    """The base's numbers: a PEFT model with its adapter disabled, or the full lane's model
    before any step. Pair sets are scored on the policy before training (their reference,
    which `refs` receives), never with the adapter disabled: DPO from an SFT adapter starts
    from that adapter."""
    tokens = {r: s for r, s in sets.items() if not (s[1] and isinstance(s[1][0], tuple))}
    out = {}
    if len(tokens) < len(sets):
        out.update(evaluate(model, {r: s for r, s in sets.items() if r not in tokens}, tel,
                            "base", spec, refs))
    if hasattr(model, "disable_adapter") and spec.lane.method != "full":
        with model.disable_adapter():
            return {**out, **evaluate(model, tokens, tel, "base")}
    return {**out, **evaluate(model, tokens, tel, "base")}


def base_from_telemetry(rows: list[dict]) -> dict:
    """A resumed run's base numbers, from the first run's EVAL rows."""
    return {r["split"]: {k: r[k] for k in ("spoke", "loss", "tokens", "records")}
            for r in rows if r["event"] == Event.EVAL and r["model"] == "base"
            and r["split"] != ORACLE}


ORACLE = "oracle"   # an EVAL row's split: the objective's held-out oracle measure (grpo)


def objective_held_out(objective, model, held: tuple, tel, which: str) -> dict | None:
    """The objective's own held-out measure (Objective.held_out; grpo: the greedy answers'
    oracle pass rate and mean partial reward) on the data's held-out chats, `held` = (name,
    chats) as the data stage prepared them (mens.data.prepare.Prepared.held_out): an EVAL row
    (split "oracle", model base | adapter), said."""
    import sys

    if not objective.measures_held_out:
        return None
    name, recs = held
    out = objective.held_out(model, recs) if recs else None
    if out is None:
        return None
    if "split" in out:   # a measure of its own (distill: the reverse KL to the teacher)
        tel.emit(Event.EVAL, model=which, spoke=name, records=out["n"], **out)
        print(f"mens: {which} on held-out {name}: " + ", ".join(
            f"{k} {v:.4f}" for k, v in out.items() if isinstance(v, float)), file=sys.stderr)
        return {"spoke": name, **out}
    tel.emit(Event.EVAL, model=which, split=ORACLE, spoke=name, records=out["n"],
             check=out["check"], passed=out["passed"], failed=out.get("failed"),
             unverified=out.get("unverified", 0), pass_rate=out["pass_rate"],
             reward_mean=out["reward_mean"])
    unverified = out.get("unverified", 0)
    mean = "n/a" if out["reward_mean"] is None else f"{out['reward_mean']:.3f}"
    print(f"mens: {which} on held-out {name}: greedy answers pass the oracle ({out['check']}) "
          f"{out['passed']}/{out['n']}, mean partial reward {mean}"
          + (f"; {unverified} unverified (the oracle cannot run here: neither pass nor fail, "
             f"left out of the pass rate)" if unverified else ""), file=sys.stderr)
    return {"spoke": name, **out}


def oracle_from_telemetry(rows: list[dict]) -> dict | None:
    """A resumed run's held-out oracle numbers of the base, from the first run's EVAL row."""
    for r in rows:
        if r["event"] == Event.EVAL and r.get("split") == ORACLE and r["model"] == "base":
            return {k: r.get(k) for k in ("spoke", "check", "passed", "failed", "unverified",
                                          "pass_rate", "reward_mean")} | {"n": r.get("records")}
    return None


def health_flags(steps: list, before, after, tel) -> dict:
    """summary.json's `grpo_flags` (mens.objective.grpo_window.flags): each raised flag said
    loudly on stderr and kept as a NOTE row."""
    from mens.objective.grpo_window import flags

    out = flags(steps, before, after)
    said = {"reward_rose_oracle_pass_did_not":
            f"the training reward rose by {out['reward_rise'] or 0:.3f} while the held-out "
            f"oracle pass rate did not (gain {out['pass_gain'] or 0:+.3f}, 95% interval "
            f"{out['pass_gain_ci95']}): reward hacking is likely; read held_out_oracle.json",
            "most_groups_have_one_reward":
            f"on average {out['mean_frac_reward_zero_std'] or 0:.0%} of the groups had one "
            f"reward for all their samples (no learning signal): raise num_generations or "
            f"temperature, or start from a policy that passes sometimes"}
    for key, text in said.items():
        if out[key]:
            import sys
            print(f"mens: WARNING: grpo: {text}", file=sys.stderr)
            tel.emit(Event.NOTE, detail=f"grpo_flags.{key}: {text}")
    return out
