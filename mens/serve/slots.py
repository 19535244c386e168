"""Adapter slots: one base model and any number of LoRA adapters, served side by side.

The adapters are loaded into ONE `peft.PeftModel` with `load_adapter` and picked per request
with `set_adapter` (the base: `disable_adapter()`), so each adapter costs only its own A/B
matrices — nothing is merged and no dense per-layer delta is materialised. Every model call
goes through `Slots.run`, a single worker thread: PEFT's active adapter is global state, so two
requests must never interleave. Aliases `<spoke>:champion` / `<spoke>:challenger` point at
slots and can be promoted and rolled back while serving.

Promotion is gated (`serve.require_gate`, default true): only a slot whose run dir holds a
passing gate.json that still matches its adapter (mens.run.receipt.promotable) may become
champion; anything else raises PromotionRefused (HTTP 409, CLI exit 3). At load, a spoke's
champion is its first adapter that passes its gate, else its first adapter (said in `notes`).
"""
from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mens.config.objectives import lane_fields
from mens.errors import EXIT_REFUSED, ConfigError, MensError
from mens.run.rundir import RunDir

BASE = "base"
ROLES = ("champion", "challenger")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class PromotionRefused(MensError):
    """A promotion the gate does not allow (HTTP 409; `mens.serve promote` exits 3)."""
    code = EXIT_REFUSED


@dataclass
class Slot:
    name: str                      # the id clients send as `model`
    adapter: str | None            # PEFT adapter name inside the PeftModel; None: the base
    path: Path | None = None       # adapter dir
    run: Path | None = None        # its run dir, when it came from one
    spoke: str | None = None
    lane: str | None = None
    tensor_bytes: int = 0          # the adapter's own weights as loaded
    system_prompt: str | None = None   # the default system turn: what training added (_system)


@dataclass
class Source:
    """Where an adapter comes from: a run dir (adapter/ inside), a bare PEFT adapter dir, or a
    Hub repo `org/name[@revision]` (fetched into the hub cache: mens.source.hub.fetch_adapter)."""
    name: str
    adapter_dir: Path
    run: Path | None
    spec: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, item: str, key: str = "serve.adapters") -> "Source":
        name, sep, path = item.partition("=")
        if not sep:
            name, path = "", item
        p = Path(path).expanduser()
        if not p.exists() and "/" in path and not path.startswith((".", "/", "~")):
            from mens.source.hub import fetch_adapter   # not here: a Hub repo id
            try:
                p, source = fetch_adapter(path)
            except ConfigError as e:
                raise ConfigError(e.message, key=key) from None
            name = name or source["repo_id"].split("/")[-1]
        if (p / "adapter_config.json").is_file():
            adapter, run = p, (p.parent if RunDir(p.parent).spec.is_file() else None)
        elif RunDir(p).artifact_kind == RunDir.ADAPTER:
            adapter, run = RunDir(p).artifact, p
        elif RunDir(p).artifact_kind == RunDir.MODEL:
            raise ConfigError(
                f"{p} is a full fine-tuning run (model/, no adapter): it is a whole model, not a "
                f"slot on a base. Serve it as the base: `python -m mens.serve rung.path={p}/model`.",
                key=key)
        else:
            raise ConfigError(f"{p}: no PEFT adapter there (adapter_config.json, or adapter/ in a "
                              f"finished run dir). Give a run dir that `python -m mens` wrote.",
                              key=key)
        spec = RunDir(run).read_spec() if run else {}
        name = name or (run.name if run else adapter.name)
        if name == BASE or not NAME_RE.match(name):
            raise ConfigError(f"slot name `{name}` is not usable as a model id: use letters, "
                              f"digits, `.`, `_`, `-` (at most 64, not `base`), e.g. "
                              f"`serve.adapters=['mine={path}']`.", key=key)
        return cls(name, adapter, run, spec)


def pick_device(want: str) -> str:
    import torch
    if want != "auto":
        return want
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


