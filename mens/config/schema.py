"""Typed schemas of every config group, registered in Hydra's ConfigStore.

The primary config (conf/mens.yaml) starts from `mens_schema`, so each group option merged into
it is checked against these dataclasses at compose time: a misspelt key in an option file or a
`train.max_steps=abc` fails there. Knobs that accept `auto` are typed `Any` (OmegaConf has no
Union of int and str) and are checked by `mens.config.validate` right after composition.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

AUTO = "auto"
# PEFT target names of every linear layer in a Qwen3 decoder layer: the one list of LoRA targets
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# DPO losses mens.objective.dpo implements (TRL's DPOTrainer loss_type names)
DPO_LOSSES = ("sigmoid", "hinge", "ipo")
# A lane is a method (how the weights train) × an objective (what they train toward); the
# objectives' torch-free facts are their cards in mens.config.objectives
METHODS = ("lora", "qlora", "full")
OBJECTIVES = ("sft", "dpo", "orpo", "simpo", "kto", "grpo", "distill")
GRPO_LOSSES = ("dapo", "grpo", "bnpo", "dr_grpo")   # TRL GRPOConfig.loss_type (dapo: default)
GRPO_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")  # TRL's
GRPO_REWARDS = ("pass", "partial", "teacher",   # mens.objective.rewards.KINDS
                "shuffled", "length")            # controls (issue #39), see rewards.py
GRPO_SCALES = ("group", "batch", "none")         # TRL's scale_rewards


@dataclass
class LightningDefaults:
    accelerator: str = "cpu"      # Lightning Trainer(accelerator=...)
    precision: str = "32-true"    # Trainer(precision=...) when lane.precision is auto


@dataclass
class HeadroomPolicy:
    # usable = memory_gb * advisory_frac - reserve_gb   (what the runtime can ever hand out)
    # budget = usable - max(frac * usable, min_gb)       (what the planner lets a run use)
    advisory_frac: float = 1.0    # Metal's working-set limit is ~3/4 of a Mac's RAM
    reserve_gb: float = 0.0       # CUDA context + driver, OS share
    frac: float = 0.10
    min_gb: float = 0.5


@dataclass
class LinkConfig:
    # How a tier's devices talk, for the gradient traffic in the step time (mens.plan.comm):
    # figures from datasheets, cited in each conf/hw file; a cluster's own can be given.
    intra: str = ""                      # within a node, e.g. "NVLink 4 (NVSwitch)", "PCIe Gen4 x16"
    intra_gbs: Optional[float] = None    # GB/s per device per direction; null: unknown (no comm time)
    inter: str = ""                      # between nodes, e.g. "8 × InfiniBand NDR 400 Gb/s"
    inter_gbs: Optional[float] = None    # GB/s per node per direction, all its NICs; null: unknown
    # ASSUMED share of those figures a ring collective achieves (NCCL's bus bandwidth): 0.8,
    # the sources in mens/plan/comm.py; 1.0 when intra_gbs / inter_gbs are measured busbw
    efficiency: float = 0.8


@dataclass
class HwConfig:
    name: str = MISSING
    backend: str = MISSING        # auto | cuda | mps | cpu
    description: str = ""
    memory_gb: Optional[float] = None   # total memory in GiB as labelled; null = detect here
    bf16: Optional[bool] = None         # null = detect
    tflops_bf16: Optional[float] = None  # dense, for time estimates; null = unknown
    bandwidth_gbs: Optional[float] = None  # memory bandwidth GB/s (datasheet); null = unknown
    lightning: LightningDefaults = field(default_factory=LightningDefaults)
    headroom: HeadroomPolicy = field(default_factory=HeadroomPolicy)
    link: LinkConfig = field(default_factory=LinkConfig)   # device-to-device links (comm time)
    # How a tier is recognised (a new tier is its one option file): mens.plan.hardware.cuda_tier
    # reads device_*, mens.cloud.catalog reads catalog_*; no device or name may match two tiers.
    device_names: List[str] = field(default_factory=list)   # regexes on torch's device name
    device_min_gb: float = 0.0               # ...matched when its memory (GiB) is at least this
    device_below_gb: Optional[float] = None  # ...and below this (null: no bound)
    catalog_names: List[str] = field(default_factory=list)   # SkyPilot accelerator names of it
    catalog_boards: Dict[str, str] = field(default_factory=dict)   # shared name → sxm|pcie|nvl
    # Several devices (mens.plan.planner plans per device; mens.train.strategy runs it):
    devices: Any = AUTO    # per node: auto = every visible accelerator of the backend (CPU: 1 process)
    nodes: int = 1         # SLURM / torchrun nodes; world size = devices × nodes
    strategy: str = AUTO   # auto (the planner chooses and says why) | single | ddp | fsdp2


@dataclass
class RungConfig:
    name: str = MISSING
    repo_id: Optional[str] = MISSING   # a Hugging Face model id (null only with rung.path)
    revision: Optional[str] = None   # null = unpinned (reported as such)
    commit: Optional[str] = None     # the snapshot commit a run resolved and used (spec.yaml)
    init: str = "pretrained"         # pretrained | random
    path: Optional[str] = None       # explicit local weights dir (skips the HF cache)
    download: bool = True            # fetch missing weights from the Hub after the plan fits
    family: str = "qwen3"            # config.json's model_type (mens.model.families)
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
    # Mixture of experts (0: dense): experts per layer, routed per token, each expert's MLP
    # width, and a shared expert's (Qwen3.5-MoE). A spec.yaml from before them reads dense.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    # Linear attention (Qwen3.5's Gated DeltaNet; 0: none): how many layers, and their shape
    linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
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
    # the one system prompt of the spoke: synthesis asks for answers under it, training adds it
    # where a record has none (data.system_prompt wins), serving uses it as the slot's default
    system_prompt: Optional[str] = None


DATA_FORMATS = ("auto", "messages", "sharegpt", "alpaca", "prompt_completion", "text",
                "preference")


@dataclass
class DataConfig:
    # the `data` group: `data=spoke` (the spoke's shipped corpus, the default), `data=file
    # data.path=…` or `data=hf data.name=org/ds` (mens.data.sources)
    source: str = MISSING            # spoke | file | hf
    path: Any = None                 # file: a path, a list of paths, or a glob (jsonl json parquet csv)
    name: Optional[str] = None       # hf: the dataset id (org/name)
    split: str = "train"             # hf: the split trained on
    revision: Optional[str] = None   # hf: a branch, tag or commit (null: main)
    format: str = "auto"             # auto (from the columns) | one of DATA_FORMATS
    columns: Dict[str, str] = field(default_factory=dict)   # mens field -> the data's column name
    system_prompt: Optional[str] = None   # prepended as a system turn where a record has none
    chat_template: Optional[str] = None   # a .jinja file or `chatml`: for a model without one
    enable_thinking: bool = False    # the template option (Qwen3): train and serve alike
    eval_path: Any = None            # a held-out file (file) or split name (hf); null: eval_fraction
    eval_fraction: float = 0.05      # held out by a hash of each record (stable as the file grows)
    min_rating: Optional[float] = None   # records with a `rating` below it are dropped
    tags: List[str] = field(default_factory=list)   # keep records with any of these `tags`
    dedup: bool = True               # remove exact duplicates (counted)
    decontam_n: int = 13             # n-gram size (words) of the eval-vs-train check; 0: off
    decontam_threshold: float = 0.5  # an eval record sharing this fraction of its n-grams is removed
    collateral: str = "spoke"        # spoke: also score the spoke's held-out split | none
    tools: Optional[str] = None      # a JSON/JSONL file of tool schemas for records listing none
    tool_format: str = "native"      # native: the template's own tool syntax | hermes (<tool_call>)
    on_bad: str = "error"            # a record that fits no format: error (exit 2) | skip (counted)


@dataclass
class LoraConfig:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    targets: List[str] = field(default_factory=lambda: list(LORA_TARGETS))
    # a mixture of experts: LoRA on every expert's fused weights too (PEFT target_parameters);
    # false: attention and the router only. An error on a dense family.
    experts: bool = False


@dataclass
class QuantConfig:
    type: str = "nf4"                # bitsandbytes 4-bit NormalFloat
    double_quant: bool = True        # quantise the absmax constants too (~0.4 bit/param saved)
    blocksize: int = 64              # only 64: what training's BitsAndBytesConfig uses


@dataclass
class OptimizerConfig:
    name: str = "adamw"              # adamw | adamw_8bit | sgd
    lr: Any = AUTO                   # auto: the rung's lora_lr (lora/qlora) or full_lr (full)
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])


# Each objective's section, with TRL's defaults (its *Config classes): only the selected
# objective's section is validated (mens.config.validate) and read.
@dataclass
class DpoConfig:
    beta: float = 0.1                # > 0: the temperature of the implicit reward
    loss: str = "sigmoid"            # sigmoid | hinge | ipo (DPO_LOSSES; TRL's loss_type names)


@dataclass
class OrpoConfig:
    beta: float = 0.1                # λ: the weight of the odds-ratio term beside the SFT loss


@dataclass
class SimpoConfig:
    beta: float = 2.0                # the reward scale of the length-normalised log-prob
    gamma_beta_ratio: float = 0.5    # the target margin γ as a fraction of β


@dataclass
class KtoConfig:
    beta: float = 0.1
    desirable_weight: float = 1.0    # λ_D: weight of records labelled desirable (label true)
    undesirable_weight: float = 1.0  # λ_U: weight of records labelled undesirable


@dataclass
class GrpoConfig:
    num_generations: int = 4         # completions sampled per prompt (the group)
    max_completion_length: int = 64  # tokens generated per completion
    temperature: float = 1.0         # of the sampling
    beta: float = 0.04               # KL weight to the reference (0: no reference pass); TRL 1.x
    #                                  defaults to 0, DeepSeekMath's GRPO used 0.04
    epsilon: float = 0.2             # the clip's lower side
    epsilon_high: Optional[float] = None   # the clip's upper side; null: epsilon
    loss_type: str = "dapo"          # dapo | grpo | bnpo | dr_grpo (GRPO_LOSSES; TRL's default)
    reward: str = "partial"          # pass | partial (the spoke's own oracle; partial: the share
    #                                  of an answer's pieces that pass) | teacher (the teacher= judge)
    scale_rewards: str = "group"     # group | batch | none (TRL's scale_rewards; none: Dr. GRPO)
    format_reward: float = 0.0       # weight of the format reward beside the oracle's
    oracle_timeout_s: float = 10.0   # per completion; a timeout is a failed reward
    # local: transformers `generate` in the step; server: an OpenAI-compatible endpoint, the
    # adapter reloaded after each optimizer step (mens.objective.rollout_server)
    generation: str = "local"
    server_url: Optional[str] = None  # generation=server; null: mens starts `mens serve` itself
    # the server's log-probs correct the loss as TRL's vllm_importance_sampling_* do
    importance_sampling_mode: str = "sequence_mask"   # token|sequence _ truncate|mask (TRL's)
    importance_sampling_clip_max: float = 3.0          # TRL's C_max (vllm_importance_sampling_cap)
    use_bias_correction_kl: bool = True   # the KL term × the ratio (TRL 1.16's default, True
    #                                  since huggingface/trl#6503; False in TRL before it)


@dataclass
class DistillConfig:
    # On-policy distillation (TRL's GKDConfig names and defaults, where mens has the knob)
    teacher: Optional[str] = None    # a rung name (conf/rung, e.g. tiny) or an HF model directory
    #                                  sharing the student's tokenizer (TRL: teacher_model_name_or_path)
    # or a served teacher (exactly one of the two): an OpenAI-compatible base URL whose server
    # scores token ids with vLLM's prompt_logprobs (mens serve, vLLM); beta and lmbda must be 1
    teacher_url: Optional[str] = None     # e.g. http://127.0.0.1:8000/v1
    teacher_model: Optional[str] = None   # the model the requests name (null: its first /v1/models)
    teacher_api_key_env: Optional[str] = None   # the NAME of the env var holding its key (never the key)
    beta: float = 0.5                # generalised JSD: 0 forward KL, 1 reverse KL (TRL's default)
    temperature: float = 0.9         # of the student's sampling (TRL's default; the loss uses 1)
    lmbda: float = 0.5               # the share of steps on the student's own samples (TRL's)
    seq_kd: bool = False             # off-policy steps on the teacher's samples, not the data's
    max_completion_length: int = 128   # tokens sampled per completion (TRL's max_new_tokens)


@dataclass
class LaneConfig:
    name: str = MISSING
    method: str = MISSING            # lora | qlora | full (METHODS): how the weights train
    objective: str = "sft"           # sft | dpo | orpo | simpo | kto | grpo | distill (OBJECTIVES)
    precision: str = AUTO            # auto | bf16 | fp16 | fp32  (auto: the tier's default)
    gradient_checkpointing: Any = AUTO   # auto | true | false
    lora: Optional[LoraConfig] = None
    quantization: QuantConfig = field(default_factory=QuantConfig)   # read by method qlora only
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    dpo: DpoConfig = field(default_factory=DpoConfig)
    orpo: OrpoConfig = field(default_factory=OrpoConfig)
    simpo: SimpoConfig = field(default_factory=SimpoConfig)
    kto: KtoConfig = field(default_factory=KtoConfig)
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)


@dataclass
class CurriculumConfig:
    name: str = MISSING
    epochs: int = MISSING
    caps: List[int] = MISSING        # max difficulty (1-10) seen in epoch e; len == epochs
    phases: List[str] = field(default_factory=lambda: [
        "warmup", "syntax", "reasoning", "tool_call", "multi_turn", "orchestration", "agentic"])
    # how many phases apart two records may share a packed row (mens.data.pack): null = any
    # (the least padding), 0 = a row holds one phase's records
    pack_window: Optional[int] = None


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
    # The training paths (issue #13). auto: the paths the memory contract's cells were fitted on
    # (conf/contract.yaml `paths`); another choice plans with the analytic terms, uncalibrated.
    attention: str = AUTO            # auto | block_mask (4-D mask) | per_record (no b·s² mask)
    loss: str = AUTO                 # auto | full_logits | chunked (the head chunk by chunk)
    heap: str = AUTO                 # auto | default (glibc's) | fixed (8 MiB mmap threshold, CPU)


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
    # the NAME of the env var holding the bearer token (never the key itself: Hydra saves the
    # command line into .hydra/overrides.yaml); null: no key asked
    api_key_env: Optional[str] = None
    require_gate: bool = True        # promote only runs whose gate.json passes (mens.gate)
    adapters: List[str] = field(default_factory=list)   # more slots: NAME=DIR or DIR
    device: str = "auto"             # auto | cpu | cuda | mps
    dtype: str = "auto"              # auto: fp32 on CPU (no fast half type), bf16/fp16 on GPUs
    max_tokens: int = 256            # when a request sets none (and the context allows)
    max_body_bytes: int = 1048576    # a larger request body gets 413
    max_header_bytes: int = 16384    # a larger request line + headers gets 431 (h11's default)
    # requests that may wait for the one model thread (beyond: 503 + Retry-After, at once)
    max_queue: int = 32
    # POST /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM's names; mens.serve.lora_admin):
    # off unless asked, as vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING (the server reads given paths)
    runtime_lora: bool = False
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
    # record files (JSONL/dirs/globs) whose finished measurement of the same job (role, cell,
    # architecture, shape, paths, world) counts as done: a sweep longer than one sitting goes on
    # from committed records instead of starting again
    skip_recorded: List[str] = field(default_factory=list)
    keep_outputs: bool = False       # keep checkpoints/, model/, adapter/ (random weights: usually not)
    weights_cache: str = "outputs/calibration/weights"   # random weights written for qlora rungs
    # python -m mens.fit: records → fitted cells in the contract, and a report
    records: List[str] = field(default_factory=lambda: ["calibration/cpu.jsonl",
                                                        "calibration/external"])  # files, dirs, globs
    save_records: Optional[str] = None   # also write every collected record to this JSONL
    out: Optional[str] = None        # written contract (null: plan.contract; else the shipped one, checkout only)
    check: bool = False              # compare a fresh fit with the contract instead of writing it
    report: Optional[str] = None     # report dir (null: the command's run dir)


@dataclass
class CloudConfig:
    # mens cloud estimate | launch | catalog refresh (mens.cloud)
    catalog: Optional[str] = None    # offers CSV; null = the dated catalogue mens ships
    providers: List[str] = field(default_factory=list)   # [] = every provider in the catalogue
    mfu: Optional[float] = None      # null: the plan's speed model (measured); a number: ASSUMED MFU instead
    setup_hours: float = 0.25        # set-up + download time added to each estimate
    max_age_days: int = 90           # a catalogue older than this is said on every estimate
    top: int = 20                    # rows of the ranked table (estimate.json keeps all)
    offer: Optional[str] = None      # launch: an offer id from estimate.json; null = cheapest that fits
    spot: bool = False               # launch on spot capacity
    sky_catalogs: str = "~/.sky/catalogs/v8"   # catalog refresh reads <cloud>/vms.csv here
    tokens: Optional[int] = None     # training tokens of one run; null = the spoke's corpus × epochs (estimated)


@dataclass
class LaunchConfig:
    # mens launch torchrun | slurm | kubeflow (mens.launch): a file that starts `python -m mens
    # <the same overrides>` on hw.nodes nodes × hw.devices processes; mens spawns nothing itself.
    # mens launch ray: Ray Train's workers start them on a Ray cluster (mens.launch.ray)
    # torchrun: host:port of the c10d store on node 0, which every node must reach; null = one
    # node only (127.0.0.1:29500, torchrun's default port)
    rdzv_endpoint: Optional[str] = None
    # torchrun --max-restarts (also sky.yaml's with hw.nodes>1); ray: FailureConfig(max_failures)
    max_restarts: int = 0
    partition: Optional[str] = None  # slurm: #SBATCH --partition; null = the cluster's default
    account: Optional[str] = None    # slurm: #SBATCH --account; null = the user's default
    time: Optional[str] = None       # slurm: #SBATCH --time (e.g. 1-00:00:00); null = partition's
    image: Optional[str] = None      # kubeflow: a container image with this mens installed
    runtime: str = "torch-distributed"   # kubeflow: the ClusterTrainingRuntime it runs on
    namespace: Optional[str] = None  # kubeflow: metadata.namespace; null = kubectl's current
    secret: str = "mens-secrets"     # kubeflow: the Secret whose HF_TOKEN / WANDB_API_KEY keys the pods read
    run_root: str = "/mnt/mens/outputs"   # kubeflow: the pods' run dirs (a volume the runtime mounts)
    # ray: the running cluster to start the workers on (host:port, ray://host:port, auto);
    # null = a local Ray started for this run on this machine
    ray_address: Optional[str] = None


@dataclass
class RecommendConfig:
    # mens recommend: recommendation.md for one machine (mens.cloud.recommend)
    rungs: List[str] = field(default_factory=lambda: ["0.6b", "1.7b", "4b", "8b", "14b", "32b",
                                                      "gpt-oss-20b", "qwen3-30b-a3b"])
    lanes: List[str] = field(default_factory=lambda: ["lora", "qlora", "full"])


# --- teachers for the data studio (issue #15): `teacher=` group, mens.synth.teacher.routing
TEACHER_CAPABILITIES = ("json_schema",)   # json_schema: honours response_format's json_schema
# the shipped conf/teacher options, and `custom` for a user's own file with `candidates:`
TEACHER_TIERS = ("free", "efficient", "balanced", "genius", "auto", "endpoint", "local", "custom")


@dataclass
class TeacherEndpoint:
    # one candidate of a cascade: an OpenAI-compatible chat endpoint and what it costs
    name: str = MISSING              # the label in stats and errors (e.g. openai-gpt-5-mini)
    base_url: str = MISSING          # e.g. https://api.openai.com/v1, http://127.0.0.1:11434/v1
    model: str = MISSING             # the model id the endpoint knows
    api_key_env: Optional[str] = None   # the NAME of the env var holding the key (never the key)
    price_in_per_mtok: Optional[float] = None    # USD per million prompt tokens; null: unknown
    price_out_per_mtok: Optional[float] = None   # USD per million completion tokens; null: unknown
    price_date: Optional[str] = None     # when the price was read (YYYY-MM-DD)
    price_source: Optional[str] = None   # where it was read (a URL)
    capabilities: List[str] = field(default_factory=list)   # TEACHER_CAPABILITIES it has


@dataclass
class TeacherConfig:
    tier: str = MISSING              # TEACHER_TIERS (custom: a user's conf/teacher/NAME.yaml)
    candidates: List[TeacherEndpoint] = field(default_factory=list)   # tried in order
    # teacher=endpoint: the one endpoint (base_url and model required)
    base_url: Optional[str] = None
    model: Optional[str] = None
    api_key_env: Optional[str] = None   # the NAME of the env var holding the key
    prefer_local: bool = False       # conf/teacher/local.yaml's candidates go first
    concurrency: int = 4             # requests in flight at once
    max_retries: int = 4             # mens's own retries of 429 / 5xx / timeouts (openai's: 0)
    backoff_s: float = 1.0           # first retry's wait; doubles each time (Retry-After wins)
    timeout_s: float = 120.0         # per request
    temperature: float = 0.7
    max_tokens: int = 4096           # per reply


# Prompt strategies of `mens data synth` (mens.synth.synth)
SYNTH_STRATEGIES = ("zero_shot", "few_shot_seed", "cot_distill", "oracle_repair")


@dataclass
class TreeConfig:
    """`mens data tree expand|prune|add|regen` (mens.synth.tree): the dataset's tree.yaml."""
    depth: int = 3                   # expand: levels below the root
    branching: int = 4               # expand: subtopics asked for per node
    node: Optional[str] = None       # prune / add / regen: the node id it acts on
    label: Optional[str] = None      # add: the new child's label
    description: str = ""            # add: the new child's description


