"""After the gate, what leaves the run dir: `export` (merged model, GGUFs, Modelfile), `serve`
(the OpenAI-compatible server), `push` (the Hub), and the two long-running hosts of them,
`afk` (the unattended queue) and `studio` (the web app), with their valid values."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from mens.config.ranges import Range, count, nonneg, pos


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
    # one request's rows (prompts × n) × (longest prompt + max_tokens): the tokens its KV cache
    # holds at once (Qwen3-8B in bf16: ~9 GiB at 65536); beyond: 400, before any model work. A
    # GRPO run's rollout server gets its window in requests the plan sizes under this cap
    # (lane.grpo.generation=server, lane.grpo.generation_batch_size: mens.plan.rl.calls)
    max_batch_tokens: int = 65536
    # POST /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM's names; mens.serve.lora_admin):
    # off unless asked, as vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING (the server reads given paths)
    runtime_lora: bool = False
    admin: Optional[str] = None      # promote | rollback | aliases: ask the running server, exit
    admin_spoke: Optional[str] = None
    admin_slot: Optional[str] = None   # promote: this slot (default: the spoke's challenger)


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


# Every number of these sections and its valid values (mens.config.validate): null is accepted
# wherever the field is Optional (its meaning is in the note); `[]`: every list item.
RANGES = {
    "serve.port": Range(lo=0, hi=65535, integer=True, example="8089",
                        note="0 takes any free port"),
    "serve.max_tokens": count("tokens when a request sets none", "256"),
    "serve.max_body_bytes": count("bytes; a larger request body gets 413", "1048576"),
    "serve.max_header_bytes": count("bytes; larger request headers get 431", "16384"),
    "serve.max_queue": Range(lo=0, integer=True, example="32",
                             note="requests waiting for the model; more get 503"),
    "serve.max_batch_tokens": count("tokens one request's rows × (prompt + max_tokens) may "
                                    "hold; more get 400", "65536"),
    "studio.port": Range(lo=0, hi=65535, integer=True, example="8090",
                         note="0 takes any free port"),
    "studio.max_body_bytes": count("bytes; a larger request body to the studio gets 413",
                                   "65536"),
    "afk.max_attempts": count("starts of one queue item before it is recorded as failed", "3"),
    "afk.nice": Range(lo=0, hi=19, integer=True, example="10",
                      note="the niceness added to the queue's children (19: lowest priority)"),
    "afk.memory_factor": Range(lo=1, example="1.5",
                               note="× the planned peak (+ afk.memory_overhead_gb) a child's RSS "
                                    "may reach; null: no limit"),
    "afk.memory_overhead_gb": nonneg("GiB of RSS a child has besides the planned window", "2"),
    "afk.poll_s": pos("seconds between reads of the child's RSS and the control file", "1"),
}
# The strings with a fixed set of values
CHOICES = {
    "serve.device": ["auto", "cpu", "cuda", "mps"],
    "serve.dtype": ["auto", "fp32", "bf16", "fp16"],
}
