"""Training stage: a LightningModule + LightningDataModule + Trainer built from the RunSpec.

SFT lanes (lora, qlora, full) minimise the causal-LM loss on assistant tokens of packed rows;
the dpo lane minimises a DPO loss (lane.dpo.loss: TRL's sigmoid, hinge or ipo; see dpo_losses)
on chosen/rejected pairs against reference log-probs computed once, before training, from the
initial policy — which *is* the base with the adapter disabled (LoRA's B starts at 0) or, from
`train.init_adapter`, the frozen SFT policy.
The data side (rows, batches, the loader's position) is mens.train.datamodule.
"""
from __future__ import annotations

import math
import random

import lightning as L
import torch
import torch.nn.functional as F

from mens.config.schema import DPO_LOSSES
from mens.errors import ConfigError, RunFailed
from mens.data.pack import IGNORE
from mens.train.datamodule import Position, pair_batch
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


def dpo_losses(chosen_logratio: torch.Tensor, rejected_logratio: torch.Tensor, beta: float,
               loss_type: str = "sigmoid") -> torch.Tensor:
    """Per-pair DPO losses, TRL's DPOTrainer `loss_type`s. The log-ratios are
    log π(y|x) − log π_ref(y|x) of the chosen and the rejected answer; h = chosen − rejected.

        sigmoid  −log σ(β·h)          (Rafailov et al. 2023)
        hinge    relu(1 − β·h)        (SLiC; β·h is the reward margin)
        ipo      (h − 1/(2β))²        (Azar et al. 2023)

    For ipo the caller passes log-probs averaged over each answer's tokens, as TRL does (the
    others take sums). lane.dpo.loss is checked against DPO_LOSSES when the config composes."""
    margin = beta * chosen_logratio - beta * rejected_logratio   # β·h (the sigmoid path's order)
    if loss_type == "sigmoid":
        return -F.logsigmoid(margin)
    if loss_type == "hinge":
        return torch.relu(1 - margin)
    if loss_type == "ipo":
        return (chosen_logratio - rejected_logratio - 1 / (2 * beta)) ** 2
    raise ConfigError(f"`lane.dpo.loss={loss_type}` is not valid: it takes one of "
                      f"{', '.join(DPO_LOSSES)}.", key="lane.dpo.loss")


class MensModule(L.LightningModule):
    """model: the built model, or None with build=() → model, which Lightning's configure_model
    calls once, inside the strategy's context (where a sharding strategy such as FSDP2 wants
    the model made, per process)."""
    def __init__(self, model, spec, position: Position, planned_steps: int,
                 ref_logps: torch.Tensor | None = None, build=None):
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
        self.ref_logps = ref_logps          # (n_pairs, 2): chosen, rejected — dpo only
        self.strict_loading = False         # checkpoints hold trainable weights only
        self.last = {}
        self.counts = {"real": 0, "valid": 0, "slots": 0}   # tokens since the last TRAIN_STEP row
        self.val_sums: dict[int, list[float]] = {}   # loader index → [summed NLL, tokens]
        self.group_nll: list = [None, None]  # [(epoch, accumulation group), this rank's NLL]

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
        self.counts["real"] += int(batch.pop("real_tokens"))
        self.counts["valid"] += int((batch["labels"] != IGNORE).sum())
        self.counts["slots"] += batch["input_ids"].numel()
        group, group_tokens = batch.pop("step_group", None), batch.pop("step_tokens", None)
        world, accum = self.world(), self.accum()
        if self.ref_logps is not None:
            loss = self.dpo_loss(batch, world)
            logged = loss.detach() if world == 1 else all_sum(loss.detach()) / world
        elif (world == 1 and accum == 1) or group_tokens is None:
            loss = lm_loss(self.model, batch) if self.chunked else self.model(**batch).loss
            logged = loss.detach()
        else:
            loss, logged = self.token_weighted_loss(batch, group, group_tokens, world, accum)
        if not torch.isfinite(logged):   # the same on every rank: all of them stop
            raise RunFailed(f"the loss became {logged.item()} at step {self.global_step + 1} "
                            f"(epoch {self.current_epoch}): training stopped. Lower "
                            f"lane.optimizer.lr (or raise warmup) or check the data.")
        self.last["loss"] = logged
        # the progress bar's; the loggers get every TRAIN_STEP number (trainer.StepTelemetry)
        self.log("train/loss", logged, prog_bar=True, logger=False)
        return loss

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

    def dpo_loss(self, batch, world: int = 1) -> torch.Tensor:
        idx = batch.pop("pair_index")
        keep = batch.pop("keep", None)        # False: a rank's repeated pair (strategy.Repeat)
        n = len(idx)
        loss_type = self.spec.lane.dpo.loss
        logps = sequence_logps(self.model, batch, self.chunked)                   # (2n,)
        ref = self.ref_logps.to(logps.device)[idx]                                # (n, 2)
        policy_chosen, policy_rejected = logps[:n], logps[n:]
        ref_chosen, ref_rejected = ref[:, 0], ref[:, 1]
        if loss_type == "ipo":   # TRL: IPO compares log-probs averaged over completion tokens
            tokens = (batch["labels"][:, 1:] != IGNORE).sum(-1).clamp(min=1).to(logps.dtype)
            policy_chosen, ref_chosen = policy_chosen / tokens[:n], ref_chosen / tokens[:n]
            policy_rejected, ref_rejected = policy_rejected / tokens[n:], ref_rejected / tokens[n:]
        beta = self.spec.lane.dpo.beta
        chosen = policy_chosen - ref_chosen          # log-ratios; rewards are beta times these
        rejected = policy_rejected - ref_rejected
        margin = beta * chosen - beta * rejected
        if world > 1:   # means over every rank's pairs (repeats weigh 0), as in one process
            k = torch.ones_like(margin) if keep is None else keep.to(margin)
            pairs = all_sum(k.sum())
            stats = all_sum(torch.stack([(beta * chosen * k).sum(), (beta * rejected * k).sum(),
                                         (margin * k).sum(), ((margin > 0).to(k) * k).sum()])
                            .detach()) / pairs
            self.last.update(dict(zip(("rewards/chosen", "rewards/rejected", "rewards/margins",
                                       "rewards/accuracies"), stats)))
            return (dpo_losses(chosen, rejected, beta, loss_type) * k).sum() / (pairs / world)
        self.last.update({"rewards/chosen": (beta * chosen).mean().detach(),
                          "rewards/rejected": (beta * rejected).mean().detach(),
                          "rewards/margins": margin.mean().detach(),
                          "rewards/accuracies": (margin > 0).float().mean().detach()})
        return dpo_losses(chosen, rejected, beta, loss_type).mean()

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

    def on_load_checkpoint(self, checkpoint):
        rng = checkpoint.get("mens_rng")
        if rng:
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])


def reference_logps(model, pairs: list, spec) -> torch.Tensor:
    """Log-probs of the initial policy on every pair, once: (n_pairs, 2)."""
    out = torch.zeros(len(pairs), 2)
    from tqdm.auto import tqdm

    from mens.model.load import eval_mode
    eval_mode(model)
    with torch.no_grad():
        for i in tqdm(range(0, len(pairs), spec.train.micro_batch), desc="dpo reference pass",
                      unit="batch", leave=False):
            chunk = pairs[i:i + spec.train.micro_batch]
            batch = pair_batch(chunk, spec.train.seq_len)
            idx = batch.pop("pair_index")
            lp = sequence_logps(model, batch).float()
            out[idx, 0], out[idx, 1] = lp[:len(chunk)], lp[len(chunk):]
    model.train()
    return out