@dataclass
class SynthConfig:
    """`mens data synth` (mens.synth.synth): leaf-conditioned synthesis into a dataset dir."""
    out: Optional[str] = None        # the dataset dir; null: datasets/<spoke>
    per_leaf: int = 8                # samples asked for per leaf
    strategy: str = "zero_shot"      # SYNTH_STRATEGIES
    repair_turns: int = 2            # repair turns after an oracle failure (0: none)
    seed_examples: int = 3           # few_shot_seed / oracle_repair: k examples of the spoke
    keep_reasoning: bool = False     # cot_distill: keep the reasoning in the trained answer
    seed: int = 0                    # sent to the teacher (endpoints that honour it) and for picks
    oracle_timeout_s: float = 10.0   # per candidate, in the oracle's child process
    oracle_memory_mb: int = 1024     # the oracle child's address-space limit
    tools: Optional[str] = None      # a JSON/JSONL file of tool schemas: tool-using records, every call validated (jsonschema)


@dataclass
class CurateConfig:
    """`mens data curate list|rate|tag|untag|edit|clean` (mens.synth.curate)."""
    topic: Optional[str] = None      # filter: topic path prefix (`loops` or `shell/loops`)
    tag: Optional[str] = None        # filter: records with this tag
    verdict: Optional[str] = None    # filter: passed | repaired | unverified
    min_rating: Optional[float] = None   # filter: rating >= this (unrated records do not match)
    id: Optional[str] = None         # filter: one record id
    rating: Optional[int] = None     # rate: the 1-5 rating to set
    tags: List[str] = field(default_factory=list)   # tag / untag: the tags to add / remove
    response: Optional[str] = None   # edit: the new assistant answer (the original is kept)
    near_dup: float = 0.8            # clean: Jaccard of word n-grams at which a record is a near-duplicate
    near_dup_n: int = 3              # clean: n-gram size (words) of the near-duplicate check
    eval: List[str] = field(default_factory=list)   # clean: more eval files to decontaminate against


