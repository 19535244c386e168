"""Mixture-of-experts weights in their three layouts: the checkpoint's, transformers 5's fused
parameters, and llama.cpp's stacked `ffn_{gate,up,down}_exps`.

transformers 5 holds each layer's experts as two 3-D parameters, `mlp.experts.gate_up_proj` and
`mlp.experts.down_proj`, and converts on load and back on save: Qwen3-MoE, Qwen3.5-MoE and
Mixtral checkpoints keep one 2-D tensor per expert (`mlp.experts.{e}.gate_proj.weight`;
Mixtral's `block_sparse_moe.experts.{e}.w1/w3/w2.weight`), gpt-oss keeps the fused tensors
(transposed: [E, in, out], gate and up interleaved column by column, with biases). mens's merge
and GGUF writer stream checkpoint tensors, so they map each one to its fused parameter here:
a LoRA on the experts (PEFT `target_parameters`) is a delta on the fused parameter, and
llama.cpp wants every expert of a layer stacked into one [E, out, in] tensor, as
convert_hf_to_gguf.py's Qwen2MoeModel / LlamaModel / GptOssModel write them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# family -> (per-expert checkpoint name of layer L, expert e, part; names of gate/up/down there)
PER_EXPERT = {
    "qwen3_moe": ("model.layers.{L}.mlp.experts.{e}.{p}.weight",
                  {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}),
    "qwen3_5_moe_text": ("model.layers.{L}.mlp.experts.{e}.{p}.weight",
                         {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}),
    "mixtral": ("model.layers.{L}.block_sparse_moe.experts.{e}.{p}.weight",
                {"gate": "w1", "up": "w3", "down": "w2"}),
}
# checkpoint -> transformers 5 module paths besides the experts (Mixtral's router)
RENAMES = {"mixtral": ((".block_sparse_moe.gate.", ".mlp.gate."),)}
TRANSPOSED = {"gpt_oss"}       # fused [E, in, out] on disk and in transformers (is_transposed)
_RX = {f: re.compile(re.escape(pat).replace(r"\{L\}", r"(?P<L>\d+)")
                     .replace(r"\{e\}", r"(?P<e>\d+)").replace(r"\{p\}", r"(?P<p>\w+)") + "$")
       for f, (pat, _) in PER_EXPERT.items()}


@dataclass(frozen=True)
class View:
    """Where a checkpoint tensor sits in its layer's fused parameter."""
    fused: str               # "model.layers.0.mlp.experts.gate_up_proj"
    layer: int
    expert: int | None       # None: the checkpoint tensor is the fused one (gpt-oss)
    part: str                # gate | up | down | gate_up


