"""In-domain scoring of one held-out set, base vs tuned: per-item loss, and — where the spoke
has an admission oracle — a greedy answer and k samples per prompt, every answer judged by the
oracle (mens.synth.oracle) and every verdict kept.

Rows (mens.eval's metric row; group "in_domain" for the run's own spoke, "collateral" else):
    <spoke>/loss      token-weighted NLL per item; gain = share of the base's loss removed
    <spoke>/greedy    pass rate of the greedy answer
    <spoke>/pass@1    unbiased pass@1 from the k samples (mens.eval.stats.pass_at_k)
    <spoke>/pass@k    unbiased pass@k from the same samples
Intervals: paired over items (a record for loss, a prompt with all its samples for the pass
rates; mens.eval.stats.paired): the greedy pass's 0/1 scores by McNemar's exact test, the loss
and the pass@k of k samples by the bootstrap (a sign-flip test below 20 items). An unverified
verdict (passed=None: the oracle's tool is absent, or its checker could not start) never
counts as passed or failed: a prompt with one in either model is left out of that row and
counted under `unverified`; with none verified the value is null.
"""
from __future__ import annotations

import sys

from mens.eval.stats import pass_at_k, paired
# what the oracle judges: the answer in its record (mens.objective's GRPO rewards build it too)
from mens.synth.oracle_checks import oracle_record

GROUPS = {"spoke": "in_domain", "collateral": "collateral"}


def as_chats(recs: list[dict]) -> tuple[list[dict], dict]:
    """Held-out records as the chats scored here (mens.data.formats.turns, the one reader of
    record kinds): a chat as it is; a pair (DPO, ORPO, SimPO) as its prompt + chosen answer; a
    labeled record (KTO) as its prompt + completion when desirable. An undesirable labeled
    record and a text record are left out — the tuned model is not credited for a lower loss on
    an answer the data calls bad — and counted: ({"undesirable": n, "text": n})."""
    from mens.data.formats import kind, turns

    out, left = [], {"undesirable": 0, "text": 0}
    for r in recs:
        k = kind(r)
        if k == "chat":
            out.append(r)
        elif k == "text":
            left["text"] += 1
        elif k == "labeled" and not r.get("label"):
            left["undesirable"] += 1
        else:
            rest = {f: v for f, v in r.items()
                    if f not in ("prompt", "chosen", "rejected", "completion", "label")}
            out.append({**rest, "messages": turns(r, "chosen")})
    return out, left


def room(slots, prompt: list[int], max_new: int) -> int:
    """New tokens a prompt may get: max_new, cut so prompt + answer fits the model's context."""
    return max(0, min(max_new, slots.context - len(prompt)))


