#!/usr/bin/env bash
# The CUDA sitting, as run on a lent one-GPU machine with no network (2026-12-04, an H200):
#   bash calibration/cuda/sitting.sh      (from the repository root; OUT= where results go)
# That machine's image has torch (CUDA) but not all of mens's pins, so the packages it lacks
# travel as cp312 wheels in .whl/ (the versions this repository's .venv holds; bitsandbytes with
# its CUDA 13 libraries only), unpacked into /tmp/site. mens itself is laid out at /tmp/app the
# way its wheel lays it out (conf/, recipes/, calibration/ as mens.conf, mens.recipes,
# mens.evidence), so it runs as an installed package, never writing into this checkout.
# Then: a check of the CUDA paths (bf16, bitsandbytes 4-bit, Liger, flash-attn's import), and
# `make calibrate-gpu`'s own command with a time budget; records tarred into $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/sitting-out}; BUDGET=${BUDGET:-330}
mkdir -p "$OUT"; rm -rf /tmp/site /tmp/app; mkdir -p /tmp/site /tmp/app
for w in .whl/*.whl; do python3 -m zipfile -e "$w" /tmp/site || exit 1; done
cp -r mens /tmp/app/mens && cp -r conf /tmp/app/mens/conf && cp -r recipes /tmp/app/mens/recipes \
  && cp -r calibration /tmp/app/mens/evidence || exit 1
cd /tmp/app
export PYTHONPATH=/tmp/site:/tmp/app PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 WANDB_MODE=disabled
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/env.txt"
python3 - <<'PY' 2>&1 | tee -a "$OUT/env.txt" || exit 1
import importlib.util, time
import torch, transformers, peft, lightning, hydra, bitsandbytes as bnb
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0),
      "transformers", transformers.__version__, "peft", peft.__version__, "lightning",
      lightning.__version__, "bitsandbytes", bnb.__version__)
for m in ("flash_attn", "liger_kernel"):
    print(m, "importable" if importlib.util.find_spec(m) else "NOT importable")
torch.manual_seed(0)
# bf16 matmul against fp64, and a bitsandbytes NF4 layer forward + backward against its own
# dequantised weight: the CUDA paths qlora rests on, before any job runs
a, b = torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")
ref = (a.double() @ b.double())
err = ((a.bfloat16() @ b.bfloat16()).double() - ref).norm() / ref.norm()
print(f"bf16 matmul rel. error vs fp64: {err:.2e}")
lin = torch.nn.Linear(1024, 1024, bias=False, dtype=torch.bfloat16)
q = bnb.nn.Linear4bit(1024, 1024, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
q.load_state_dict(lin.state_dict()); q = q.cuda()
x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
y = q(x); y.float().pow(2).mean().backward()
w = bnb.functional.dequantize_4bit(q.weight.data, q.weight.quant_state).to(torch.bfloat16)
e = (y - x.detach() @ w.t()).float().norm() / y.float().norm()
print(f"NF4 Linear4bit: forward vs dequantised weight rel. error {e:.2e}; grad finite:",
      bool(torch.isfinite(x.grad).all()), "; weight quantisation error",
      f"{((w.cpu().float() - lin.weight.float()).norm() / lin.weight.float().norm()):.3f}")
PY
python3 -m mens.cli.calibrate_gpu --budget-s "$BUDGET" --out /tmp/gpu logger=none \
  calibrate.weights_cache=/tmp/wcache 2>&1 | tee "$OUT/calibrate_gpu.log"
tar czf "$OUT/records.tgz" -C /tmp --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' \
  --exclude='*.ckpt' gpu
ls -la "$OUT"