@dataclass
class LadderConfig:
    """`mens ladder` (mens.ladder): the rung × spoke matrix and each cell's state."""
    runs: str = "outputs"            # where run dirs are looked for (spec.yaml + summary.json)


@dataclass
class EvalConfig:
    """`mens eval` (mens.eval): standard benchmarks (lm-evaluation-harness), in-domain oracle
    pass@k, an optional judge — every metric with a 95 % interval, base and tuned paired."""
    tasks: List[str] = field(default_factory=list)   # lm-eval tasks or groups by name
    include_path: Optional[str] = None   # a dir of the user's own lm-eval task YAMLs
    limit: Optional[float] = None    # lm-eval: items per task (int) or a fraction (< 1); null: all
    num_fewshot: Optional[int] = None   # null: each task's own default
    batch_size: Any = AUTO           # auto: the largest the eval plan fits; or an int
    chat_template: Any = AUTO        # auto: the model's chat template for generation tasks when it has one
    max_length: Optional[int] = None    # lm-eval's context window; null: min(the rung's, 4096)
    in_domain: bool = True           # the spoke's held-out prompts: oracle pass@1 / pass@k + loss
    collateral: bool = True          # every other spoke's held-out prompts: loss + greedy pass@1
    max_prompts: int = 64            # held-out prompts per spoke (all of them, capped here)
    k: int = 4                       # samples per prompt for pass@k (plus one greedy answer)
    temperature: float = 0.8         # of the k samples
    top_p: float = 0.95
    max_new_tokens: int = 256        # per answer
    judge: Optional[str] = None      # teacher: pairwise base-vs-tuned through the teacher cascade
    judge_prompts: int = 16          # held-out prompts the judge sees (each in both orders)
    confidence: float = 0.95         # of every interval
    bootstrap: int = 2000            # resamples of the items (paired between base and tuned)
    min_items: int = 20              # fewer items: a gain is "too few to judge" (never significant; the gate fails)
    seed: int = 0
    models: List[str] = field(default_factory=lambda: ["base", "tuned"])   # base | tuned (the adapter through PEFT)
    out: Optional[str] = None        # null: the run dir (or this command's own dir for a base)


