"""Resolution: a composed config → an immutable, typed RunSpec (every `auto` filled) + its Plan.

`compile_run` is the one function that does it: detect hardware, run the cross-field checks,
take sequence lengths from the spoke's manifest, plan, and write the chosen shape back. The
RunSpec alone (spec.yaml) is enough to re-launch: `python -m mens rerun=<run dir>`.
"""
from __future__ import annotations

import importlib.metadata as md
import json
from dataclasses import asdict, dataclass, fields, is_dataclass, make_dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from mens import schema
from mens.compose import CONF_DIR
from mens.errors import ConfigError
from mens.memory import MIN_UNCALIBRATED_MARGIN, GiB, Arch, LaneModel, load_contract, stale_note
from mens.planner import Plan, PlanRequest, plan, ways_out

MISSING_VALUE = object()
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when present: ~10x faster
DATA_DIR = Path(__file__).resolve().parent / "data"
SECTIONS = ("hw", "rung", "spoke", "lane", "curriculum", "train", "plan", "logger")
LADDER = ["tiny", "0.6b", "1.7b", "4b", "8b", "14b", "32b"]
PRECISION_OF = {"bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16", "32-true": "fp32"}
LIGHTNING_OF = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32-true"}
# bitsandbytes nf4 support by installed version (first match from the top wins). 0.50 runs
# 4-bit on CPU, CUDA and MPS; before it only CUDA is trusted here.
BNB_NF4 = [((0, 50), {"cuda", "cpu", "mps"}), ((0, 43), {"cuda"})]


@lru_cache(maxsize=None)
def _frozen_type(cls):
    return make_dataclass(cls.__name__.replace("Config", "Spec"),
                          [(f.name, f.type) for f in fields(cls)], frozen=True)


def freeze(obj):
    """A schema dataclass instance → its frozen twin (lists become tuples)."""
    if is_dataclass(obj):
        return _frozen_type(type(obj))(**{f.name: freeze(getattr(obj, f.name)) for f in fields(obj)})
    if isinstance(obj, (list, tuple)):
        return tuple(freeze(v) for v in obj)
    return obj


@dataclass(frozen=True)
class RunSpec:
    hw: object          # frozen HwConfig: backend/memory/bf16 resolved
    rung: object
    spoke: object
    lane: object        # precision and gradient_checkpointing resolved
    curriculum: object
    train: object       # seq_len, micro_batch, grad_accum, global_batch resolved
    plan: object
    logger: str
    detected: dict | None      # what hw=auto / device checks found (None: planned from elsewhere)
    budget_gb: float
    notes: tuple[str, ...]     # every place mens did something other than the spec said
    versions: dict

    def to_dict(self) -> dict:
        return json.loads(json.dumps(asdict(self)))

    def config_dict(self) -> dict:
        """The re-launchable part (what `rerun=` composes from)."""
        d = self.to_dict()
        return {k: d[k] for k in SECTIONS}


@lru_cache(maxsize=None)
def load_option(group: str, name: str):
    """One option file as its (read-only) schema dataclass, for ways out and auto-tier
    defaults. Plain YAML + dataclasses: OmegaConf is ~10x slower and these files are
    validated by composition tests anyway."""
    cls = getattr(schema, {"hw": "HwConfig", "rung": "RungConfig", "spoke": "SpokeConfig",
                           "lane": "LaneConfig", "curriculum": "CurriculumConfig"}[group])
    with open(CONF_DIR / group / f"{name}.yaml") as f:
        return freeze(_build(cls, yaml.load(f, Loader=SafeLoader)))


def _build(cls, raw: dict):
    kwargs = {}
    for f in fields(cls):
        value = raw.get(f.name, MISSING_VALUE)
        default = f.default_factory() if callable(f.default_factory) else f.default
        if value is MISSING_VALUE:
            value = default
        elif isinstance(value, dict) and is_dataclass(default):
            value = _build(type(default), value)
        kwargs[f.name] = value
    return cls(**kwargs)


def tier_budget(hw, available_gb: float | None) -> tuple[float, float, float]:
    """(usable, headroom, budget) in GiB from the tier's policy and, when live, what's free."""
    pol = hw.headroom
    usable = hw.memory_gb * pol.advisory_frac - pol.reserve_gb
    if available_gb is not None:
        usable = min(usable, available_gb)
    headroom = max(pol.frac * usable, pol.min_gb)
    return usable, headroom, max(usable - headroom, 0.0)


