"""Merge a PEFT LoRA adapter into its base, one tensor at a time.

Weights are read from safetensors files (memory-mapped, reopened per tensor so no mapping keeps
the whole base resident), merged as W' = W + (alpha / r) · B @ A in fp32 and cast to the output
dtype. The merged Hugging Face directory is written in shards of at most SHARD_BYTES with
`safetensors.torch.save_file`, so peak memory is about one shard plus one tensor, never the model
plus every dense delta. QLoRA adapters were trained against nf4-rounded weights: those merge into
the base quantized and dequantized with the run's own bitsandbytes settings (nn.Linear weights
only: MoE experts and routers are parameters bitsandbytes leaves alone). A LoRA on the fused
experts (PEFT target_parameters) is a delta on transformers 5's [E, …] parameter, sliced onto the
checkpoint's per-expert tensors (mens/export/experts.py); the merged dir keeps the checkpoint's
layout.

Hand-written here: the one-line merge (PEFT's `merge_and_unload` needs the whole model loaded;
tests check this equals it) and the shard index (a JSON map, the layout transformers reads).
"""
from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mens.errors import ConfigError

SHARD_BYTES = 256 * 2**20          # small shards: peak memory stays ~2 shards, not a model copy
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ST_DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "chat_template.jinja", "generation_config.json")
PEFT_PREFIX = "base_model.model."


@dataclass
class Adapter:
    """A PEFT LoRA adapter dir: per target weight name, (A [r, in], B [out, r]) in fp32."""
    path: Path
    r: int
    alpha: float
    pairs: dict          # "model.layers.0.self_attn.q_proj.weight" -> (A, B)
    # PEFT target_parameters on fused expert weights (lane.lora.experts): per fused parameter
    # ("model.layers.0.mlp.experts.gate_up_proj"), (A [r·E, in], B [out, r·E])
    experts: dict = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return self.alpha / self.r   # PEFT's scaling without rslora (rejected on load)


def load_adapter(adapter_dir: Path) -> Adapter:
    """Read adapter_config.json + adapter_model.safetensors; exit 2 on anything mens can't merge."""
    from safetensors.torch import load_file

    cfg_path = adapter_dir / "adapter_config.json"
    st_path = adapter_dir / "adapter_model.safetensors"
    for p in (cfg_path, st_path):
        if not p.is_file():
            raise ConfigError(f"{p} is missing: the run's adapter/ is incomplete (was the run "
                              f"interrupted before it finished?). Re-run or resume the training.",
                              key="run")
    cfg = json.loads(cfg_path.read_text())
    unsupported = [k for k in ("use_rslora", "use_dora") if cfg.get(k)]
    unsupported += [k for k in ("rank_pattern", "alpha_pattern", "modules_to_save") if cfg.get(k)]
    if cfg.get("peft_type") != "LORA" or unsupported:
        raise ConfigError(f"{cfg_path}: peft_type {cfg.get('peft_type')} with "
                          f"{', '.join(unsupported) or 'no extras'}; mens exports plain LoRA "
                          f"adapters only (one rank and alpha, no DoRA/rsLoRA/modules_to_save).",
                          key="run")
    raw = load_file(str(st_path))
    pairs: dict = {}
    for key, t in raw.items():
        name = key[len(PEFT_PREFIX):] if key.startswith(PEFT_PREFIX) else key
        for part, idx in ((".lora_A.weight", 0), (".lora_B.weight", 1)):
            if name.endswith(part):
                pairs.setdefault(name[: -len(part)] + ".weight", [None, None])[idx] = t.float()
                break
        else:
            raise ConfigError(f"{st_path}: tensor {key} is not a LoRA A/B matrix; mens merges "
                              f"plain LoRA adapters only.", key="run")
    broken = [n for n, (a, b) in pairs.items() if a is None or b is None]
    if broken or not pairs:
        what = "no LoRA tensors" if not pairs else f"unpaired A/B for {broken[0]}"
        raise ConfigError(f"{st_path}: {what}; the adapter file is damaged. Re-run the training.",
                          key="run")
    experts = _expert_pairs(pairs, cfg.get("target_parameters") or [], st_path)
    return Adapter(adapter_dir, int(cfg["r"]), float(cfg["lora_alpha"]),
                   {n: tuple(ab) for n, ab in pairs.items()}, experts)