@dataclass
class GateConfig:
    """`mens gate run=DIR` (mens.gate): reads `mens eval`'s results (running what is missing) and
    passes when the in-domain gain is significant and nothing else regresses with confidence."""
    metric: str = AUTO               # in-domain gain on: auto (pass@1 with an oracle, else loss) | pass@1 | pass@k | loss
    min_gain: float = 0.005          # the gain's interval must lie above this (a fraction: 0.5 points of a rate, 0.5 % of the loss)
    max_regression: float = 0.05     # a collateral metric confidently losing more than this fails
    guard_tasks: List[str] = field(default_factory=list)   # lm-eval tasks guarded for regression
    max_prompts: int = 64            # held-out prompts per spoke
    k: int = 4                       # samples per prompt (pass@k)
    max_new_tokens: int = 256        # per answer
    collateral: bool = True          # guard every other spoke too


@dataclass
class PushConfig:
    """`mens push run=DIR push.repo=ORG/NAME` and `mens data push synth.out=DIR push.repo=…`
    (mens.push): the run's artifacts (or a synthesized dataset) to the Hugging Face Hub, with a
    card rendered from the evidence in the dir. The token: HF_TOKEN in the environment only."""
    repo: Optional[str] = None       # org/name on the Hub (HF_ENDPOINT: another Hub); required
    private: bool = True             # a repo push creates is private (an existing one keeps its visibility)
    branch: Optional[str] = None     # commit to this branch (created from push.revision when missing); null: main
    revision: Optional[str] = None   # where a new push.branch starts (a branch, tag or commit); null: main
    merged: bool = False             # also the merged model (base + adapter), into <repo> beside the adapter
    gguf: bool = False               # also the GGUFs + Modelfile, into <repo>-GGUF (the Hub's convention)
    gguf_repo: Optional[str] = None  # null: <push.repo>-GGUF
    dry_run: bool = False            # write exactly what would be uploaded into <dir>/push/, upload nothing
    message: Optional[str] = None    # the commit message; null: one naming the run and its spec


