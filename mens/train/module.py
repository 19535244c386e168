"""Training stage: a LightningModule + LightningDataModule + Trainer built from the RunSpec.

SFT lanes (lora, qlora, full) minimise the causal-LM loss on assistant tokens of packed rows;
the dpo lane minimises a DPO loss (lane.dpo.loss: TRL's sigmoid, hinge or ipo; see dpo_losses)
on chosen/rejected pairs against reference log-probs computed once, before training, from the
initial policy — which *is* the base with the adapter disabled (LoRA's B starts at 0) or, from
`train.init_adapter`, the frozen SFT policy.
Data order is a function of (seed, epoch) only, so a resumed run sees the batches it would
have seen; the loader's position is saved in every checkpoint.
"""
from __future__ import annotations

import math
import random

import lightning as L
import torch
import torch.nn.functional as F

from mens.config.schema import DPO_LOSSES
from mens.errors import ConfigError, RunFailed
from mens.data.pack import IGNORE, Example, collate, pack, pad_batch


class Position:
    """Batches finished in the current epoch: saved in checkpoints, read back to skip them."""
    def __init__(self):
        self.epoch, self.done, self.skip = 0, 0, 0


class SkipBatches(torch.utils.data.Sampler):
    """Fixed batches of indices; after a resume the first `position.skip` are not yielded."""
    def __init__(self, n: int, micro: int, position: Position):
        self.batches = [list(range(i, min(i + micro, n))) for i in range(0, n, micro)]
        self.position = position

    def __iter__(self):   # a generator: the skip is read at the first next(), after loading
        start, self.position.skip = self.position.skip, 0
        yield from self.batches[start:]

    def __len__(self):
        return len(self.batches)


class ResumableLoader(torch.utils.data.DataLoader):
    """Lightning saves `state_dict()` of loaders that have one (mid-epoch resume)."""
    def __init__(self, items, micro: int, collate_fn, position: Position):
        super().__init__(items, batch_sampler=SkipBatches(len(items), micro, position),
                         collate_fn=collate_fn)
        self.position = position

    def state_dict(self) -> dict:
        return {"epoch": self.position.epoch, "done": self.position.done}

    def load_state_dict(self, state: dict) -> None:
        if state.get("epoch") == self.position.epoch:
            self.position.skip = self.position.done = state["done"]


def epoch_items(examples: dict, records: list, spec, epoch: int, pairs: bool):
    """The rows (packed SFT), examples (unpacked SFT) or pair examples of one epoch."""
    from mens.data.curriculum import epoch_records, shuffle_within_phase

    cur = spec.curriculum
    recs = shuffle_within_phase(epoch_records(records, list(cur.caps), list(cur.phases), epoch),
                                spec.train.seed, epoch)
    items = [examples[r["id"]] for r in recs]
    if pairs or not spec.train.packing:
        return items
    # FFD emits a phase's rows longest-first: shuffle rows within each phase by (seed, epoch)
    return shuffle_within_phase(pack(items, spec.train.seq_len), spec.train.seed, epoch,
                                key=lambda row: row.phase)


class MensData(L.LightningDataModule):
    def __init__(self, spec, examples: dict, records: list, pairs: bool, mask_dtype,
                 eval_sets: dict | None = None):
        super().__init__()
        self.spec, self.examples, self.records, self.pairs = spec, examples, records, pairs
        self.eval_sets = eval_sets or {}     # {role: (spoke, [Example])}: the validation loop's
        self.mask_dtype, self.position = mask_dtype, Position()
        self.epochs = [epoch_items(examples, records, spec, e, pairs)
                       for e in range(spec.curriculum.epochs)]

    def collate(self, items):
        if self.pairs:
            batch = pair_batch(items, self.spec.train.seq_len)
            real = sum(min(len(e), self.spec.train.seq_len) for p in items for e in p[:2])
        elif isinstance(items[0], Example):
            longest = max(len(x) for x in items)
            batch = pad_batch(items, min(longest, self.spec.train.seq_len))
            real = int(batch["attention_mask"].sum())
        else:
            batch = collate(items, self.mask_dtype)
            real = sum(r.real_tokens for r in items)
        batch["real_tokens"] = torch.tensor(real)
        return batch

    def train_dataloader(self):
        epoch = self.trainer.current_epoch if self.trainer else 0
        if self.position.epoch != epoch:
            self.position.epoch, self.position.done = epoch, 0
        items = self.epochs[min(epoch, len(self.epochs) - 1)]
        return ResumableLoader(items, self.spec.train.micro_batch, self.collate, self.position)

    def val_dataloader(self):
        """One loader per held-out set (eval, collateral), batched as evaluate.eval_loss
        batches them (longest first, 4 a batch), so its numbers are the same."""
        from mens.train.evaluate import EVAL_MICRO, eval_chunks

        return [torch.utils.data.DataLoader(eval_chunks(exs, EVAL_MICRO), batch_size=None,
                                            collate_fn=lambda c: pad_batch(c, max(map(len, c))))
                for _, exs in self.eval_sets.values()]

    def steps_per_epoch(self) -> list[int]:
        t = self.spec.train
        return [math.ceil(math.ceil(len(items) / t.micro_batch) / t.grad_accum)
                for items in self.epochs]

    def planned_steps(self) -> int:
        total = sum(self.steps_per_epoch())
        return min(total, self.spec.train.max_steps) if self.spec.train.max_steps > 0 else total