# (substring of torch.cuda.get_device_name(), minimum GiB, tier)
CUDA_NAMES = [("4080 SUPER", 0, "rtx4080s"), ("4090", 0, "rtx4090"), ("3090", 0, "rtx3090"),
              ("A6000", 0, "a6000"), ("L40S", 0, "l40s"), ("A100", 60, "a100_80g"),
              ("A100", 0, "a100_40g"), ("H100", 0, "h100"), ("H200", 0, "h200")]


def cuda_tier(device_name: str, total_gb: float) -> str | None:
    for key, min_gb, tier in CUDA_NAMES:
        if key.lower() in device_name.lower() and total_gb >= min_gb:
            return tier
    return None


def memory_needed(hw, budget_gb: float) -> float:
    """Invert tier_budget: the smallest whole `hw.memory_gb` whose budget is >= budget_gb."""
    import math

    pol = hw.headroom
    usable = max(budget_gb / (1 - pol.frac), budget_gb + pol.min_gb)
    return float(math.ceil((usable + pol.reserve_gb) / pol.advisory_frac))


def resolve_hw(hw: DictConfig, purpose: str, notes: list[str]) -> tuple[dict | None, float]:
    """Fill hw.backend / memory_gb / bf16 in place; return (detection, budget GiB)."""
    from mens.detect import DetectionError, detect

    need_device = purpose == "train" or hw.memory_gb is None
    det = None
    if need_device:
        prefer = None if hw.backend == "auto" else hw.backend
        try:
            det = detect(prefer)
        except DetectionError as e:
            if hw.backend == "mps":
                import platform
                raise ConfigError(
                    f"+hw=m_series needs an Apple Silicon GPU and this machine "
                    f"({platform.system()} {platform.machine()}) has none. "
                    f"To plan for a Mac from here, give its memory: "
                    f"`python -m mens.plan +hw=m_series hw.memory_gb=128 +rung=0.6b`.",
                    key="hw") from None
            if hw.backend == "auto":
                raise ConfigError(f"hw=auto could not detect this machine: {e}", key="hw") from None
            raise ConfigError(
                f"+hw={hw.name} needs a {hw.backend.upper()} device and this machine lacks one "
                f"({e}). Plan for it from here with `python -m mens.plan +hw={hw.name} ...`, or "
                f"train here with `+hw=auto`.", key="hw") from None
        notes.extend(det.notes)
    if hw.backend == "auto":   # take the policy (and speeds) of the tier this machine is
        tier = {"cpu": "cpu", "mps": "m_series"}.get(det.backend) \
            or cuda_tier(det.device_name, det.total_gb)
        base = load_option("hw", tier or "h100")
        if det.backend == "cuda" and not tier:
            notes.append(f"hw: {det.device_name} matches no named tier; no time estimates")
        for k in ("lightning", "headroom", "tflops_bf16", "bandwidth_gbs"):
            v = getattr(base, k) if tier or k in ("lightning", "headroom") else None
            if is_dataclass(v):
                for kk, vv in asdict(v).items():
                    hw[k][kk] = vv
            else:
                hw[k] = v
        hw.backend = det.backend
        hw.description = det.device_name
    if hw.bf16 is None:
        hw.bf16 = bool(det.bf16) if det else False
    overridden = hw.memory_gb is not None
    if not overridden:
        hw.memory_gb = round(det.total_gb, 2)
    live = None if overridden else det.available_gb
    if live is not None and hw.backend == "mps":   # detect() already kept max(15 %, 2 GiB) back
        hw.headroom.frac, hw.headroom.min_gb, hw.headroom.advisory_frac = 0.0, 0.0, 1.0
    usable, headroom, budget = tier_budget(hw, live)
    detection = None if det is None else {**asdict(det), "usable_gb": round(usable, 3),
                                          "headroom_gb": round(headroom, 3),
                                          "memory_overridden": overridden}
    return detection, budget


def qlora_support(backend: str) -> tuple[bool, str]:
    try:
        version = md.version("bitsandbytes")
    except md.PackageNotFoundError:
        return False, "bitsandbytes is not installed"
    v = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    for since, backends in BNB_NF4:
        if v >= since:
            return backend in backends, f"bitsandbytes {version} (nf4 on {', '.join(sorted(backends))})"
    return False, f"bitsandbytes {version} predates nf4 support mens trusts (0.43)"


