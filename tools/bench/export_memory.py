"""Peak memory of exporting a merge: mens's streaming export vs load-everything-then-merge.

The 0.6b architecture with random bf16 weights (so the model, not the imports, dominates) and a
random LoRA (r=16 on all seven projections, PEFT-made) are written once; then each path runs in
a fresh process, which reports its peak RSS (VmHWM) above its own post-import baseline.
- streaming: `mens.export.merge` (merged HF dir in shards) + an f16 GGUF of it (`mens.export.gguf`)
- naive: `from_pretrained` → `PeftModel.from_pretrained` → `merge_and_unload` →
  `save_pretrained`
Goal (issue #5): streaming peak above baseline ≤ 1.3 × the merged model's bytes.
`python tools/bench/export_memory.py [RUNG]` (and `make bench`) prints both, side by side.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import numpy, safetensors.torch, torch, transformers, peft, gguf   # imports before the baseline
from mens.export.merge import MergedWeights, SafetensorsDir, load_adapter, write_hf_dir
from mens.export.gguf import write_model_gguf
mode, base, adapter, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
def kib():   # VmHWM: this address space's high-water mark (ru_maxrss would carry the parent's)
    try:
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
    except OSError:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss // 1024 if sys.platform == "darwin" else rss
baseline, t0 = kib(), time.time()
if mode == "streaming":
    src = MergedWeights(SafetensorsDir(base), load_adapter(adapter), "auto")
    merged = write_hf_dir(src, base, out / "merged", [])
    write_model_gguf(SafetensorsDir(merged), merged, out / "model-f16.gguf", "f16", "bench")
else:
    from transformers import AutoModelForCausalLM
    from peft import PeftModel
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.bfloat16)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.save_pretrained(str(out / "merged"))
nbytes = sum(p.stat().st_size for p in (out / "merged").glob("*.safetensors"))
print(json.dumps({"baseline_kib": baseline, "peak_kib": kib(), "merged_bytes": nbytes,
                  "seconds": round(time.time() - t0, 1)}))
"""


def make_inputs(tmp: Path, rung: str = "0.6b") -> tuple[Path, Path]:
    """Random-weight base (bf16 safetensors) and a random LoRA adapter for it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3ForCausalLM

    from mens.config.options import load_option
    from mens.config.schema import LORA_TARGETS
    from mens.model.load import qwen3_config
    from mens.resources import ASSETS

    torch.manual_seed(0)
    config = qwen3_config(load_option("rung", rung))
    with torch.device("meta"):                 # shapes only; filled below without init cost
        model = Qwen3ForCausalLM(config)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    model.tie_weights()
    model.save_pretrained(str(tmp / "base"))
    for f in ("tokenizer.json", "tokenizer_config.json"):   # the random rung borrows tiny's
        shutil.copyfile(ASSETS / "tiny" / f, tmp / "base" / f)
    lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, init_lora_weights=False,
                                            target_modules=list(LORA_TARGETS)))
    lora.save_pretrained(str(tmp / "adapter"))
    return tmp / "base", tmp / "adapter"


def measure(mode: str, base: Path, adapter: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([sys.executable, "-c", CHILD, mode, str(base), str(adapter), str(out)],
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"export_bench: {mode} failed: {p.stderr[-800:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["above_baseline_bytes"] = (r["peak_kib"] - r["baseline_kib"]) * 1024
    r["ratio"] = round(r["above_baseline_bytes"] / r["merged_bytes"], 3)
    return r


def main(rung: str = "0.6b") -> dict:
    with tempfile.TemporaryDirectory(prefix="mens-export-bench-") as tmp:
        base, adapter = make_inputs(Path(tmp), rung)
        res = {m: measure(m, base, adapter, Path(tmp) / m) for m in ("streaming", "naive")}
    gib = 2**30
    print(f"export peak RSS above post-import baseline, {rung} architecture, random weights "
          f"(merged model {res['streaming']['merged_bytes'] / gib:.2f} GiB bf16):")
    for m, r in res.items():
        what = "merged dir + f16 GGUF" if m == "streaming" else "load, merge_and_unload, save"
        print(f"  {m:<10} {r['above_baseline_bytes'] / gib:6.2f} GiB = {r['ratio']:.2f} × merged "
              f"bytes  ({what}, {r['seconds']:.0f} s)")
    ok = res["streaming"]["ratio"] <= 1.3
    print(f"  goal: streaming ≤ 1.3 × — {'met' if ok else 'NOT met'}")
    return res


if __name__ == "__main__":
    main(*sys.argv[1:])
