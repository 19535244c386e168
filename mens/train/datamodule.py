"""The training data as Lightning sees it: each epoch's rows (packed SFT), examples (unpacked)
or pairs (dpo), batched per process, with the loader's position saved in every checkpoint so
a resumed run skips the batches it has already trained on.

Data order is a function of (seed, epoch) only, so a resumed run sees the batches it would
have seen; several processes take their rows from that order (mens.train.strategy).
"""
from __future__ import annotations

import math

import lightning as L
import torch

from mens.data.pack import IGNORE, Example, collate, pack, pad_batch, packing_stats


class Position:
    """Batches finished in the current epoch: saved in checkpoints, read back to skip them."""
    def __init__(self):
        self.epoch, self.done, self.skip = 0, 0, 0


class SkipBatches(torch.utils.data.Sampler):
    """Fixed batches of indices; after a resume the first `position.skip` are not yielded.

    Each index comes out as (index, accumulation group, the group's supervised tokens on this
    rank): an optimizer step's loss is its summed NLL over the whole group (every micro-batch,
    every rank) divided by the group's supervised tokens (MensModule.training_step), so a
    micro-batch must know its group's total before its backward. Groups are the epoch's batches
    taken `accum` at a time, as Lightning accumulates them (the last may be short); a resume
    skips whole groups (checkpoints fall on optimizer steps), so the grouping holds across it."""
    def __init__(self, n: int, micro: int, position: Position, accum: int = 1, tokens=None):
        self.batches = [list(range(i, min(i + micro, n))) for i in range(0, n, micro)]
        self.position, self.accum = position, max(int(accum), 1)
        per_batch = [sum(tokens[i] for i in b) if tokens else 0 for b in self.batches]
        self.group_tokens = [sum(per_batch[g:g + self.accum])
                             for g in range(0, len(per_batch), self.accum)]

    def __iter__(self):   # a generator: the skip is read at the first next(), after loading
        start, self.position.skip = self.position.skip, 0
        for k in range(start, len(self.batches)):
            g = k // self.accum
            yield [(i, g, self.group_tokens[g]) for i in self.batches[k]]

    def __len__(self):
        return len(self.batches)


class _Keyed(torch.utils.data.Dataset):
    """items looked up by SkipBatches' (index, group, group tokens) keys."""
    def __init__(self, items):
        self.items = items

    def __getitem__(self, key):
        i, group, tokens = key
        return self.items[i], group, tokens, i

    def __len__(self):
        return len(self.items)


def supervised_tokens(item, seq_len: int) -> int:
    """Tokens the causal-LM loss scores in one row or example: labels[1:] that are not IGNORE,
    within seq_len (the loss shifts labels by one; a record's first label is IGNORE anyway).
    A rank's repeated row (strategy.Repeat) scores none."""
    from mens.train.strategy import Repeat

    if isinstance(item, Repeat):
        return 0
    labels = item.labels[1:seq_len]
    return sum(1 for t in labels if t != IGNORE)


class ResumableLoader(torch.utils.data.DataLoader):
    """Lightning saves `state_dict()` of loaders that have one (mid-epoch resume). collate_fn
    takes [(item, group, group tokens)] (SkipBatches)."""
    def __init__(self, items, micro: int, collate_fn, position: Position, accum: int = 1,
                 tokens=None):
        super().__init__(_Keyed(items), collate_fn=collate_fn,
                         batch_sampler=SkipBatches(len(items), micro, position, accum, tokens))
        self.position = position

    def state_dict(self) -> dict:
        return {"epoch": self.position.epoch, "done": self.position.done}

    def load_state_dict(self, state: dict) -> None:
        if state.get("epoch") == self.position.epoch:
            self.position.skip = self.position.done = state["done"]


