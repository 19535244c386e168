"""A mixture of experts' router auxiliary load-balancing loss, as transformers computes it, for
mens's own loss paths.

transformers adds `router_aux_loss_coef · aux_loss` to a MoE model's `loss` only when the
model's forward returns the loss (config.output_router_logits); mens usually computes the loss
itself — the chunked head runs the decoder alone, the token-weighted path rescales the
causal-LM loss — so that sum would be missing there, and on the plain path transformers' own
version would meet the packed rows' 4-D block mask, which its load_balancing_loss_func cannot
read (it expects a (B, S) padding mask). So here:
  * the model's own switch is turned off (config.output_router_logits = False while training:
    transformers never adds the aux loss itself, so it cannot be counted twice);
  * a forward hook on each router module (the class transformers records `router_logits`
    from) keeps its logits during the training step's grad-enabled forwards (a no-grad pass —
    a reference, a sampling — and a checkpointed layer's recompute in backward are not kept);
  * `RouterAux.loss(mask)` is the family's own load_balancing_loss_func (its modelling
    module's, the Switch Transformer loss: E · Σₑ fₑ · Pₑ over every MoE layer) over the real
    tokens of the micro-batch (packed rows: the records, not the padding), averaged over the
    step's forwards;
  * MensModule logs it unscaled in every TRAIN_STEP row (`router_aux_loss`) and adds
    coef · aux to the micro-batch's loss where the family trains with it (`adds`, below).
    Lightning divides each micro-batch's loss by the accumulation and DDP averages ranks, so
    an optimizer step's aux term is coef × the mean of its micro-batches' aux losses — what
    transformers' Trainer gives a model whose forward adds it.

Which families train with it: Mixtral (coef 0.02 in Mixtral-8x7B's config.json), Qwen3-MoE
and Qwen3.5-MoE (0.001) were pre-trained with this load-balancing loss, so a fine-tune keeps
it, at the config's coefficient — the more so where lane.lora.router=true adapts the router,
which could otherwise drift to a few experts. Their published config.json files say
output_router_logits: false only because inference needs no router logits. gpt-oss's training
is not published with one: logged, not added. A config.json that says output_router_logits:
true asks for it in any family.
"""
from __future__ import annotations

import importlib

# model_type → why its fine-tune adds the aux loss (see the module docstring)
TRAINS_WITH = {
    "mixtral": "Mixtral was pre-trained with the router load-balancing loss",
    "qwen3_moe": "Qwen3-MoE was pre-trained with the router load-balancing loss",
    "qwen3_5_moe_text": "Qwen3.5-MoE was pre-trained with the router load-balancing loss",
}


class RouterAux:
    """The router logits of one training step's forwards, and their load-balancing loss."""

    def __init__(self, lm, router_cls, index: int):
        import torch

        self.lm = lm                                   # the *ForCausalLM (under PEFT's wrapper)
        self.coef = float(getattr(lm.config, "router_aux_loss_coef", 0.0) or 0.0)
        self.experts, self.top_k = int(lm.num_experts), int(lm.num_experts_per_tok)
        self.balance = importlib.import_module(type(lm).__module__).load_balancing_loss_func
        mt = lm.config.model_type
        asked = bool(getattr(lm.config, "output_router_logits", False))
        self.adds = self.coef > 0 and (asked or mt in TRAINS_WITH)
        why = "its config.json sets output_router_logits: true" if asked else TRAINS_WITH.get(mt)
        self.note = (f"router: {mt}'s auxiliary load-balancing loss is added to the loss "
                     f"(× router_aux_loss_coef {self.coef:g}: {why}) and logged unscaled as "
                     f"router_aux_loss" if self.adds else
                     f"router: {mt}'s auxiliary load-balancing loss is logged (router_aux_loss), "
                     f"not added to the loss: " + ("its router_aux_loss_coef is 0" if
                     self.coef <= 0 else f"{mt}'s training with it is not published"))
        self.was = asked
        lm.config.output_router_logits = False          # mens adds it, once (module docstring)
        self.routers = [m for m in lm.modules() if isinstance(m, router_cls)]
        self.on, self.kept = False, []

        def keep(module, args, out):
            if self.on and torch.is_grad_enabled():
                self.kept.append(out[index] if isinstance(out, tuple) else out)
        self.handles = [m.register_forward_hook(keep) for m in self.routers]

    @classmethod
    def of(cls, model) -> "RouterAux | None":
        """The recorder of a MoE model (a PreTrainedModel or PEFT's wrapper of one); None for a
        dense model or one whose modelling code records no router logits."""
        lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        spec = (getattr(lm, "_can_record_outputs", None) or {}).get("router_logits")
        if spec is None or not hasattr(lm, "num_experts_per_tok"):
            return None
        mod = importlib.import_module(type(lm).__module__)
        if not hasattr(mod, "load_balancing_loss_func"):
            return None
        return cls(lm, spec.target_class, getattr(spec, "index", 0) or 0)

    def start(self) -> None:
        """Keep the router logits of the grad-enabled forwards from now on (a new micro-batch)."""
        self.kept, self.on = [], True

    def loss(self, mask=None):
        """Stop keeping; the load-balancing loss of the kept forwards (their mean), None when no
        grad-enabled forward ran. mask: (B, S) 1 = a real token, for the forward whose tokens it
        covers (a forward of another size counts all of its tokens, as transformers does
        without a mask)."""
        self.on = False
        n = len(self.routers)
        if not self.kept or not n:
            return None
        losses = []
        for i in range(0, len(self.kept) - n + 1, n):   # one forward: one logits per router
            logits = tuple(self.kept[i:i + n])
            m = mask if mask is not None and mask.numel() == logits[0].shape[0] else None
            losses.append(self.balance(logits, self.experts, self.top_k, m))
        self.kept = []
        return sum(losses) / len(losses)

    def close(self) -> None:
        """Remove the hooks and give the config back its own output_router_logits."""
        for h in self.handles:
            h.remove()
        self.handles = []
        self.lm.config.output_router_logits = self.was
