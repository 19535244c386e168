"""GRPO's rollouts through an OpenAI-compatible server (`lane.grpo.generation=server`, issue #39),
as TRL's GRPOTrainer generates through `trl vllm-serve` and verl/OpenRLHF through vLLM: the
trainer keeps the weights that learn, the server keeps a copy that samples, and only the
adapter travels between them.

    lane.grpo.server_url=null      mens starts `python -m mens.serve run=<the initial policy>
                                   serve.runtime_lora=true` on 127.0.0.1 (a free port), on the
                                   trainer's device and dtype, and stops it with the run
    lane.grpo.server_url=http://…  a server the user runs — `mens serve serve.runtime_lora=true`,
                                   or vLLM (`vllm serve BASE --enable-lora`, with
                                   VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and vLLM ≥ 0.10.2 for
                                   `return_token_ids`; `--logprobs-mode processed_logprobs`,
                                   as TRL asks, or ratios at temperature ≠ 1 are biased) on the
                                   same base, able to read this machine's paths. vllm is not installable here (no CUDA): mens
                                   is tested against `mens serve` only.

Each step: if the trainable weights changed since the server last got them (an optimizer step
ran), the adapter is saved and loaded under a fresh name (POST /v1/load_lora_adapter), the old
one unloaded (/v1/unload_lora_adapter) — the seconds are logged as `rollout/reload_s`. The
group's prompts, rendered by the run's encoder exactly as in-process sampling renders them
(mens.objective.sampling.prompt_ids), go as token ids in /v1/completions requests of at most
lane.grpo.generation_batch_size rows each (mens.plan.rl.calls: the window's calls, as
in-process; `n` = the group, `logprobs: 0`, `return_token_ids: true`): token ids both ways, so
no text round trip can change a token. The answer becomes the same Rollout in-process sampling returns, plus the
server's per-token log-probs (of the distribution it sampled from: mens.serve.batch).

Those log-probs correct the loss where the two copies disagree (another dtype, another kernel,
a quantized trainer): TRL's vLLM importance sampling (`vllm_importance_sampling_correction`,
TRL 1.16 `_generate_and_score_completions`), followed as it is — ρ = exp(trainer − server)
per token (or its sum per sequence), truncated at `importance_sampling_clip_max` or masked to 0
above it, multiplying the clipped surrogate before the KL term; logged under TRL's names
`sampling/importance_sampling_ratio/{min,mean,max}`, `sampling/sampling_logp_difference/
{mean,max}`. Where both copies agree, ρ = 1 and the loss is the local one.

LoRA and QLoRA only (the full lane would ship every weight each step: refused, exit 2). Under
several processes each rank starts (or names, under its own adapter names) its own server.

The server a run starts wants a bearer key (issue #49): its adapter routes read any path they
are given, so another process on the machine must not be able to use them. The key is random
(`secrets.token_urlsafe`), made per server, handed over in the environment variable that
`serve.api_key_env` names (KEY_ENV) — never on the command line, in a file or in a log — and
sent by this side with every request.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from mens.errors import ConfigError
from mens.model.generate import end_ids
from mens.objective.sampling import Rollout, prompt_rows

READY_S = 600.0         # a loaded 2-core box may take minutes to import torch and load a base
GEN_TIMEOUT_S = 3600.0  # one group's generation
KEY_ENV = "MENS_ROLLOUT_KEY"  # the variable the spawned server reads its key from


@dataclass
class ServerRollout(Rollout):
    sampling_logps: "torch.Tensor | None" = None   # (N, T) the server's, 0 past the end
    reload_s: float = math.nan                     # the adapter reload before it (NaN: none)
    generate_s: float = math.nan                   # the HTTP round trip of the generation


def importance(roll, logps, mask, grpo, rows: tuple | None = None):
    """TRL's vLLM importance-sampling correction → (weights (N, T) or (N, 1), metrics), or
    (None, {}) for an in-process rollout. logps: the trainer's (N, T), detached here (TRL's
    old_per_token_logps: the same weights, computed without grad); rows: (a, b), the rollout's
    rows logps covers (one micro-batch of the step's window), else all of them."""
    import torch

    if getattr(roll, "sampling_logps", None) is None:
        return None, {}
    sampled = roll.sampling_logps if rows is None else roll.sampling_logps[rows[0]:rows[1]]
    old, sampled = logps.detach(), sampled.to(logps.device, logps.dtype)
    m = mask.bool()
    diff = torch.nan_to_num((old - sampled) * mask, nan=0.0)           # (N, T)
    mode, cap = grpo.importance_sampling_mode, float(grpo.importance_sampling_clip_max)
    sequence = mode.startswith("sequence")
    ratio = torch.exp(diff.sum(-1, keepdim=True) if sequence else diff)   # (N, 1) or (N, T)
    if mode.endswith("truncate"):
        ratio = torch.clamp(ratio, max=cap)
    else:
        ratio = ratio.masked_fill(ratio > cap, 0.0)
    delta = (old - sampled).abs()[m & ~torch.isnan(sampled)]
    flat = ratio.flatten() if sequence else ratio[m]
    stats = {"sampling/sampling_logp_difference/mean": delta.mean() if delta.numel() else 0.0,
             "sampling/sampling_logp_difference/max": delta.max() if delta.numel() else 0.0,
             "sampling/importance_sampling_ratio/min": flat.min() if flat.numel() else 0.0,
             "sampling/importance_sampling_ratio/mean": flat.mean() if flat.numel() else 0.0,
             "sampling/importance_sampling_ratio/max": flat.max() if flat.numel() else 0.0,
             "rollout/reload_s": roll.reload_s, "rollout/generate_s": roll.generate_s}
    return ratio, {k: torch.as_tensor(float(v)) for k, v in stats.items()}


def save_adapter(model, path: Path) -> None:
    """The active adapter as PEFT saves it (adapter_config.json + adapter_model.safetensors),
    without the model card `save_pretrained` renders each time (a third of a tiny reload)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    name = model.active_adapter
    state = get_peft_model_state_dict(model, adapter_name=name)
    save_file({k: v.detach().contiguous() for k, v in state.items()},
              str(path / "adapter_model.safetensors"), metadata={"format": "pt"})
    model.peft_config[name].save_pretrained(str(path))


def _stop(proc, folder: str) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(folder, ignore_errors=True)


class RolloutServer:
    """The server side of one GRPO run: started (or named) in `start`, synced and asked in
    `generate`, which has mens.objective.sampling.generate's signature."""

    def __init__(self, spec, url: str | None, folder: Path, proc=None, key: str | None = None):
        self.spec, self.url, self.folder, self.proc = spec, url, folder, proc
        self._auth = {"authorization": f"Bearer {key}"} if key else {}
        self.name: str | None = None        # the adapter name the server samples from now
        self.version, self.snapshot = 0, None
        self.rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
        self._finalizer = weakref.finalize(self, _stop, proc, str(folder))

    @classmethod
    def start(cls, spec, model) -> "RolloutServer":
        grpo = spec.lane.grpo
        if spec.lane.method == "full":
            raise ConfigError("lane.grpo.generation=server syncs the policy to the server as a "
                              "LoRA adapter after each step; the full lane has none (it would "
                              "ship every weight). Use lane.method=lora|qlora, or "
                              "lane.grpo.generation=local.", key="lane.grpo.generation")
        folder = Path(tempfile.mkdtemp(prefix="mens-rollout-"))
        if grpo.server_url:
            self = cls(spec, str(grpo.server_url).rstrip("/"), folder)
            self.get("/v1/models")     # reachable, or a ConfigError naming server_url
            print(f"mens: note: grpo: rollouts through the server at {self.url}",
                  file=sys.stderr)
        else:
            self = cls._spawn(spec, model, folder)
        self.sync(model, force=True)
        return self

    @classmethod
    def _spawn(cls, spec, model, folder: Path) -> "RolloutServer":
        """`mens serve` on 127.0.0.1:0 over the initial policy, on the trainer's device/dtype."""
        import torch
        import yaml

        init = folder / "initial"
        model.save_pretrained(str(init / "adapter"), safe_serialization=True)
        # the run's rung, seed and chat format; no spoke (a spoke's adapter would be made its
        # champion, which the server then refuses to unload)
        run = {k: v for k, v in spec.to_dict().items() if k != "spoke"}
        (init / "spec.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
        frozen = next((p for p in model.parameters() if not p.requires_grad), None)
        dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
            getattr(frozen, "dtype", None), "auto")
        if dtype == "auto":
            print("mens: note: grpo: the trainer's base is quantized; the rollout server holds "
                  "it unquantized (serve.dtype=auto): their log-probs differ, and the "
                  "importance-sampling correction accounts for it", file=sys.stderr)
        device = next(model.parameters()).device.type
        held = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
        print(f"mens: note: grpo: the rollout server holds its own copy of the base "
              f"(~{held / 2**20:.0f} MiB on {device}) beside the trainer's (planned: plan.json "
              f"sampling.server_bytes)", file=sys.stderr)
        log = open(folder / "serve.log", "w")
        key = secrets.token_urlsafe(32)   # this run's only: the routes read any path given
        proc = subprocess.Popen(
            [sys.executable, "-m", "mens.serve", f"run={init}", "serve.host=127.0.0.1",
             "serve.port=0", "serve.runtime_lora=true", f"serve.api_key_env={KEY_ENV}",
             f"serve.device={device}", f"serve.dtype={dtype}",
             f"hydra.run.dir={folder / 'serve'}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=folder, env={**os.environ, KEY_ENV: key})
        log.close()
        self = cls(spec, None, folder, proc, key)
        info, deadline = folder / "serve" / "serve.json", time.time() + READY_S
        while self.url is None:
            if proc.poll() is not None or time.time() > deadline:
                tail = (folder / "serve.log").read_text()[-2000:]
                self.close()
                raise ConfigError(f"lane.grpo.generation=server: `mens serve` did not start "
                                  f"({'exit ' + str(proc.returncode) if proc.returncode is not None else 'timeout'}"
                                  f"):\n{tail}", key="lane.grpo.generation")
            if info.is_file():
                self.url = json.loads(info.read_text())["url"]
            time.sleep(0.2)
        self.name = "initial"      # the slot `run=` made: the policy before step 1
        print(f"mens: note: grpo: generation=server: rollouts through `mens serve` at {self.url} "
              f"(started by this run; log {folder / 'serve.log'})", file=sys.stderr)
        return self

    # --- HTTP ------------------------------------------------------------------------------
    def post(self, route: str, body: dict, timeout: float = 600.0) -> dict:
        import httpx

        try:
            r = httpx.post(self.url + route, json=body, headers=self._auth, timeout=timeout)
        except httpx.HTTPError as e:
            raise ConfigError(f"lane.grpo.server_url: no answer from {self.url}{route} "
                              f"({type(e).__name__}: {e}).", key="lane.grpo.server_url") from None
        if r.status_code != 200:
            raise ConfigError(f"lane.grpo.generation=server: {self.url}{route} answered "
                              f"{r.status_code}: {r.text[:800]}", key="lane.grpo.server_url")
        try:
            return r.json()
        except ValueError:      # vLLM's adapter routes answer plain text
            return {"text": r.text}

    def get(self, route: str) -> dict:
        import httpx

        try:
            r = httpx.get(self.url + route, headers=self._auth, timeout=30)
            r.raise_for_status()
            return r.json()
        except (httpx.HTTPError, ValueError) as e:
            raise ConfigError(f"lane.grpo.server_url={self.url}: {route} does not answer as an "
                              f"OpenAI-compatible server ({type(e).__name__}: {e}).",
                              key="lane.grpo.server_url") from None

    # --- the policy ------------------------------------------------------------------------
    def sync(self, model, force: bool = False) -> float:
        """Load the trainer's adapter into the server when its weights changed (an optimizer
        step ran since the last load): seconds taken (save + load + unload), NaN if none."""
        snap = [p.detach().to("cpu", copy=True) for p in model.parameters() if p.requires_grad]
        if not force and self.snapshot is not None and all(
                a.shape == b.shape and bool((a == b).all()) for a, b in zip(snap, self.snapshot)):
            return math.nan
        if force and self.name is not None:     # the spawned server already holds it
            self.snapshot = snap
            return math.nan
        t0 = time.perf_counter()
        self.version += 1
        name = f"policy-r{self.rank}-{self.version}"
        path = self.folder / name
        save_adapter(model, path)
        self.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        old, self.name, self.snapshot = self.name, name, snap
        if old is not None:
            self.post("/v1/unload_lora_adapter", {"lora_name": old})
            shutil.rmtree(self.folder / old, ignore_errors=True)
        return time.perf_counter() - t0

    def generate(self, model, tokenizer, prompts: list[list[dict]], G: int, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, encoder=None,
                 max_prompt_tokens: int | None = None, greedy: bool = False,
                 tools: list | None = None) -> ServerRollout:
        """mens.objective.sampling.generate, answered by the server (after a sync)."""
        import torch

        if greedy and G != 1:
            raise ValueError("a greedy answer is one per prompt (G=1)")
        reload_s = self.sync(model)
        eos = end_ids(model, tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        rows, cut = prompt_rows(tokenizer, prompts, encoder, tools, max_prompt_tokens)
        t0 = time.perf_counter()
        out = self.post("/v1/completions", {
            "model": self.name, "prompt": rows, "n": G, "max_tokens": max_new_tokens,
            "temperature": 0.0 if greedy else temperature, "top_p": 1.0 if greedy else top_p,
            "seed": seed, "logprobs": 0, "return_token_ids": True}, timeout=GEN_TIMEOUT_S)
        generate_s = time.perf_counter() - t0
        choices = sorted(out.get("choices", []), key=lambda c: c["index"])
        if len(choices) != len(rows) * G or any("token_ids" not in c for c in choices):
            raise ConfigError(f"lane.grpo.generation=server: {self.url} answered {len(choices)} "
                              f"choices for {len(rows)} prompts × n={G}"
                              f"{'' if all('token_ids' in c for c in choices) else ' without token_ids'}"
                              f": it must honour n, prompt batches and return_token_ids (mens "
                              f"serve does; vLLM from 0.10.2).", key="lane.grpo.server_url")
        toks, lps = [], []
        for c in choices:
            ids = list(c["token_ids"])
            end = next((i for i, t in enumerate(ids) if t in eos), None)
            ids = ids if end is None else ids[:end + 1]     # nothing after the first end token
            got = ((c.get("logprobs") or {}).get("token_logprobs") or [])[:len(ids)]
            toks.append(ids)
            lps.append([math.nan if v is None else float(v) for v in got] +
                       [math.nan] * (len(ids) - len(got)))
        device = next(model.parameters()).device
        T = max(1, max(map(len, toks)))
        width = max(map(len, rows))
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)  # (B, P)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
        completion = torch.tensor([t + [pad] * (T - len(t)) for t in toks], device=device)  # (N, T)
        cmask = torch.tensor([[1] * len(t) + [0] * (T - len(t)) for t in toks], device=device)
        logps = torch.tensor([v + [0.0] * (T - len(v)) for v in lps], device=device)
        ended = [bool(t) and t[-1] in eos for t in toks]
        texts = [tokenizer.decode(t[:len(t) - (1 if e else 0)], skip_special_tokens=True)
                 for t, e in zip(toks, ended)]
        return ServerRollout(ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0),
                             completion, cmask, texts, [len(t) for t in toks], ended, G, cut,
                             sampling_logps=logps, reload_s=reload_s, generate_s=generate_s)

    def close(self) -> None:
        self._finalizer()