def resolve_seq_len(cfg: DictConfig, notes: list[str]) -> int:
    """Explicit, or from the spoke's length manifest (no tokenizer needed to plan)."""
    max_pos = cfg.rung.max_position_embeddings
    if cfg.train.seq_len != schema.AUTO:
        if cfg.train.seq_len > max_pos:
            raise ConfigError(
                f"train.seq_len={cfg.train.seq_len} exceeds rung {cfg.rung.name}'s "
                f"max_position_embeddings={max_pos}: use train.seq_len<={max_pos} (or auto).",
                key="train.seq_len")
        return int(cfg.train.seq_len)
    manifest = DATA_DIR / cfg.spoke.name / "lengths.json"
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        p99 = m["p99_tokens"]
        if not cfg.rung.tokenizer_bundled:   # manifest counts the tiny tokenizer's tokens
            p99 = int(m["p99_chars"] / m.get("est_chars_per_token", 3.5))
            notes.append(f"seq_len: {cfg.rung.name}'s tokenizer is not here; p99 length "
                         f"{p99} tokens is an estimate from characters")
        seq = max(128, -(-p99 // 128) * 128)
    else:
        seq = cfg.spoke.seq_len_hint
        notes.append(f"seq_len: spoke {cfg.spoke.name} has no length manifest yet; using its "
                     f"declared seq_len_hint={seq}")
    if seq > max_pos:
        notes.append(f"seq_len: capped {seq} → {max_pos} (rung max positions)")
        seq = max_pos
    return seq


def lane_model(lane, precision: str, init_adapter: str | None = None) -> LaneModel:
    lora = lane.lora
    q = lane.quantization
    return LaneModel(
        kind="qlora" if lane.kind == "qlora" else lane.kind, precision=precision,
        optimizer=lane.optimizer.name,
        lora_r=lora.r if lora else 0, lora_targets=tuple(lora.targets) if lora else (),
        lora_dropout=lora.dropout if lora else 0.0,
        double_quant=q.double_quant if q else True, blocksize=q.blocksize if q else 64,
        frozen_adapter_copy=bool(init_adapter) and lane.kind == "dpo")


def _auto(v):
    return None if v == schema.AUTO else int(v)


def compile_run(cfg: DictConfig, purpose: str = "plan") -> tuple[RunSpec, Plan]:
    """Resolve every `auto`, check the cross-field rules, plan. Raises MensError."""
    cfg = cfg.copy()                     # composed (or rerun) configs are already typed
    OmegaConf.resolve(cfg)
    notes: list[str] = []
    detection, budget_gb = resolve_hw(cfg.hw, purpose, notes)

    lane = cfg.lane
    if lane.kind == "dpo" and not cfg.spoke.preference_pairs:
        pairs = [n for n in _spokes() if load_option("spoke", n).preference_pairs]
        raise ConfigError(
            f"lane=dpo needs chosen/rejected pairs and spoke {cfg.spoke.name} ships none: use "
            f"a spoke with pairs ({', '.join(pairs)}) or lane=lora.", key="lane")
    if lane.kind == "qlora":
        ok, why = qlora_support(cfg.hw.backend)
        if not ok:
            raise ConfigError(
                f"lane=qlora is not supported on backend {cfg.hw.backend} with {why}: "
                f"`pip install 'bitsandbytes>=0.50'`, or use lane=lora.", key="lane")
    if lane.kind in ("lora", "qlora", "dpo") and not lane.lora:
        raise ConfigError(f"lane {lane.name} (kind {lane.kind}) needs a `lora:` section.",
                          key="lane.lora")
    wanted = PRECISION_OF.get(cfg.hw.lightning.precision, "fp32") \
        if lane.precision == schema.AUTO else lane.precision
    precision = wanted
    if wanted == "bf16" and not cfg.hw.bf16:
        precision = "fp32"
        notes.append(f"GPU_FALLBACK: precision bf16 → fp32 ({cfg.hw.name} has no bf16)")
    lane.precision = precision
    if purpose == "train" and cfg.rung.init == "pretrained" and not cfg.rung.tokenizer_bundled:
        from mens.weights import find_weights, missing_weights_message

        st = find_weights(cfg.rung.repo_id, cfg.rung.revision, cfg.rung.path)
        if not st.present:
            raise ConfigError(missing_weights_message(st), key="rung")
    if cfg.rung.revision is None and not cfg.rung.tokenizer_bundled:
        notes.append(f"rung {cfg.rung.name}: {cfg.rung.repo_id} is unpinned (revision null)")

    seq_len = resolve_seq_len(cfg, notes)
    t = cfg.train
    if lane.optimizer.lr == schema.AUTO:   # the rung's recommendation for this kind of lane
        which = "full_lr" if lane.kind == "full" else "lora_lr"
        lane.optimizer.lr = float(getattr(cfg.rung, which))
    default_gb = cfg.rung.global_batch or t.default_global_batch
    gc = lane.gradient_checkpointing
    req = PlanRequest(
        arch=Arch.of(cfg.rung), lane=lane_model(lane, precision, t.init_adapter),
        backend=cfg.hw.backend, budget_bytes=int(budget_gb * GiB), seq_len=seq_len,
        micro_batch=_auto(t.micro_batch), grad_accum=_auto(t.grad_accum),
        global_batch=_auto(t.global_batch), default_global_batch=default_gb,
        checkpointing=None if gc == schema.AUTO else bool(gc), packing=t.packing,
        margin=max(cfg.plan.uncalibrated_margin, MIN_UNCALIBRATED_MARGIN),
        contract=cfg.plan.contract, tflops=cfg.hw.tflops_bf16)
    p = plan(req)
    stale = stale_note(load_contract(cfg.plan.contract), p.cell)   # said, never silent
    if stale:
        notes.append(stale)
    if not p.fits:
        from dataclasses import replace
        p = replace(p, ways_out=ways_out(
            req, rungs=_smaller_rungs(cfg.rung.name), tiers=_tier_budgets(cfg.hw),
            memory_for=lambda need: memory_needed(cfg.hw, need / GiB)))
    t.seq_len, t.micro_batch, t.grad_accum = seq_len, p.shape.micro_batch, p.grad_accum
    t.global_batch = p.global_batch
    lane.gradient_checkpointing = p.shape.checkpointing
    obj = OmegaConf.to_object(cfg)
    spec = RunSpec(
        **{f: freeze(getattr(obj, f)) for f in SECTIONS},
        detected=detection, budget_gb=round(budget_gb, 3), notes=tuple(notes),
        versions=_versions())
    return spec, p


def _spokes() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "spoke").glob("*.yaml"))


