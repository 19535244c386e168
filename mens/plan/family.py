"""What a model family changes in a run before it is planned: the LoRA targets it has, whether
LoRA may reach experts, whether rows may be packed, and what the plan says of a mixture of
experts (no torch: the row of mens.source.families is data)."""
from __future__ import annotations

from mens.errors import ConfigError
from mens.source.families import family, lora_targets, router_adapted

# Said in every MoE plan: the experts are weights like any other, replicated (or FSDP-sharded)
EXPERT_PARALLEL = ("expert parallelism is not planned (experts sit on every device): each "
                   "device holds all {e} experts of each layer, {k} routed per token")
# gpt-oss is published with its experts in MXFP4; without the triton kernels transformers
# dequantises them on load, and LoRA trains over that bf16 copy
MXFP4 = ("gpt-oss: the published checkpoint stores its experts in MXFP4; transformers "
         "dequantises it on load (without the triton MXFP4 kernels) and this plan counts the "
         "weights in the lane's precision ({precision})")
# Said in every MoE LoRA plan: whether the router trains, what it costs, and the key that
# changes it (PEFT's, TRL's and Unsloth's recipes leave it frozen: their counts are mens's)
ROUTER_FROZEN = ("lora: the router (`{name}`) is frozen, as PEFT's, TRL's and Unsloth's MoE "
                 "recipes leave it; lane.lora.router=true adapts it too (+{n:,} trainable "
                 "params at r {r})")
ROUTER_ADAPTED = ("lora: the router (`{name}`) is adapted ({n:,} of the trainable params at r "
                  "{r}); lane.lora.router=false (and no `{name}` in lane.lora.targets) freezes "
                  "it, as PEFT's, TRL's and Unsloth's MoE recipes do")


def resolve_family(cfg, notes: list[str]) -> None:
    """Write the family's resolution into the config (the spec then says what trains):
    lane.lora.targets → the family's own (families.lora_targets, the router with
    lane.lora.router), lane.lora.router → whether they hold it, lane.lora.experts checked,
    train.packing off with the reason where the family cannot pack (the trainer reads it)."""
    rung, lane, t = cfg.rung, cfg.lane, cfg.train
    fam = family(rung.family)
    if lane.get("lora"):
        lane.lora.targets = list(lora_targets(fam, lane.lora.targets, lane.lora.get("router")))
        if fam.experts:
            from mens.plan.arch import Arch

            adapted = router_adapted(fam, lane.lora.targets)
            lane.lora.router = adapted
            n = Arch.of(rung).lora_params(int(lane.lora.r), (fam.router,))
            notes.append((ROUTER_ADAPTED if adapted else ROUTER_FROZEN).format(
                name=fam.router, n=n, r=lane.lora.r))
        if lane.lora.get("experts") and not fam.experts:
            raise ConfigError(
                f"lane.lora.experts=true: {rung.name} is a {fam.model_type} model, which has no "
                f"experts (a dense family); drop lane.lora.experts or pick a mixture-of-experts "
                f"model (qwen3_moe, mixtral, gpt_oss, qwen3_5_moe).", key="lane.lora.experts")
        # the router and the fused experts are bare weights PEFT wraps as target parameters,
        # where it applies no dropout (the trainer raises: mens.model.load.lora_plan)
        bare = [k for k, on in (("lane.lora.router", lane.lora.get("router")),
                                ("lane.lora.experts", lane.lora.get("experts"))) if on]
        if lane.lora.dropout and bare:
            raise ConfigError(
                f"lane.lora.dropout={lane.lora.dropout} with {' and '.join(bare)}=true: PEFT "
                f"applies no dropout to LoRA on {fam.model_type}'s router and fused experts "
                f"(bare weights it wraps as target parameters). Set lane.lora.dropout=0, or "
                f"{' and '.join(f'{k}=false' for k in bare)}.", key="lane.lora.dropout")
    if fam.no_packing and t.packing:
        notes.append(f"FALLBACK packing: {fam.no_packing}; train.packing is off and each record "
                     f"is padded alone")
        t.packing = False
    if rung.get("num_experts"):
        shared = rung.shared_expert_intermediate_size
        notes.append(EXPERT_PARALLEL.format(e=rung.num_experts, k=rung.num_experts_per_tok) +
                     (f" (and a shared expert of width {shared} every token uses)"
                      if shared else ""))
    if rung.get("linear_attention_layers"):
        notes.append(f"{rung.linear_attention_layers} of {rung.num_hidden_layers} layers are "
                     f"linear attention (Gated DeltaNet): the plan counts their recurrent state "
                     f"({rung.linear_num_value_heads} value heads × {rung.linear_key_head_dim} × "
                     f"{rung.linear_value_head_dim}, fp32, per sequence), not a KV cache, and "
                     f"no attention scores in them; no memory cell has measured such layers, "
                     f"so the plan takes the uncalibrated margin")
    if fam.model_type == "gpt_oss" and rung.init == "pretrained":
        notes.append(MXFP4.format(precision=lane.precision))