@dataclass
class AfkConfig:
    """`mens afk` (mens.afk): the unattended queue — each cell planned, based, trained, gated."""
    # rung/spoke ids (`afk.cells=[tiny/vox_lang]`); []: every cell missing or stale that fits
    cells: List[str] = field(default_factory=list)
    dir: str = "outputs/afk"         # queue.json, control.json, logs/ and runs/<item>/ live here
    overrides: List[str] = field(default_factory=list)   # appended to every item's training command
    gate: bool = True                # gate each trained run (mens gate) before it counts as done
    promote: bool = False            # a run whose gate passes: promoted on serve.host:serve.port
    retry_failed: bool = False       # run again the items an earlier `mens afk` recorded as failed
    max_attempts: int = 3            # starts of one item (a resume after a crash counts) before it fails
    nice: int = 10                   # niceness added to every child (0-19): the machine stays usable
    # a child is stopped when its RSS passes planned peak × this + memory_overhead_gb (cpu and mps,
    # where the plan is of host memory); null: no limit
    memory_factor: Optional[float] = 1.5
    memory_overhead_gb: float = 2.0  # RSS besides the planned window (Python, torch, libraries)
    poll_s: float = 1.0              # seconds between reads of the child's RSS and the control file


@dataclass
class StudioConfig:
    """`mens studio` (mens.studio): the local web app over the ladder, jobs, gates and serving."""
    host: str = "127.0.0.1"          # any other bind needs studio.token_env (else exit 2)
    port: int = 8090                 # 0: any free port (printed)
    token_env: Optional[str] = None  # the NAME of the env var holding the access token, never the value
    runs: str = "outputs"            # run dirs it lists, and where the jobs it launches go
    datasets: str = "datasets"       # the data studio's dataset dirs (mens data synth / curate)
    recipes: str = "conf/recipe"     # where `save as recipe` writes NAME.yaml (+recipe=NAME finds it)
    max_body_bytes: int = 65536      # a larger request body gets 413
    # more Host names it answers to beyond its bound addresses (a DNS name, a proxy's name:port)
    allowed_hosts: List[str] = field(default_factory=list)


