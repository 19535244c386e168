"""Scoring given tokens: vLLM's `prompt_logprobs` extension of /v1/completions (issue #39: a
served teacher for on-policy distillation, mens.objective.served_teacher).

`"prompt_logprobs": k` asks, per prompt, the log-prob the model gives each prompt token after
the tokens before it, plus the k most likely tokens there — vLLM's shape, so one client works
against both servers:

    choices[i].prompt_logprobs = [None,                     # the first token has no context
                                  {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...]

each entry holding the prompt's own token (always) and the top k (rank 1 = the most likely).
The log-probs are the raw model's (log-softmax of its logits, no temperature, no top-p):
vLLM's default `raw_logprobs`, and the teacher's distribution a distillation loss asks for.

The prompts are right-padded into one batch: a real token never attends to the padding after
it, and its position is its index, so each row's log-probs are its own forward's.
Runs on the model thread only (`Slots.run`), like mens.serve.batch.
"""
from __future__ import annotations


def prompt_logprobs(slots, slot, prompts: list[list[int]], top: int) -> list[list]:
    """Per prompt: [None, {id: {logprob, rank, decoded_token}}, ...] (model thread)."""
    import torch

    width = max(map(len, prompts))
    pad = slots.pad if slots.pad is not None else 0
    ids = torch.tensor([list(p) + [pad] * (width - len(p)) for p in prompts],
                       device=slots.device)                                      # (B, L)
    mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts],
                        device=slots.device)
    with torch.inference_mode(), slots.activate(slot):
        logits = slots.model(input_ids=ids, attention_mask=mask).logits           # (B, L, V)
    tok, out = slots.request_tokenizer, []
    for r, p in enumerate(prompts):
        # position i − 1 predicts token i; one row at a time keeps one fp32 (L, V) copy
        logp = logits[r, :len(p) - 1].float().log_softmax(-1)                     # (L−1, V)
        target = torch.tensor(p[1:], device=logp.device)
        got = logp.gather(-1, target[:, None])[:, 0]                             # (L−1,)
        rank = (logp > got[:, None]).sum(-1) + 1         # vLLM's rank: 1 + tokens more likely
        if top:
            tv, ti = logp.topk(top, dim=-1)
            tv, ti = tv.tolist(), ti.tolist()
        row: list = [None]
        for i, (t, lp, rk) in enumerate(zip(p[1:], got.tolist(), rank.tolist())):
            entry = {str(t): {"logprob": lp, "rank": rk, "decoded_token": _text(tok, t)}}
            for k in range(top):
                if str(ti[i][k]) not in entry:
                    entry[str(ti[i][k])] = {"logprob": tv[i][k], "rank": k + 1,
                                            "decoded_token": _text(tok, ti[i][k])}
            row.append(entry)
        out.append(row)
    return out


def _text(tokenizer, tid: int) -> str:
    """vLLM's decoded_token: the token decoded alone (a piece of a character shows U+FFFD)."""
    return tokenizer.decode([tid])
