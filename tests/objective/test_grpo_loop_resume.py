"""Issue #39: a resumed GRPO run equals the uninterrupted one. The sampling RNG is the
objective's own generator, advanced by sampling and kept in every checkpoint (before, a resumed
run replayed the first steps' seeds); that sampling leaves the global RNG alone is
tests/objective/test_grpo_loop.py's.

Real tiny runs (mens.train.run.train_run, a real Lightning Trainer, the spoke's own oracle):
4 steps straight; 4 steps stopped by Ctrl-C after step 2 (the Interrupt callback's last.ckpt)
and resumed from it. Their TRAIN_STEP numbers after the resume and their adapters must be
equal. On the tiny rung every group's rewards are equal (frac_reward_zero_std 1: no signal, and
the run says so), so the adapter barely moves; what tells the runs apart is what was sampled:
the policy's entropy over the sampled tokens and their lengths differ with the samples (a
resume that reseeded, or replayed step 1's seed, fails here)."""
from __future__ import annotations

import pytest

from train_util import FAST_TRAIN
from mens.run.telemetry import read

GRPO = [*FAST_TRAIN, "lane=grpo", "spoke=structured_shell", "train.max_steps=4",
        "train.eval_max_records=1", "train.global_batch=2", "train.micro_batch=1",
        "train.seq_len=128", "lane.grpo.num_generations=2", "lane.grpo.max_completion_length=8",
        "lane.optimizer.lr=1e-3", "train.checkpoint_every=100"]


@pytest.mark.slow   # three tiny GRPO runs
def test_a_resumed_grpo_run_equals_the_uninterrupted_one(compile_run, tmp_path):
    import lightning as L
    import torch
    from safetensors.torch import load_file

    from mens.errors import Interrupted
    from mens.train.run import RunHooks, train_run

    class CtrlC(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step == 2:
                raise KeyboardInterrupt

    spec, plan = compile_run(*GRPO, purpose="train")
    whole = train_run(spec, plan, tmp_path / "whole")
    with pytest.raises(Interrupted):
        train_run(spec, plan, tmp_path / "cut", hooks=RunHooks(callbacks=[CtrlC()]))
    ckpt = torch.load(tmp_path / "cut" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 2 and len(ckpt["mens_objective"]["sampling_rng"]) == 1
    resumed = train_run(spec, plan, tmp_path / "cut", resume=True)
    assert whole["steps"] == resumed["steps"] == 4

    def rows(run):
        return {r["step"]: r for r in read(run / "telemetry.jsonl") if r["event"] == "TRAIN_STEP"}
    a, b = rows(tmp_path / "whole"), rows(tmp_path / "cut")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in (3, 4):                         # the steps after the resume
        for k in ("loss", "reward", "completions/mean_length", "entropy"):
            assert b[step][k] == pytest.approx(a[step][k], rel=1e-6, abs=1e-9), (step, k)
    wa = load_file(tmp_path / "whole" / "adapter" / "adapter_model.safetensors")
    wb = load_file(tmp_path / "cut" / "adapter" / "adapter_model.safetensors")
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) <= 1e-6
    # steps draw different samples (the generator moves on): their entropies differ
    assert len({round(a[s]["entropy"], 6) for s in a}) == 4


@pytest.mark.slow   # a real 2-process run (DDP on gloo, mens's launcher)
def test_two_processes_keep_each_ranks_sampling_rng(mens_cli, tmp_path):
    """Saving is a collective: every rank's generator state is gathered into last.ckpt (the
    ranks draw differently: their states differ), and the window's collectives (token counts,
    reward moments, length extremes) run in step on both ranks of a real Lightning DDP run."""
    import json

    import torch

    run = tmp_path / "ddp"
    res = mens_cli("mens", "+hw=cpu", "logger=csv", "train.seq_len=256", "curriculum=flat",
               "train.eval_max_records=2", "lane=grpo", "spoke=structured_shell",
               "train.max_steps=2", "train.micro_batch=1", "train.global_batch=4", "hw.devices=2",
               "hw.strategy=ddp", "train.checkpoint_every=1", "lane.grpo.num_generations=2",
               "lane.grpo.max_completion_length=16", f"hydra.run.dir={run}")
    assert res.returncode == 0, res.stderr[-3000:]
    states = torch.load(run / "checkpoints" / "last.ckpt",
                        weights_only=False)["mens_objective"]["sampling_rng"]
    assert len(states) == 2 and not torch.equal(states[0], states[1])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["grpo_flags"]["steps"] == 2
