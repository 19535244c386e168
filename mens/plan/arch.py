"""A model's architecture as the planner counts it: every parameter of the family's
*ForCausalLM (total, and the active ones a token uses in a mixture of experts), a LoRA's
trainable count as PEFT makes it (on nn.Linear targets and on fused 3-D expert weights), and a
generation cache (K/V of full-attention layers, a recurrent state for linear-attention ones).
Pure arithmetic on config.json numbers: no torch (mens.source.families holds the facts)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from mens.source.families import DEFAULT_FAMILY, family, rung_fields


@dataclass(frozen=True)
class Arch:
    hidden: int          # h
    intermediate: int    # i
    layers: int          # L
    heads: int           # a
    kv_heads: int        # kv
    head_dim: int        # d
    vocab: int           # V
    tied: bool
    family: str = DEFAULT_FAMILY   # config.json's model_type (mens.source.families)
    # mixture of experts (0: dense): E experts of width mi per layer, k routed per token, and
    # a shared expert of width si (Qwen3.5-MoE); every layer's MLP is then the experts
    experts: int = 0
    experts_per_tok: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    # Gated DeltaNet layers (Qwen3.5): how many of the L, key/value heads and their widths,
    # the causal conv's kernel; the other layers are full attention
    linear_layers: int = 0
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 0

    @classmethod
    def of(cls, rung) -> "Arch":
        """A rung's architecture: a schema dataclass, its frozen twin, a DictConfig or a dict
        (spec.yaml). A rung without `family` predates the field: Qwen3, the only family then;
        one without the MoE / linear-attention fields predates them: dense."""
        get = rung.get if isinstance(rung, Mapping) else lambda k, d=None: getattr(rung, k, d)
        return cls(get("hidden_size"), get("intermediate_size"), get("num_hidden_layers"),
                   get("num_attention_heads"), get("num_key_value_heads"), get("head_dim"),
                   get("vocab_size"), bool(get("tie_word_embeddings")),
                   get("family", None) or DEFAULT_FAMILY,
                   get("num_experts", 0) or 0, get("num_experts_per_tok", 0) or 0,
                   get("moe_intermediate_size", 0) or 0,
                   get("shared_expert_intermediate_size", 0) or 0,
                   get("linear_attention_layers", 0) or 0, get("linear_num_key_heads", 0) or 0,
                   get("linear_num_value_heads", 0) or 0, get("linear_key_head_dim", 0) or 0,
                   get("linear_value_head_dim", 0) or 0, get("linear_conv_kernel_dim", 0) or 0)

    def rung_fields(self) -> dict:
        """Its experts and linear-attention numbers under the rung fields' names (the inverse
        of `of` for them: what a random model of this Arch is built from)."""
        return {"num_experts": self.experts, "num_experts_per_tok": self.experts_per_tok,
                "moe_intermediate_size": self.moe_intermediate,
                "shared_expert_intermediate_size": self.shared_intermediate,
                "linear_attention_layers": self.linear_layers,
                "linear_num_key_heads": self.lin_k_heads,
                "linear_num_value_heads": self.lin_v_heads,
                "linear_key_head_dim": self.lin_k_dim, "linear_value_head_dim": self.lin_v_dim,
                "linear_conv_kernel_dim": self.conv_kernel}

    @property
    def attn_layers(self) -> int:
        """Layers with full (softmax) attention: a KV cache and (b, a, s, s) scores."""
        return self.layers - self.linear_layers

    @property
    def mlp_width(self) -> int:
        """The MLP width one token passes through: k routed experts (+ the shared one) in a
        mixture of experts, the dense width else (activations and FLOPs scale with it)."""
        if not self.experts:
            return self.intermediate
        return self.experts_per_tok * self.moe_intermediate + self.shared_intermediate

    def linear_layer_shapes(self) -> dict[str, tuple[int, int, int]]:
        """(in, out, how many layers have it) of every nn.Linear in the decoder, by its PEFT
        target name: attention in the full-attention layers (Phi-3's fused qkv_proj, Qwen3.5's
        gated q_proj of 2 × heads·d), Gated DeltaNet's projections in the linear ones, the MLP
        (Phi-3's fused gate_up_proj) or, in a mixture of experts, the router and a shared
        expert's MLP. The fused 3-D expert weights are not nn.Linear: expert_shapes()."""
        fam = family(self.family)
        h, i, L, A = self.hidden, self.intermediate, self.layers, self.attn_layers
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        out = ({"qkv_proj": (h, q + 2 * kv, A)} if "qkv_proj" in fam.linear else
               {"q_proj": (h, q * (2 if fam.gated_q else 1), A), "k_proj": (h, kv, A),
                "v_proj": (h, kv, A)})
        out["o_proj"] = (q, h, A)
        if self.linear_layers:
            key, value = self.lin_k_heads * self.lin_k_dim, self.lin_v_heads * self.lin_v_dim
            n, vh = self.linear_layers, self.lin_v_heads
            out.update(in_proj_qkv=(h, 2 * key + value, n), in_proj_z=(h, value, n),
                       in_proj_b=(h, vh, n), in_proj_a=(h, vh, n), out_proj=(value, h, n))
        if self.experts:
            out[fam.router] = (h, self.experts, L)
            si = self.shared_intermediate
            if si:
                out.update(gate_proj=(h, si, L), up_proj=(h, si, L), down_proj=(si, h, L),
                           shared_expert_gate=(h, 1, L))
        elif "gate_up_proj" in fam.linear:
            out.update(gate_up_proj=(h, 2 * i, L), down_proj=(i, h, L))
        else:
            out.update(gate_proj=(h, i, L), up_proj=(h, i, L), down_proj=(i, h, L))
        return out

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer of the decoder, by PEFT target name."""
        return {k: (a, b) for k, (a, b, _) in self.linear_layer_shapes().items()}

    def expert_shapes(self) -> dict[str, tuple[int, int, int]]:
        """(experts, in, out) of each fused expert weight of one layer, by its parameter
        suffix (families.Family.experts): gate and up fused (h → 2·mi), then down (mi → h).
        transformers stores them [E, 2mi, h] / [E, h, mi] (gpt-oss transposed); PEFT's
        target_parameters adapter has the same count either way."""
        if not self.experts:
            return {}
        E, h, mi = self.experts, self.hidden, self.moe_intermediate
        return {"mlp.experts.gate_up_proj": (E, h, 2 * mi), "mlp.experts.down_proj": (E, mi, h)}

    def params(self) -> dict[str, int]:
        """Exact parameter counts of the family's *ForCausalLM: linear weights, biases (q/k/v:
        Qwen2; q/k/v/o, router and experts: gpt-oss), q/k RMSNorm over head_dim (Qwen3, Gemma
        3) or over the whole q and k projections (OLMo 2), 2 or 4 hidden-sized norms per layer
        plus the final norm, an lm_head unless tied; the fused experts; gpt-oss's attention
        sinks; Gated DeltaNet's conv, decay and gate norm (Qwen3.5).

        `active`: the weights one token's forward uses — all but the experts it is not routed
        to (E − k of each layer's E), the embedding and lm_head included. That is how Qwen and
        Mistral state it (Qwen3-30B-A3B "3.3B activated", Mixtral-8x7B "12.9B active");
        OpenAI's gpt-oss-20b "3.6B active" leaves out the embedding (active − embed here:
        tests/plan/test_moe_plan.py checks all three)."""
        fam = family(self.family)   # ConfigError for one mens does not support
        A, Ln = self.attn_layers, self.linear_layers
        linear = sum(a * b * n for a, b, n in self.linear_layer_shapes().values())
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        biases = A * ((q + 2 * kv if fam.qkv_bias else 0) + (self.hidden if fam.o_bias else 0))
        qk_norm = {"": 0, "head": 2 * self.head_dim, "proj": q + kv}[fam.qk_norm]
        norms = self.layers * fam.norms_per_layer * self.hidden + A * qk_norm + self.hidden
        other = A * self.heads if fam.sinks else 0
        if Ln:   # conv1d over q,k,v (no bias), dt_bias and A_log per value head, gated norm
            conv = 2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim
            other += Ln * (conv * self.conv_kernel + 2 * self.lin_v_heads)
            norms += Ln * self.lin_v_dim
        per_expert = sum(a * b for _, a, b in self.expert_shapes().values())
        if self.experts and fam.moe_biases:   # router bias; each expert's gate_up and down bias
            biases += self.layers * self.experts
            per_expert_bias = 2 * self.moe_intermediate + self.hidden
        else:
            per_expert_bias = 0
        experts = self.layers * self.experts * (per_expert + per_expert_bias)
        embed = self.vocab * self.hidden
        lm_head = 0 if self.tied else embed
        total = embed + lm_head + linear + biases + norms + other + experts
        idle = self.layers * (self.experts - self.experts_per_tok) * (per_expert + per_expert_bias) \
            if self.experts else 0
        return {"embed": embed, "lm_head": lm_head, "linear": linear, "biases": biases,
                "norms": norms, "other": other, "experts": experts, "total": total,
                "active": total - idle}

    def lora_params(self, r: int, targets, experts: bool = False) -> int:
        """PEFT's trainable count of a LoRA of rank r on `targets` (nn.Linear names: r·(in +
        out) per module) and, with `experts`, on every fused expert weight through
        target_parameters (a [E, in, out] weight gets lora_A [E·r, in] and lora_B
        [out, E·r]: E·r·(in + out))."""
        shapes = self.linear_layer_shapes()
        n = sum(r * (shapes[t][0] + shapes[t][1]) * shapes[t][2] for t in targets if t in shapes)
        if experts:
            n += self.layers * sum(E * r * (a + b) for E, a, b in self.expert_shapes().values())
        return n

    def state_bytes(self, rows: int, tokens: int, wb: int) -> int:
        """A generation cache's bytes: K and V of every full-attention layer for `tokens`
        tokens, and for each Gated DeltaNet layer its recurrent state (value heads × key dim ×
        value dim, fp32 in transformers' torch path, whatever the length) and its conv state
        (conv channels × kernel, the compute dtype)."""
        kv = rows * tokens * self.attn_layers * 2 * self.kv_heads * self.head_dim * wb
        if not self.linear_layers:
            return kv
        conv = 2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim
        state = self.lin_v_heads * self.lin_k_dim * self.lin_v_dim * 4 + \
            conv * self.conv_kernel * wb
        return kv + rows * self.linear_layers * state


def teacher_arch(config: Mapping) -> Arch:
    """A teacher's architecture from its config.json (an HF model directory) or its rung."""
    if config.get("model_type") is not None:   # a config.json: read as the family reads it
        return Arch.of(rung_fields(config, "the teacher's config.json"))   # experts and all
    get = config.get
    if get("hidden_size") is None:
        raise ValueError("no architecture numbers")
    if get("family") is not None:   # a rung: its own fields (a MoE rung's experts among them)
        return Arch.of(config)
    return Arch(get("hidden_size"), get("intermediate_size"), get("num_hidden_layers"),
                get("num_attention_heads"), get("num_key_value_heads"),
                get("head_dim") or get("hidden_size") // get("num_attention_heads"),
                get("vocab_size"), bool(get("tie_word_embeddings")),
                get("model_type") or get("family") or DEFAULT_FAMILY)