def _expert_pairs(pairs: dict, targets: list[str], where) -> dict:
    """Pop PEFT ParamWrapper pairs (target_parameters) out of `pairs`: -> {fused param: (A, B)}.

    PEFT nests one wrapper per targeted parameter of a module (`experts.base_layer.lora_A` is
    the inner one, `experts.lora_A` the outer), in an order of its own; which is which follows
    from the shapes: gate_up maps hidden -> 2·width and down maps width -> hidden, so gate_up
    is the wrapper whose input width is the other's output width."""
    # 3-D expert parameters only: a 2-D one (a router `gate.weight` that PEFT targets as a
    # parameter) is a plain [out, in] pair, merged as any other
    targets = [t for t in targets if t.rpartition(".")[0].rpartition(".")[2] == "experts"]
    if not targets:
        return {}
    suffixes = sorted({t.rpartition(".")[2] for t in targets})
    modules = {"experts"}
    groups: dict = {}
    for n in [n for n in pairs if n.removesuffix(".weight").split(".base_layer")[0]
              .rpartition(".")[2] in modules]:
        module = n.removesuffix(".weight").split(".base_layer")[0]
        groups.setdefault(module, []).append(pairs.pop(n))
    out = {}
    for module, ab in groups.items():
        if len(ab) != len(suffixes):
            raise ConfigError(f"{where}: {module} has {len(ab)} LoRA pair(s) for "
                              f"target_parameters {targets}; the adapter is not one mens "
                              f"can merge (one pair per targeted expert parameter).", key="run")
        if len(ab) == 1:
            out[f"{module}.{suffixes[0]}"] = tuple(ab[0])
            continue
        (a0, b0), (a1, b1) = ab
        first_is_gate_up = a0.shape[1] == b1.shape[0]
        gu, dn = (ab[0], ab[1]) if first_is_gate_up else (ab[1], ab[0])
        out[f"{module}.gate_up_proj"], out[f"{module}.down_proj"] = tuple(gu), tuple(dn)
    return out


class SafetensorsDir:
    """The tensors of a HF model dir (one file or an index of shards), read one at a time."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self.path = Path(path)
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            files = json.loads(index.read_text())["weight_map"]
        else:
            files = {}
            for f in sorted(self.path.glob("*.safetensors")):
                with safe_open(str(f), "pt") as h:
                    files.update({k: f.name for k in h.keys()})
        if not files:
            raise ConfigError(f"{self.path} holds no *.safetensors weights.", key="run")
        self.files = files
        self.shapes, self.dtypes = {}, {}
        for fname in sorted(set(files.values())):
            with safe_open(str(self.path / fname), "pt") as h:
                for k in h.keys():
                    sl = h.get_slice(k)
                    self.shapes[k], self.dtypes[k] = tuple(sl.get_shape()), sl.get_dtype()
        self.names = list(files)   # file order: embeddings, then layer by layer

    def get(self, name: str):
        from safetensors import safe_open

        with safe_open(str(self.path / self.files[name]), "pt") as h:   # unmapped on close
            return h.get_tensor(name)

    @property
    def dtype(self) -> str:
        """The storage dtype of the 2-D weights (what `export.dtype=auto` keeps)."""
        kinds = {self.dtypes[n] for n in self.names if len(self.shapes[n]) == 2}
        return ST_DTYPES.get(sorted(kinds)[0], "fp32") if kinds else "fp32"


class MergedWeights:
    """Base (+ adapter) as a tensor source: same names and shapes as the base, merged lazily."""

    def __init__(self, base: SafetensorsDir, adapter: Adapter | None, out_dtype: str,
                 qlora=None):
        self.base, self.adapter, self.qlora = base, adapter, qlora
        self.out_dtype = base.dtype if out_dtype == "auto" else out_dtype
        self.names, self.shapes = base.names, base.shapes
        self._delta = (None, None)       # the last fused expert delta: E tensors in a row use it
        self.cfg = _text_config(_config(base.path))
        self.model_names = _model_names(self.cfg.get("model_type"), base.names)

    def get(self, name: str):
        import torch

        from mens.export import experts

        w = self.base.get(name)                                    # [out, in], stored dtype
        key = self.model_names.get(name, name)                     # the adapter's name for it
        if self.qlora is not None and _is_linear(key, w) and \
                not experts.not_linear(self.cfg.get("model_type"), key):
            w = nf4_roundtrip(w, self.qlora)
        if self.adapter and key in self.adapter.pairs:
            a, b = self.adapter.pairs[key]                         # [r, in], [out, r]
            w = w.float() + (b @ a) * self.adapter.scale           # fp32: one rounding, below
        elif self.adapter and self.adapter.experts:
            w = self._add_expert_delta(key, w)
        return w.to(getattr(torch, TORCH_DTYPES[self.out_dtype]))

    def _add_expert_delta(self, name: str, w):
        """W + the expert LoRA's share of it: the fused [E, …] delta sliced to this tensor."""
        from mens.export import experts

        mt = self.cfg.get("model_type")
        v = experts.view(mt, name)
        if v is None or v.fused not in self.adapter.experts:
            return w
        if self._delta[0] != v.fused:
            a, b = self.adapter.experts[v.fused]
            self._delta = (v.fused, experts.lora_delta(mt, a, b, self.adapter.r,
                                                       self.adapter.scale))
        width = experts.fused_shapes(mt, self.cfg)["down_proj"][0]
        return w.float() + experts.expert_slice(mt, self._delta[1], v, width)


def _config(path: Path) -> dict:
    p = Path(path) / "config.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def _text_config(cfg: dict) -> dict:
    """The text model's config (a multimodal checkpoint's text_config, under the text model's
    model_type): what training adapted, so what the merge reads."""
    from mens.source.families import text_config
    return dict(text_config(cfg, "config.json")) if cfg else cfg