@dataclass
class MensConfig:
    hw: HwConfig = MISSING           # not in the defaults list: `+hw=NAME`, else auto
    rung: RungConfig = MISSING       # not in the defaults list: `+rung=NAME`, else tiny
    spoke: SpokeConfig = MISSING
    data: DataConfig = MISSING       # the `data` group (default: spoke)
    lane: LaneConfig = MISSING
    curriculum: CurriculumConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    rerun: Optional[str] = None      # a run dir: re-launch from its spec.yaml (new run dir)
    resume: Optional[str] = None     # a run dir: continue it from its last checkpoint
    logger: LoggerConfig = MISSING   # the `logger` group (default: wandb)
    teacher: TeacherConfig = MISSING   # the `teacher` group (default: auto), mens.synth.teacher
    run: Optional[str] = None        # a finished run dir: what export / serve / compare read
    # a PEFT adapter instead of a run: a Hub repo id (org/name, org/name@revision) or a local dir;
    # train continues from it, eval / export / serve read it (mens.source.hub.fetch_adapter)
    adapter: Optional[str] = None
    export: ExportConfig = field(default_factory=ExportConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    calibrate: CalibrateConfig = field(default_factory=CalibrateConfig)
    cloud: CloudConfig = field(default_factory=CloudConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    recommend: RecommendConfig = field(default_factory=RecommendConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    synth: SynthConfig = field(default_factory=SynthConfig)
    curate: CurateConfig = field(default_factory=CurateConfig)
    afk: AfkConfig = field(default_factory=AfkConfig)
    ladder: LadderConfig = field(default_factory=LadderConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    push: PushConfig = field(default_factory=PushConfig)
    studio: StudioConfig = field(default_factory=StudioConfig)


# Knobs that accept `auto` or a positive int (checked after compose).
AUTO_INTS = ("train.seq_len", "train.micro_batch", "train.grad_accum", "train.global_batch",
             "hw.devices")
# The training paths and their choices (besides auto): what mens.plan.memory models
TRAIN_PATHS = {"attention": ("block_mask", "per_record"), "loss": ("full_logits", "chunked"),
               "heap": ("default", "fixed")}


def register() -> None:
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="mens_schema", node=MensConfig)
    if not OmegaConf.has_resolver("mens_devices"):   # hw.devices for a launcher: auto → 1
        OmegaConf.register_new_resolver(
            "mens_devices", lambda v: 1 if v in (None, AUTO) else int(v))
