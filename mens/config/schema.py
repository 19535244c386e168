"""Typed schemas of every config group, registered in Hydra's ConfigStore.

The primary config (conf/mens.yaml) starts from `mens_schema`, so each group option merged into
it is checked against these dataclasses at compose time: a misspelt key in an option file or a
`train.max_steps=abc` fails there. Knobs that accept `auto` are typed `Any` (OmegaConf has no
Union of int and str) and are checked by `mens.config.validate` right after composition.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

AUTO = "auto"
# PEFT target names of every linear layer in a Qwen3 decoder layer: the one list of LoRA targets
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# DPO losses mens.train.module implements (TRL's DPOTrainer loss_type names)
DPO_LOSSES = ("sigmoid", "hinge", "ipo")


@dataclass
class LightningDefaults:
    accelerator: str = "cpu"      # Lightning Trainer(accelerator=...)
    precision: str = "32-true"    # Trainer(precision=...) when lane.precision is auto
    strategy: str = "auto"
    devices: int = 1


@dataclass
class HeadroomPolicy:
    # usable = memory_gb * advisory_frac - reserve_gb   (what the runtime can ever hand out)
    # budget = usable - max(frac * usable, min_gb)       (what the planner lets a run use)
    advisory_frac: float = 1.0    # Metal's working-set limit is ~3/4 of a Mac's RAM
    reserve_gb: float = 0.0       # CUDA context + driver, OS share
    frac: float = 0.10
    min_gb: float = 0.5


@dataclass
class HwConfig:
    name: str = MISSING
    backend: str = MISSING        # auto | cuda | mps | cpu
    description: str = ""
    memory_gb: Optional[float] = None   # total memory in GiB as labelled; null = detect here
    bf16: Optional[bool] = None         # null = detect
    tflops_bf16: Optional[float] = None  # dense, for time estimates; null = unknown
    lightning: LightningDefaults = field(default_factory=LightningDefaults)
    headroom: HeadroomPolicy = field(default_factory=HeadroomPolicy)


@dataclass
class RungConfig:
    name: str = MISSING
    repo_id: str = MISSING
    revision: Optional[str] = None   # null = unpinned (reported as such)
    init: str = "pretrained"         # pretrained | random
    path: Optional[str] = None       # explicit local weights dir (skips the HF cache)
    hidden_size: int = MISSING
    intermediate_size: int = MISSING
    num_hidden_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_key_value_heads: int = MISSING
    head_dim: int = MISSING
    vocab_size: int = MISSING
    tie_word_embeddings: bool = MISSING
    max_position_embeddings: int = MISSING
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tokenizer_bundled: bool = False  # true only for the embedded tiny rung
    # What `lane.optimizer.lr: auto` and an auto global batch resolve to for this rung (the
    # usual LoRA / full fine-tuning recipes; a few-million-parameter model wants a larger lr).
    lora_lr: float = 2.0e-4
    full_lr: float = 1.0e-5
    global_batch: Optional[int] = None   # null: train.default_global_batch


@dataclass
class SourceConfig:
    name: str = MISSING
    weight: float = MISSING          # mix weight; normalised over the spoke's sources
    path: str = MISSING              # JSONL under the spoke's corpus folder
    kind: str = "sft"                # sft | preference


@dataclass
class AdmissionConfig:
    check: str = MISSING             # name of the validator that guards this spoke's records
    tool: Optional[str] = None       # external tool the check needs (if absent: record unverified)
    description: str = ""


@dataclass
class SpokeConfig:
    name: str = MISSING
    domain: str = MISSING            # one-line domain profile
    profile: List[str] = field(default_factory=list)   # what the spoke teaches
    min_rating: float = 3.0
    preference_pairs: bool = False   # ships chosen/rejected pairs (dpo lane needs them)
    seq_len_hint: int = 1024         # declared target, used only when no length manifest exists
    sources: List[SourceConfig] = field(default_factory=list)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)


@dataclass
class LoraConfig:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    targets: List[str] = field(default_factory=lambda: list(LORA_TARGETS))


@dataclass
class QuantConfig:
    type: str = "nf4"                # bitsandbytes 4-bit NormalFloat
    double_quant: bool = True        # quantise the absmax constants too (~0.4 bit/param saved)
    blocksize: int = 64              # only 64: what training's BitsAndBytesConfig uses


@dataclass
class OptimizerConfig:
    name: str = "adamw"              # adamw | adamw_8bit | sgd
    lr: Any = AUTO                   # auto: the rung's lora_lr (lora/qlora/dpo) or full_lr
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])


@dataclass
class DpoConfig:
    beta: float = 0.1                # > 0: the temperature of the implicit reward
    loss: str = "sigmoid"            # sigmoid | hinge | ipo (DPO_LOSSES; TRL's loss_type names)


@dataclass
class LaneConfig:
    name: str = MISSING
    kind: str = MISSING              # lora | qlora | full | dpo
    precision: str = AUTO            # auto | bf16 | fp16 | fp32  (auto: the tier's default)
    gradient_checkpointing: Any = AUTO   # auto | true | false
    lora: Optional[LoraConfig] = None
    quantization: Optional[QuantConfig] = None
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    dpo: Optional[DpoConfig] = None


@dataclass
class CurriculumConfig:
    name: str = MISSING
    epochs: int = MISSING
    caps: List[int] = MISSING        # max difficulty (1-10) seen in epoch e; len == epochs
    phases: List[str] = field(default_factory=lambda: [
        "warmup", "syntax", "reasoning", "tool_call", "multi_turn", "orchestration", "agentic"])


@dataclass
class TrainConfig:
    seq_len: Any = AUTO              # auto: from the spoke's length manifest
    micro_batch: Any = AUTO          # auto: largest that fits the plan
    grad_accum: Any = AUTO           # auto: global_batch / micro_batch
    global_batch: Any = AUTO         # auto: default_global_batch
    default_global_batch: int = 16
    packing: bool = True
    max_steps: int = -1              # -1: run the curriculum's epochs
    warmup_ratio: float = 0.03
    schedule: str = "cosine"
    grad_clip: float = 1.0
    seed: int = 0
    init_adapter: Optional[str] = None   # start from this PEFT adapter (DPO after SFT)
    checkpoint_every: int = 50           # optimizer steps between checkpoints
    eval_every: int = 0                  # steps between held-out evals in training (0: off)
    eval_max_records: Optional[int] = None   # score at most this many held-out records (null: all)


DEFAULT_WANDB_PROJECT = "mens"   # logger.project when neither it nor $WANDB_PROJECT is set


@dataclass
class LoggerConfig:
    # the `logger` group: `logger=wandb|csv|tensorboard|none` (Lightning's own loggers)
    kind: str = MISSING              # wandb (offline unless $WANDB_MODE) | csv | tensorboard | none
    project: Optional[str] = None    # wandb project; null: $WANDB_PROJECT, else `mens`
    entity: Optional[str] = None     # wandb entity; null: $WANDB_ENTITY, else wandb's default


@dataclass
class PlanConfig:
    force: bool = False              # train despite a refusal (loud, recorded)
    uncalibrated_margin: float = 0.25
    contract: Optional[str] = None   # null: the shipped conf/contract.yaml (mens.conf)


# --- after training: export (issue #5), serve / compare (issue #6), calibrate (issue #4).
# Each stage owns its block; all live in the one `mens` config so a typo fails at compose time.
@dataclass
class ExportConfig:
    out: Optional[str] = None        # null: <run dir>/export
    merged: bool = True              # HF model dir of base + adapter merged
    dtype: str = "auto"              # merged weights: auto (the base's) | bf16 | fp16 | fp32
    # merged-model GGUF types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 (gguf-py);
    # q4_k_m q5_k_m q6_k (llama.cpp's quantizer, needs llama-cpp-python)
    gguf: List[str] = field(default_factory=lambda: ["f16", "q8_0"])
    adapter_gguf: bool = True        # GGUF LoRA adapter (general.type = adapter)
    base_gguf: Optional[str] = "f16"  # base GGUF the adapter applies to (Modelfile FROM); null: none
    modelfile: bool = True           # Ollama Modelfile
    verify: bool = False             # check the GGUFs against a real llama.cpp


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8089                 # 0: any free port (printed, and written to serve.json)
    api_key: Optional[str] = None    # optional bearer token
    adapters: List[str] = field(default_factory=list)   # more slots: NAME=DIR or DIR
    device: str = "auto"             # auto | cpu | cuda | mps
    dtype: str = "auto"              # auto: fp32 on CPU (no fast half type), bf16/fp16 on GPUs
    max_tokens: int = 256            # when a request sets none (and the context allows)
    max_body_bytes: int = 1048576    # a larger request body gets 413
    max_header_bytes: int = 16384    # a larger request line + headers gets 431 (h11's default)
    admin: Optional[str] = None      # promote | rollback | aliases: ask the running server, exit
    admin_spoke: Optional[str] = None
    admin_slot: Optional[str] = None   # promote: this slot (default: the spoke's challenger)


@dataclass
class CompareConfig:
    runs: List[str] = field(default_factory=list)   # run dirs or globs (across-runs mode)
    out: Optional[str] = None        # null: the command's own run dir
    prompts: int = 8                 # before/after: the spoke's first N held-out prompts
    max_tokens: int = 48             # greedy tokens per answer (short: CPU-friendly)


@dataclass
class CalibrateConfig:
    # python -m mens.calibrate: one record per run dir (calibration.json)
    steps: int = 3                   # optimizer steps measured (step 2 is the first with Adam state)
    role: str = "fit"                # fit | held_out (held-out records test a fit, never enter it)
    eval_records: int = 2            # train.eval_max_records when that is null: evaluation is not measured
    max_rss_gb: Optional[float] = None        # guard: kill the child above this RSS → a lower-bound record
    max_predicted_gb: Optional[float] = None  # do not run shapes predicted above this → a skipped record
    timeout_s: float = 7200.0
    keep_outputs: bool = False       # keep checkpoints/, model/, adapter/ (random weights: usually not)
    weights_cache: str = "outputs/calibration/weights"   # random weights written for qlora rungs
    # python -m mens.fit: records → fitted cells in the contract, and a report
    records: List[str] = field(default_factory=lambda: ["calibration/cpu.jsonl"])  # files, dirs, globs
    save_records: Optional[str] = None   # also write every collected record to this JSONL
    out: Optional[str] = None        # written contract (null: plan.contract; else the shipped one, checkout only)
    check: bool = False              # compare a fresh fit with the contract instead of writing it
    report: Optional[str] = None     # report dir (null: the command's run dir)


@dataclass
class MensConfig:
    hw: HwConfig = MISSING           # not in the defaults list: `+hw=NAME`, else auto
    rung: RungConfig = MISSING       # not in the defaults list: `+rung=NAME`, else tiny
    spoke: SpokeConfig = MISSING
    lane: LaneConfig = MISSING
    curriculum: CurriculumConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    rerun: Optional[str] = None      # a run dir: re-launch from its spec.yaml (new run dir)
    resume: Optional[str] = None     # a run dir: continue it from its last checkpoint
    logger: LoggerConfig = MISSING   # the `logger` group (default: wandb)
    run: Optional[str] = None        # a finished run dir: what export / serve / compare read
    export: ExportConfig = field(default_factory=ExportConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    calibrate: CalibrateConfig = field(default_factory=CalibrateConfig)


# Knobs that accept `auto` or a positive int (checked after compose).
AUTO_INTS = ("train.seq_len", "train.micro_batch", "train.grad_accum", "train.global_batch")


def register() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="mens_schema", node=MensConfig)