def epoch_items(examples: dict, records: list, spec, epoch: int, pairs: bool,
                prompts: bool = False, packing: bool | None = None):
    """The rows (packed SFT), examples (unpacked SFT) or pair examples of one epoch. packing:
    None — train.packing; False — every record padded alone (a family that cannot pack)."""
    from mens.data.curriculum import epoch_records, shuffle_within_phase

    cur = spec.curriculum
    recs = shuffle_within_phase(epoch_records(records, list(cur.caps), list(cur.phases), epoch),
                                spec.train.seed, epoch)
    items = [examples[r["id"]] for r in recs]
    packing = spec.train.packing if packing is None else packing
    if pairs or prompts or not packing:   # prompts: one record each (grpo samples)
        return items
    # FFD emits a phase's rows longest-first: shuffle rows within each phase by (seed, epoch)
    rows = pack(items, spec.train.seq_len, window=cur.pack_window)
    return shuffle_within_phase(rows, spec.train.seed, epoch, key=lambda row: row.phase)


def packing_refusal(model) -> str:
    """Why this model's packed rows cannot train ("" when they can): its family row's
    no_packing (Qwen3.5: the linear-attention layers' state crosses record boundaries;
    tests/train/test_families_train.py measures the leak)."""
    from mens.source.families import FAMILIES, WRAPPERS

    mt = model.config.get_text_config().model_type
    fam = FAMILIES.get(WRAPPERS.get(mt, mt))
    return fam.no_packing if fam is not None else ""


