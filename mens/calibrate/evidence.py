"""External evidence: a published measurement (calibration/external/*.jsonl, one row per
measured run, with its source, config and what mens cannot express) as a calibration record
the fit reads — the architecture, lane and shape mens's analytic model needs, the peak in bytes,
tokens/s per device — of its own kind (`external`), never mistaken for a measurement of mens.

A row that cannot be read this way is a DataError naming file:line and the field, not skipped.
"""
from __future__ import annotations

from mens.config.schema import LORA_TARGETS
from mens.errors import DataError
from mens.plan.hardware import cuda_tier
from mens.plan.memory import LaneModel, cell_key
from mens.source.families import family

UNITS = {"GiB": 2**30, "GB": 10**9, "MiB": 2**20, "MB": 10**6}
# a source's optimizer names → the optimizer mens's model counts the state of
OPTIMIZERS = {"adamw": "adamw", "adam": "adamw", "adamw_fused": "adamw", "adamw_torch": "adamw",
              "adamw_torch_fused": "adamw", "paged_adamw_32bit": "adamw",
              "adamw_8bit": "adamw_8bit", "paged_adamw_8bit": "adamw_8bit",
              "adamw_bnb_8bit": "adamw_8bit", "sgd": "sgd"}
# strategies whose one device holds a whole replica (the cell of one device applies) or a shard
REPLICA = {"single", "ddp", "deepspeed-zero0", "deepspeed-zero1", "deepspeed-zero2"}


def is_external(row: dict) -> bool:
    return isinstance(row.get("source"), dict) and "measured" in row and "config" in row


def to_record(row: dict, where: str) -> dict:
    """One published row → a fit record. `where`: file:line, for errors."""
    try:
        return _convert(row)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DataError(f"{where}: external evidence row {row.get('id', '?')!r} is malformed "
                        f"({type(e).__name__}: {e}); see calibration/external/README.md for the "
                        f"row's fields.") from None


