"""A lane as the planner models it (mens.plan.memory.LaneModel): the method's weights and the
objective's card — its rows per record, a reference pass, and for an objective that samples
(grpo, distill) the generation, an in-step reference copy, the oracle's processes and the
teacher's architecture, read without loading anything."""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from mens.config.objectives import ORACLE_WORKERS, card, section
from mens.errors import ConfigError
from mens.plan import rl
from mens.plan.arch import teacher_arch
from mens.plan.contract import load_contract
from mens.plan.memory import LaneModel


def lane_model(lane, precision: str, init_adapter: str | None = None, check: str | None = None,
               contract: str | None = None) -> LaneModel:
    """What the planner models of a lane: the method's weights and the objective's card (its
    rows per record, a reference pass; grpo's sampling: generation, an in-step reference copy,
    the oracle `check`'s processes)."""
    lora = lane.lora
    q = lane.quantization
    c = card(lane)
    ref = c.needs_reference(lane)
    # an in-step reference kept as a frozen copy of the model (mens.objective.grpo.Grpo.bind)
    copy = ref and "reference_copy" in c.memory_terms and (lane.method == "full" or
                                                           bool(init_adapter))
    oracle_mib = 0.0
    if "oracle_procs" in c.memory_terms and section(lane, c.name).reward != "teacher" and check:
        sizes = load_contract(contract).get("oracle_process_mib") or {}
        oracle_mib = ORACLE_WORKERS * float(sizes.get(check, sizes.get("default", 0)))
    return LaneModel(
        kind=lane.method, precision=precision,
        optimizer=lane.optimizer.name,
        lora_r=lora.r if lora else 0, lora_targets=tuple(lora.targets) if lora else (),
        lora_dropout=lora.dropout if lora else 0.0,
        lora_experts=bool(getattr(lora, "experts", False)) if lora else False,
        double_quant=q.double_quant if q else True, blocksize=q.blocksize if q else 64,
        frozen_adapter_copy=bool(init_adapter) and ref and lane.method != "full" and not copy,
        objective=c.name, rows_per_record=c.rows_per_record(lane), reference=ref,
        generation_tokens=int(section(lane, c.name).max_completion_length)
        if "generation" in c.memory_terms else 0,
        reference_copy=bool(copy), oracle_mib=oracle_mib,
        generation_where=rl.generation_where(section(lane, c.name))
        if "generation" in c.memory_terms else "local",
        # grpo samples its window in calls of lane.grpo.generation_batch_size rows (0: the
        # planner picks), each within a rollout server's cap (mens.plan.rl)
        generation_batch=rl.asked_rows(section(lane, c.name)) if c.name == "grpo" else 0,
        **(dict(zip(("server_max_batch_tokens", "server_max_rows"),
                    rl.server_caps(section(lane, c.name)))) if c.name == "grpo" else {}),
        **(distill_terms(lane) if "teacher" in c.memory_terms else {}))


def distill_terms(lane) -> dict:
    """LaneModel's teacher fields (mens.plan.memory.distill_teacher): the teacher's
    architecture from its rung option or config.json, read without loading it."""
    from mens.config.validate import teacher_source
    from mens.resources import option_path

    d = lane.distill
    if d.get("teacher_url") and d.teacher is None:   # the server holds it (memory: 0)
        return {"teacher_served": True}
    where, name = teacher_source(d.teacher)
    config = json.loads((Path(name) / "config.json").read_text()) if where == "path" else \
        OmegaConf.to_container(OmegaConf.load(option_path("rung", name)))
    if where == "rung" and config.get("path"):
        config = json.loads((Path(config["path"]) / "config.json").read_text())
    try:
        arch = teacher_arch(config)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"lane.distill.teacher={d.teacher}: its architecture cannot be read "
                          f"without loading it ({e}): name a rung with its numbers (conf/rung) "
                          f"or an HF model directory with config.json.",
                          key="lane.distill.teacher") from None
    return {"teacher": arch, "teacher_rows": float(d.lmbda) < 1 and not d.seq_kd}
