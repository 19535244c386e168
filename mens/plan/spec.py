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
from mens.config.objectives import card, section, upgrade_lane
from mens.config.options import freeze, load_option, spokes
from mens.data.corpus import corpus_lock
from mens.errors import ConfigError
from mens.plan.contract import contract_paths, load_contract, min_margin, stale_note
from mens.plan.devices import hw_link, resolve_devices
from mens.plan.hardware import memory_needed, qlora_support, resolve_hw, tier_budget
from mens.plan.lane import lane_model
from mens.plan.memory import GiB, Arch
from mens.plan.planner import Plan, PlanRequest, plan, ways_out
from mens.resources import CORPORA, option_names
from mens.source.families import FAMILIES

DATA_DIR = CORPORA   # each spoke's lengths.json (the length manifest) lives here
SECTIONS = ("hw", "rung", "spoke", "data", "lane", "curriculum", "train", "plan", "logger")
LADDER = ["tiny", "0.6b", "1.7b", "4b", "8b", "14b", "32b"]
# Mixtures of experts beside the dense ladder: planned, recommended and laddered like its rungs
MOE_RUNGS = ["gpt-oss-20b", "qwen3-30b-a3b"]
PRECISION_OF = {"bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16", "32-true": "fp32"}


@dataclass(frozen=True)
class RunSpec:
    hw: object          # frozen HwConfig: backend/memory/bf16 resolved
    rung: object
    spoke: object
    data: object        # frozen DataConfig: spoke | file | hf (mens.data.sources)
    lane: object        # precision and gradient_checkpointing resolved
    curriculum: object
    train: object       # seq_len, micro_batch, grad_accum, global_batch resolved
    plan: object
    logger: object       # frozen LoggerConfig: kind (wandb|csv|tensorboard|none), project, entity
    detected: dict | None      # what hw=auto / device checks found (None: planned from elsewhere)
    budget_gb: float
    notes: tuple[str, ...]     # every place mens did something other than the spec said
    versions: dict
    data_lock: tuple = ()      # the data by content: [{path, sha256}] or [{dataset, revision}]
    # frozen TeacherConfig: only a run whose training asks a teacher (grpo.reward=teacher) keeps
    # it (its keys are env var names, never the keys: mens.synth.teacher)
    teacher: object = None
    # `adapter=` pinned (org/name@<commit>, or a local dir): a rerun/resume fetches that very
    # snapshot again and makes it train.init_adapter (mens.plan.adapter.resolve_adapter)
    adapter: str | None = None

    def to_dict(self) -> dict:
        d = json.loads(json.dumps(asdict(self)))
        for k in ("teacher", "adapter"):
            if d[k] is None:
                d.pop(k)
        return d

    def config_dict(self) -> dict:
        """The re-launchable part (what `rerun=` composes from)."""
        d = self.to_dict()
        return {k: d[k] for k in (*SECTIONS, "teacher", "adapter") if k in d}


def resolve_seq_len(cfg: DictConfig, notes: list[str], dataset=None) -> int:
    """Explicit, or from the user's data measured with the run's tokenizer (mens.data.lengths),
    or from the spoke's length manifest (no tokenizer needed to plan)."""
    max_pos = cfg.rung.max_position_embeddings
    if cfg.train.seq_len != schema.AUTO:
        if cfg.train.seq_len > max_pos:
            raise ConfigError(
                f"train.seq_len={cfg.train.seq_len} exceeds rung {cfg.rung.name}'s "
                f"max_position_embeddings={max_pos}: use train.seq_len<={max_pos} (or auto).",
                key="train.seq_len")
        if dataset is not None:
            from mens.data.lengths import report
            report(cfg, dataset, int(cfg.train.seq_len), notes)
        return int(cfg.train.seq_len)
    if dataset is not None:
        from mens.data.lengths import auto_seq_len
        return auto_seq_len(cfg, dataset, notes)
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


def resolve_paths(cfg: DictConfig, lane, notes: list[str]) -> dict:
    """train.attention / loss / heap: auto → the contract's fitted paths; another choice is
    planned with its analytic terms, uncalibrated (said)."""
    fitted = contract_paths(load_contract(cfg.plan.contract))
    t, out = cfg.train, {}
    for key in ("attention", "loss", "heap"):
        v = fitted[key] if t[key] == schema.AUTO else t[key]
        fam = FAMILIES.get(cfg.rung.family)     # its row says when per-record cannot express it
        if key == "attention" and v == "per_record" and fam and fam.no_per_record:
            notes.append(f"FALLBACK attention: {fam.no_per_record}; packed rows keep "
                         f"the 4-D block mask")
            v = "block_mask"
        if v != fitted[key]:
            notes.append(f"train.{key}={v}: the memory cells were fitted on {fitted[key]}; this "
                         f"plan uses the analytic terms for {v} under the uncalibrated margin")
        t[key] = out[key] = v
    return out


