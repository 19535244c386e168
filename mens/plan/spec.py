"""Resolution: a composed config → an immutable, typed RunSpec (every `auto` filled) + its Plan.

`compile_run` is the one function that does it: detect hardware, run the cross-field checks,
take sequence lengths from the spoke's manifest, plan, and write the chosen shape back. The
RunSpec alone (spec.yaml) is enough to re-launch: `python -m mens rerun=<run dir>`.
"""
from __future__ import annotations

import importlib.metadata as md
import json
from dataclasses import asdict, dataclass

from omegaconf import DictConfig, OmegaConf

from mens.config import schema
from mens.config.options import freeze, load_option, spokes
from mens.errors import ConfigError
from mens.plan.hardware import memory_needed, qlora_support, resolve_hw, tier_budget
from mens.plan.memory import MIN_UNCALIBRATED_MARGIN, GiB, Arch, LaneModel, load_contract, stale_note
from mens.plan.planner import Plan, PlanRequest, plan, ways_out
from mens.resources import CORPORA, option_names

DATA_DIR = CORPORA   # each spoke's lengths.json (the length manifest) lives here
SECTIONS = ("hw", "rung", "spoke", "lane", "curriculum", "train", "plan", "logger")
LADDER = ["tiny", "0.6b", "1.7b", "4b", "8b", "14b", "32b"]
PRECISION_OF = {"bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16", "32-true": "fp32"}


@dataclass(frozen=True)
class RunSpec:
    hw: object          # frozen HwConfig: backend/memory/bf16 resolved
    rung: object
    spoke: object
    lane: object        # precision and gradient_checkpointing resolved
    curriculum: object
    train: object       # seq_len, micro_batch, grad_accum, global_batch resolved
    plan: object
    logger: object       # frozen LoggerConfig: kind (wandb|csv|tensorboard|none), project, entity
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


def _margin(asked: float, notes: list[str]) -> float:
    """The uncalibrated margin: never below the floor the contract's evidence supports."""
    if asked < MIN_UNCALIBRATED_MARGIN:
        notes.append(f"plan.uncalibrated_margin={asked:g} raised to {MIN_UNCALIBRATED_MARGIN:g}: "
                     f"uncalibrated cells missed held-out shapes by up to 12.5 %")
    return max(asked, MIN_UNCALIBRATED_MARGIN)


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
        pairs = [n for n in spokes() if load_option("spoke", n).preference_pairs]
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
    wanted = PRECISION_OF[cfg.hw.lightning.precision] \
        if lane.precision == schema.AUTO else lane.precision
    precision = wanted
    if wanted == "bf16" and not cfg.hw.bf16:
        precision = "fp32"
        notes.append(f"GPU_FALLBACK: precision bf16 → fp32 ({cfg.hw.name} has no bf16)")
    lane.precision = precision
    if purpose == "train" and cfg.rung.init == "pretrained" and not cfg.rung.tokenizer_bundled:
        from mens.plan.weights import find_weights, missing_weights_message

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
        margin=_margin(cfg.plan.uncalibrated_margin, notes),
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


def _smaller_rungs(name: str) -> dict:
    idx = LADDER.index(name) if name in LADDER else len(LADDER)
    return {r: Arch.of(load_option("rung", r)) for r in reversed(LADDER[1:idx])}


def _tier_budgets(hw) -> dict:
    """Budgets of the named tiers of the same backend (for 'a bigger tier')."""
    out = {}
    for name in option_names("hw"):
        t = load_option("hw", name)
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


# Keys an earlier mens wrote into spec.yaml and that this one no longer has (nothing read
# them): a rerun, resume or export of such a run drops them and says so.
RETIRED = {"hw.bandwidth_gbs": "read by nothing (time estimates use hw.tflops_bf16)",
           "spoke.default_lane": "read by nothing (the lane is chosen with `lane=`)"}


def load_rerun(run_dir: str) -> DictConfig:
    """A run dir's spec.yaml → a config that compiles to the same RunSpec."""
    import sys

    from mens.config.validate import validate
    from mens.rundir import RunDir

    run = RunDir(run_dir)
    if run.spec.is_file():
        saved = OmegaConf.load(run.spec)
    elif run.telemetry.is_file():   # the first telemetry row carries the whole resolved spec
        with open(run.telemetry) as f:
            first = json.loads(f.readline())
        saved = OmegaConf.create({**first["spec"], "detected": first["spec"].get("detected")})
    else:
        raise ConfigError(f"{run_dir}: neither spec.yaml nor telemetry.jsonl there. Give a run "
                          f"directory that mens wrote (outputs/<date>/<time>_*/).", key="rerun")
    if isinstance(saved.get("logger"), str):   # an earlier mens: `logger: wandb`, a plain key
        saved.logger = {"kind": saved.logger}
    for key, why in RETIRED.items():
        section, _, leaf = key.rpartition(".")
        node = OmegaConf.select(saved, section, default=None)
        if isinstance(node, DictConfig) and leaf in node:
            node.pop(leaf)
            print(f"mens: note: {run_dir} was written by an earlier mens: `{key}` is no longer "
                  f"a key ({why}); dropped", file=sys.stderr)
    cfg = OmegaConf.merge(OmegaConf.structured(schema.MensConfig),
                          {k: saved[k] for k in SECTIONS if k in saved})
    det = saved.get("detected")
    if det and not det.get("memory_overridden", False):
        cfg.hw.memory_gb = None          # memory was detected: detect it again here
    validate(cfg)
    return cfg