def pair_batch(pairs, seq_len: int) -> dict:
    """[(chosen Example, rejected Example, pair index)] → chosen rows then rejected rows."""
    exs = [p[0] for p in pairs] + [p[1] for p in pairs]
    batch = pad_batch(exs, min(seq_len, max(len(e) for e in exs)))
    batch["pair_index"] = torch.tensor([p[2] for p in pairs])
    return batch


def sequence_logps(model, batch) -> torch.Tensor:
    """Sum of log p(label) over each row's supervised tokens: (B,)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   position_ids=batch["position_ids"]).logits[:, :-1].float()   # (B, S-1, V)
    labels = batch["labels"][:, 1:]                                              # (B, S-1)
    mask = labels != IGNORE
    logp = torch.gather(F.log_softmax(logits, -1), 2, labels.clamp(min=0)[..., None])[..., 0]
    return (logp * mask).sum(-1)


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
        self.ref_logps = ref_logps          # (n_pairs, 2): chosen, rejected — dpo only
        self.strict_loading = False         # checkpoints hold trainable weights only
        self.last = {}
        self.counts = {"real": 0, "valid": 0, "slots": 0}   # tokens since the last TRAIN_STEP row
        self.val_sums: dict[int, list[float]] = {}   # loader index → [summed NLL, tokens]

    def configure_model(self):
        if self.model is None:
            self.model = self.build()

    def training_step(self, batch, batch_idx):
        self.position.done += 1
        self.counts["real"] += int(batch.pop("real_tokens"))
        self.counts["valid"] += int((batch["labels"] != IGNORE).sum())
        self.counts["slots"] += batch["input_ids"].numel()
        if self.ref_logps is not None:
            loss = self.dpo_loss(batch)
        else:
            loss = self.model(**batch).loss
        if not torch.isfinite(loss):
            raise RunFailed(f"the loss became {loss.item()} at step {self.global_step + 1} "
                            f"(epoch {self.current_epoch}): training stopped. Lower "
                            f"lane.optimizer.lr (or raise warmup) or check the data.")
        self.last["loss"] = loss.detach()
        # the progress bar's; the loggers get every TRAIN_STEP number (trainer.StepTelemetry)
        self.log("train/loss", loss, prog_bar=True, logger=False)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        """Summed NLL and token count of one held-out batch (trainer.HeldOutEval averages)."""
        labels = batch.pop("labels")
        logits = self.model(**batch).logits[:, :-1].float()                  # (B, S-1, V)
        target = labels[:, 1:]                                              # (B, S-1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                               ignore_index=IGNORE, reduction="sum")
        sums = self.val_sums.setdefault(dataloader_idx, [0.0, 0])
        sums[0] += loss.item()
        sums[1] += int((target != IGNORE).sum())

    def on_validation_model_eval(self):
        from mens.model.load import eval_mode
        eval_mode(self)   # keeps bitsandbytes 4-bit layers in train mode (see eval_mode)

    def dpo_loss(self, batch) -> torch.Tensor:
        idx = batch.pop("pair_index")
        n = len(idx)
        loss_type = self.spec.lane.dpo.loss
        logps = sequence_logps(self.model, batch)                                 # (2n,)
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