def _margin(asked: float, notes: list[str], contract: str | None) -> float:
    """The uncalibrated margin: never below the floor the contract's evidence supports."""
    least = min_margin(load_contract(contract))
    if asked < least:
        notes.append(f"plan.uncalibrated_margin={asked:g} raised to {least:g} (the contract's "
                     f"margins.uncalibrated_min): uncalibrated cells missed held-out shapes by up "
                     f"to 12.5 %")
    return max(asked, least)


def _auto(v):
    return None if v == schema.AUTO else int(v)


def compile_run(cfg: DictConfig, purpose: str = "plan") -> tuple[RunSpec, Plan]:
    """Resolve every `auto`, check the cross-field rules, plan. Raises MensError."""
    cfg = cfg.copy()                     # composed (or rerun) configs are already typed
    OmegaConf.resolve(cfg)
    notes: list[str] = []
    detection, budget_gb = resolve_hw(cfg.hw, purpose, notes)

    lane = cfg.lane
    if OmegaConf.is_missing(cfg.rung, "hidden_size"):   # +rung=hf: from the model's config.json
        from mens.source.resolve import fill_hf_rung
        fill_hf_rung(cfg, notes)
    from mens.source.resolve import rung_tool_format
    rung_tool_format(cfg, notes)   # smol's template writes no tool calls: hermes, said
    if cfg.adapter:   # a pushed (or local) adapter to start from: fetched, checked, pinned
        from mens.plan.adapter import resolve_adapter
        resolve_adapter(cfg, notes)
    dataset = None
    if cfg.data.source != "spoke":   # the user's data: read, checked and split before planning
        from mens.data.select import dataset as load_dataset
        dataset = load_dataset(cfg.data, card(lane), list(cfg.curriculum.phases))
        cfg.data.format = dataset.format   # resolved: a rerun reads the files as this run did
        if dataset.stats.get("eval_minimum_applied"):
            notes.append(f"data: {dataset.stats['eval_from']} (it trains on "
                         f"{len(dataset.train)})")
    elif "chat" not in (c := card(lane)).record_kinds() and not cfg.spoke.preference_pairs:
        pairs = [n for n in spokes() if load_option("spoke", n).preference_pairs]
        raise ConfigError(
            f"lane.objective={lane.objective} trains on {c.record} records made from "
            f"chosen/rejected pairs and spoke {cfg.spoke.name} ships none: use a spoke with "
            f"pairs ({', '.join(pairs)}) or lane.objective=sft.", key="lane")
    if lane.method == "qlora":
        # read from the installed package's metadata (bitsandbytes is never imported here);
        # only a run that trains on this machine needs it: a plan, a cloud estimate or a
        # launch plans for another machine, and says so instead of refusing
        ok, why = qlora_support(cfg.hw.backend)
        if not ok and purpose == "train":
            raise ConfigError(
                f"lane=qlora is not supported on backend {cfg.hw.backend} with {why}: "
                f"`pip install 'bitsandbytes>=0.50'`, or use lane=lora.", key="lane")
        if not ok:
            notes.append(f"lane=qlora cannot train on this machine ({why}; backend "
                         f"{cfg.hw.backend}): planned all the same; where it trains, install "
                         f"bitsandbytes>=0.50")
    if lane.method in ("lora", "qlora") and not lane.lora:
        raise ConfigError(f"lane {lane.name} (method {lane.method}) needs a `lora:` section.",
                          key="lane.lora")
    wanted = PRECISION_OF[cfg.hw.lightning.precision] \
        if lane.precision == schema.AUTO else lane.precision
    precision = wanted
    if wanted == "bf16" and not cfg.hw.bf16:
        precision = "fp32"
        notes.append(f"GPU_FALLBACK: precision bf16 → fp32 ({cfg.hw.name} has no bf16)")
    lane.precision = precision
    if purpose == "train" and cfg.rung.init == "pretrained" and not cfg.rung.tokenizer_bundled:
        from mens.source.resolve import check_weights
        check_weights(cfg, notes)
    if cfg.rung.revision is None and not cfg.rung.tokenizer_bundled and not cfg.rung.path:
        notes.append(f"rung {cfg.rung.name}: {cfg.rung.repo_id} is unpinned (revision null)")

    from mens.plan.family import resolve_family
    resolve_family(cfg, notes)   # the family's targets, experts and packing, written back
    seq_len = resolve_seq_len(cfg, notes, dataset)
    obj = card(lane).name           # the sampling objective's own section (grpo, distill)
    if "generation" in card(lane).memory_terms and \
            int(section(lane, obj).max_completion_length) >= seq_len:
        raise ConfigError(
            f"lane.{obj}.max_completion_length={section(lane, obj).max_completion_length} leaves "
            f"no room for the prompt in train.seq_len={seq_len} (a sampled row is prompt + "
            f"completion, the prompt cut to the rest): lower lane.{obj}.max_completion_length "
            f"or raise train.seq_len.", key=f"lane.{obj}.max_completion_length")
    if obj == "distill" and lane.distill.get("teacher_url") and lane.distill.teacher is None:
        notes.append(f"distill: the teacher is served at {lane.distill.teacher_url}: no teacher "
                     f"weights or logits here (plan term teacher = 0, the server's memory); "
                     f"the loss is the sampled-token reverse KL")
    if "generation" in card(lane).memory_terms and cfg.hw.backend == "cuda":
        notes.append(f"{obj} samples with transformers' generate on CUDA: vLLM colocated "
                     f"sampling is not built in this mens (its speed and memory are unmeasured)")
    t = cfg.train
    if lane.optimizer.lr == schema.AUTO:   # the rung's recommendation; the card says which
        rates = {"lora_lr": cfg.rung.lora_lr, "full_lr": cfg.rung.full_lr}
        lane.optimizer.lr = float(rates[card(lane).lr_key(lane)])
    paths = resolve_paths(cfg, lane, notes)
    world = resolve_devices(cfg, detection, purpose, notes)
    if cfg.hw.backend == "cpu" and cfg.hw.devices > 1:   # processes share this machine's RAM
        budget_gb /= cfg.hw.devices
        notes.append(f"hw.devices={cfg.hw.devices} on CPU: the processes share one machine's "
                     f"memory, so each plans within 1/{cfg.hw.devices} of the budget "
                     f"({budget_gb:.2f} GiB)")
    default_gb = cfg.rung.global_batch or t.default_global_batch
    gc = lane.gradient_checkpointing
    req = PlanRequest(
        arch=Arch.of(cfg.rung), lane=lane_model(lane, precision, t.init_adapter,
                                               cfg.spoke.admission.check, cfg.plan.contract),
        backend=cfg.hw.backend, budget_bytes=int(budget_gb * GiB), seq_len=seq_len,
        micro_batch=_auto(t.micro_batch), grad_accum=_auto(t.grad_accum),
        global_batch=_auto(t.global_batch), default_global_batch=default_gb,
        checkpointing=None if gc == schema.AUTO else bool(gc),
        packing=t.packing and card(lane).packs,
        margin=_margin(cfg.plan.uncalibrated_margin, notes, cfg.plan.contract),
        contract=cfg.plan.contract, tflops=cfg.hw.tflops_bf16,
        bandwidth_gbs=cfg.hw.get("bandwidth_gbs"), paths=tuple(paths.items()),
        world_size=world, strategy=cfg.hw.strategy, nodes=cfg.hw.nodes,
        link=hw_link(cfg.hw))
    p = plan(req)
    stale = stale_note(load_contract(cfg.plan.contract), p.cell)   # said, never silent
    if stale:
        notes.append(stale)
    if not p.fits:
        from dataclasses import replace
        p = replace(p, ways_out=ways_out(
            req, rungs={n: a for n, a in _smaller_rungs(cfg.rung.name, req.arch).items()
                        if a.experts or not req.lane.lora_experts},   # experts need experts
            tiers=_tier_budgets(cfg.hw),
            memory_for=lambda need: memory_needed(cfg.hw, need / GiB),
            memory_gb=cfg.hw.memory_gb))
    if lane.objective == "grpo":   # will its groups carry a signal? (said, warned above 0.8)
        from dataclasses import replace
        from mens.plan.signal import signal
        p = replace(p, signal=signal(int(lane.grpo.num_generations), str(lane.grpo.reward),
                                     float(lane.grpo.format_reward), t.init_adapter,
                                     cfg.spoke.name))
    t.seq_len, t.micro_batch, t.grad_accum = seq_len, p.shape.micro_batch, p.grad_accum
    t.global_batch = p.global_batch
    lane.gradient_checkpointing = p.shape.checkpointing
    if p.shape.generation_rows:   # grpo's rows per generate call, as planned (mens.plan.rl)
        lane.grpo.generation_batch_size = p.shape.generation_rows
    cfg.hw.strategy = p.strategy
    if p.strategy_why and world > 1:
        notes.append(f"strategy {p.strategy_why}")
    obj = OmegaConf.to_object(cfg)
    spec = RunSpec(
        **{f: freeze(getattr(obj, f)) for f in SECTIONS},
        detected=detection, budget_gb=round(budget_gb, 3), notes=tuple(notes),
        versions=_versions(), data_lock=tuple(dataset.lock) if dataset else
        tuple(corpus_lock(cfg.spoke.name)),
        teacher=freeze(obj.teacher) if asks_teacher(cfg.lane) else None,
        adapter=cfg.adapter or None)
    return spec, p


