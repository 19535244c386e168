"""Training stage: a LightningModule + LightningDataModule + Trainer built from the RunSpec.

The module owns the model, the optimizer and the ways log-probs are computed (the chunked head
or full logits, the token-weighted causal-LM loss); the lane's objective (mens.objective: SFT,
DPO …) decides what a step does with them and what it logs.
The data side (rows, batches, the loader's position) is mens.train.datamodule.
"""
from __future__ import annotations

import math
import random

import lightning as L
import torch
import torch.nn.functional as F

from mens.errors import RunFailed
from mens.data.pack import IGNORE
from mens.objective.base import Step
from mens.train.datamodule import Position
from mens.train.strategy import all_sum


def sequence_logps(model, batch, chunked: bool = True) -> torch.Tensor:
    """Sum of log p(label) over each row's supervised tokens: (B,). chunked: the head runs chunk
    by chunk (mens.train.chunked_ce) and the (B, S, V) logits are never held."""
    from mens.train.chunked_ce import hidden_and_head, row_logps

    if not chunked:   # train.loss=full_logits: the whole (B, S, V) at once
        logits = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"),
                       position_ids=batch["position_ids"]).logits[:, :-1].float()  # (B, S-1, V)
        labels = batch["labels"][:, 1:]                                          # (B, S-1)
        logp = torch.gather(F.log_softmax(logits, -1), 2, labels.clamp(min=0)[..., None])[..., 0]
        return (logp * (labels != IGNORE)).sum(-1)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    h, w, b, cap = hidden_and_head(model, inputs)                               # h: (B, S, H)
    return row_logps(h, w, batch["labels"], softcap=cap, bias=b)


def lm_loss(model, batch, num_items=None) -> torch.Tensor:
    """The causal-LM loss (HF's: shifted, mean over supervised tokens) with the head run chunk by
    chunk and each chunk's gradient made in the forward (mens.train.chunked_ce). num_items: the
    divisor instead of this batch's supervised tokens (several ranks: see MensModule)."""
    from mens.train.chunked_ce import causal_lm_loss, hidden_and_head

    h, w, b, cap = hidden_and_head(model, batch)                                # h: (B, S, H)
    return causal_lm_loss(h, w, batch["labels"], softcap=cap, bias=b, num_items=num_items)