def _smaller_rungs(name: str) -> dict:
    idx = LADDER.index(name) if name in LADDER else len(LADDER)
    return {r: Arch.of(load_option("rung", r)) for r in reversed(LADDER[1:idx])}


def _tier_budgets(hw) -> dict:
    """Budgets of the named tiers of the same backend (for 'a bigger tier')."""
    out = {}
    for path in sorted((CONF_DIR / "hw").glob("*.yaml")):
        t = load_option("hw", path.stem)
        if t.backend == hw.backend and t.memory_gb is not None:
            out[t.name] = int(tier_budget(t, None)[2] * GiB)
    return out


def _versions() -> dict:
    out = {}
    for pkg in ("mens", "hydra-core", "omegaconf", "torch", "lightning", "transformers", "peft",
                "bitsandbytes"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def load_rerun(run_dir: str) -> DictConfig:
    """A run dir's spec.yaml → a config that compiles to the same RunSpec."""
    from mens.compose import validate

    path, tel = Path(run_dir) / "spec.yaml", Path(run_dir) / "telemetry.jsonl"
    if path.is_file():
        saved = OmegaConf.load(path)
    elif tel.is_file():   # the first telemetry row carries the whole resolved spec
        with open(tel) as f:
            first = json.loads(f.readline())
        saved = OmegaConf.create({**first["spec"], "detected": first["spec"].get("detected")})
    else:
        raise ConfigError(f"{run_dir}: neither spec.yaml nor telemetry.jsonl there. Give a run "
                          f"directory that mens wrote (outputs/<date>/<time>_*/).", key="rerun")
    cfg = OmegaConf.merge(OmegaConf.structured(schema.MensConfig),
                          {k: saved[k] for k in SECTIONS if k in saved})
    det = saved.get("detected")
    if det and not det.get("memory_overridden", False):
        cfg.hw.memory_gb = None          # memory was detected: detect it again here
    validate(cfg)
    return cfg