class MensData(L.LightningDataModule):
    def __init__(self, spec, examples: dict, records: list, pairs: bool, mask_dtype,
                 eval_sets: dict | None = None, block_mask: bool = True, prompts: bool = False,
                 packing: bool | None = None, token_mask: bool = False, windows=None):
        """block_mask: packed rows carry the 4-D block mask (False: the model attends per
        record itself, mens.train.attention, and no b·s² mask is built). packing: None —
        train.packing; False — records padded alone (mens.train.run: a family whose packed rows
        leak across records). token_mask: packed batches carry `token_mask` (B, S), 1 on the
        records' tokens (a mixture of experts' load-balancing loss skips the padding).
        windows: the model's sliding window for the block mask (mens.train.attention.
        window_masks), None when it has none shorter than a row."""
        super().__init__()
        self.block_mask = block_mask
        self.spec, self.examples, self.records, self.pairs = spec, examples, records, pairs
        self.prompts = prompts               # grpo: batches name their records (record_ids)
        self.eval_sets = eval_sets or {}     # {role: (spoke, [Example])}: the validation loop's
        self.mask_dtype, self.position = mask_dtype, Position()
        from mens.train.strategy import world_size
        self.world = world_size(spec)        # processes; micro_batch is per process
        self.token_mask, self.windows = token_mask, windows
        self.epochs = [epoch_items(examples, records, spec, e, pairs, prompts, packing)
                       for e in range(spec.curriculum.epochs)]
        packed = (spec.train.packing if packing is None else packing) and not (pairs or prompts)
        # each epoch's packed rows in numbers (the run's CURRICULUM rows); None when unpacked
        self.row_stats = [packing_stats(rows) for rows in self.epochs] if packed else None

    def collate(self, keyed):
        """[(item, group, group tokens)] (SkipBatches) → a batch with `step_group` and
        `step_tokens` (this rank's supervised tokens in the batch's accumulation group)."""
        batch = self.collate_items([k[0] for k in keyed])
        batch["step_group"] = torch.tensor(keyed[0][1])
        batch["step_tokens"] = torch.tensor(keyed[0][2])
        if self.prompts:
            self.window(batch, keyed)
        return batch

    def window(self, batch, keyed) -> None:
        """grpo samples once per optimizer step for every micro-batch of its accumulation group,
        as TRL's GRPOTrainer generates one generation batch per step (_prepare_inputs): each
        micro-batch carries its group's prompts on this rank, `window` (per micro-batch, its
        (record id, is a rank's repeat) pairs), and its own place in it, `window_pos`."""
        from mens.train.strategy import Repeat

        sampler, items = self.loader_state
        g, first = keyed[0][1], keyed[0][3]
        group = sampler.batches[g * sampler.accum:(g + 1) * sampler.accum]
        batch["window"] = [[(items[i].item.record_id, True) if isinstance(items[i], Repeat)
                            else (items[i].record_id, False) for i in b] for b in group]
        batch["window_pos"] = next(k for k, b in enumerate(group) if b and b[0] == first)

    def collate_items(self, items):
        from mens.train.strategy import Repeat

        repeat = [isinstance(x, Repeat) for x in items]   # a rank's padding: no label (strategy.py)
        items = [x.item if r else x for x, r in zip(items, repeat)]
        batch = self._collate(items)
        if any(repeat):
            keep = torch.tensor([not r for r in repeat])
            rows = torch.cat([keep, keep]) if self.pairs else keep   # pairs: chosen, rejected
            batch["labels"][~rows] = IGNORE
            real = batch["real_tokens"]
            if self.pairs:
                batch["keep"] = keep
                real = sum(min(len(e), self.spec.train.seq_len)
                           for p, k in zip(items, keep) if k for e in p[:2])
            elif isinstance(items[0], Example):
                real = int(batch["attention_mask"][rows].sum())
            else:
                real = sum(r.real_tokens for r, k in zip(items, keep) if k)
            batch["real_tokens"] = torch.tensor(real)   # a repeat is no trained token
        return batch

    def _collate(self, items):
        if self.pairs:
            from mens.objective.dpo import pair_batch
            batch = pair_batch(items, self.spec.train.seq_len)
            real = sum(min(len(e), self.spec.train.seq_len) for p in items for e in p[:2])
        elif isinstance(items[0], Example):
            longest = max(len(x) for x in items)
            batch = pad_batch(items, min(longest, self.spec.train.seq_len))
            real = int(batch["attention_mask"].sum())
            if self.prompts:   # a rank's repeats: MensData.window marks them
                batch["record_ids"] = [x.record_id for x in items]
        else:
            batch = collate(items, self.mask_dtype, mask=self.block_mask)
            if self.block_mask and self.windows:
                from mens.train.attention import windowed
                batch["attention_mask"] = windowed(batch["attention_mask"], self.windows)
            real = sum(r.real_tokens for r in items)
            if self.token_mask:
                batch["token_mask"] = torch.tensor([[s != 0 for s in r.segment_ids]
                                                    for r in items])                  # (B, S)
        batch["real_tokens"] = torch.tensor(real)
        return batch

    def train_dataloader(self):
        epoch = self.trainer.current_epoch if self.trainer else 0
        if self.position.epoch != epoch:
            self.position.epoch, self.position.done = epoch, 0
        items = self.epochs[min(epoch, len(self.epochs) - 1)]
        if self.world > 1:   # this rank's rows, in order (strategy.rank_items: no shuffle)
            from mens.train.strategy import rank_items
            items = rank_items(items, self.world, self.trainer.global_rank)
        t = self.spec.train
        # pairs (dpo) average over pairs, not tokens: no token totals needed
        tokens = None if self.pairs else [supervised_tokens(x, t.seq_len) for x in items]
        loader = ResumableLoader(items, t.micro_batch, self.collate, self.position,
                                 accum=t.grad_accum, tokens=tokens)
        self.loader_state = (loader.batch_sampler, items)   # grpo's windows (MensData.window)
        return loader

    def val_dataloader(self):
        """One loader per held-out set (eval, collateral), batched as evaluate.eval_loss
        batches them (longest first, 4 a batch), so its numbers are the same."""
        from mens.data.pack_order import EVAL_MICRO, eval_chunks

        return [torch.utils.data.DataLoader(eval_chunks(exs, EVAL_MICRO), batch_size=None,
                                            collate_fn=lambda c: pad_batch(c, max(map(len, c))))
                for _, exs in self.eval_sets.values()]

    def steps_per_epoch(self) -> list[int]:
        t, w = self.spec.train, self.world   # each rank: ceil(rows / world) rows (padded)
        return [math.ceil(math.ceil(math.ceil(len(items) / w) / t.micro_batch) / t.grad_accum)
                for items in self.epochs]

    def reached(self) -> list:
        """The items the planned steps train on, every rank's (each epoch's leading items: a
        rank takes every world-th item in order, strategy.rank_items), for a reference pass
        that need not score the rest."""
        t, left, out = self.spec.train, self.planned_steps(), []
        for items, steps in zip(self.epochs, self.steps_per_epoch()):
            take = min(left, steps)
            out += items[:take * t.grad_accum * t.micro_batch * self.world]
            left -= take
            if left <= 0:
                break
        return out

    def planned_steps(self) -> int:
        total = sum(self.steps_per_epoch())
        return min(total, self.spec.train.max_steps) if self.spec.train.max_steps > 0 else total