def asks_teacher(lane) -> bool:
    """Whether the lane's training asks the run's teacher (grpo.reward=teacher)."""
    return lane.objective == "grpo" and lane.grpo.reward == "teacher"


def _smaller_rungs(name: str, arch: Arch) -> dict:
    """The ladder's rungs below this one (for a `+rung=hf` model: those with fewer params)."""
    if name in LADDER:
        return {r: Arch.of(load_option("rung", r)) for r in reversed(LADDER[1:LADDER.index(name)])}
    mine = arch.params()["total"]   # a MoE rung or an HF model: the dense rungs with fewer
    below = {r: Arch.of(load_option("rung", r)) for r in reversed(LADDER[1:])}
    return {r: a for r, a in below.items() if a.params()["total"] < mine}


def _tier_budgets(hw) -> dict:
    """Budgets of the named tiers of the same backend (for 'a bigger tier')."""
    out = {}
    for name in option_names("hw"):
        t = load_option("hw", name)
        if t.backend == hw.backend and t.memory_gb is not None:
            out[t.name] = int(tier_budget(t, None)[2] * GiB)
    return out


def _versions() -> dict:
    from mens.resources import DIST   # mens's distribution name (PyPI's `mens` is another)

    out = {}
    for pkg in ("mens", "hydra-core", "omegaconf", "torch", "lightning", "transformers", "peft",
                "bitsandbytes"):
        try:
            out[pkg] = md.version(DIST if pkg == "mens" else pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


# Keys an earlier mens wrote into spec.yaml and that this one no longer has (nothing read
# them): a rerun, resume or export of such a run drops them and says so.
RETIRED = {"spoke.default_lane": "read by nothing (the lane is chosen with `lane=`)",
           "hw.lightning.devices": "replaced by hw.devices (and hw.nodes)",
           "hw.lightning.strategy": "replaced by hw.strategy, which the planner resolves"}


def load_rerun(run_dir: str) -> DictConfig:
    """A run dir's spec.yaml → a config that compiles to the same RunSpec."""
    import sys

    from mens.config.validate import validate
    from mens.run.rundir import RunDir
    from mens.run.telemetry import first as first_row

    run = RunDir(run_dir)
    if run.spec.is_file():
        saved = OmegaConf.load(run.spec)
    elif (first := first_row(run.telemetry)) is not None:   # it carries the resolved spec
        saved = OmegaConf.create({**first["spec"], "detected": first["spec"].get("detected")})
    else:
        raise ConfigError(f"{run_dir}: neither spec.yaml nor telemetry.jsonl there. Give a run "
                          f"directory that mens wrote (outputs/<date>/<time>_*/).", key="rerun")
    if "data" not in saved:   # an earlier mens: the spoke's corpus was the only data
        saved.data = {"source": "spoke"}
    if isinstance(saved.get("logger"), str):   # an earlier mens: `logger: wandb`, a plain key
        saved.logger = {"kind": saved.logger}
    for said in upgrade_lane(saved, f"{run_dir} was written by an earlier mens: "):
        print(f"mens: note: {said}", file=sys.stderr)
    for key, why in RETIRED.items():
        section, _, leaf = key.rpartition(".")
        node = OmegaConf.select(saved, section, default=None)
        if isinstance(node, DictConfig) and leaf in node:
            node.pop(leaf)
            print(f"mens: note: {run_dir} was written by an earlier mens: `{key}` is no longer "
                  f"a key ({why}); dropped", file=sys.stderr)
    cfg = OmegaConf.merge(OmegaConf.structured(schema.MensConfig),
                          {k: saved[k] for k in (*SECTIONS, "teacher", "adapter") if k in saved})
    if cfg.adapter:   # re-resolved from the pinned ref: this machine's hub cache, not the old path
        cfg.train.init_adapter = None
    if OmegaConf.is_missing(cfg, "teacher"):   # not a run's section: the group's default
        from mens.config.options import option_path
        cfg.teacher = OmegaConf.merge(OmegaConf.structured(schema.TeacherConfig),
                                      OmegaConf.load(option_path("teacher", "auto")))
    det = saved.get("detected")
    if det and not det.get("memory_overridden", False):
        cfg.hw.memory_gb = None          # memory was detected: detect it again here
    validate(cfg)
    return cfg
