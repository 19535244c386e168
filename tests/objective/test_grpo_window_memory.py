"""Issue #49 item 1, the measured side: a window of 4 micro-batches (micro_batch 1 × grad_accum 4,
G 4: 16 rows) on the tiny rung, planned, then sampled by the objective's own code
(mens.objective.grpo.Grpo.sample: mens.plan.rl.calls splits it into generate calls of
lane.grpo.generation_batch_size rows) under torch's profiler: the measured peak of the sampling
phase is at most the plan's generation phase for one call's rows, and within 10 % of it — for
the window split in two calls and for the whole window in one.

The tiny rung's widths with random weights (an end token is then a 2-in-4,096 draw per step: some
row of every call runs to max_completion_length, as the plan assumes) and prompts longer than
seq_len − max_completion_length (each is cut to exactly that: no padding), fp32 as a CPU plan.
Before issue #49 the spec had no generation batch and the code sampled the whole window in one
call while the plan counted one micro-batch's 4 rows."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.plan.test_grpo_plan_memory import peak_bytes  # noqa: E402  (the profiler's peak)

S, T, G = 288, 256, 4           # prompts cut to 32 tokens, answers of 256: the KV cache dominates


@pytest.fixture(scope="module")
def tiny_random():
    import transformers

    from mens.config.compose import compose
    from mens.model.load import load_tokenizer

    rung = compose(["+rung=tiny", "+hw=cpu"]).rung
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        vocab_size=rung.vocab_size, hidden_size=rung.hidden_size,
        intermediate_size=rung.intermediate_size, num_hidden_layers=rung.num_hidden_layers,
        num_attention_heads=rung.num_attention_heads,
        num_key_value_heads=rung.num_key_value_heads, head_dim=rung.head_dim,
        tie_word_embeddings=True, attn_implementation="sdpa")
    return transformers.Qwen3ForCausalLM(cfg).eval(), load_tokenizer(rung)


@pytest.mark.slow     # ~30 s a case on a busy 2-core box: 2 × 256 decode steps under the profiler
@pytest.mark.parametrize("rows", [8, 16])
def test_the_windows_sampling_peak_is_the_planned_calls(compile_run, tiny_random, rows):
    from mens.objective.grpo import Grpo
    from mens.objective.sampling import sampling_rng

    spec, plan = compile_run("+hw=cpu", "hw.memory_gb=16", "+rung=tiny", "lane=grpo",
                             "spoke=structured_shell", f"train.seq_len={S}",
                             "train.micro_batch=1", "train.grad_accum=4",
                             f"lane.grpo.num_generations={G}",
                             f"lane.grpo.max_completion_length={T}",
                             f"lane.grpo.generation_batch_size={rows}")
    assert plan.fits and spec.lane.grpo.generation_batch_size == rows
    assert plan.sampling["window_rows"] == 16
    planned = plan.sampling["generation_peak_bytes"]
    model, tok = tiny_random
    calls = []

    class Counted(Grpo):
        def rollout(self, model, heads, G_, T_, tools):   # the real sampling, its rows counted
            calls.append(len(heads) * G_)
            return super().rollout(model, heads, G_, T_, tools)
    obj = Counted(spec)
    obj.tokenizer, obj.rng = tok, sampling_rng(0, "cpu")
    heads = [[{"role": "user", "content": f"prompt {i}: " + "list the files here " * 20}]
             for i in range(4)]
    measured, roll = peak_bytes(lambda: obj.sample(model, heads, G, T, [None] * 4))
    assert calls == [rows] * (16 // rows)
    assert roll.truncated == 4 and roll.prompt_ids.shape == (16, S - T)
    assert roll.completion_ids.shape == (16, T)          # some row of each call ran to T
    assert measured <= planned, (measured, planned)
    assert (planned - measured) / measured <= 0.10, (measured, planned)


def test_a_window_sampled_in_calls_is_one_rollout():
    """Grpo.sample joins its calls' rollouts (mens.objective.sampling.concat): prompts of
    different widths left-padded, answers of different widths right-padded (mask 0 there), in
    call order — and every row scores as it did in its own call (left padding shifts positions,
    which RoPE's relative attention does not see); a server's log-probs and seconds carried."""
    import math

    from mens.config.compose import compose
    from mens.model.load import load_base, load_tokenizer
    from mens.objective.rollout_server import ServerRollout
    from mens.objective.sampling import completion_logps, concat, generate

    rung = compose(["+rung=tiny", "+hw=cpu"]).rung
    model, tok = load_base(rung), load_tokenizer(rung)
    short = generate(model, tok, [[{"role": "user", "content": "ls"}]], 2, 4, seed=1)
    long = generate(model, tok, [[{"role": "user", "content": "count the lines of a.txt " * 3}]],
                    2, 9, seed=2)
    assert short.prompt_ids.shape[1] < long.prompt_ids.shape[1]
    roll = concat([short, long])
    P, T = long.prompt_ids.shape[1], max(short.completion_ids.shape[1], 9)
    assert roll.prompt_ids.shape == (4, P) and roll.completion_ids.shape == (4, T)
    assert roll.texts == short.texts + long.texts and roll.lengths == short.lengths + long.lengths
    assert roll.prompt_mask[:2].sum() == short.prompt_mask.sum()
    assert roll.completion_mask[:2].sum() == short.completion_mask.sum()
    with torch.no_grad():
        joined = completion_logps(model, roll.input_ids, roll.attention_mask,
                                  roll.completion_mask)
        alone = completion_logps(model, short.input_ids, short.attention_mask,
                                 short.completion_mask)
    w = short.completion_ids.shape[1]
    assert torch.allclose(joined[:2, :w], alone, atol=1e-4)
    assert (joined[:2, w:] == 0).all()
    served = [ServerRollout(**vars(r), sampling_logps=torch.full(r.completion_ids.shape, -1.0),
                            reload_s=s, generate_s=1.5) for r, s in ((short, 0.25), (long, math.nan))]
    both = concat(served)
    assert isinstance(both, ServerRollout) and both.sampling_logps.shape == (4, T)
    assert both.reload_s == 0.25 and both.generate_s == 3.0
    assert (both.sampling_logps[:2, w:] == 0).all()