def view(model_type: str, name: str) -> View | None:
    """The fused parameter a checkpoint tensor belongs to, or None for a non-expert tensor."""
    rx = _RX.get(model_type)
    if rx is not None:
        m = rx.match(name)
        if m is None:
            return None
        part = {v: k for k, v in PER_EXPERT[model_type][1].items()}.get(m["p"])
        if part is None:
            return None
        fused = f"model.layers.{m['L']}.mlp.experts." + \
            ("down_proj" if part == "down" else "gate_up_proj")
        return View(fused, int(m["L"]), int(m["e"]), part)
    m = re.match(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$", name)
    if model_type in TRANSPOSED and m:
        return View(name, int(m[1]), None, m[2].removesuffix("_proj"))
    return None


def not_linear(model_type: str, name: str) -> bool:
    """A 2-D checkpoint tensor that is no nn.Linear in transformers 5 — an expert (fused in
    the model) or a router (a TopKRouter module) — so bitsandbytes never quantised it."""
    return view(model_type, name) is not None or \
        name.endswith((".mlp.gate.weight", ".block_sparse_moe.gate.weight", ".mlp.router.weight"))


# a multimodal checkpoint (Qwen3.5, Gemma 3) holds its text model under these prefixes; mens
# trains the text model alone (its *ForCausalLM), whose names — and its adapter's — lack them
WRAPPED = (("model.language_model.", "model."), ("language_model.model.", "model."),
           ("language_model.lm_head.", "lm_head."))


def model_name(model_type: str, name: str) -> str:
    """A checkpoint tensor's name in the transformers 5 model (what a PEFT adapter names)."""
    for a, b in WRAPPED:
        if name.startswith(a):
            name = b + name[len(a):]
            break
    for a, b in RENAMES.get(model_type, ()):
        name = name.replace(a, b)
    return name


def fused_shapes(model_type: str, cfg: dict) -> dict[str, tuple[int, int]]:
    """(in, out) of each fused parameter's per-expert matrix, as PEFT's ParamWrapper reads them
    (gate_up: hidden -> 2 · expert width; down: expert width -> hidden), for every family."""
    h = cfg["hidden_size"]
    i = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    return {"gate_up_proj": (h, 2 * i), "down_proj": (i, h)}


def expert_slice(model_type: str, full, v: View, width: int):
    """The part of a fused tensor ([E, 2I, H] / [E, H, I]; gpt-oss: as stored) that the
    checkpoint tensor `v` holds: gate = the first I rows of gate_up, up = the last I."""
    if v.expert is None:
        return full
    x = full[v.expert]
    if v.part == "gate":
        return x[:width]
    if v.part == "up":
        return x[width:]
    return x


def fuse(model_type: str, cfg: dict, state: dict) -> dict:
    """A checkpoint state dict -> transformers 5's parameter names (per-expert tensors stacked
    into the fused parameters), for load_state_dict without transformers' own converter."""
    import torch

    out, parts = {}, {}
    for n, t in state.items():
        v = view(model_type, n)
        if v is None or v.expert is None:
            out[model_name(model_type, n)] = t
        else:
            parts.setdefault(v.fused, {}).setdefault(v.part, {})[v.expert] = t
    for fused, p in parts.items():
        def stack(k):
            return torch.stack([p[k][e] for e in sorted(p[k])])
        out[fused] = stack("down") if "down" in p else torch.cat([stack("gate"), stack("up")], 1)
    return out


def lora_delta(model_type: str, a, b, r: int, scale: float):
    """PEFT ParamWrapper.get_delta_weight for a 3-D parameter: A [r·E, in], B [out, r·E] ->
    [E, out, in] ([E, in, out] for a transposed family), times alpha / r."""
    import torch

    n_exp = a.shape[0] // r
    a3 = a.reshape(n_exp, r, a.shape[-1])                    # e r i
    b3 = b.reshape(b.shape[0], r, n_exp)                     # o r e
    spec = "o r e, e r i -> e i o" if model_type in TRANSPOSED else "o r e, e r i -> e o i"
    return torch.einsum(spec, b3, a3) * scale


def gguf_sources(model_type: str, names: list[str], shapes: dict) -> list[tuple]:
    """The checkpoint's tensors as llama.cpp's converter regroups them: [(name gguf-py's map
    knows, source names, shape, make(source tensors) -> tensor)], other tensors one to one.

    Per-expert tensors of a layer stack into [E, out, in] (Qwen2MoeModel / LlamaModel); gpt-oss's
    fused [E, in, out] gate_up splits column-interleaved into gate (even) and up (odd) and is
    transposed, its down transposed, its gate_up bias split the same way (GptOssModel)."""
    import torch

    out, groups = [], {}
    for n in names:
        v = view(model_type, n)
        if v is not None and v.expert is not None:
            groups.setdefault((v.layer, v.part), []).append((v.expert, n))
        elif v is not None:                                   # gpt-oss fused [E, in, out]
            e, i, o = shapes[n]
            if v.part == "down":
                out.append((f"model.layers.{v.layer}.mlp.experts.down_proj.weight", (n,),
                            (e, o, i), lambda ts: ts[0].transpose(-1, -2)))
            else:
                for k, part in enumerate(("gate", "up")):
                    out.append((f"model.layers.{v.layer}.mlp.experts.{part}_proj.weight", (n,),
                                (e, o // 2, i),
                                lambda ts, k=k: ts[0].transpose(-1, -2)[:, k::2, :]))
        elif model_type in TRANSPOSED and n.endswith("mlp.experts.gate_up_proj_bias"):
            e, o = shapes[n]
            for k, part in enumerate(("gate", "up")):
                out.append((n.replace("gate_up_proj_bias", f"{part}_proj.bias"), (n,),
                            (e, o // 2), lambda ts, k=k: ts[0][..., k::2]))
        elif model_type in TRANSPOSED and n.endswith("mlp.experts.down_proj_bias"):
            out.append((n.replace("down_proj_bias", "down_proj.bias"), (n,), shapes[n],
                        lambda ts: ts[0]))
        elif model_type in TRANSPOSED and n.endswith("self_attn.sinks"):
            out.append((n + ".weight", (n,), shapes[n], lambda ts: ts[0]))
        else:
            out.append((n, (n,), shapes[n], None))
    for (layer, part), members in groups.items():
        srcs = tuple(n for _, n in sorted(members))
        pat, names_of = PER_EXPERT[model_type]
        stacked = (f"layers.{layer}.feed_forward.experts.{names_of[part]}.weight"
                   if model_type == "mixtral" else
                   f"model.layers.{layer}.mlp.experts.{names_of[part]}.weight")
        out.append((stacked, srcs, (len(srcs), *shapes[srcs[0]]),
                    lambda ts: torch.stack(list(ts))))
    return out