def _convert(row: dict) -> dict:
    src, hw, m, c, meas = row["source"], row["hardware"], row["model"], row["config"], \
        row["measured"]
    family(m["family"])          # a family mens has (ConfigError otherwise)
    arch = {k: m[k] for k in ("hidden", "intermediate", "layers", "heads", "kv_heads",
                              "head_dim", "vocab")}
    arch.update(tied=bool(m["tied"]), family=m["family"])
    kind = c["method"]
    if kind not in ("lora", "qlora", "full"):
        raise ValueError(f"config.method {kind!r} is not lora, qlora or full")
    optimizer = OPTIMIZERS.get(str(c.get("optimizer") or "adamw").lower(), "adamw")
    adapter = kind != "full"
    quant = str(c.get("quantization") or "")
    lane = LaneModel(kind=kind, precision=c.get("dtype") or "bf16", optimizer=optimizer,
                     lora_r=int(c.get("lora_rank") or 0) if adapter else 0,
                     lora_targets=tuple(c.get("lora_targets") or LORA_TARGETS) if adapter else (),
                     lora_dropout=float(c.get("lora_dropout") or 0.0) if adapter else 0.0,
                     double_quant="double" in quant, blocksize=64,
                     unquantized_fp32=_unquantized_fp32(c, kind))
    devices = int(hw.get("devices") or 1)
    strategy = str(c.get("strategy") or "single")
    ckpt = bool(c["checkpointing"])
    packing = c.get("packing") is True
    peak = meas.get("peak")
    peak_bytes = None if peak is None else int(float(peak) * UNITS[meas["peak_unit"]])
    if peak_bytes is not None and meas.get("peak_scope") == "total" and devices > 1:
        peak_bytes //= devices
    tps = meas.get("tokens_per_s")
    scope = meas.get("tokens_per_s_scope")
    if tps is not None and devices > 1:   # per device, or not usable when unsaid
        tps = float(tps) / devices if scope == "total" else tps if scope == "per_device" else None
    loss = "chunked" if c.get("loss") == "chunked" else "full_logits"
    one_device = devices == 1 or strategy in REPLICA
    # what changes the peak in ways the model has no term for: the row still counts for speed
    unmodelled = [k for k in ("optimizer_in_backward", "activation_offloading") if c.get(k)]
    if (quant or kind == "qlora") and not quant.startswith("nf4"):
        unmodelled.append(f"quantization {quant or 'unstated'} (mens's QLoRA: bitsandbytes nf4; "
                          f"its LoRA: a 16-bit base)")
    load = meas.get("load_peak")   # the source's reading while loading: judged by the fit's
    # screens (mens.calibrate.screens.load_reading), never with a held-out source in view
    if c.get("dtype") not in ("bf16", "fp16", "fp32"):
        unmodelled.append(f"a compute dtype the source does not give as bf16/fp16/fp32 "
                          f"({c.get('dtype')})")
    if c.get("seq_len") is None or c.get("micro_batch") is None:
        unmodelled.append("a shape the source does not give (seq_len or micro_batch unstated)")
    if m.get("native") is False:
        unmodelled.append(f"{m['name']}: an architecture mens does not load (its own model "
                          f"code), mapped to family {m['family']}")
    if c.get("trainable_embeddings"):
        unmodelled.append("trainable embeddings and lm_head beside the adapters "
                          "(modules_to_save)")
    if kind == "full":   # where masters and optimizer state live differs by framework
        unmodelled.append("a full fine-tune (frameworks keep weights and optimizer state in "
                          "bf16, fp32 or 8 bits, some update in backward: mens keeps fp32 masters)")
    return {
        "id": row["id"], "kind": "external", "source": src["id"], "url": src["url"],
        "framework": src.get("framework") or "unknown", "gpu": hw.get("gpu") or "unknown",
        "gpu_memory_gb": hw.get("memory_gb"),
        # the tier detection maps the device's name to (a source's name reads like one)
        "tier": cuda_tier(hw.get("gpu") or "", hw.get("memory_gb") or 0),
        "cell": cell_key("cuda", lane, ckpt), "backend": "cuda", "precision": lane.precision,
        "arch": arch, "lane": {**lane.__dict__, "lora_targets": list(lane.lora_targets)},
        "rung": {"name": m["name"]}, "seq_len": _int(c.get("seq_len")),
        "micro_batch": _int(c.get("micro_batch")), "checkpointing": ckpt, "packing": packing,
        # attention as the source ran it: eager keeps the (b, heads, s, s) scores; anything else
        # (sdpa, flash) keeps none (a packed row's mask is per record); the loss likewise
        "paths": {"attention": "eager" if c.get("attention") == "eager" else "per_record",
                  "loss": loss, "heap": "default"},
        "world_size": 1, "strategy": "single", "devices": devices, "source_strategy": strategy,
        "measured_peak_bytes": peak_bytes, "peak_kind": meas.get("peak_kind") or "unknown",
        "load_peak_bytes": None if load is None else int(float(load) * UNITS[meas["peak_unit"]]),
        "tokens_per_s": None if tps is None else float(tps),
        "status": "ok" if one_device and peak_bytes is not None and not unmodelled
        else "skipped",
        "reason": _why_not(one_device, peak_bytes, unmodelled, devices, strategy),
        "role": "fit", "host": {"hostname": src["id"]},
        "versions": {src.get("framework") or "unknown": src.get("framework_version")},
        "not_expressible": list(row.get("not_expressible") or []),
        "compile": bool(c.get("compile")), "attention": c.get("attention"),
    }


def _unquantized_fp32(c: dict, kind: str) -> bool:
    """Whether a QLoRA row's framework held the weights bitsandbytes leaves in 16 bits
    (embeddings, lm_head, norms) in fp32 — PEFT's prepare_model_for_kbit_training casts them so
    unless the framework casts them back (config.unquantized_dtype; unsaid: the compute dtype)."""
    said = c.get("unquantized_dtype")
    if said not in (None, "fp32", "bf16", "fp16"):
        raise ValueError(f"config.unquantized_dtype {said!r} is not fp32, bf16 or fp16")
    if said is not None and kind != "qlora":
        raise ValueError("config.unquantized_dtype is a QLoRA row's (the weights bitsandbytes "
                         "leaves unquantized)")
    return said == "fp32"


def _int(v) -> int | None:
    return None if v is None else int(v)


def _why_not(one_device: bool, peak, unmodelled: list[str], devices: int,
             strategy: str) -> str | None:
    if peak is None:
        return "no peak published (throughput only)"
    if not one_device:
        return (f"{devices} devices under {strategy}: one device holds a shard, which the "
                f"external fit does not model (its throughput still counts)")
    if unmodelled:
        return (f"ran with {' and '.join(unmodelled)}, which mens's memory model has no term "
                f"for (its throughput still counts)")
    return None