def _model_names(model_type, names) -> dict:
    """Checkpoint names that the model (and so a PEFT adapter) calls otherwise (Mixtral's
    block_sparse_moe.gate is the model's mlp.gate)."""
    from mens.export import experts
    return {n: m for n in names if (m := experts.model_name(model_type, n)) != n}


def _is_linear(name: str, w) -> bool:
    """bitsandbytes quantised every nn.Linear but the output head; embeddings/norms stay."""
    return w.dim() == 2 and "embed_tokens" not in name and not name.startswith("lm_head")


def nf4_roundtrip(w, q: dict):
    """The weight as the QLoRA run saw it: quantised to 4 bit and dequantised with the run's
    settings, from the dtype the run loaded it in (bitsandbytes' result depends on it)."""
    import bitsandbytes.functional as F
    import torch

    packed, state = F.quantize_4bit(w.to(getattr(torch, TORCH_DTYPES[q["precision"]])),
                                    blocksize=q["blocksize"], compress_statistics=q["double_quant"],
                                    quant_type=q["type"])
    return F.dequantize_4bit(packed, state).to(torch.float32)


def check_adapter(adapter: Adapter, base: SafetensorsDir) -> None:
    """Every A/B pair must fit its base weight: else the adapter was trained on another base."""
    _check_expert_pairs(adapter, base)
    renamed = {m: n for n, m in _model_names(_text_config(_config(base.path)).get(
        "model_type"), base.names).items()}
    for name, (a, b) in adapter.pairs.items():
        shape = base.shapes.get(renamed.get(name, name))
        if shape is None or len(shape) != 2 or a.shape != (adapter.r, shape[1]) \
                or b.shape != (shape[0], adapter.r):
            got = f"A {list(a.shape)} / B {list(b.shape)}"
            want = f"base weight {list(shape)}" if shape else "no such base weight"
            raise ConfigError(
                f"{adapter.path}: LoRA pair for {name} is {got} but the base in {base.path} has "
                f"{want} (r={adapter.r}): the adapter was trained on a different base "
                f"architecture than this run's rung. Export it with the base it was trained on "
                f"(`rung.path=<that model dir>`), or check that the run dir is the right one.",
                key="run")


def _check_expert_pairs(adapter: Adapter, base: SafetensorsDir) -> None:
    """An expert LoRA's pairs fit the base's experts: A [r·E, in], B [out, r·E]."""
    from mens.export import experts

    if not adapter.experts:
        return
    cfg = _text_config(_config(base.path))
    mt = cfg.get("model_type")
    n_exp = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    shapes = experts.fused_shapes(mt, cfg)
    views = [experts.view(mt, experts.model_name(mt, n)) for n in base.names]
    have = {v.fused for v in views if v}
    for name, (a, b) in adapter.experts.items():
        i, o = shapes.get(name.rpartition(".")[2], (None, None))
        rE = adapter.r * n_exp
        if name not in have or a.shape != (rE, i) or b.shape != (o, rE):
            raise ConfigError(
                f"{adapter.path}: expert LoRA pair for {name} is A {list(a.shape)} / B "
                f"{list(b.shape)}, but the base in {base.path} ({mt}, {n_exp} experts) wants "
                f"A [{rE}, {i}] / B [{o}, {rE}]: the adapter was trained on another base.",
                key="run")


def write_hf_dir(src, config_dir: Path, out: Path, notes: list[str]) -> Path:
    """The merged model as a HF dir, shard by shard, into a temp dir renamed into place."""
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)     # inside the try: a Ctrl-C can land as mkdir returns
        groups = _shard_groups(src)
        total = _write_shards(src, groups, tmp, config_dir)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:             # interrupted or failed: no half-written dir stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    notes.append(f"merged: {len(groups)} shard(s), {total / 2**20:.1f} MiB {src.out_dtype}")
    return out


def _shard_groups(src) -> list[list[str]]:
    """Tensor names in file order, cut into shards of at most SHARD_BYTES (from shapes alone)."""
    import torch

    itemsize = torch.empty((), dtype=getattr(torch, TORCH_DTYPES[src.out_dtype])).element_size()
    groups, size = [[]], 0
    for n in src.names:
        nbytes = itemsize * math.prod(src.shapes[n])
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(n)
        size += nbytes
    return groups


def _write_shards(src, groups, tmp: Path, config_dir: Path) -> int:
    from safetensors.torch import save_file
    from tqdm.auto import tqdm

    total, weight_map = 0, {}
    for i, names in enumerate(tqdm(groups, desc="merge", unit="shard", leave=False)):
        fname = "model.safetensors" if len(groups) == 1 else \
            f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        shard = {n: src.get(n).contiguous() for n in names}   # one shard in memory at a time
        save_file(shard, str(tmp / fname), metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in shard.values())
        weight_map.update({n: fname for n in names})
        del shard
    if len(groups) > 1:
        (tmp / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    config = json.loads((config_dir / "config.json").read_text())
    config["dtype"] = TORCH_DTYPES[src.out_dtype]
    config.pop("torch_dtype", None)
    config.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for f in TOKENIZER_FILES:
        if (config_dir / f).is_file():
            shutil.copyfile(config_dir / f, tmp / f)
    return total

