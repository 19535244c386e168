"""Evaluation: token-weighted held-out loss on the spoke's eval split and on one other spoke's
(collateral effect), before and after training. Used by the run and by mens.compare."""
from __future__ import annotations

from mens.config.options import load_option, spokes
from mens.data.corpus import load_eval
from mens.data.examples import examples_for


def collateral_spoke(name: str) -> str:
    names = spokes()
    return names[(names.index(name) + 1) % len(names)]


EVAL_MICRO = 4   # held-out records per forward pass


def eval_chunks(examples, micro: int) -> list:
    """Longest first, so each batch pads to lengths alike (unsorted: ~40 % of slots were
    padding); the validation loop (module.MensData.val_dataloader) batches the same way."""
    examples = sorted(examples, key=len, reverse=True)
    return [examples[i:i + micro] for i in range(0, len(examples), micro)]


def eval_loss(model, examples, micro: int, seq_len: int, desc: str | None = None) -> dict:
    """Token-weighted mean NLL over supervised tokens (one record per row, no packing).
    desc: a progress bar's label (none without one)."""
    import torch
    from tqdm.auto import tqdm

    from mens.data.pack import IGNORE, pad_batch
    from mens.model.load import eval_mode

    device = next(model.parameters()).device
    total, count = 0.0, 0
    chunks = eval_chunks(examples, micro)
    eval_mode(model)
    with torch.no_grad():
        for chunk in tqdm(chunks, desc=desc, disable=desc is None, leave=False, unit="batch"):
            batch = pad_batch(chunk, min(seq_len, max(len(e) for e in chunk)))
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            logits = model(**batch).logits[:, :-1].float()                   # (B, S-1, V)
            target = labels[:, 1:]                                           # (B, S-1)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                ignore_index=IGNORE, reduction="sum")
            total += loss.item()
            count += int((target != IGNORE).sum())
    model.train()
    return {"loss": total / max(count, 1), "tokens": count, "records": len(examples)}


def eval_sets(spec, tokenizer) -> dict:
    """{role: (spoke, [Example])} for the spoke's held-out split ("eval") and one other
    spoke's ("collateral")."""
    out = {}
    for role, name in (("eval", spec.spoke.name), ("collateral", collateral_spoke(spec.spoke.name))):
        spoke = spec.spoke if role == "eval" else load_option("spoke", name)
        recs = [r for r in load_eval(spoke) if "messages" in r][:spec.train.eval_max_records]
        phases = list(spec.curriculum.phases)
        # held-out records are scored whole (up to the rung's positions, at most 4096), not cut
        # to the training window: a cut could drop the very answer being scored
        exs, _ = examples_for(recs, tokenizer, spec, phases, pairs=False,
                              max_len=min(spec.rung.max_position_embeddings, 4096))
        out[role] = (name, list(exs.values()))
    return out


def evaluate(model, sets: dict, tel, which: str) -> dict:
    """Score every set; one EVAL telemetry row each. which: base | adapter."""
    res = {}
    for role, (name, exs) in sets.items():
        r = eval_loss(model, exs, EVAL_MICRO, max(len(e) for e in exs),
                      desc=f"eval {which} · {role} ({name})")
        tel.emit("EVAL", model=which, split=role, spoke=name, **r)
        res[role] = {"spoke": name, **r}
    return res


def evaluate_base(model, sets: dict, spec, tel) -> dict:
    """The base's numbers: a PEFT model with its adapter disabled, or the full lane's model
    before any step."""
    if hasattr(model, "disable_adapter") and spec.lane.kind != "full":
        with model.disable_adapter():
            return evaluate(model, sets, tel, "base")
    return evaluate(model, sets, tel, "base")


def base_from_telemetry(rows: list[dict]) -> dict:
    """A resumed run's base numbers, from the first run's EVAL rows."""
    return {r["split"]: {k: r[k] for k in ("spoke", "loss", "tokens", "records")}
            for r in rows if r["event"] == "EVAL" and r["model"] == "base"}