class MensModule(L.LightningModule):
    """model: the built model, or None with build=() → model, which Lightning's configure_model
    calls once, inside the strategy's context (where a sharding strategy such as FSDP2 wants
    the model made, per process)."""
    def __init__(self, model, spec, position: Position, planned_steps: int,
                 objective=None, build=None, router=None):
        super().__init__()
        if model is None and build is None:
            raise ValueError("MensModule needs a model or a build() that makes one")
        self.model, self.spec, self.position, self.build = model, spec, position, build
        # known up front: asking Lightning (estimated_stepping_batches) would build the train
        # loader before a checkpoint is restored, and its first batch would be prefetched
        # before the saved loader position could be applied
        self.planned_steps = planned_steps
        # train.loss, resolved by the plan (a spec without it: the plain full-logits loss)
        self.chunked = getattr(getattr(spec, "train", None), "loss", None) == "chunked"
        if objective is None:               # the lane's (mens.objective.build)
            from mens.objective import build as build_objective
            objective = build_objective(spec)
        self.objective = objective
        self.strict_loading = False         # checkpoints hold trainable weights only
        self.last = {}
        self.counts = {"real": 0, "valid": 0, "slots": 0}   # tokens since the last TRAIN_STEP row
        self.val_sums: dict[int, list[float]] = {}   # loader index → [summed NLL, tokens]
        self.group_nll: list = [None, None]  # [(epoch, accumulation group), this rank's NLL]
        # a mixture of experts' load-balancing loss (mens.train.router.RouterAux; None: dense)
        self.router = router
        self.group_aux: list = [None, 0.0, 0]  # [step key, Σ micro-batch aux, micro-batches]

    def configure_model(self):
        if self.model is None:
            self.model = self.build()
        mesh = self.device_mesh   # set by ModelParallelStrategy (hw.strategy=fsdp2) only
        if mesh is not None:
            from torch.distributed.fsdp import FSDPModule, fully_shard

            if isinstance(self.model, FSDPModule):   # Lightning may call this hook again
                return
            # one FSDP2 unit per decoder layer (its weights gathered only while it runs), then
            # the root: embeddings, final norm and the (tied) head
            dp = mesh["data_parallel"]
            for layer in self.model.get_decoder().layers:
                fully_shard(layer, mesh=dp)
            fully_shard(self.model, mesh=dp)

    def world(self) -> int:
        return getattr(self._trainer, "world_size", 1) if self._trainer is not None else 1

    def accum(self) -> int:
        return getattr(self._trainer, "accumulate_grad_batches", 1) if self._trainer else 1

    def training_step(self, batch, batch_idx):
        self.position.done += 1
        real = int(batch.pop("real_tokens"))
        if "record_ids" not in batch:   # prompts (grpo): the tokens are the sampled ones, below
            self.counts["real"] += real
            self.counts["valid"] += int((batch["labels"] != IGNORE).sum())
            self.counts["slots"] += batch["input_ids"].numel()
        group, group_tokens = batch.pop("step_group", None), batch.pop("step_tokens", None)
        token_mask = batch.pop("token_mask", None)   # packed rows' real tokens (the router's)
        world, accum = self.world(), self.accum()
        if self.router is not None:
            self.router.start()
        loss, metrics = self.objective.step(self.step_context(group, group_tokens, world, accum),
                                            batch)
        if self.router is not None:
            loss = self.add_router_aux(loss, metrics, group, batch, token_mask)
        logged = metrics.pop("loss")
        if "completion_tokens" in metrics:   # an objective that samples: what it trained on
            n = int(metrics.pop("completion_tokens"))
            for k in ("real", "valid", "slots"):
                self.counts[k] += n
        self.last.update(metrics)
        if not torch.isfinite(logged):   # the same on every rank: all of them stop
            raise RunFailed(f"the loss became {logged.item()} at step {self.global_step + 1} "
                            f"(epoch {self.current_epoch}): training stopped. Lower "
                            f"lane.optimizer.lr (or raise warmup) or check the data.")
        self.last["loss"] = logged
        # the progress bar's; the loggers get every TRAIN_STEP number (trainer.StepTelemetry)
        self.log("train/loss", logged, prog_bar=True, logger=False)
        return loss

    def add_router_aux(self, loss, metrics: dict, group, batch, token_mask):
        """The micro-batch's loss + coef · router aux loss where the family trains with it
        (mens.train.router); `router_aux_loss` in the step's metrics: the unscaled mean over
        the optimizer step's micro-batches (this rank's)."""
        mask = token_mask
        am = batch.get("attention_mask")
        if mask is None and isinstance(am, torch.Tensor) and am.dim() == 2:   # padded rows
            mask = am
        aux = self.router.loss(mask)
        if aux is None:
            return loss
        key = (self.current_epoch, int(group)) if group is not None else \
            (self.current_epoch, self.global_step)
        if self.group_aux[0] != key:
            self.group_aux = [key, 0.0, 0]
        self.group_aux[1] += float(aux.detach())
        self.group_aux[2] += 1
        metrics["router_aux_loss"] = self.group_aux[1] / self.group_aux[2]
        return loss + self.router.coef * aux if self.router.adds else loss

    def on_fit_end(self):
        if self.router is not None:   # the hooks off, the config's own switch back (saving)
            self.router.close()

    def step_context(self, group, group_tokens, world: int, accum: int) -> Step:
        """What the objective's step may call (mens.objective.base.Step)."""
        def causal(batch):
            if (world == 1 and accum == 1) or group_tokens is None:
                loss = lm_loss(self.model, batch) if self.chunked else self.model(**batch).loss
                return loss, loss.detach()
            return self.token_weighted_loss(batch, group, group_tokens, world, accum)
        return Step(logps=lambda batch: sequence_logps(self.model, batch, self.chunked),
                    lm_loss=causal, world=world, all_sum=all_sum, model=self.model,
                    group=None if group is None else (self.current_epoch, int(group)),
                    rank=self.global_rank if self._trainer is not None else 0,
                    all_max=all_max, accum=accum)

    def token_weighted_loss(self, batch, group, group_tokens, world: int, accum: int):
        """(loss to backward, the step's token mean so far) under accumulation or several ranks.

        An optimizer step's loss is the summed NLL over every micro-batch of its accumulation
        group on every rank, over all of their supervised tokens N (not a mean of per-micro-batch
        means, which weighs a short micro-batch's tokens more: the bug transformers fixed in
        4.46). Lightning divides each micro-batch's loss by `accum` and DDP/FSDP2 average the
        gradients over ranks, so each micro-batch backwards NLL_micro · accum · world / N; a
        rank's repeated rows (strategy.Repeat) carry no label and add exactly 0. The logged loss
        accumulates the group's NLL and is the step's token mean at its last micro-batch."""
        n = (all_sum(group_tokens) if world > 1 else group_tokens).float().clamp(min=1)
        scale = n / (accum * world)                # the divisor that makes the sums above
        loss = lm_loss(self.model, batch, num_items=scale) if self.chunked else \
            self.model(**batch, num_items_in_batch=scale).loss
        key = (self.current_epoch, int(group))
        if self.group_nll[0] != key:               # a new accumulation group: a new step
            self.group_nll = [key, torch.zeros((), dtype=torch.float64)]
        self.group_nll[1] = self.group_nll[1] + loss.detach().double().cpu() * scale.cpu()
        nll = self.group_nll[1].to(loss.device) if world > 1 else self.group_nll[1]
        return loss, ((all_sum(nll) if world > 1 else nll) / n.to(nll.device)).float()

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        """Summed NLL and token count of one held-out batch (trainer.HeldOutEval averages)."""
        nll = -sequence_logps(self.model, batch).sum()           # summed over supervised tokens
        sums = self.val_sums.setdefault(dataloader_idx, [0.0, 0])
        sums[0] += nll.item()
        sums[1] += int((batch["labels"][:, 1:] != IGNORE).sum())

    def on_validation_model_eval(self):
        from mens.model.load import eval_mode
        eval_mode(self)   # keeps bitsandbytes 4-bit layers in train mode (see eval_mode)

    def configure_optimizers(self):
        lane, total = self.spec.lane, max(self.planned_steps, 1)
        params = [p for p in self.model.parameters() if p.requires_grad]
        o = lane.optimizer
        if o.name == "adamw_8bit":
            import bitsandbytes as bnb
            opt = bnb.optim.AdamW8bit(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
        elif o.name == "sgd":
            opt = torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay)
        else:
            opt = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
        warmup = int(self.spec.train.warmup_ratio * total)
        schedule = self.spec.train.schedule

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            progress = min((step - warmup) / max(total - warmup, 1), 1.0)
            if schedule == "cosine":
                return 0.5 * (1 + math.cos(math.pi * progress))
            return 1 - progress if schedule == "linear" else 1.0
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint):
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                    if k in trainable}
        checkpoint["mens_rng"] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        checkpoint["mens_world_size"] = self.world()   # a resume must use the same (run.py)
        state = self.objective.state_dict()            # every rank calls it (may gather)
        if state:
            checkpoint["mens_objective"] = state

    def on_load_checkpoint(self, checkpoint):
        rng = checkpoint.get("mens_rng")
        if rng:
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])
        if checkpoint.get("mens_objective"):
            self.objective.load_state_dict(checkpoint["mens_objective"])


def all_max(t):
    """A tensor's element-wise max over ranks (autograd-free; one process: t itself)."""
    from mens.train.strategy import distributed

    if not distributed():
        return t
    import torch.distributed as dist

    t = t.detach().clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def reference_scorer(model, spec):
    """score(batch) → (B,) log-probs of the model as it is now, without grad, in eval mode (an
    objective's reference pass before training: mens.objective.base.Objective.prepare). Call
    `done()` after to put the model back in train mode."""
    from mens.model.load import eval_mode

    chunked = getattr(getattr(spec, "train", None), "loss", None) == "chunked"
    eval_mode(model)

    def score(batch):
        with torch.no_grad():
            return sequence_logps(model, batch, chunked)
    score.done = model.train
    return score