def generate(slots, slot, prompts: list[list[int]], *, n: int, temperature: float, top_p: float,
             max_new: int, seed: int, batch_size: int) -> list[list[str]]:
    """n answers per prompt (token ids from slots.encode_chat) on `slot`, through the one
    generation helper (mens.model.generate), batch_size rows per call, left-padded.
    temperature < 1e-5: greedy (n = 1). A prompt whose room (see `room`) is below max_new is
    generated alone at its own room and said on stderr; batches hold only prompts with the full
    max_new, so batching never changes an answer's length and no row outgrows the context."""
    import torch

    from mens.model import generate as gen

    sample = gen.samples(temperature)
    if not sample and n != 1:
        raise ValueError(f"greedy decoding gives one answer per prompt, not n={n}")
    rooms = [room(slots, p, max_new) for p in prompts]
    per = max(1, batch_size // n)                                  # prompts per call
    full = [i for i, r in enumerate(rooms) if r == max_new]
    short = [i for i, r in enumerate(rooms) if r < max_new]
    if short:
        print(f"mens: note: {len(short)} prompt(s) leave less than {max_new} new tokens in the "
              f"model's context ({slots.context}): their answers are cut to the room left "
              f"(0 room: an empty answer)", file=sys.stderr)
    groups = [full[j:j + per] for j in range(0, len(full), per)] + [[i] for i in short]
    out: list[list[str]] = [[""] * n for _ in prompts]
    with torch.inference_mode(), slots.activate(slot):
        for b, group in enumerate(groups):
            new = rooms[group[0]]
            if new == 0:
                continue
            # seeded per batch: a batch's samples then do not depend on how many random numbers
            # earlier batches drew (their lengths, early stops), only on seed and batching
            torch.manual_seed(seed + b)
            config = gen.generation_config(new, slots.eos, slots.pad, sample=sample,
                                           temperature=temperature, top_p=top_p, n=n)
            ids, mask = gen.left_pad([prompts[i] for i in group], slots.pad, slots.device)
            seqs = gen.generate(slots.model, ids, mask, config)   # (len(group)·n, P + new)
            answers = seqs[:, ids.shape[1]:].tolist()             # each prompt's n rows in a run
            for r, i in enumerate(group):
                out[i] = [_decode(slots, a) for a in answers[r * n:(r + 1) * n]]
    return out


def _decode(slots, ids: list[int]) -> str:
    """The answer up to its first end-of-turn token (after it: padding of finished rows)."""
    from mens.model.generate import first_end

    end = first_end(ids, slots.eos)
    return slots.tokenizer.decode(ids[:end], skip_special_tokens=True)


def item_losses(slots, slot, examples) -> tuple[list[float], list[int]]:
    """Per example (in order): summed NLL over its supervised tokens on `slot`, and their count."""
    from mens.data.pack_order import EVAL_MICRO
    from mens.train.evaluate import eval_item_losses

    if not examples:
        return [], []
    with slots.activate(slot):
        out = eval_item_losses(slots.model, examples, EVAL_MICRO, max(len(e) for e in examples))
    slots.model.eval()   # eval_item_losses leaves the model in train mode (the training loop's)
    return out


def row(spoke: str, role: str, metric: str, numbers: dict, higher_is_better: bool,
        **extra) -> dict:
    """A metric row (mens.eval's shape) of this set."""
    return {"name": f"{spoke}/{metric}", "group": GROUPS[role], "task": spoke, "metric": metric,
            "spoke": spoke, "higher_is_better": higher_is_better, **numbers, "version": None,
            **extra}


def score_set(slots, base_slot, tuned_slot, recs: list[dict], check: str | None, spec, eval_cfg, *,
              role: str, spoke: str, batch_size: int, k: int | None = None,
              greedy: bool | None = None, oracle: dict | None = None) -> dict:
    """One held-out set of chat records (as_chats makes them of pairs and labeled records), both
    models: {"rows", "items", "stats"}.

    slots: one Slots holding both slots (a LoRA run), or (base Slots, tuned Slots) (a full
    fine-tune: mens.compare.core.load_models gives two). role: "spoke" | "collateral".
    k: samples per prompt (None: eval_cfg.k; 0: none); greedy: a greedy answer per prompt (None:
    when eval_cfg.k > 0) — a collateral set passes k=0, greedy=True. check None: the loss row only.
    oracle: keyword arguments of mens.synth.oracle.judge_batch (timeout_s, memory_mb, path).
    """
    from mens.data.examples import examples_for
    from mens.synth.oracle import judge_batch

    b_slots, t_slots = slots if isinstance(slots, tuple) else (slots, slots)
    models = {"base": (b_slots, base_slot), "tuned": (t_slots, tuned_slot)}
    k = int(eval_cfg.k if k is None else k)
    greedy = eval_cfg.k > 0 if greedy is None else greedy
    boot = {"confidence": eval_cfg.confidence, "reps": eval_cfg.bootstrap, "seed": eval_cfg.seed}
    phases = list(spec.curriculum.phases)
    recs = [dict(r, phase=r["phase"] if r.get("phase") in phases else phases[0]) for r in recs]

    # --- loss: one record per item (held-out records scored whole, as mens.train.evaluate does)
    exs, ex_stats = examples_for(recs, b_slots.tokenizer, spec, phases, pairs=False,
                                 max_len=min(spec.rung.max_position_embeddings, 4096))
    losses = {m: item_losses(s, slot, list(exs.values())) for m, (s, slot) in models.items()}
    tokens = losses["base"][1]
    rows = [row(spoke, role, "loss", paired(losses["base"][0], losses["tuned"][0],
                                             weights=tokens, higher_is_better=False,
                                             relative=True, **boot),
                False, tokens=sum(tokens),
                records_skipped=ex_stats["unsupervised_records_skipped"])]
    items = [{"id": r["id"], "prompt": _last_user(r)[1]} for r in recs]
    where = {rid: j for j, rid in enumerate(exs)}      # record id → its loss item
    for it in items:
        if it["id"] in where:
            j = where[it["id"]]
            it["tokens"] = tokens[j]
            for m in models:
                it[m] = {"nll": losses[m][0][j]}
    stats = {"records": len(recs), "loss_items": len(exs),
             "records_skipped": ex_stats["unsupervised_records_skipped"], "check": check}
    if not check or not (greedy or k > 0) or not recs:
        return {"rows": rows, "items": items, "stats": stats}

    # --- answers: greedy and k samples per prompt, both models
    heads = [r["messages"][:_last_user(r)[0] + 1] for r in recs]
    answers: dict[tuple[str, str], list[list[str]]] = {}
    for m, (s, slot) in models.items():
        # a record's tools are part of its prompt, as training rendered it (issue #38)
        prompts = [s.encode(s.chat.prompt_text(h, r["tools"])) if r.get("tools") and s.chat
                   else s.encode_chat(h) for h, r in zip(heads, recs)]
        stats[f"prompts_cut_{m}"] = sum(room(s, p, eval_cfg.max_new_tokens) < eval_cfg.max_new_tokens
                                   for p in prompts)
        print(f"mens eval: {spoke} · {m}: {len(prompts)} prompts × "
              f"{(1 if greedy else 0) + k} answers of ≤ {eval_cfg.max_new_tokens} tokens",
              file=sys.stderr, flush=True)
        if greedy:
            answers[m, "greedy"] = generate(s, slot, prompts, n=1, temperature=0.0, top_p=1.0,
                                            max_new=eval_cfg.max_new_tokens, seed=eval_cfg.seed,
                                            batch_size=batch_size)
        if k > 0:
            answers[m, "samples"] = generate(s, slot, prompts, n=k, temperature=eval_cfg.temperature,
                                             top_p=eval_cfg.top_p, max_new=eval_cfg.max_new_tokens,
                                             seed=eval_cfg.seed, batch_size=batch_size)

    # --- every answer judged in ONE oracle batch (one child process for the set)
    keys = [(m, kind, i, j) for (m, kind), per in answers.items()
            for i, texts in enumerate(per) for j in range(len(texts))]
    # tool calls are read in the syntax the model writes (its template's: mens.data.tool_syntax)
    syntax = b_slots.chat.tool_syntax if b_slots.chat is not None else "hermes"
    verdicts = judge_batch(check, [oracle_record(recs[i], heads[i], answers[m, kind][i][j], check,
                                                 syntax)
                                   for m, kind, i, j in keys], **(oracle or {}))
    judged: dict[tuple[str, str], list[list]] = {key: [[] for _ in recs] for key in answers}
    for (m, kind, i, j), v in zip(keys, verdicts):
        judged[m, kind][i].append(v)
        entry = {"text": answers[m, kind][i][j], "passed": v.passed,
                 "diagnostics": v.diagnostics, "unverified_reason": v.unverified_reason}
        slot_items = items[i].setdefault(m, {})
        if kind == "greedy":
            slot_items["greedy"] = entry
        else:
            slot_items.setdefault("samples", []).append(entry)

    if greedy:
        rows.append(_pass_row(spoke, role, "greedy", judged["base", "greedy"],
                              judged["tuned", "greedy"], lambda c, n: c / n, boot))
    if k > 0:
        for at in sorted({1, k}):
            rows.append(_pass_row(spoke, role, f"pass@{at}", judged["base", "samples"],
                                  judged["tuned", "samples"],
                                  lambda c, n, at=at: pass_at_k(n, c, at), boot))
    return {"rows": rows, "items": items, "stats": stats}


def _pass_row(spoke, role, metric, base: list[list], tuned: list[list], score, boot) -> dict:
    """A pass-rate row over prompts: score(passed, answers) per prompt and model. A prompt with
    an unverified verdict in either model is left out (paired items must be the same)."""
    b, t, left_out = [], [], 0
    for vb, vt in zip(base, tuned):
        if any(v.passed is None for v in vb + vt):
            left_out += 1
            continue
        b.append(score(sum(bool(v.passed) for v in vb), len(vb)))
        t.append(score(sum(bool(v.passed) for v in vt), len(vt)))
    unverified = {m: sum(v.passed is None for per in vs for v in per)
                  for m, vs in (("base", base), ("tuned", tuned))}
    reasons = sorted({v.unverified_reason for per in base + tuned for v in per
                      if v.passed is None and v.unverified_reason})
    return row(spoke, role, metric, paired(b, t, higher_is_better=True, **boot), True,
               unverified={**unverified, "prompts_left_out": left_out, "reasons": reasons})


def _last_user(rec: dict) -> tuple[int, str]:
    """(index, content) of the record's last user turn: the prompt its answers respond to."""
    msgs = rec["messages"]
    i = max(j for j, m in enumerate(msgs) if m["role"] == "user")
    return i, msgs[i]["content"]
