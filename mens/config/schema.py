"""Typed schemas of every config group, registered in Hydra's ConfigStore.

The primary config (conf/mens.yaml) starts from `mens_schema`, so each group option merged into
it is checked against these dataclasses at compose time: a misspelt key in an option file or a
`train.max_steps=abc` fails there. Knobs that accept `auto` are typed `Any` (OmegaConf has no
Union of int and str) and are checked by `mens.config.validate` right after composition.

This is the root: MensConfig and register(). Each stage's sections live beside the valid values
of their numbers and strings (RANGES, CHOICES): hw, rung, data (spoke, data, curriculum), lane
(and each objective's section in mens.config.cards), train (train, plan, logger), gate (eval,
gate, compare, ladder), publish (export, serve, push, afk, studio), launch (launch, cloud,
recommend, calibrate), synth (teacher, tree, synth, curate). Their names are re-exported here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

from mens.config.card import METHODS
from mens.config.cards.dpo import LOSSES as DPO_LOSSES
from mens.config.cards.dpo import DpoConfig
from mens.config.cards.grpo import IS_MODES as GRPO_IS_MODES
from mens.config.cards.grpo import LOSSES as GRPO_LOSSES
from mens.config.cards.grpo import REWARDS as GRPO_REWARDS
from mens.config.cards.grpo import SCALES as GRPO_SCALES
from mens.config.cards.grpo import GrpoConfig
from mens.config.cards.distill import DistillConfig
from mens.config.cards.kto import KtoConfig
from mens.config.cards.orpo import OrpoConfig
from mens.config.cards.simpo import SimpoConfig
from mens.config.data import (DATA_FORMATS, AdmissionConfig, CurriculumConfig, DataConfig,
                              SourceConfig, SpokeConfig)
from mens.config.gate import CompareConfig, EvalConfig, GateConfig, LadderConfig
from mens.config.hw import HeadroomPolicy, HwConfig, LightningDefaults, LinkConfig
from mens.config.lane import (LORA_TARGETS, OBJECTIVES, LaneConfig, LoraConfig, OptimizerConfig,
                              QuantConfig)
from mens.config.launch import CalibrateConfig, CloudConfig, LaunchConfig, RecommendConfig
from mens.config.publish import AfkConfig, ExportConfig, PushConfig, ServeConfig, StudioConfig
from mens.config.ranges import AUTO
from mens.config.rung import RungConfig
from mens.config.synth import (SYNTH_STRATEGIES, TEACHER_CAPABILITIES, TEACHER_TIERS,
                               CurateConfig, SynthConfig, TeacherConfig, TeacherEndpoint,
                               TreeConfig)
from mens.config.train import (AUTO_INTS, DEFAULT_WANDB_PROJECT, TRAIN_PATHS, LoggerConfig,
                               PlanConfig, TrainConfig)

__all__ = [  # what importers read from here (the sections' own modules own them)
    "AUTO", "AUTO_INTS", "DATA_FORMATS", "DEFAULT_WANDB_PROJECT", "DPO_LOSSES", "GRPO_IS_MODES",
    "GRPO_LOSSES", "GRPO_REWARDS", "GRPO_SCALES", "LORA_TARGETS", "METHODS", "OBJECTIVES",
    "SYNTH_STRATEGIES", "TEACHER_CAPABILITIES", "TEACHER_TIERS", "TRAIN_PATHS",
    "AdmissionConfig", "AfkConfig", "CalibrateConfig", "CloudConfig", "CompareConfig",
    "CurateConfig", "CurriculumConfig", "DataConfig", "DistillConfig", "DpoConfig", "EvalConfig",
    "ExportConfig", "GateConfig", "GrpoConfig", "HeadroomPolicy", "HwConfig", "KtoConfig",
    "LadderConfig", "LaneConfig", "LaunchConfig", "LightningDefaults", "LinkConfig",
    "LoggerConfig", "LoraConfig", "MensConfig", "OptimizerConfig", "OrpoConfig", "PlanConfig",
    "PushConfig", "QuantConfig", "RecommendConfig", "RungConfig", "ServeConfig", "SimpoConfig",
    "SourceConfig", "SpokeConfig", "StudioConfig", "SynthConfig", "TeacherConfig",
    "TeacherEndpoint", "TrainConfig", "TreeConfig", "register"]


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


def register() -> None:
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="mens_schema", node=MensConfig)
    if not OmegaConf.has_resolver("mens_devices"):   # hw.devices for a launcher: auto → 1
        OmegaConf.register_new_resolver(
            "mens_devices", lambda v: 1 if v in (None, AUTO) else int(v))