def pick_dtype(want: str, device: str):
    import torch
    if want == "auto":   # fp32 where there is no fast half type (CPU); bf16 where there is
        if device == "cuda":
            want = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            want = "fp16" if device == "mps" else "fp32"
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[want]


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class Slots:
    """Base + adapters on one PeftModel, a tokenizer, aliases, and the one worker thread."""

    def __init__(self, rung, sources: list[Source], device: str = "auto", dtype: str = "auto",
                 seed: int = 0, require_gate: bool = True):
        from omegaconf import OmegaConf

        from mens.model.generate import end_ids
        from mens.model.load import load_base, load_tokenizer

        if isinstance(rung, dict):
            rung = OmegaConf.create(rung)
        self.rung, self.device = rung, pick_device(device)
        self.require_gate = require_gate
        self.dtype = pick_dtype(dtype, self.device)
        self.notes: list[str] = []
        self.tokenizer = load_tokenizer(rung, self.notes)      # worker thread only
        self.request_tokenizer = load_tokenizer(rung, [])     # event loop only (see `encode`)
        # the training seed, so a random-init base is the very one the adapters trained on
        base = load_base(rung, "lora", _precision(self.dtype), self.device, seed)
        base = base.to(self.device).eval()
        self.base_bytes = tensor_bytes(list(base.parameters()) + list(base.buffers()))
        self.context = int(base.config.max_position_embeddings)
        gen = getattr(base, "generation_config", None)
        self.eos = eos = end_ids(base, self.tokenizer)   # as the trainer's sampling reads them
        # the pad id: the model's generation config first, then the tokenizer's (the trainer's
        # sampling starts at the tokenizer's): padding is masked in prompts, cut from answers
        self.pad = (gen.pad_token_id if gen is not None and gen.pad_token_id is not None
                    else self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                    else eos[0])
        self.slots: dict[str, Slot] = {BASE: Slot(BASE, None)}
        self.model = base
        # the chat format of training: the template and options of the adapters' runs
        self.chat = _encoder(self.request_tokenizer, next(
            (s.spec.get("data") for s in sources if s.spec.get("data")), None), self.notes)
        self.aliases: dict[str, dict[str, str | None]] = {}
        self.history: dict[str, list[dict]] = {}
        self._alias_lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mens-model")
        for src in sources:
            self.add(src)

    def add(self, src: Source) -> Slot:
        """Load one more adapter onto the base (not while requests run: the model changes).
        The first adapter of a spoke becomes its champion, the latest its challenger."""
        from peft import PeftModel
        taken = {s.adapter for s in self.slots.values()}   # an unloaded one's name is reused
        adapter_name = next(f"a{i}" for i in range(len(self.slots)) if f"a{i}" not in taken)
        if src.name in self.slots:
            raise ConfigError(f"two adapters are named `{src.name}`: name them apart with "
                              f"`serve.adapters=['other=DIR']`.", key="serve.adapters")
        rung = (src.spec.get("rung") or {}).get("name")
        if rung and rung != self.rung.name:
            raise ConfigError(f"adapter `{src.name}` was trained on rung {rung}, but the base "
                              f"served is {self.rung.name}: serve it with `+rung={rung}`.",
                              key="serve.adapters")
        try:
            if isinstance(self.model, PeftModel):
                self.model.load_adapter(str(src.adapter_dir), adapter_name=adapter_name)
            else:
                self.model = PeftModel.from_pretrained(self.model, str(src.adapter_dir),
                                                       adapter_name=adapter_name)
        except Exception as e:  # wrong shapes, wrong base, unreadable files
            raise ConfigError(f"adapter `{src.name}` ({src.adapter_dir}) does not load on "
                              f"{self.rung.name}: {type(e).__name__}: {e}", key="serve.adapters")
        self.model.eval()
        own = [p for n, p in self.model.named_parameters() if f".{adapter_name}." in n]
        spoke = src.spec.get("spoke") or {}
        self.slots[src.name] = Slot(
            src.name, adapter_name, src.adapter_dir, src.run, spoke.get("name"),
            lane_fields(src.spec.get("lane"))["lane"], tensor_bytes(own), _system(src.spec))
        slot = self.slots[src.name]
        if slot.spoke:
            roles = self.aliases.setdefault(slot.spoke, {"champion": None, "challenger": None})
            if roles["champion"] is None:
                roles["champion"] = slot.name
            elif self.require_gate and self.gated(slot.name)[0] and \
                    not self.gated(roles["champion"])[0]:
                # a gated adapter outranks an ungated champion chosen by load order
                roles["champion"], roles["challenger"] = slot.name, roles["champion"]
            else:
                roles["challenger"] = slot.name
        return slot

    def gated(self, name: str) -> tuple[bool, str]:
        """(may the slot be champion, why) — mens.run.receipt.promotable on its run dir."""
        from mens.run.receipt import promotable
        return promotable(self.slots[name].run)

    def champion_notes(self) -> list[str]:
        """What to say about champions that hold their role without a passing gate."""
        out = []
        for spoke, roles in sorted(self.aliases.items()):
            name = roles.get("champion")
            if name and not self.gated(name)[0]:
                out.append(f"{spoke}:champion is {name} by load order, ungated "
                           f"({self.gated(name)[1]})")
        return out

    # --- names -----------------------------------------------------------------------------
    def resolve(self, model_id: str) -> Slot | None:
        if model_id in self.slots:
            return self.slots[model_id]
        spoke, _, role = model_id.rpartition(":")
        target = self.aliases.get(spoke, {}).get(role) if role in ROLES else None
        return self.slots.get(target) if target else None

    def model_ids(self) -> list[tuple[str, str | None]]:
        """(id, the slot it stands for when it is an alias)."""
        out = [(n, None) for n in self.slots]
        for spoke, roles in sorted(self.aliases.items()):
            out += [(f"{spoke}:{r}", roles[r]) for r in ROLES if roles.get(r)]
        return out

    def promote(self, spoke: str, slot: str | None = None) -> dict:
        """`slot` (default: the challenger) becomes champion; the old champion becomes the
        challenger, so the pair can still be compared. The previous pair goes on a stack."""
        with self._alias_lock:
            roles = self.aliases.get(spoke)
            if roles is None:
                raise KeyError(f"no adapter of spoke `{spoke}` is loaded")
            slot = slot or roles["challenger"]
            if not slot:
                raise ValueError(f"spoke `{spoke}` has no challenger to promote: name a slot")
            s = self.slots.get(slot)
            if s is None or s.adapter is None:
                raise KeyError(f"no adapter slot `{slot}`")
            if s.spoke != spoke:
                raise ValueError(f"slot `{slot}` was trained on spoke {s.spoke}, not {spoke}")
            ok, why = self.gated(slot) if self.require_gate else (True, "")
            if not ok:
                raise PromotionRefused(f"promotion of `{slot}` to {spoke}:champion refused: "
                                       f"{why} (serve.require_gate=true)")
            self.history.setdefault(spoke, []).append(dict(roles))
            old = roles["champion"]
            roles["champion"] = slot
            roles["challenger"] = old if old != slot else roles["challenger"]
            return {"spoke": spoke, **roles}

    def rollback(self, spoke: str) -> dict:
        with self._alias_lock:
            if not self.history.get(spoke):
                raise ValueError(f"spoke `{spoke}` has no promotion to roll back")
            self.aliases[spoke] = self.history[spoke].pop()
            return {"spoke": spoke, **self.aliases[spoke]}

    # --- the model thread --------------------------------------------------------------------
    def run(self, fn, *args):
        """Submit fn(*args) to the single model thread; returns a concurrent Future."""
        return self._worker.submit(fn, *args)

    def activate(self, slot: Slot):
        """A context in which self.model computes as `slot` (model thread only)."""
        import contextlib
        if self.slots.get(slot.name) is not slot:   # unloaded while the request waited (#49)
            from mens.serve.api_error import APIError
            raise APIError(404, f"The model `{slot.name}` was unloaded while this request "
                                f"waited for it.", "model", "model_not_found")
        if slot.adapter is None:
            return self.model.disable_adapter() if self.slots.keys() - {BASE} \
                else contextlib.nullcontext()
        self.model.set_adapter(slot.adapter)
        return contextlib.nullcontext()

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt as training rendered it: the run's template, options, system folding and
        tool rendering (mens.data.encoder), plus the generation prompt."""
        return self.encode(self.prompt_text(messages, tools))

    def prompt_text(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        if self.chat is not None:
            return self.chat.prompt_text(messages, tools)
        if tools or any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
            raise ValueError("the served model has no chat template, so it cannot render tools "
                             "or tool calls (mens would drop them); serve a run whose template "
                             "renders tools, or one trained with data.tool_format=hermes")
        from mens.data.pack import CHATML   # a base without a template, and no run naming one
        return "".join(CHATML.format(**m) for m in messages) + "<|im_start|>assistant\n"

    def encode(self, text: str) -> list[int]:
        # A second tokenizer instance for the event loop: a HF fast tokenizer shared with the
        # model thread can fail with "Already borrowed" when both use it at once.
        out = self.request_tokenizer.encode(text, add_special_tokens=False)
        return list(getattr(out, "ids", out))

    def memory(self) -> dict:
        import psutil
        adapters = {s.name: s.tensor_bytes for s in self.slots.values() if s.adapter}
        total = tensor_bytes(list(self.model.parameters()) + list(self.model.buffers()))
        out = {"base_bytes": self.base_bytes, "adapter_bytes": adapters,
               "model_tensor_bytes": total,
               "rss_bytes": psutil.Process().memory_info().rss, "device": self.device}
        if self.device == "cuda":
            import torch
            out["cuda_allocated_bytes"] = torch.cuda.memory_allocated()
        return out

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)


def _system(spec: dict) -> str | None:
    """The system prompt a run's records had where they held none — the slot's default: the
    run's data.system_prompt, else its spoke's (the spoke's corpus was written under it). A run
    on the user's own data (data=file/hf) had none added: it gets none, as it trained."""
    data = spec.get("data") or {}
    if data.get("system_prompt"):
        return data["system_prompt"]
    spoke = spec.get("spoke") or {}
    return spoke.get("system_prompt") if data.get("source", "spoke") == "spoke" else None


def _precision(dtype) -> str:
    import torch
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def load_from_config(cfg) -> Slots:
    """`run=` (its base and adapter) + `serve.adapters`; without `run=`, the composed rung."""
    sources = []
    rung, seed = cfg.rung, 0
    if cfg.run:
        run = Path(cfg.run)
        spec = RunDir(run).read_spec()
        if not spec:
            raise ConfigError(f"run={run}: no spec.yaml there; give a run dir that `python -m "
                              f"mens` wrote (outputs/<date>/<time>_train/).", key="run")
        rung, seed = spec["rung"], int((spec.get("train") or {}).get("seed", 0))
        if RunDir(run).artifact_kind == RunDir.MODEL:
            rung = {**rung, "path": str(RunDir(run).artifact)}   # full lane: its model is the base
        else:
            sources.append(Source.parse(str(run), key="run"))
    from mens.source.resolve import fetch_base
    fetch_base(rung)   # a Hub base not cached here (`+rung=hf rung.repo_id=…`): downloaded first
    if cfg.adapter:   # `mens serve adapter=org/name` (or a dir): one more slot
        sources.append(Source.parse(str(cfg.adapter), key="adapter"))
    sources += [Source.parse(str(a)) for a in cfg.serve.adapters]
    return Slots(rung, sources, device=cfg.serve.device, dtype=cfg.serve.dtype, seed=seed,
                 require_gate=cfg.serve.require_gate)


def describe(slots: Slots) -> str:
    lines = [f"base  {slots.rung.name} on {slots.device} ({slots.base_bytes / 2**20:.1f} MiB)"]
    for s in slots.slots.values():
        if s.adapter:
            lines.append(f"slot  {s.name}: {s.lane or 'lora'} adapter, spoke {s.spoke or '?'} "
                         f"({s.tensor_bytes / 2**20:.2f} MiB) ← {s.path}")
    for spoke, roles in slots.aliases.items():
        lines.append("alias " + ", ".join(f"{spoke}:{r} → {roles[r]}" for r in ROLES if roles[r]))
    return "\n".join(lines)


def _encoder(tokenizer, data, notes: list[str]):
    """The RunEncoder of the served model (None, said, when it has no chat template)."""
    from mens.data.encoder import RunEncoder
    from mens.errors import ConfigError

    try:
        return RunEncoder.load(tokenizer.name_or_path, data, tokenizer)
    except ConfigError as e:
        notes.append(f"chat: {e.message} Serving renders ChatML.")
        return None
